"""Modular RAG pipeline: fastrag's ``RAGPipeline.batch`` vs llama-index-core, same flow, same
data, same simulated LLM, one process.

The flow (LlamaIndex's nearest equivalent of fastrag's multi-query, two-path RAG):
4 queries per question (the question + 3 LLM-generated variants) -> BM25 (jieba tokens) and
dense retrieval, top-5 each -> reciprocal rank fusion (k=60), top-5 -> compact synthesis.

* LlamaIndex: ``QueryFusionRetriever([bm25, vector], num_queries=4,
  mode="reciprocal_rerank", similarity_top_k=5)`` in ``RetrieverQueryEngine.from_args(...,
  response_mode="compact")``; its BM25 retriever is a small ``BaseRetriever`` over bm25s with the
  same jieba tokens fastrag uses (what a LlamaIndex user does for Chinese), its vector
  retriever a ``VectorStoreIndex`` (SimpleVectorStore). Called (a) in a plain loop of
  ``query_engine.query`` and (b) with ``asyncio.gather`` over ``aquery`` (unbounded).
* fastrag: ``RAGPipeline([Retriever(bm25_chinese), Retriever(cosine)],
  query_expander=MultiQueryExpander(number_of_queries=3), joiner=ReciprocalRankFusionJoiner(
  topk=5), synthesizer=compact)`` and ``pipe.batch(questions)``, at the default
  ``max_concurrency=16`` and at 128.
* The simulated LLM (the synthesis benchmark's: 50 ms + 0.02 ms per prompt token) writes the
  same words for both: three variant lines for a query-generation prompt, a fixed short answer
  otherwise; both see context_window 4096 / num_output 256. LLM calls and prompt tokens are
  counted on the LLM side (tiktoken), identically for both.
* The dense side uses one cheap deterministic embedder for both (hashed character unigrams and
  bigrams, 256-d, unit norm): vectors are what is retrieved from, not what is measured; the
  corpus is embedded once per framework before timing, queries inside the timed run.
* Framework CPU per query: process CPU time of the whole run with a zero-latency copy of the
  LLM (no sleeping, usage estimated without tokenizing), divided by the questions.

    python bench/bench_pipeline.py             # 500 questions (the LlamaIndex loop ~2 min)
    python bench/bench_pipeline.py --smoke     # 20 questions over 40 paragraphs (CI)

Writes bench/results/pipeline.{json,md,png} (``--smoke``: pipeline_smoke.*).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import RESULTS_DIR, machine_info, markdown_table, median, write_results
from bench_synthesis import CONTEXT_WINDOW, LATENCY, LATENCY_PER_TOKEN, NUM_OUTPUT, llama_llm

import fastrag as fr
from fastrag.analysis import get_analyzer
from fastrag.datasets import load_cmrc2018_dev
from fastrag.eval.loaders import squad_questions

TOPK = 5
DIM = 256
ANSWER = "根据上下文，答案见第一段。The answer is in the first passage."
_QUERY = re.compile(r"(?:Original query|Query): (.*)\n")


# -- the simulated model's words ------------------------------------------------------------------
def words(prompt: str) -> str:
    """Three variants for a query-generation prompt (fastrag's or LlamaIndex's), else ANSWER."""
    if "search queries" in prompt or "different versions of the given query" in prompt:
        q = _QUERY.search(prompt).group(1).strip()
        return f"{q}是什么\n{q}的背景\n关于{q}"
    return ANSWER


def sim_llm(zero: bool = False) -> fr.MockLLM:
    if zero:  # framework CPU: no sleep, usage estimated from characters (no tokenizer)
        return fr.MockLLM(words, token_counter=lambda s: len(s) // 4)
    return fr.MockLLM(words, latency=LATENCY, latency_per_token=LATENCY_PER_TOKEN)


# -- the shared embedder --------------------------------------------------------------------------
def embed(texts: list[str]) -> np.ndarray:
    """Hashed character unigrams + bigrams, 256-d, unit norm (deterministic, cheap)."""
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, t in enumerate(texts):
        grams = list(t) + [t[j : j + 2] for j in range(len(t) - 1)]
        idx = np.fromiter((hash_gram(g) for g in grams), dtype=np.int64, count=len(grams))
        np.add.at(out[i], idx % DIM, 1.0)
    n = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(n > 0, n, 1.0)


_GRAM: dict[str, int] = {}


def hash_gram(g: str) -> int:
    h = _GRAM.get(g)
    if h is None:
        h = _GRAM[g] = zlib.crc32(g.encode("utf-8"))
    return h


# -- data ----------------------------------------------------------------------
def load(n_paragraphs: int | None, n_questions: int):
    questions, gold, contexts = squad_questions(load_cmrc2018_dev())
    if n_paragraphs is not None:
        keep = [i for i, g in enumerate(gold) if g < n_paragraphs]
        questions, gold = [questions[i] for i in keep], [gold[i] for i in keep]
        contexts = contexts[:n_paragraphs]
    step = max(1, len(questions) // n_questions)
    picked = list(range(0, len(questions), step))[:n_questions]
    return contexts, [questions[i] for i in picked], [gold[i] for i in picked]


# -- fastrag ----------------------------------------------------------------------
def fastrag_doc(contexts: list[str]) -> fr.Document:
    doc = fr.Document.from_texts(
        contexts, metadatas=[{"para": i} for i in range(len(contexts))], embed=embed
    )
    for sim in ("bm25_chinese", "cosine"):  # build the indexes before timing
        fr.Retriever(doc, "root", sim, topk=TOPK).batch(["预热"])
    return doc


def fastrag_pipe(doc: fr.Document, llm: fr.MockLLM, conc: int) -> fr.RAGPipeline:
    return fr.RAGPipeline(
        [
            fr.Retriever(doc, "root", "bm25_chinese", topk=TOPK),
            fr.Retriever(doc, "root", "cosine", topk=TOPK),
        ],
        query_expander=fr.MultiQueryExpander(llm, number_of_queries=3, max_concurrency=conc),
        joiner=fr.ReciprocalRankFusionJoiner(topk=TOPK),
        synthesizer=fr.get_response_synthesizer(
            "compact",
            llm=llm,
            max_concurrency=conc,
            context_window=CONTEXT_WINDOW,
            num_output=NUM_OUTPUT,
        ),
    )


def run_fastrag(doc, questions, gold, conc: int, zero: bool = False) -> dict[str, Any]:
    llm = sim_llm(zero)
    pipe = fastrag_pipe(doc, llm, conc)
    t0, c0 = time.perf_counter(), time.process_time()
    resps = pipe.batch(questions)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    hits = [[n.metadata["para"] for n in r.source_nodes] for r in resps]
    return _row(
        f"fastrag batch (max_concurrency={conc})",
        wall,
        cpu,
        llm,
        hits,
        gold,
        sum(r.metadata["llm_calls"] for r in resps),
    )


# -- LlamaIndex ----------------------------------------------------------------------
def llama_engine(contexts: list[str], llm) -> Any:
    import bm25s
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import BaseRetriever, QueryFusionRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    analyzer = get_analyzer("bm25_chinese")

    class HashEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return embed([query])[0].tolist()

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return embed([text])[0].tolist()

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return embed(texts).tolist()

    nodes = [TextNode(text=t, id_=f"p{i}", metadata={"para": i}) for i, t in enumerate(contexts)]

    class JiebaBM25Retriever(BaseRetriever):
        """bm25s over the same jieba tokens fastrag's bm25_chinese uses."""

        def __init__(self) -> None:
            super().__init__()
            self.bm25 = bm25s.BM25()
            self.bm25.index([analyzer(t) for t in contexts], show_progress=False)

        def _retrieve(self, query_bundle) -> list:
            toks = analyzer(query_bundle.query_str)
            if not toks:
                return []
            docs, scores = self.bm25.retrieve([toks], k=TOPK, show_progress=False, n_threads=1)
            return [
                NodeWithScore(node=nodes[int(d)], score=float(s))
                for d, s in zip(docs[0], scores[0], strict=True)
                if s > 0
            ]

    vector = VectorStoreIndex(nodes, embed_model=HashEmbedding()).as_retriever(
        similarity_top_k=TOPK
    )
    fusion = QueryFusionRetriever(
        [JiebaBM25Retriever(), vector],
        llm=llm,
        num_queries=4,
        mode="reciprocal_rerank",
        similarity_top_k=TOPK,
        use_async=True,
    )
    return RetrieverQueryEngine.from_args(fusion, llm=llm, response_mode="compact")


