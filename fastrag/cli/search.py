"""``fastrag search`` (a hits table, JSON lines, or a batch of queries to JSONL/Parquet) and
``fastrag ask`` (an answer written by an OpenAI-compatible LLM, or an extractive one)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastrag.cli.common import UsageError, make_retriever, open_store
from fastrag.cli.storearg import add_store_argument
from fastrag.documents.document import Document
from fastrag.errors import ReaderError
from fastrag.eval.records import read_queries
from fastrag.retrieval.present import hit_label, hit_record, snippet
from fastrag.settings import DEFAULT_TOPK
from fastrag.synth.extractive import extractive_text

if TYPE_CHECKING:
    from fastrag.llms.openai_like import OpenAILike

__all__ = ["add_ask_arguments", "add_search_arguments", "cmd_ask", "cmd_search"]


def _hit_record(qi: int, query: str, rank: int, hit: Any, doc: Document) -> dict:
    """A hits-file row: the query, the rank, then the hit's record (``retrieval.present``)."""
    return {
        "query_idx": qi,
        "query": query,
        "rank": rank,
        **hit_record(hit, doc.source_path, text=True),
    }


def _write_hits(records: list[dict], out: Path) -> None:
    if out.suffix.lower() == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), out)
    else:
        with open(out, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")


def cmd_search(args: argparse.Namespace) -> int:
    if (args.query is None) == (args.queries is None):
        raise UsageError("give one query, or --queries FILE (one query per line, JSONL or Parquet)")
    doc = open_store(args.store)
    ret = make_retriever(doc, args.group, args.similarity, args.topk, args.filter)
    if args.queries is None:
        queries = [args.query]
    else:
        try:
            queries = read_queries(args.queries)
        except ReaderError as exc:
            raise UsageError(f"--queries {exc}") from None
    t0 = time.perf_counter()
    hits = ret.batch(queries)
    seconds = time.perf_counter() - t0
    records = [
        _hit_record(qi, q, r, h, doc)
        for qi, (q, hs) in enumerate(zip(queries, hits, strict=True))
        for r, h in enumerate(hs, 1)
    ]
    if args.out:
        _write_hits(records, Path(args.out))
        print(
            f"{len(queries):,} queries ({len(queries) / max(seconds, 1e-9):,.0f}/s, "
            f"{ret.similarity} on group {ret.group_name!r}): {len(records):,} hits written to "
            f"{args.out}",
            file=sys.stderr,
        )
        return 0
    if args.json:
        for r in records:
            print(json.dumps(r, ensure_ascii=False))
        return 0
    for qi, q in enumerate(queries):
        if len(queries) > 1:
            print(f"\nquery {qi}: {q}")
        rows = [r for r in records if r["query_idx"] == qi]
        if not rows:
            print(f"no hits: {ret.why_no_hits(q)}")
            continue
        labels = [hit_label(r) for r in rows]
        width = max(len(label) for label in labels)
        width = min(max(width, 6), 40)
        print(f"{'rank':>4}  {'score':>8}  {'source':<{width}}  snippet")
        for r, label in zip(rows, labels, strict=True):
            print(
                f"{r['rank']:>4}  {r['score']:>8.3f}  {snippet(label, width):<{width}}"
                f"  {snippet(r['text'], 80)}"
            )
    return 0


def _llm_from(args: argparse.Namespace) -> OpenAILike | None:
    """An OpenAI-compatible LLM from --base-url/--model or the environment, or None."""
    base = args.base_url or os.environ.get("FASTRAG_LLM_BASE_URL")
    model = args.model or os.environ.get("FASTRAG_LLM_MODEL")
    if not base and not model:
        return None
    if not base or not model:
        raise UsageError(
            "an LLM needs both a base URL and a model: --base-url/--model or "
            "FASTRAG_LLM_BASE_URL/FASTRAG_LLM_MODEL"
        )
    from fastrag.llms.openai_like import OpenAILike  # lazy: httpx, for `ask` with an LLM

    return OpenAILike(
        model=model,
        base_url=base,
        api_key=os.environ.get("OPENAI_API_KEY"),
        max_retries=args.max_retries,
    )


def cmd_ask(args: argparse.Namespace) -> int:
    if args.question is None:
        raise UsageError("give the question: fastrag ask STORE QUESTION")
    doc = open_store(args.store)
    ret = make_retriever(doc, args.group, args.similarity, args.topk, args.filter)
    hits = ret(args.question)
    llm = _llm_from(args)
    if not hits:
        print(f"no passage in the store matches the question: {ret.why_no_hits(args.question)}")
        return 1
    if llm is None:
        print(
            extractive_text(
                args.question,
                hits,
                ret.similarity,
                lambda hit: hit_label(hit_record(hit, doc.source_path)),
            )
        )
        print(
            "(no LLM configured: set FASTRAG_LLM_BASE_URL and FASTRAG_LLM_MODEL, or pass "
            "--base-url and --model, for a generated answer)",
            file=sys.stderr,
        )
    else:
        from fastrag.synth.factory import get_response_synthesizer  # lazy: for an LLM only

        synth = get_response_synthesizer(response_mode=args.mode, llm=llm, streaming=True)
        resp = synth.synthesize(args.question, hits)
        for piece in resp.response_gen:
            sys.stdout.write(piece)
            sys.stdout.flush()
        print()
    print("\nSources:")
    for rank, hit in enumerate(hits, 1):
        label = hit_label(hit_record(hit, doc.source_path))
        print(f"{rank}. {label}  (score {hit.score:.3f})  {snippet(hit.text, 70)}")
    return 0


def _query_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", help="node group to search (default: the last one built)")
    p.add_argument(
        "--similarity",
        help="bm25 (the default: any language, mixed folders "
        "too), bm25_english, bm25_chinese, bm25_cjk, bm25_fused, cosine, hybrid, ...",
    )
    p.add_argument(
        "-k",
        "--topk",
        type=int,
        default=DEFAULT_TOPK,
        help=f"hits per query (default {DEFAULT_TOPK})",
    )
    p.add_argument("--filter", help="metadata filter, Spring AI syntax: \"file_type == 'md'\"")


def add_search_arguments(se: argparse.ArgumentParser) -> None:
    """The arguments of ``fastrag search`` (its handler, ``cmd_search``, as ``func``)."""
    add_store_argument(se, then=("query",))
    se.add_argument("query", nargs="?")
    _query_args(se)
    se.add_argument("--json", action="store_true", help="one JSON object per hit")
    se.add_argument("--queries", help="file of queries: one per line, JSONL or Parquet")
    se.add_argument("--out", help="write the hits here (.jsonl or .parquet)")
    se.set_defaults(func=cmd_search)


def add_ask_arguments(ask: argparse.ArgumentParser) -> None:
    """The arguments of ``fastrag ask`` (its handler, ``cmd_ask``, as ``func``)."""
    add_store_argument(ask, then=("question",))
    ask.add_argument("question", nargs="?")
    _query_args(ask)
    ask.add_argument(
        "--mode",
        default="compact",
        help="response mode (compact, refine, tree_summarize, simple_summarize, accumulate, ...)",
    )
    ask.add_argument("--base-url", help="OpenAI-compatible endpoint (or FASTRAG_LLM_BASE_URL)")
    ask.add_argument(
        "--model",
        help="model name (or FASTRAG_LLM_MODEL); the key is read from OPENAI_API_KEY",
    )
    ask.add_argument("--max-retries", type=int, default=3)
    ask.set_defaults(func=cmd_ask)
