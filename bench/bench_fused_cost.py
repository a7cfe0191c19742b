"""What ``similarity="bm25_fused"`` costs against ``bm25`` and ``bm25_cjk``: index build (a
fresh store each round, with one query) and one batch of every CMRC dev question, wall and
CPU seconds, medians of interleaved rounds, with the machine and its load.

    python bench/bench_fused_cost.py [--rounds 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from _harness import machine_info, markdown_table, median, write_results

import fastrag as fr
from fastrag.datasets import load_cmrc2018_dev
from fastrag.eval import squad_questions

SIMS = ("bm25", "bm25_cjk", "bm25_fused")


def _timed(fn) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn()``."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    if args.rounds < 1 or args.threads < 1:
        ap.error("--rounds and --threads must be at least 1")
    questions, _, contexts = squad_questions(load_cmrc2018_dev())
    build = {s: [] for s in SIMS}
    query = {s: [] for s in SIMS}
    load = [os.getloadavg()[0]]
    for _ in range(args.rounds + 1):  # the first round warms the kernels and is not kept
        for sim in SIMS:
            tmp = tempfile.mkdtemp(prefix="fused_cost_")
            try:
                doc = fr.Document.from_texts(contexts, store=f"{tmp}/s")
                ret = None

                def make(doc=doc, sim=sim):
                    nonlocal ret
                    ret = fr.Retriever(doc, "root", sim, topk=5, num_threads=args.threads)
                    ret("索引")  # builds the index(es)

                b = _timed(make)
                q = _timed(lambda r=ret: r.batch_arrow(questions))
                build[sim].append(b)
                query[sim].append(q)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        load.append(os.getloadavg()[0])
    rows, payload = [], {"machine": machine_info(["numpy", "numba"]), "rows": []}
    for sim in SIMS:
        bw, bc = (median([x[i] for x in build[sim][1:]]) for i in (0, 1))
        qw, qc = (median([x[i] for x in query[sim][1:]]) for i in (0, 1))
        rows.append([sim, bw, bc, 1000 * qw, 1000 * qc, len(questions) / qw])
        payload["rows"].append(
            {
                "similarity": sim,
                "build_s": bw,
                "build_cpu_s": bc,
                "query_ms": 1000 * qw,
                "query_cpu_ms": 1000 * qc,
                "qps": len(questions) / qw,
            }
        )
    base = {r[0]: r for r in rows}["bm25"]
    ratio = [[r[0], r[2] / base[2], r[4] / base[4]] for r in rows]
    m = payload["machine"]
    md = "\n\n".join(
        [
            "# `bm25_fused` cost (CMRC dev: 848 paragraphs, every question as one batch)",
            f"CPU: {m['cpu']} ({m.get('cpu_class', '?')}); {args.threads} search thread(s); "
            f"medians of {args.rounds} interleaved rounds after one warm-up round; load "
            f"{min(load):.2f}-{max(load):.2f}; commit {m.get('commit')}.",
            markdown_table(
                ["similarity", "build s", "build CPU s", "batch ms", "batch CPU ms", "queries/s"],
                rows,
            ),
            "CPU seconds against `bm25`:",
            markdown_table(["similarity", "build", "batch"], ratio),
        ]
    )
    payload["load"] = load
    write_results("bm25_fused_cost", payload, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
