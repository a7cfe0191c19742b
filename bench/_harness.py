"""Shared benchmark helpers: machine info, timing with warm-up and medians, peak RSS, and
writing results (JSON + Markdown) to ``bench/results/``.

Every benchmark records the machine (CPU, threads, load, library versions, commit) next to its
numbers, reports medians of repeats, and runs its peers in the same process on the same data.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# Benchmarks time fastrag's numba kernels: a process that finds them uncompiled compiles them
# itself (before the warm-up calls) instead of running the NumPy path of a cold process while
# a background compile runs (fastrag._coldstart). bench_coldstart sets it per child.
os.environ.setdefault("FASTRAG_BACKGROUND_COMPILE", "0")

BENCH_DIR = Path(__file__).resolve().parent
# FASTRAG_BENCH_RESULTS redirects results (the CI smoke test writes to a temp folder)
RESULTS_DIR = Path(os.environ.get("FASTRAG_BENCH_RESULTS", BENCH_DIR / "results"))
WORK_DIR = BENCH_DIR / ".work"
#: set (to "1") where a run hides AVX-512 from its processes (``_avx2only.py``): the CPU class
#: the reports print
AVX512_HIDDEN = "FASTRAG_BENCH_AVX512_HIDDEN"


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (or platform.processor())."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_class() -> str:
    """The SIMD features that decide fastrag's kernels: ``AVX2``, ``AVX-512``, ``VNNI``,
    ``BF16``, ``AMX`` (those present, from /proc/cpuinfo; ``?`` where it cannot be read)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "?"
    names = [
        ("avx2", "AVX2"),
        ("avx512f", "AVX-512"),
        ("avx512_vnni", "VNNI"),
        ("avx512_bf16", "BF16"),
        ("amx_bf16", "AMX"),
    ]
    have = " / ".join(label for flag, label in names if flag in flags) or "no AVX2"
    if os.environ.get(AVX512_HIDDEN) == "1":
        return f"AVX2 (AVX-512 hidden by CPUID faulting; the CPU has {have})"
    return have


def git_commit() -> str | None:
    """Current commit of the repository the benchmark runs from (None outside git)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=BENCH_DIR,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_info(extra_versions: Sequence[str] = ()) -> dict[str, Any]:
    """CPU, usable cores, load average, memory, Python and library versions, commit."""
    import numpy

    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_class": cpu_class(),
        "cpu_count": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "numpy": numpy.__version__,
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
        import numba

        info["numba"] = numba.__version__
        info["numba_threads"] = numba.config.NUMBA_NUM_THREADS
        info["numba_threading_layer"] = numba.config.THREADING_LAYER
    except ImportError:  # pragma: no cover
        pass
    try:
        info["mem_total_gb"] = round(
            os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1
        )
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        pass
    for mod in extra_versions:
        try:
            from importlib.metadata import version

            info[mod] = version(mod)
        except Exception:  # noqa: BLE001 - a missing peer is recorded as None
            info[mod] = None
    return info


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# Run in the child by child_peak: the child's own peak RSS is VmHWM of the memory it maps after
# exec. wait4's ru_maxrss is not: Linux folds the parent's peak into the child's at exec (a
# child of a 1.5 GB pytest process reports at least 1.5 GB).
_PEAK_MAIN = """import atexit, runpy, sys
if sys.path and sys.path[0] == '':  # not the working directory's copy: PYTHONPATH's, or installed
    del sys.path[0]
out, module = sys.argv[1], sys.argv[2]
def _write_peak():
    with open('/proc/self/status') as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith('VmHWM:'))
    with open(out, 'w') as f:
        f.write(str(kb))
atexit.register(_write_peak)
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name='__main__', alter_sys=True)
"""


def child_peak(module: str, args: Sequence[str], **popen_kw: Any) -> dict[str, Any]:
    """Run ``python -m MODULE ARGS`` in a child process until it exits: its exit code, peak RSS
    (MiB, Linux), CPU and wall seconds, and stderr. ``popen_kw`` goes to ``subprocess.run``.
    MODULE is imported as installed or from ``PYTHONPATH``, never from the working directory,
    so ``PYTHONPATH=<other checkout>`` measures that checkout from anywhere."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "peak_kb"
        t0 = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(
            [sys.executable, "-c", _PEAK_MAIN, str(out), module, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            **popen_kw,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.perf_counter() - t0
        peak_kb = int(out.read_text()) if out.exists() else float("nan")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "returncode": proc.returncode,
        "peak_rss_mb": peak_kb / 1024.0,
        "cpu_s": cpu,
        "wall_s": wall,
        "stderr": proc.stderr.decode(errors="replace"),
    }


def current_rss_mb() -> float:
    """Current resident set size of this process, in MiB (Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def time_repeats(fn: Callable[[], Any], *, repeats: int = 5, warmup: int = 1) -> list[float]:
    """Wall-clock seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub Markdown table; floats get 3 significant digits or thousands separators."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            if math.isnan(v):
                return "n/a"
            if abs(v) >= 1000:
                return f"{v:,.0f}"
            if abs(v) >= 10:
                return f"{v:.1f}"
            return f"{v:.3g}"
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(
    name: str, payload: dict[str, Any], markdown: str, results_dir: Path | None = None
) -> tuple[Path, Path]:
    """Write ``<name>.json`` and ``<name>.md`` under ``bench/results/`` (or ``results_dir``)."""
    out = Path(results_dir) if results_dir is not None else RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    jp = out / f"{name}.json"
    mp = out / f"{name}.md"
    jp.write_text(json.dumps(payload, indent=2, ensure_ascii=False, default=_json_default) + "\n")
    mp.write_text(markdown.rstrip() + "\n")
    return jp, mp


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
