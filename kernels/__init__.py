"""numba kernels of fastrag, installed as ``fastrag._kernels``.

Arrays and scalars in, arrays out: no pyarrow and no Python objects inside. Every kernel is
``@njit(cache=True)`` at module level and compiles on first call, never at import.

A value that starts as a constant and is then passed to another kernel in a loop (a counter, a
flag) starts as ``np.int64(0)`` or ``np.bool_(False)``: from a plain ``0`` numba first compiles
the callee, and all it calls, for the constant, then again for the widened type
(``tests/kernels/test_compile_once.py``).
"""

import logging as _logging
import os as _os
from pathlib import Path as _Path

from . import _fresh


def _cached() -> bool:
    """Whether numba's cache already holds compiled kernels (next to them, or in
    NUMBA_CACHE_DIR)."""
    env = _os.environ.get("NUMBA_CACHE_DIR")
    if env:  # numba then caches there only
        return any(_Path(env).rglob("*.nbi"))
    here = _Path(__file__).parent / "__pycache__"
    return here.is_dir() and any(here.glob("*.nbi"))


def cache_dir() -> _Path:
    """numba's cache folder for these kernels: its folder for them under ``NUMBA_CACHE_DIR``,
    ``__pycache__`` beside them, or its user-wide folder when that is not writable."""
    try:
        from numba.core.caching import FunctionCache  # numba loads on first use, not here

        return _Path(FunctionCache(_cached).cache_path)
    except (ImportError, AttributeError, RuntimeError):  # numba changed: its documented places
        env = _os.environ.get("NUMBA_CACHE_DIR")
        return _Path(env) if env else _Path(__file__).parent / "__pycache__"


# numba checks a cached kernel against its own module only; a caller that inlined a kernel of
# another module would keep the old code. Any change to these sources drops the whole cache.
_fresh.drop_stale_cache(_Path(__file__).parent, cache_dir())

# With background compilation on (the default) fastrag._coldstart says what happens instead.
_off = _os.environ.get("FASTRAG_BACKGROUND_COMPILE", "1").strip().lower() in (
    "0",
    "false",
    "no",
    "off",
)
if _off and not _cached():
    _logging.getLogger("fastrag").warning(
        "fastrag: compiling kernels (first run only; this takes up to half a minute)"
    )
