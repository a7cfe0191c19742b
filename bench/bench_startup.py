"""Start-up: wall and CPU seconds of fresh ``fastrag`` processes (issue 42, goal 4).

Three cases, each a fresh ``python -m fastrag.cli`` process on a warm numba cache (each tree's
``fastrag warmup`` runs first, untimed: a tree with cold kernels would otherwise compile them in
a background process during the timing), medians of ``--runs``:

* ``fastrag --help``: until the process exits;
* ``fastrag search STORE QUERY`` on a 3-file store (built here, or ``--store``): until it exits;
* ``fastrag mcp STORE`` over stdio: until the ``initialize`` response arrives (the client's
  first wait); CPU is the server's at that moment.

Each case records the process's peak RSS too (``wait4``'s ``ru_maxrss``: the child starts
from this process's memory map, so it reads at least this process's RSS, ~90 MiB: a floor, not
the child's figure, for the small cases; for MCP, ``VmHWM`` at ``initialize``).
``--tree [LABEL=]DIR`` (repeatable) times other source trees too, e.g. ``git worktree add
/tmp/before COMMIT`` then ``--tree before=/tmp/before``: the processes of all trees run
interleaved, one of each in turn, so machine load
touches them alike. ``python -c pass`` is the floor. Goals: --help <= 0.3 s, search <= 0.8 s,
MCP initialize <= 1.5 s wall on a quiet 2-core machine. Under load, CPU seconds compare better
than wall seconds; the load average is recorded before and after each case.

A worktree has ``kernels/`` but no ``fastrag/_kernels`` (an editable install maps that name
to its own checkout): the bench links ``fastrag/_kernels`` to the tree's ``kernels`` for the
run, so each tree runs its own kernels. ``--cases`` picks cases (``mcp`` needs the ``mcp``
extra); whether pandas is installed is recorded (pyarrow imports it, when it is, on its first
array or compute call: ~0.2 s of ``search``).

    python bench/bench_startup.py [--runs 5] [--tree [LABEL=]DIR ...] [--cases help,search]
        [--name startup] [--smoke]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import git_commit, machine_info, markdown_table, median, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")
QUERY = "follow a log file"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2024-11-05",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}
FILES = {
    "a.md": "Use tail -f to follow a log file as it grows.\n\nThe chmod command changes modes.\n",
    "b.md": "chown changes the owner of a file.\n\nls lists a directory.\n",
    "c.txt": "df shows free disk space.\n",
}
GOALS = {"help": 0.3, "search": 0.8, "mcp": 1.5}
CASES = ("python -c pass", "help", "search", "mcp")


def _env(tree: Path) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(tree), path) if p)}


def _run(tree: Path, args: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB) of ``python ARGS`` run in ``tree`` until it exits."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=tree,
        env=_env(tree),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{args} in {tree} exited with {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _mcp(tree: Path, store: Path) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB) of ``fastrag mcp STORE`` until its ``initialize``
    response."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastrag.cli", "mcp", str(store)],
        cwd=tree,
        env=_env(tree),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    proc.stdin.write(json.dumps(INIT) + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    wall = time.perf_counter() - t0
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
    peak = next(int(x.split()[1]) for x in status if x.startswith("VmHWM:")) / 1024
    proc.stdin.close()
    proc.wait(timeout=60)
    if '"result"' not in line:
        raise SystemExit(f"fastrag mcp in {tree} answered {line!r}")
    return wall, cpu, peak


def _link_kernels(tree: Path) -> None:
    """Give a worktree its own ``fastrag/_kernels`` (a link to its ``kernels``)."""
    link = tree / "fastrag" / "_kernels"
    if tree != ROOT and (tree / "kernels").is_dir() and not link.exists():
        link.symlink_to(tree / "kernels", target_is_directory=True)


def _store(tmp: Path, tree: Path) -> Path:
    kb = tmp / "kb"
    kb.mkdir()
    for name, text in FILES.items():
        (kb / name).write_text(text, encoding="utf-8")
    store = tmp / "store"
    _run(tree, ["-m", "fastrag.cli", "ingest", str(kb), "--store", str(store), "-q"])
    return store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--tree", action="append", default=[], help="[LABEL=]DIR: another source tree to time"
    )
    ap.add_argument("--store", help="a store to search (default: 3 files ingested here)")
    ap.add_argument("--smoke", action="store_true", help="1 run each")
    ap.add_argument("--out", help="results folder (default bench/results)")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ",".join(CASES))
    ap.add_argument("--name", help="results name (default startup, startup_smoke with --smoke)")
    args = ap.parse_args()
    chosen = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(CASES))
    if unknown or not chosen:
        ap.error(f"--cases: unknown {unknown or 'none given'}; choose from {', '.join(CASES)}")
    runs = 1 if args.smoke else args.runs
    labels = {ROOT: f"this checkout ({git_commit()})"}
    for spec in args.tree:
        label, _, folder = spec.rpartition("=")
        labels[Path(folder).resolve()] = label or folder
    trees = list(labels)
    for tree in trees:
        _link_kernels(tree)
        _run(tree, ["-m", "fastrag.cli", "warmup"])  # untimed: no background compile below
    info = machine_info()
    info["pandas_installed"] = importlib.util.find_spec("pandas") is not None
    with tempfile.TemporaryDirectory(prefix="fastrag-startup-") as tmp:
        store = Path(args.store) if args.store else _store(Path(tmp), ROOT)
        cases = {
            "python -c pass": lambda tree: _run(tree, ["-c", "pass"]),
            "help": lambda tree: _run(tree, ["-m", "fastrag.cli", "--help"]),
            "search": lambda tree: _run(tree, ["-m", "fastrag.cli", "search", str(store), QUERY]),
            "mcp": lambda tree: _mcp(tree, store),
        }
        results = []
        for case, fn in ((c, cases[c]) for c in chosen):
            for tree in trees:
                fn(tree)  # untimed: the page cache holds what it loads
            load = [os.getloadavg()[0]]
            timed: dict[Path, list[tuple[float, float, float]]] = {t: [] for t in trees}
            for _ in range(runs):
                for tree in trees:
                    timed[tree].append(fn(tree))
            load.append(os.getloadavg()[0])
            for tree in trees:
                walls = [w for w, _, _ in timed[tree]]
                results.append(
                    {
                        "case": case,
                        "tree": labels[tree],
                        "path": str(tree),
                        "wall_s": median(walls),
                        "wall_min_s": min(walls),
                        "wall_max_s": max(walls),
                        "cpu_s": median([c for _, c, _ in timed[tree]]),
                        "peak_rss_mib": median([m for _, _, m in timed[tree]]),
                        "runs": runs,
                        "load_1min": load,
                        "goal_s": GOALS.get(case),
                    }
                )
                print(json.dumps(results[-1]), flush=True)
    rows = [
        [
            r["case"],
            r["tree"],
            r["wall_s"],
            f"{r['wall_min_s']:.3f}-{r['wall_max_s']:.3f}",
            r["cpu_s"],
            r["peak_rss_mib"],
            f"{r['load_1min'][0]:.2f} -> {r['load_1min'][1]:.2f}",
            r["goal_s"],
        ]
        for r in results
    ]
    md = (
        f"# Start-up of fresh fastrag processes\n\nMachine: {info['cpu']}, "
        f"{info['usable_cores']} cores, {info.get('mem_total_gb')} GB, Python {info['python']}, "
        f"numba {info.get('numba')}; pandas installed: {info['pandas_installed']}; "
        f"{info['date']}; medians of {runs} runs, trees "
        "interleaved; load is /proc/loadavg's 1-minute figure before and after each case; "
        "peak RSS is wait4's, at least this bench's own RSS at the spawn (a floor for small "
        "cases).\n\n"
        + markdown_table(
            [
                "case",
                "tree",
                "wall s",
                "wall range",
                "CPU s",
                "peak RSS MiB",
                "load (1 min)",
                "goal s",
            ],
            rows,
        )
        + "\n\nReproduce: `python bench/bench_startup.py "
        + " ".join(sys.argv[1:])
        + "`\n"
    )
    name = args.name or ("startup_smoke" if args.smoke else "startup")
    out = Path(args.out) if args.out else None
    write_results(name, {"machine": info, "results": results}, md, out)


if __name__ == "__main__":
    main()
