"""CMRC 2018 recall of the default ``bm25`` with and without its Han sub-words
(``han_search``) and characters (``han_chars``), alone and in ``hybrid`` (issue 42, goal 1).

    python bench/ab_bm25_han_search.py                      # the bundled dev set
    python bench/ab_bm25_han_search.py --cmrc cmrc2018_trial.json --dense

``--cmrc`` takes a SQuAD-style CMRC file (the trial set: ymcui/cmrc2018,
``squad-style-data/cmrc2018_trial.json``); ``--dense`` adds ``cosine`` and ``hybrid`` rows
(multilingual-e5-small; slow on a CPU: ~1 text/s on a loaded 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import RESULTS_DIR, WORK_DIR, machine_info

import fastrag as fr
from fastrag.analysis import get_analyzer
from fastrag.datasets import load_cmrc2018_dev
from fastrag.eval.loaders import squad_questions

VARIANTS = [{}, {"han_chars": True}, {"han_search": False}]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cmrc", type=Path, help="a SQuAD-style CMRC 2018 file (default: dev)")
    ap.add_argument("--dense", action="store_true", help="also cosine and hybrid")
    ap.add_argument("--out", default="ab_bm25_han_search")
    args = ap.parse_args()
    squad = json.loads(args.cmrc.read_text("utf-8")) if args.cmrc else load_cmrc2018_dev()
    split = args.cmrc.stem if args.cmrc else "dev"
    questions, gold, contexts = squad_questions(squad)
    embed = None
    if args.dense:
        from fastrag.embeddings.local import default_embedding

        embed = default_embedding()
    doc = fr.Document.from_texts(
        contexts,
        metadatas=[{"p": i} for i in range(len(contexts))],
        store=str(WORK_DIR / "quality" / f"ab_han_search_{split}"),
        embed=embed,
    )
    runs = [("bm25", v) for v in VARIANTS]
    if args.dense:
        runs += [("cosine", None)] + [("hybrid", v) for v in VARIANTS]
    rows = []
    for sim, opts in runs:
        kw = {"analyzer": get_analyzer("bm25", **opts)} if opts else {}
        t = fr.Retriever(doc, "root", sim, topk=5, **kw).batch_arrow(
            questions, columns=["metadata"]
        )
        ranked: list[list[int]] = [[] for _ in questions]
        for qi, meta in zip(t["query_idx"].to_pylist(), t["metadata"].to_pylist(), strict=True):
            ranked[qi].append(json.loads(meta)["p"])
        rec = {
            f"R@{k}": float(np.mean([g in r[:k] for r, g in zip(ranked, gold, strict=True)]))
            for k in (1, 3, 5)
        }
        label = sim + ("" if not opts else " " + ",".join(f"{k}={v}" for k, v in opts.items()))
        rows.append({"run": label, **rec})
        print(label, rec, flush=True)
    info = machine_info(["numpy", "numba"])
    lines = [
        f"# CMRC 2018 {split}: bm25 Han sub-words and characters",
        "",
        f"{len(contexts)} paragraphs, {len(questions)} questions; {time.strftime('%Y-%m-%d')}, "
        f"commit {info.get('commit')}.",
        "",
        "| run | R@1 | R@3 | R@5 |",
        "|---|---|---|---|",
        *(f"| {r['run']} | {r['R@1']:.4f} | {r['R@3']:.4f} | {r['R@5']:.4f} |" for r in rows),
    ]
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    name = f"{args.out}_{split}"
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps({"machine": info, "rows": rows}))
    (RESULTS_DIR / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