def run_llama(contexts, questions, gold, how: str, zero: bool = False) -> dict[str, Any]:
    mock = sim_llm(zero)
    engine = llama_engine(contexts, llama_llm(mock))
    t0, c0 = time.perf_counter(), time.process_time()
    if how == "loop":
        resps = [engine.query(q) for q in questions]
    else:

        async def gathered():
            return await asyncio.gather(*(engine.aquery(q) for q in questions))

        resps = asyncio.run(gathered())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    hits = [[n.node.metadata["para"] for n in r.source_nodes] for r in resps]
    label = "llama-index loop (query)" if how == "loop" else "llama-index asyncio.gather(aquery)"
    return _row(label, wall, cpu, mock, hits, gold, len(mock.calls))


def _row(label, wall, cpu, llm, hits, gold, reported_calls) -> dict[str, Any]:
    n = len(gold)
    recall = sum(g in h for g, h in zip(gold, hits, strict=True)) / n
    return {
        "flow": label,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_ms_per_query": cpu / n * 1e3,
        "llm_calls": len(llm.calls),
        "reported_llm_calls": reported_calls,
        "prompt_tokens": sum(c.prompt_tokens or 0 for c in llm.calls),
        "recall@5": recall,
        "n_queries": n,
    }


# -- report ----------------------------------------------------------------------
def plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib
    except ImportError:  # pragma: no cover
        print("matplotlib not installed: no plot")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    labels = [r["flow"].replace(" (", "\n(").replace(" asyncio", "\nasyncio") for r in rows]
    axes[0].barh(labels, [r["wall_s"] for r in rows], color="tab:blue")
    axes[0].set_xscale("log")
    axes[0].set_title(f"wall time, {rows[0]['n_queries']} questions (s, log)")
    axes[1].barh(labels, [r.get("cpu_ms_zero", float("nan")) for r in rows], color="tab:orange")
    axes[1].set_xscale("log")
    axes[1].set_title("framework CPU per question, zero-latency LLM (ms, log)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny CI run")
    ap.add_argument("--questions", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the fast flows")
    args = ap.parse_args(argv)
    n_par, n_q, repeats = (40, 20, 1) if args.smoke else (None, args.questions, args.repeats)
    info = machine_info(["llama_index.core", "bm25s"])
    contexts, questions, gold = load(n_par, n_q)
    print(
        f"{len(contexts)} paragraphs, {len(questions)} questions; load {os.getloadavg()}",
        flush=True,
    )
    doc = fastrag_doc(contexts)
    run_fastrag(doc, questions[:4], gold[:4], 16)  # warm-up (kernels, tokenizer caches)

    def measure(run, n_rep: int) -> dict[str, Any]:
        """Medians of n_rep timed runs, plus the CPU per question with a zero-latency LLM."""
        reps = [run(False) for _ in range(n_rep)]
        row = reps[0]
        row["wall_s"] = median([r["wall_s"] for r in reps])
        row["cpu_s"] = median([r["cpu_s"] for r in reps])
        row["cpu_ms_zero"] = median([run(True)["cpu_ms_per_query"] for _ in range(n_rep)])
        print(
            f"  {row['flow']}: {row['wall_s']:.2f} s, cpu/q (zero-latency) "
            f"{row['cpu_ms_zero']:.2f} ms",
            flush=True,
        )
        return row

    rows = [
        measure(lambda z, c=conc: run_fastrag(doc, questions, gold, c, zero=z), repeats)
        for conc in (16, 128)
    ]
    rows += [
        measure(
            lambda z, h=how: run_llama(contexts, questions, gold, h, zero=z),
            repeats if how == "gather" else 1,
        )
        for how in ("gather", "loop")
    ]
    info["loadavg_at_end"] = list(os.getloadavg())

    fast = {r["flow"]: r for r in rows}
    best = fast["fastrag batch (max_concurrency=128)"]
    default = fast["fastrag batch (max_concurrency=16)"]
    loop = fast["llama-index loop (query)"]
    gath = fast["llama-index asyncio.gather(aquery)"]
    goals = [
        (
            "batch >= 20x the LlamaIndex loop (default max_concurrency=16)",
            loop["wall_s"] / default["wall_s"],
            20.0,
        ),
        (
            "batch >= 20x the LlamaIndex loop (max_concurrency=128)",
            loop["wall_s"] / best["wall_s"],
            20.0,
        ),
        (
            "batch >= 3x LlamaIndex asyncio.gather (default max_concurrency=16)",
            gath["wall_s"] / default["wall_s"],
            3.0,
        ),
        (
            "batch >= 3x LlamaIndex asyncio.gather (max_concurrency=128)",
            gath["wall_s"] / best["wall_s"],
            3.0,
        ),
        (
            "framework CPU per question <= 1/10 of LlamaIndex's (gather)",
            gath["cpu_ms_zero"] / best["cpu_ms_zero"],
            10.0,
        ),
        ("no more LLM calls than LlamaIndex", loop["llm_calls"] / max(1, best["llm_calls"]), 1.0),
        (
            "no more prompt tokens than LlamaIndex",
            loop["prompt_tokens"] / max(1, best["prompt_tokens"]),
            1.0,
        ),
    ]
    headers = [
        "flow",
        "wall s",
        "LLM calls",
        "prompt tokens",
        "CPU ms/question (zero-latency LLM)",
        "recall@5",
    ]
    table = markdown_table(
        headers,
        [
            [
                r["flow"],
                r["wall_s"],
                r["llm_calls"],
                r["prompt_tokens"],
                r["cpu_ms_zero"],
                r["recall@5"],
            ]
            for r in rows
        ],
    )
    goal_lines = [
        f"- {'PASS' if ratio >= need else 'MISS'}: {name}: {ratio:.2f}x (goal {need:g}x)"
        for name, ratio, need in goals
    ]
    md = "\n".join(
        [
            "# Modular RAG pipeline: fastrag vs llama-index-core",
            "",
            f"CPU: {info['cpu']} ({info['usable_cores']} usable cores); load at start "
            f"{info['loadavg_at_start']}, at end {info['loadavg_at_end']}; "
            f"commit {info['commit']}; "
            f"{len(questions)} CMRC questions over {len(contexts)} paragraphs; simulated LLM "
            f"{LATENCY * 1e3:.0f} ms + {LATENCY_PER_TOKEN * 1e3:.2f} ms per prompt token; wall and "
            f"CPU medians of {repeats} runs (the LlamaIndex loop: 1 run).",
            "",
            "Flow: 4 queries per question (original + 3 generated) -> BM25 (jieba) + dense, top-5 "
            "each -> reciprocal rank fusion top-5 -> compact synthesis.",
            "",
            table,
            "",
            *goal_lines,
            "",
            "Reproduce: `python bench/bench_pipeline.py` (see the module docstring for the setup).",
        ]
    )
    payload = {
        "machine": info,
        "rows": rows,
        "goals": [{"goal": g, "ratio": r, "need": n, "met": r >= n} for g, r, n in goals],
        "questions": len(questions),
        "paragraphs": len(contexts),
    }
    name = "pipeline_smoke" if args.smoke else "pipeline"
    write_results(name, payload, md)
    plot(rows, RESULTS_DIR / f"{name}.png")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
