"""Retrieval quality on CMRC 2018 dev with the offline multilingual model: cosine alone, BM25
alone, and the multi-path pipeline (BM25 + cosine -> reciprocal rank fusion -> rerank), one
table.

The knowledge base is the LazyLLM tutorial's (848 paragraphs, 10 per file, a ``block`` group of
one node per paragraph); all 3,219 questions run as batches. Paragraph vectors are computed once
with multilingual-e5-small (``[embed]`` extra) and cached in a store under ``bench/.work/``, so
re-runs only embed the questions. The reranker is a ``ModuleReranker`` whose model scores each
candidate by the sum of its min-max-normalised BM25 and cosine scores for the query (no packaged
cross-encoder exists offline; pass a local one with ``--cross-encoder PATH``).

    python bench/bench_rag_quality.py            # full (first run embeds 848 paragraphs: minutes)
    python bench/bench_rag_quality.py --smoke    # 60 paragraphs, their questions
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
from fastrag.datasets import build_squad_kb, load_cmrc2018_dev
from fastrag.eval.loaders import normalize_paragraph, squad_questions
from fastrag.eval.metrics import evaluate_retrieval


def subset(squad: dict, n_paragraphs: int) -> dict:
    out, seen = [], 0
    for art in squad["data"]:
        paras = []
        for p in art["paragraphs"]:
            if seen < n_paragraphs:
                paras.append(p)
                seen += 1
        if paras:
            out.append({**art, "paragraphs": paras})
    return {"version": squad.get("version"), "data": out}


def minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = x.min(), x.max()
    return (x - lo) / (hi - lo) if hi > lo else np.ones_like(x)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--candidates", type=int, default=10, help="top-k of each path before fusion")
    ap.add_argument("--cross-encoder", help="local sentence-transformers cross-encoder path")
    args = ap.parse_args()

    squad = load_cmrc2018_dev()
    if args.smoke:
        squad = subset(squad, 60)
    questions, gold_idx, contexts = squad_questions(squad)
    work = WORK_DIR / ("rag_quality_smoke" if args.smoke else "rag_quality")
    build_squad_kb(squad, work / "kb")
    emb = fr.default_embedding()
    doc = fr.Document(work / "kb", store=work / "store", embed=emb)
    doc.create_node_group("block", transform=lambda t: t.split("\n"))
    g = doc.group("block")
    row_of = {t: i for i, t in enumerate(g.texts())}
    gold = [g.ids[row_of[normalize_paragraph(contexts[i])]] for i in gold_idx]

    t0 = time.perf_counter()
    doc.embeddings("block")
    embed_s = time.perf_counter() - t0
    k = args.candidates
    bm25 = fr.Retriever(doc, "block", similarity="bm25_chinese", topk=k)
    cos = fr.Retriever(doc, "block", similarity="cosine", topk=k)
    t0 = time.perf_counter()
    hits_bm25 = bm25.batch(questions)
    bm25_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    hits_cos = cos.batch(questions)
    cos_s = time.perf_counter() - t0

    joiner = fr.ReciprocalRankFusionJoiner(k=60)
    fused = joiner.batch([[a, b] for a, b in zip(hits_bm25, hits_cos, strict=False)])

    if args.cross_encoder:
        reranker = fr.Reranker(
            "ModuleReranker", model=f"cross-encoder:{args.cross_encoder}", topk=5
        )
        reranked = reranker.batch(fused, questions)
    else:
        # score = normalised BM25 + normalised cosine of each candidate for its query
        per_query: list[dict[str, float]] = []
        for a, b in zip(hits_bm25, hits_cos, strict=False):
            s: dict[str, float] = {}
            for hits in (a, b):
                if hits:
                    norm = minmax(np.array([h.score for h in hits]))
                    for h, v in zip(hits, norm, strict=False):
                        s[h.text] = s.get(h.text, 0.0) + float(v)
            per_query.append(s)
        lookup = iter(per_query)

        def hybrid(query, texts, _scores=None):
            s = next(lookup)
            return [s.get(t, 0.0) for t in texts]

        reranker = fr.Reranker("ModuleReranker", model=hybrid, topk=5)
        reranked = [reranker(f, query=q) for f, q in zip(fused, questions, strict=False)]

    ks = (1, 3, 5)
    rows = {
        "cosine (e5-small)": evaluate_retrieval([[h.id for h in r] for r in hits_cos], gold, ks),
        "bm25_chinese": evaluate_retrieval([[h.id for h in r] for r in hits_bm25], gold, ks),
        "RRF(bm25, cosine)": evaluate_retrieval([[h.id for h in r] for r in fused], gold, ks),
        "RRF + rerank": evaluate_retrieval([[h.id for h in r] for r in reranked], gold, ks),
    }
    out = {
        "machine": machine_info(),
        "n_paragraphs": len(g),
        "n_queries": len(questions),
        "candidates": k,
        "embed_paragraphs_s": embed_s,
        "bm25_batch_s": bm25_s,
        "cosine_batch_s": cos_s,
        "results": rows,
    }
    name = "rag_quality_smoke" if args.smoke else "rag_quality"
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(out, indent=1, default=str))
    lines = [
        f"# Retrieval quality, CMRC 2018 dev ({len(g)} paragraphs, {len(questions)} questions)",
        "",
        "| path | recall@1 | recall@3 | recall@5 | MRR |",
        "|---|---|---|---|---|",
    ]
    for path, m in rows.items():
        lines.append(
            f"| {path} | {m['recall@1']:.4f} | {m['recall@3']:.4f} | "
            f"{m['recall@5']:.4f} | {m['mrr']:.4f} |"
        )
    lines += [
        "",
        f"paragraph embedding: {embed_s:.1f} s (0 when cached in the store); "
        f"question batches: bm25 {bm25_s:.2f} s, cosine {cos_s:.1f} s (includes embedding "
        "the questions)",
    ]
    (RESULTS_DIR / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
