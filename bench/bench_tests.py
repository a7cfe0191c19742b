"""The README's test command: wall time and peak memory of the whole process tree.

Runs ``python -m pytest -m "not slow and not ray" -n 2`` (README.md) in this checkout and
samples every second the processes it starts (pytest, its workers, every process a test
starts): the peak of their summed PSS (``/proc/<pid>/smaps_rollup``: shared pages split
between the processes that map them, the fair total), of their summed RSS (which counts each
shared library once per process) and the largest single RSS. Linux only. Issue 30's goal: at
most 5 minutes on a quiet 2-core machine (10 under load), at most 3 GB.

    python bench/bench_tests.py [--cold] [--smoke]

``--cold`` points ``NUMBA_CACHE_DIR`` at a new, empty folder, so the kernels compile as on a
fresh clone; ``--smoke`` runs one small test file.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, markdown_table, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ["-m", "pytest", "-m", "not slow and not ray", "-n", "2", "-p", "no:cacheprovider"]


def _children(pid: int) -> list[int] | None:
    """The child processes of ``pid`` from its threads' ``children`` files (None: the kernel
    does not list them, or ``pid`` has gone)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        out = []
        for tid in tasks:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        return out
    except (OSError, ValueError):
        return None


def _tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        kids = _children(pid)
        if kids is None:
            return _tree_by_scan(root)
        out.append(pid)
        todo.extend(kids)
    return out


def _tree_by_scan(root: int) -> list[int]:
    """:func:`_tree` from every process's parent in ``/proc/<pid>/stat``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _memory(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in bytes; (0, 0) once it has gone."""
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return pss, rss


def run(args: list[str], env: dict[str, str], interval: float = 1.0) -> dict:
    """Run pytest with ``args``; wall time, exit code, the memory peaks and the CPU seconds the
    sampling took (reading every process's ``smaps_rollup`` each 0.2 s cost 12% of a core)."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    proc = subprocess.Popen([sys.executable, *COMMAND, *args], cwd=ROOT, env=env)
    peak_pss = peak_rss = peak_one = 0
    while proc.poll() is None:
        sizes = [_memory(pid) for pid in _tree(proc.pid)]
        peak_pss = max(peak_pss, sum(p for p, _ in sizes))
        peak_rss = max(peak_rss, sum(r for _, r in sizes))
        peak_one = max(peak_one, max((r for _, r in sizes), default=0))
        time.sleep(interval)
    return {
        "wall_s": time.perf_counter() - t0,
        "sampler_cpu_s": time.process_time() - c0,
        "returncode": proc.returncode,
        "peak_pss_gib": peak_pss / 2**30,
        "peak_rss_sum_gib": peak_rss / 2**30,
        "peak_rss_largest_gib": peak_one / 2**30,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cold", action="store_true", help="an empty numba cache first")
    ap.add_argument("--smoke", action="store_true", help="one small test file")
    ap.add_argument("--out", default=None, help="results folder (default bench/results/)")
    args = ap.parse_args()
    if not Path("/proc/self/smaps_rollup").exists():
        sys.exit("bench_tests.py reads /proc/<pid>/smaps_rollup: run it on Linux")
    info = machine_info()
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="fastrag-numba-") as cache:
        if args.cold:
            env["NUMBA_CACHE_DIR"] = cache
        row = run(["tests/test_public_api.py"] if args.smoke else [], env)
    row["cache"] = "empty" if args.cold else "as found"
    row["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    name = "tests_smoke" if args.smoke else ("tests_cold" if args.cold else "tests")
    table = markdown_table(
        [
            "numba cache",
            "wall s",
            "peak PSS GiB",
            "peak RSS sum GiB",
            "largest RSS GiB",
            "sampler CPU s",
            "exit",
        ],
        [
            [
                row["cache"],
                row["wall_s"],
                row["peak_pss_gib"],
                row["peak_rss_sum_gib"],
                row["peak_rss_largest_gib"],
                row["sampler_cpu_s"],
                row["returncode"],
            ]
        ],
    )
    md = (
        f"# README's test command\n\n`python {shlex.join(COMMAND)}`\n\n{table}\n\n"
        f"CPU {info.get('cpu')}, {info.get('usable_cores')} cores, load "
        f"{[round(x, 2) for x in info.get('loadavg_at_start') or []]} at start, "
        f"{row['loadavg_at_end']} at the end.\n"
    )
    write_results(name, {"machine": info, "run": row}, md, Path(args.out) if args.out else None)
    print(md)
    sys.exit(row["returncode"])


if __name__ == "__main__":
    main()
