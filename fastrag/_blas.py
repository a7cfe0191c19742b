"""A once-per-process check that the BLAS kernels loaded match the CPU.

OpenBLAS picks a kernel per CPU, unless ``OPENBLAS_CORETYPE`` forces one; a library may also
bundle an old OpenBLAS that does not know the CPU (faiss-cpu's 0.3.15 runs the pre-AVX2
"Barcelona" kernel on Zen 5). Either halves float32 matmul speed or worse, silently.
"""

from __future__ import annotations

import os
import threading
import warnings

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
