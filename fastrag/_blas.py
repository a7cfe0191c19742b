"""BLAS and thread control: which kernel BLAS runs, and how many threads BLAS, numba and torch
use.

OpenBLAS picks a kernel per CPU, unless ``OPENBLAS_CORETYPE`` forces one; a library may also
bundle an old OpenBLAS that does not know the CPU (faiss-cpu's 0.3.15 runs the pre-AVX2
"Barcelona" kernel on Zen 5). Either halves float32 matmul speed or worse, silently:
:func:`check_blas` warns once per process. Dense search runs one worker per share of the
corpus, each with single-threaded BLAS (and torch), so the thread limits here are
process-wide and re-entrant: the last search out restores them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
import warnings
from collections.abc import Iterator
from typing import Any

from fastrag._lazy import LazyModule

numba = LazyModule("numba")  # on first use: a process that runs no kernel loads no numba

# SIMD level of OpenBLAS kernels (architecture names as threadpoolctl reports them)
_KERNEL_LEVEL = {
    "prescott": 1,
    "core2": 1,
    "penryn": 1,
    "dunnington": 1,
    "nehalem": 1,
    "atom": 1,
    "opteron": 1,
    "opteron_sse3": 1,
    "barcelona": 1,
    "bobcat": 1,
    "nano": 1,
    "sandybridge": 2,
    "bulldozer": 2,
    "piledriver": 2,
    "steamroller": 2,
    "excavator": 2,
    "haswell": 3,
    "zen": 3,
    "skylakex": 4,
    "cooperlake": 4,
    "sapphirerapids": 4,
}
_LEVEL_NAME = {1: "SSE", 2: "AVX", 3: "AVX2", 4: "AVX-512"}
_BEST_KERNEL = {2: "Sandybridge", 3: "Haswell", 4: "SkylakeX"}
_checked: set[tuple[str, str]] = set()
_lock = threading.Lock()


class BlasWarning(UserWarning):
    """A BLAS library runs a kernel older than the CPU supports."""


def cpu_simd_level(flags: set[str] | None = None) -> int:
    """The float32 SIMD level the CPU offers (1 SSE .. 4 AVX-512), from /proc/cpuinfo."""
    if flags is None:
        flags = cpu_flags()
    if "avx512f" in flags:
        return 4
    if "avx2" in flags and "fma" in flags:
        return 3
    if "avx" in flags:
        return 2
    return 1 if flags else 0


def cpu_flags() -> set[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is not available)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def check_blas(info: list[dict] | None = None, flags: set[str] | None = None) -> list[str]:
    """Warn (once per library and kernel) about OpenBLAS kernels older than the CPU supports;
    returns the warnings issued by this call."""
    level = cpu_simd_level(flags)
    if level < 2:
        return []
    if info is None:
        try:
            from threadpoolctl import threadpool_info
        except ImportError:
            return []
        info = threadpool_info()
    issued = []
    for lib in info:
        arch = str(lib.get("architecture") or "")
        if lib.get("internal_api") != "openblas" or arch.lower() not in _KERNEL_LEVEL:
            continue
        key = (str(lib.get("filepath")), arch)
        with _lock:
            if key in _checked:
                continue
            _checked.add(key)
        have = _KERNEL_LEVEL[arch.lower()]
        if have >= level:
            continue
        forced = os.environ.get("OPENBLAS_CORETYPE")
        fix = (
            f"OPENBLAS_CORETYPE={forced} is set in the environment: unset it (or set "
            f"OPENBLAS_CORETYPE={_BEST_KERNEL[level]})"
            if forced
            else f"this OpenBLAS ({lib.get('version')}) does not know the CPU: set "
            f"OPENBLAS_CORETYPE={_BEST_KERNEL[level]} before starting Python, or upgrade "
            "the package that bundles it"
        )
        msg = (
            f"BLAS {os.path.basename(key[0])} runs its {arch} ({_LEVEL_NAME[have]}) kernel "
            f"on a CPU with {_LEVEL_NAME[level]}: float32 matmul (dense search, embeddings) "
            f"runs at a fraction of its speed; {fix}"
        )
        warnings.warn(msg, BlasWarning, stacklevel=3)
        issued.append(msg)
    return issued


_BLAS_CHECKED = False


def check_blas_once() -> None:
    """:func:`check_blas`, the first time only (dense search calls it on every search)."""
    global _BLAS_CHECKED
    if not _BLAS_CHECKED:
        _BLAS_CHECKED = True
        check_blas()


# ---------------------------------------------------------------------------------- threads
_LIMIT_LOCK = threading.Lock()
_BLAS_STATE: dict[str, Any] = {"controller": None, "users": 0, "ctx": None}
_TORCH_STATE: dict[str, Any] = {"users": 0, "saved_threads": 0}
_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def _blas_controller() -> Any:
    if _BLAS_STATE["controller"] is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - threadpoolctl is optional
            _BLAS_STATE["controller"] = False
        else:
            _BLAS_STATE["controller"] = ThreadpoolController()
    return _BLAS_STATE["controller"]


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[bool]:
    """Hold BLAS at one thread (process-wide, re-entrant); yields False without threadpoolctl."""
    with _LIMIT_LOCK:
        controller = _blas_controller()
        if controller and _BLAS_STATE["users"] == 0:
            _BLAS_STATE["ctx"] = controller.limit(limits=1, user_api="blas")
        _BLAS_STATE["users"] += 1
    try:
        yield bool(controller)
    finally:
        with _LIMIT_LOCK:
            _BLAS_STATE["users"] -= 1
            if _BLAS_STATE["users"] == 0 and _BLAS_STATE["ctx"] is not None:
                _BLAS_STATE["ctx"].restore_original_limits()
                _BLAS_STATE["ctx"] = None


@contextlib.contextmanager
def torch_single_thread(torch: Any) -> Iterator[None]:
    """Hold torch at one thread (process-wide, re-entrant: the last search out restores)."""
    with _LIMIT_LOCK:
        if _TORCH_STATE["users"] == 0:
            _TORCH_STATE["saved_threads"] = torch.get_num_threads()
            torch.set_num_threads(1)
        _TORCH_STATE["users"] += 1
    try:
        yield
    finally:
        with _LIMIT_LOCK:
            _TORCH_STATE["users"] -= 1
            if _TORCH_STATE["users"] == 0:
                torch.set_num_threads(_TORCH_STATE["saved_threads"])


@contextlib.contextmanager
def numba_threads(num_threads: int | None) -> Iterator[int]:
    """Run numba parallel kernels on ``num_threads`` threads (default: all); yields the count."""
    if num_threads is None:
        yield numba.get_num_threads()
        return
    old = numba.get_num_threads()
    n = min(num_threads, numba.config.NUMBA_NUM_THREADS)
    numba.set_num_threads(n)
    try:
        yield n
    finally:
        numba.set_num_threads(old)


def worker_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The process's pool of search workers (one per numba thread), made on first use."""
    global _POOL
    if _POOL is None:
        _POOL = concurrent.futures.ThreadPoolExecutor(
            max_workers=numba.config.NUMBA_NUM_THREADS, thread_name_prefix="fastrag-dense"
        )
    return _POOL
