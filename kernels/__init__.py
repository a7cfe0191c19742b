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
from types import FunctionType as _FunctionType

from . import _fresh


def _cached() -> bool:
    """Whether numba's cache already holds compiled kernels (next to them, or in
    NUMBA_CACHE_DIR)."""
    env = _os.environ.get("NUMBA_CACHE_DIR")
    if env:  # numba then caches there only
        return any(_Path(env).rglob("*.nbi"))
    return any(_Path(__file__).parent.rglob("*.nbi"))


def kernel_folders() -> list[_Path]:
    """This package's folder and those of its subpackages (each has its own numba cache)."""
    root = _Path(__file__).parent
    return [root, *sorted(p.parent for p in root.glob("*/__init__.py"))]


def cache_dir(folder: _Path | None = None) -> _Path:
    """numba's cache folder for the kernels in ``folder`` (default: this package's): its folder
    for them under ``NUMBA_CACHE_DIR``, ``__pycache__`` beside them, or its user-wide folder
    when that is not writable."""
    folder = _Path(__file__).parent if folder is None else folder
    try:
        from numba.core.caching import FunctionCache  # numba loads on first use, not here

        # numba places a function's cache by its source file: one in ``folder`` stands in
        code = _cached.__code__.replace(co_filename=str(folder / "__init__.py"))
        return _Path(FunctionCache(_FunctionType(code, {})).cache_path)
    except (ImportError, AttributeError, RuntimeError):  # numba changed: its documented places
        env = _os.environ.get("NUMBA_CACHE_DIR")
        return _Path(env) if env else folder / "__pycache__"


# numba checks a cached kernel against its own module only; a caller that inlined a kernel of
# another module (or folder) would keep the old code. Any change to these sources, subpackages
# included, drops every folder's cache.
for _folder in kernel_folders():
    _fresh.drop_stale_cache(_Path(__file__).parent, cache_dir(_folder))

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
