"""CPU cost of the BM25 analyzers on Chinese text: the default ``bm25`` (with its pairs of Han
characters, issue 42) against ``han_bigrams=False``, ``bm25_chinese`` and ``bm25_cjk``.

On CMRC 2018 dev (848 paragraphs, 3,219 questions), one thread, CPU seconds: tokenizing the
paragraphs, building the index, and the questions end to end (analysis + search, top-5);
terms, postings and terms per query. Analyzers interleaved, median of ``--repeats``.

    python bench/bench_analyzer_cost.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import RESULTS_DIR, machine_info

from fastrag.analysis import encode_queries, get_analyzer, tokenize_corpus
from fastrag.datasets import load_cmrc2018_dev
from fastrag.eval.loaders import squad_questions
from fastrag.indexes.bm25.index import BM25Index

ANALYZERS = {
    "bm25": ("bm25", {}),
    "bm25, han_bigrams=False": ("bm25", {"han_bigrams": False}),
    "bm25_chinese": ("bm25_chinese", {}),
    "bm25_cjk": ("bm25_cjk", {}),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="analyzer_cost")
    args = ap.parse_args()
    questions, _, contexts = squad_questions(load_cmrc2018_dev())
    for name, opts in ANALYZERS.values():  # compile kernels, load dictionaries
        an = get_analyzer(name, **opts)
        tc = tokenize_corpus(contexts[:50], an, num_workers=0)
        encode_queries(questions[:50], an, tc.vocab)
    times: dict[str, dict[str, list[float]]] = {k: {} for k in ANALYZERS}
    sizes: dict[str, dict] = {}
    for _ in range(args.repeats):
        for label, (name, opts) in ANALYZERS.items():
            an = get_analyzer(name, **opts)
            t0 = time.process_time()
            tc = tokenize_corpus(contexts, an, num_workers=0)
            t1 = time.process_time()
            index = BM25Index.build(tc.values, tc.offsets, len(tc.vocab))
            index.search_csr(*encode_queries(questions[:20], an, tc.vocab), 5, num_threads=1)
            t2 = time.process_time()
            q_values, q_offsets = encode_queries(questions, an, tc.vocab)
            index.search_csr(q_values, q_offsets, 5, num_threads=1)
            t3 = time.process_time()
            for key, dt in (("tokenize_s", t1 - t0), ("build_s", t2 - t1), ("queries_s", t3 - t2)):
                times[label].setdefault(key, []).append(dt)
            sizes[label] = {
                "terms": len(tc.vocab),
                "postings": int(len(tc.values)),
                "terms_per_query": len(q_values) / len(questions),
            }
    rows = [
        {"analyzer": k, **sizes[k], **{t: statistics.median(v) for t, v in times[k].items()}}
        for k in ANALYZERS
    ]
    info = machine_info(["numpy", "numba"])
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"{args.out}.json").write_text(json.dumps({"machine": info, "rows": rows}))
    base = next(r for r in rows if r["analyzer"] == "bm25, han_bigrams=False")
    lines = [
        "# BM25 analyzers on Chinese text: CPU cost (CMRC 2018 dev)",
        "",
        f"CPU: {info['cpu']} ({info['cpu_class']}); commit {info['commit']}; {info['date']}; "
        f"load {info['loadavg_at_start']}; one thread, CPU seconds, median of {args.repeats} "
        "interleaved rounds; `python bench/bench_analyzer_cost.py`.",
        "",
        "| analyzer | terms | postings | tokenize 848 paragraphs s | terms per query "
        "| 3,219 queries (analysis + search) ms | queries vs han_bigrams=False |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['analyzer']}` | {r['terms']:,} | {r['postings']:,} | {r['tokenize_s']:.3f} "
            f"| {r['terms_per_query']:.1f} | {1000 * r['queries_s']:.1f} "
            f"| {r['queries_s'] / base['queries_s']:.2f}x |"
        )
    text = "\n".join(lines)
    (RESULTS_DIR / f"{args.out}.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
