"""Kernels compiled against the code on disk: numba checks a cached kernel against its own
module's file only, so a kernel that calls (and inlines) one from another module would keep
running the old callee after that module changes. The cache of these kernels is therefore
keyed by the digest of all their sources, subpackages included: when it differs from the one
recorded beside a folder's cache, every cached kernel of that folder is dropped (recompiled on
next use). Each package of kernels drops its own folder's cache when it is imported."""

import hashlib
import os
from pathlib import Path

STAMP = "fastrag-kernels.sources"


def sources_digest(folder: Path) -> str:
    """Digest of the kernel sources (paths and bytes of every ``*.py`` under ``folder``)."""
    h = hashlib.sha256()
    for src in sorted(folder.rglob("*.py")):
        if "__pycache__" not in src.parts:
            h.update(src.relative_to(folder).as_posix().encode() + b"\0")
            h.update(src.read_bytes() + b"\0")
    return h.hexdigest()[:32]


def drop_stale_cache(folder: Path, cache: Path) -> bool:
    """Drop the cached kernels in ``cache`` when the sources under ``folder`` are not those they
    were compiled from (recorded in ``cache / STAMP``); returns whether it dropped them. A
    cache that cannot be written is left as it is (numba then compiles in memory)."""
    digest = sources_digest(folder)
    stamp = cache / STAMP
    try:
        if stamp.read_text().strip() == digest:
            return False
    except OSError:
        pass
    try:
        if cache.is_dir():
            for f in cache.iterdir():
                if f.suffix in (".nbi", ".nbc"):
                    f.unlink(missing_ok=True)  # numba recompiles a kernel whose file vanished
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cache / f"{STAMP}.{os.getpid()}.tmp"
        tmp.write_text(digest + "\n")
        os.replace(tmp, stamp)
    except OSError:
        return False
    return True
