"""Peak memory and store size of ``fastrag ingest`` on one large log file.

Generates a seeded server log (``bench/gen_log.py``: nginx + syslog lines, ``--mb`` MB, one
file) and runs ``fastrag ingest LOG_DIR --store STORE -q`` (the default ``chunk`` group,
sentence:256:32, and its BM25 index) in a child process, ``--repeats`` times. Per run: the
child's peak RSS (its own ``VmHWM``, ``_harness.child_peak``), its wall and CPU seconds, the
store's bytes (every file under it) against the log's, and the load average. The kernels are
compiled first (``fastrag warmup``), so no run waits for a compile.

Usage: ``python bench/bench_ingest_memory.py`` (50 MB, 3 repeats), ``--mb 5 --repeats 1``, or
``--smoke`` (2 MB, one run). ``--tree before=/path/to/checkout`` (repeatable) runs that
checkout's fastrag (``PYTHONPATH``) too, interleaved with this one in every repeat, each
checkout warmed up first; the table then names each run's tree and gives each tree's median.
Writes ``bench/results/ingest_memory.json`` and ``.md`` (``--name`` to change). Run it with the
Python of the environment to measure: a core install (``pip install -e .``) lacks pandas and
scipy, which pyarrow and numba import when present.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import WORK_DIR, child_peak, machine_info, markdown_table, write_results
from gen_log import write_log

# The same command on the same 50 MB log before issue 42's changes (commit 7e5a8b9, with
# /usr/bin/time -v, 2026-12-03 14:22 UTC, load 2.8-3.7 on 2 cores): kept as the reference row.
BEFORE = {
    "commit": "7e5a8b9",
    "peak_rss_mb": 1451572 / 1024,
    "store_bytes": 137_905_421,
    "wall_s": 36.06,
    "cpu_s": 13.86 + 4.28,
    "load": "2.83 -> 3.52",
}


NON_ASCII = " user=José région=東京"  # --non-ascii: appended to every NON_ASCII_EVERY-th line
NON_ASCII_EVERY = 500


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _env(tree: str | None) -> dict | None:
    if tree is None:
        return None
    return {**os.environ, "PYTHONPATH": tree}


def run_ingest(log_dir: Path, store: Path, tree: str | None = None) -> dict:
    """One ``fastrag ingest`` in a child process (of checkout ``tree``, else the installed or
    this one): peak RSS, seconds, store bytes, load."""
    shutil.rmtree(store, ignore_errors=True)
    load0 = os.getloadavg()[0]
    run = child_peak(
        "fastrag.cli", ["ingest", str(log_dir), "--store", str(store), "-q"], env=_env(tree)
    )
    if run["returncode"] != 0:
        raise SystemExit(f"fastrag ingest failed:\n{run['stderr']}")
    return {
        "peak_rss_mb": run["peak_rss_mb"],
        "wall_s": run["wall_s"],
        "cpu_s": run["cpu_s"],
        "store_bytes": dir_bytes(store),
        "load_start": load0,
        "load_end": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--name", default=None, help="results name (default: ingest_memory[_smoke])")
    ap.add_argument("--smoke", action="store_true", help="2 MB, one run (CI)")
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="also run the fastrag of checkout PATH, interleaved",
    )
    ap.add_argument(
        "--non-ascii",
        action="store_true",
        help=f"append {NON_ASCII!r} to every {NON_ASCII_EVERY}th line (a text Python keeps at "
        "2 bytes a character)",
    )
    a = ap.parse_args()
    if a.smoke:
        a.mb, a.repeats = 2.0, 1
    a.name = a.name or ("ingest_memory_smoke" if a.smoke else "ingest_memory")
    work = WORK_DIR / "ingest_memory"
    log_dir = work / f"log_{a.mb:g}mb_s{a.seed}{'_nonascii' if a.non_ascii else ''}"
    log = log_dir / "server.log"
    if not log.exists():
        write_log(log, int(a.mb * 1e6), a.seed)
        if a.non_ascii:
            lines = log.read_text("utf-8").splitlines(keepends=True)
            for i in range(NON_ASCII_EVERY - 1, len(lines), NON_ASCII_EVERY):
                lines[i] = lines[i].rstrip("\n") + NON_ASCII + "\n"
            log.write_text("".join(lines), "utf-8")
    text_bytes = log.stat().st_size
    trees: list[tuple[str, str | None]] = [
        (name, path) for name, _, path in (t.partition("=") for t in a.tree)
    ]
    trees.append(("this" if trees else "", None))
    for _, tree in trees:  # the fastrag measured below
        if child_peak("fastrag.cli", ["warmup"], env=_env(tree))["returncode"] != 0:
            raise SystemExit(f"fastrag warmup failed ({tree or 'this checkout'})")
    info = machine_info()
    # installed in this environment, so imported by the ingest: pyarrow imports pandas at its
    # first array, numba imports scipy's BLAS (neither is a dependency of fastrag)
    present = {m: importlib.util.find_spec(m) is not None for m in ("pandas", "scipy")}
    runs = [
        {"tree": name, **run_ingest(log_dir, work / "store", tree)}
        for _ in range(a.repeats)
        for name, tree in trees
    ]
    shutil.rmtree(work / "store", ignore_errors=True)

    def med(k: str, tree: str = trees[-1][0]) -> float:
        return statistics.median(r[k] for r in runs if r["tree"] == tree)

    rows = [
        [
            f"{i // len(trees) + 1} {r['tree']}".strip(),
            r["peak_rss_mb"],
            r["store_bytes"],
            r["store_bytes"] / text_bytes,
            r["wall_s"],
            r["cpu_s"],
            f"{r['load_start']:.2f} -> {r['load_end']:.2f}",
        ]
        for i, r in enumerate(runs)
    ]
    if a.mb == 50.0 and a.seed == 0 and not a.non_ascii:
        b = BEFORE
        rows.insert(
            0,
            [
                f"before ({b['commit']})",
                b["peak_rss_mb"],
                b["store_bytes"],
                b["store_bytes"] / text_bytes,
                b["wall_s"],
                b["cpu_s"],
                b["load"],
            ],
        )
    md = [
        f"# fastrag ingest of one {text_bytes / 1e6:.1f} MB log file",
        "",
        f"`python bench/bench_ingest_memory.py --mb {a.mb:g} --repeats {a.repeats}"
        f"{' --non-ascii' if a.non_ascii else ''}{''.join(f' --tree {t}' for t in a.tree)}`; "
        f"{info['cpu']} ({info['usable_cores']} usable cores), commit {info['commit']}, "
        f"{info['date']}. Median peak RSS {med('peak_rss_mb'):.0f} MiB, store "
        f"{med('store_bytes') / text_bytes:.2f}x the text, {med('cpu_s'):.1f} CPU s. "
        f"Environment: {sys.prefix}; "
        + ", ".join(f"{m} {'installed' if ok else 'not installed'}" for m, ok in present.items())
        + " (pyarrow imports pandas at its first array and numba scipy's BLAS when they are "
        "installed; fastrag's own dependencies pull neither).",
        "",
        markdown_table(
            ["run", "peak RSS MiB", "store bytes", "store / text", "wall s", "CPU s", "load 1 min"],
            rows,
        ),
    ]
    if len(trees) > 1:
        named = ", ".join(f"{n}: {p or 'this checkout'}" for n, p in trees)
        per_tree = [
            [n, med("peak_rss_mb", n), med("cpu_s", n), med("store_bytes", n)] for n, _ in trees
        ]
        md += [
            "",
            f"Medians per tree ({named}):",
            "",
            markdown_table(["tree", "peak RSS MiB", "CPU s", "store bytes"], per_tree),
        ]
    payload = {
        "machine": info,
        "installed": present,
        "text_bytes": text_bytes,
        "mb": a.mb,
        "seed": a.seed,
        "runs": runs,
        "trees": dict(trees),
    }
    _, mp = write_results(a.name, payload, "\n".join(md))
    print(mp.read_text())


if __name__ == "__main__":
    main()
