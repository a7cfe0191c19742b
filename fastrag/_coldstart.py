"""The first run of a fresh install: kernels compile in a background process.

numba compiles fastrag's kernels on first use and caches the machine code; compiling the BM25
search and segmentation kernels takes 20-40 s on a small CPU. So that a fresh install's first
query does not stall, a process that finds no compiled kernels for this install starts
``fastrag warmup`` in a background process (once per cache folder: a file lock keeps other
processes from starting another) and, until it is done, BM25 runs on a NumPy path with the
same results (jieba's own segmenter, NumPy index build and search). When the background
compile finishes, the next call loads the cached kernels.

``FASTRAG_BACKGROUND_COMPILE=0`` turns this off: kernels then compile in the calling process
on first use, as plain numba does. ``fastrag warmup`` ahead of time (in an image build or CI)
makes every process start warm.

Even cached kernels cost something once per process: numba sets up its runtime at the first
kernel call (:data:`NUMBA_START_S`). Work smaller than that (one query on a small store) runs
on the NumPy and Python twins until a kernel has run (:func:`kernels_pay`). Every caller
chooses through :func:`kernels_for`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fastrag import __version__

ENV = "FASTRAG_BACKGROUND_COMPILE"
BUSY_EXIT = 3
"""Exit status of a background compile that found another process compiling already."""
# What the background process runs (fastrag.warmup.background_warmup).
_COMMAND = "from fastrag.warmup import background_warmup; background_warmup()"
# A background compile that finds the lock taken is retried at most this often.
_RESPAWN_S = 5.0

_log = logging.getLogger("fastrag")
_lock = threading.Lock()
_ready = False
_proc: subprocess.Popen | None = None
_spawned_at = 0.0
_announced = False
_serving = False
_twin_s = 0.0  # the estimated seconds this process spent on the twins instead of starting numba


def enabled() -> bool:
    """Whether background compilation is on (``FASTRAG_BACKGROUND_COMPILE`` is not 0)."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """numba's cache folder for fastrag's kernels (``NUMBA_CACHE_DIR``, ``__pycache__`` beside
    the kernels, or numba's user-wide folder when that is not writable): the ready marker, the
    lock and the log of the background compile live there too."""
    import fastrag._kernels as kernels  # lazy: numba, only where kernels are about to run

    return kernels.cache_dir()


@functools.lru_cache(maxsize=1)
def _digest() -> str:
    """What compiled kernels depend on: versions, the kernels' sources and the CPU."""
    import llvmlite.binding as llvm  # numba and llvmlite load on use: importing this is cheap
    import numba

    import fastrag._kernels as kernels  # lazy: numba

    kdir = Path(kernels.__file__).parent
    parts = [__version__, numba.__version__, sys.version, llvm.get_host_cpu_name()]
    for src in sorted(kdir.rglob("*.py")):
        if "__pycache__" not in src.parts:
            st = src.stat()
            parts.append(f"{src.relative_to(kdir).as_posix()}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def marker() -> Path:
    """The file ``fastrag warmup`` writes once every kernel is compiled into the cache."""
    return cache_dir() / f"fastrag-kernels-{_digest()}.ready"


def mark_ready() -> Path:
    """Record that this install's kernels are compiled and cached (called by warmup)."""
    path = marker()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text("compiled by fastrag warmup\n")
    os.replace(tmp, path)
    return path


#: CPU seconds numba spends at a process's first kernel call, before any kernel of ours loads
#: (its runtime and ~230 modules of implementations; 0.38-0.45 s on AMD EPYC Zen 4)
NUMBA_START_S = 0.4


def numba_started() -> bool:
    """Whether a kernel has run in this process (numba's runtime is set up)."""
    runtime = sys.modules.get("numba.core.runtime")
    if runtime is None:
        return False
    # numba's own flag; should a release rename it, count numba as started (kernels as before)
    return bool(getattr(getattr(runtime, "rtsys", None), "_init", True))


def serving() -> None:
    """Say that this process will answer many requests (a server): kernels from now on, small
    work included, since numba's start-up is paid once for all of them."""
    global _serving
    _serving = True


def kernels_pay(numpy_s: float) -> bool:
    """Whether to call kernels for work that takes about ``numpy_s`` seconds on its NumPy or
    Python twin (the same results): once numba is started, in a server, when the work
    outweighs starting numba, or once this process has spent that much on the twins (a
    service of many small calls then starts numba after at most ~0.4 s more)."""
    global _twin_s
    if _serving or numba_started() or numpy_s + _twin_s > NUMBA_START_S:
        return True
    _twin_s += numpy_s  # a race between threads loses a little of the sum: harmless
    return False


def kernels_for(estimate: Callable[[], float] | None = None, *, wait: bool = True) -> bool:
    """The numba-or-twin choice, made here for every caller: whether this call runs fastrag's
    kernels rather than their NumPy or Python twin (the same results).

    Kernels run once they are ready (:func:`kernels_ready`), except work that ``estimate()``
    (its seconds on the twin; not asked once numba has started and the kernels are ready)
    puts below numba's start-up: that runs on the twin until numba has started
    (:func:`kernels_pay`). While the kernels compile in the background the twin runs, unless
    ``wait`` and the twin would take longer than the compile has left: then this waits for
    the compile.

    Small work is decided before the kernels are looked for (which loads numba, ~0.2 s): a
    process whose work is all small imports no numba, and the first larger call starts the
    background compile if one is needed."""
    if estimate is None or numba_started():
        return kernels_ready() or (wait and estimate is not None and kernels_ready(estimate()))
    numpy_s = estimate()
    if not kernels_pay(numpy_s):
        return False
    return kernels_ready() or (wait and kernels_ready(numpy_s))


def use_kernels() -> None:
    """Call kernels from now on in this process, compiling them here if need be (warm-up)."""
    global _ready
    _ready = True


def kernels_ready(numpy_s: float = 0.0) -> bool:
    """True when kernels can be called without compiling in this process for long: they are
    cached, background compilation is off, or it failed. Otherwise starts (or watches) the
    background compile and returns False: the caller takes its NumPy path, unless that path
    would take longer (``numpy_s``, the caller's estimate in seconds) than the compile has
    left: then this waits for the compile, and returns True once it is done."""
    global _ready
    if _ready:
        return True
    with _lock:
        if not _ready:
            _ready = _check()
        if _ready or numpy_s <= 0.0:
            return _ready
    left = remaining_compile_s()
    if numpy_s <= left:
        return False
    _log.warning(
        "fastrag: waiting for the background kernel compile (about %.0f s left): "
        "this batch would take about %.0f s on the NumPy path",
        left,
        numpy_s,
    )
    return wait_for_kernels(3 * left + 30.0)


def wait_for_kernels(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for the background compile; whether kernels are ready."""
    global _ready
    deadline = time.monotonic() + timeout
    while True:
        with _lock:
            if not _ready:
                _ready = _check()
            if _ready:
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def remaining_compile_s() -> float:
    """Seconds the background compile likely has left: the last recorded compile of this
    cache folder (60 s when none) less the time since this process started it, at least 1."""
    expected = 60.0
    try:
        with open(_logfile(), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            tail = f.read().decode("utf-8", "replace").splitlines()
        times = [
            float(line.rsplit(": ", 1)[1].split()[0])
            for line in tail
            if " fastrag warmup " in line and line.endswith(" s")
        ]
        if times:
            expected = times[-1]
    except (OSError, ValueError, IndexError):
        pass
    started = _spawned_at or time.monotonic()
    return max(1.0, expected - (time.monotonic() - started))


def _check() -> bool:
    global _proc
    if not enabled():
        return True
    try:
        done = marker().exists()
    except OSError:
        return True
    if done:
        return True
    if _proc is not None:
        code = _proc.poll()
        if code is None:
            return False
        _proc = None
        if marker().exists():
            return True
        if code != BUSY_EXIT:
            _log.warning(
                "fastrag: the background kernel compile failed (exit %s; log: %s); "
                "compiling in this process instead",
                code,
                _logfile(),
            )
            return True
    if time.monotonic() - _spawned_at >= _RESPAWN_S or _spawned_at == 0.0:
        _spawn()
    return False


def _logfile() -> Path:
    return cache_dir() / "fastrag-warmup.log"


def _spawn() -> None:
    global _proc, _spawned_at, _announced
    _spawned_at = time.monotonic()
    env = {**os.environ, ENV: "0"}
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        log = open(_logfile(), "ab")  # noqa: SIM115 - the child writes it; closed below
    except OSError:
        log = subprocess.DEVNULL
    try:
        _proc = subprocess.Popen(
            [sys.executable, "-c", _COMMAND],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )  # finishes the cache even if this process exits
    finally:
        if log is not subprocess.DEVNULL:
            log.close()
    if not _announced:
        _announced = True
        _log.warning(
            "fastrag: compiling kernels in a background process (first run only, "
            "about a minute); until then BM25 runs on a slower NumPy path with the "
            "same results. `fastrag warmup` ahead of time avoids this; %s=0 compiles "
            "in this process instead.",
            ENV,
        )
