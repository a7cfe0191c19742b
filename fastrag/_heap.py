"""The C heap of a one-shot process (``fastrag ingest``): glibc's ``mallopt`` and
``malloc_trim``, where the C library is glibc (elsewhere these do nothing)."""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


@functools.cache
def _libc() -> Any:
    """glibc, or None (another C library, another system)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None
    except OSError:
        return None


def map_large_blocks() -> None:
    """Allocate blocks of 4 MiB and more as their own maps, returned to the system when freed
    (glibc's threshold otherwise rises to the largest block freed, up to 32 MiB, and such
    blocks then stay in the heap: ~50 MiB at a 50 MB log's index build, a segment's texts at a
    time; 1 MiB saved no more and cost ~0.5 CPU s). Set once per process: glibc has no way
    back to the moving threshold."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, 4 << 20)


def trim_heap() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
