"""``fastrag eval`` (hit rate, nDCG and MRR of a store on your questions, or recall on SQuAD
data) and ``fastrag demo`` (the same on the bundled CMRC 2018 knowledge base)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from fastrag._coldstart import kernels_ready
from fastrag.analysis.language import detect_language
from fastrag.cli.common import UsageError, make_retriever, open_store
from fastrag.cli.storearg import add_store_argument
from fastrag.datasets import load_cmrc2018_dev
from fastrag.errors import ReaderError
from fastrag.eval.loaders import read_squad_json, squad_questions
from fastrag.eval.metrics import evaluate_retrieval
from fastrag.eval.questions import gold_ids, read_questions
from fastrag.eval.squad_run import evaluate_squad, format_table
from fastrag.eval.timing import describe_load, machine_load, time_batches

__all__ = ["add_demo_arguments", "add_eval_arguments", "cmd_demo", "cmd_eval"]


def _run_eval(squad: Any, args: argparse.Namespace) -> int:
    topks = [int(k) for k in str(args.topk).split(",")]
    with tempfile.TemporaryDirectory(prefix="fastrag-eval-") as tmp:
        workdir = Path(args.workdir) if args.workdir else Path(tmp)
        res = evaluate_squad(
            squad,
            workdir,
            similarities=args.similarity,
            topks=topks,
            per_file=args.kb_per_file,
            group=args.group,
            runs=args.runs,
        )
    print(
        f"{res['n_queries']:,} questions over {res['n_nodes']:,} paragraphs "
        f"(one batch per similarity)\n"
    )
    print(format_table(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, ensure_ascii=False))
        print(f"\nwrote {args.json}")
    return 0


def _check_runs(args: argparse.Namespace) -> None:
    if args.runs < 3:
        raise UsageError(
            f"--runs {args.runs}: pass 3 or more (queries/s is the median of the timed "
            "batches, shown with their spread)"
        )


def cmd_eval(args: argparse.Namespace) -> int:
    _check_runs(args)
    if args.squad:
        if args.store or args.questions:
            raise UsageError("--squad builds its own knowledge base: drop STORE and --questions")
        squad = read_squad_json(args.squad)
        args.group = args.group or "block"
        if args.similarity is None:
            questions, _, contexts = squad_questions(squad)
            zh = detect_language(contexts[:200] + questions[:200]) == "zh"
            args.similarity = ["bm25_chinese", "bm25_cjk"] if zh else ["bm25"]
        return _run_eval(squad, args)
    if not args.store or not args.questions:
        raise UsageError("eval needs STORE and --questions FILE (or --squad FILE for SQuAD data)")
    return _eval_store(args)


def _eval_store(args: argparse.Namespace) -> int:
    try:
        records = read_questions(args.questions)
    except ReaderError as exc:
        raise UsageError(f"--questions {exc}") from None
    doc = open_store(args.store)
    topks = [int(k) for k in str(args.topk).split(",")]
    sims = args.similarity or [None]
    gold = None
    rows = []
    questions = [r["question"] for r in records]
    for sim in sims:
        ret = make_retriever(doc, args.group, sim, max(topks), None)
        if gold is None:
            gold = gold_ids(doc.group(ret.group_name), records)
            missing = sum(1 for g in gold if not g)
            if missing:
                print(
                    f"note: {missing} of {len(records)} questions have no passage in group "
                    f"{ret.group_name!r} that holds their answer; they count as misses",
                    file=sys.stderr,
                )
        hits, timing = time_batches(partial(ret.batch, questions), len(questions), runs=args.runs)
        res = evaluate_retrieval(
            [[h.id for h in hs] for hs in hits], [sorted(g) for g in gold], topks
        )
        rows.append((ret.similarity, res, timing))
    head = (
        ["similarity"]
        + [f"hit@{k}" for k in topks]
        + [f"ndcg@{k}" for k in topks]
        + ["MRR", "queries/s (min-max)", "CPU s"]
    )
    print(
        f"{len(records):,} questions over group {ret.group_name!r} "
        f"({len(doc.group(ret.group_name)):,} nodes), one batch per similarity\n"
    )
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for sim, res, t in rows:
        print(
            " | ".join(
                [sim]
                + [f"{res[f'hit_rate@{k}']:.3f}" for k in topks]
                + [f"{res[f'ndcg@{k}']:.3f}" for k in topks]
                + [
                    f"{res['mrr']:.3f}",
                    f"{t.per_s:,.0f} ({t.per_s_min:,.0f}-{t.per_s_max:,.0f})",
                    f"{t.cpu_s_median:.3f}",
                ]
            )
        )
    load = machine_load()
    print(
        f"\nqueries/s: median of {args.runs} timed batches per similarity after one untimed "
        f"batch; measured on this machine now. {describe_load(load)}"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "n_queries": len(records),
                    "group": ret.group_name,
                    "similarities": {sim: {**res, **t.as_dict()} for sim, res, t in rows},
                    "load": load,
                },
                indent=1,
            )
        )
        print(f"\nwrote {args.json}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    _check_runs(args)
    if args.similarity is None:
        args.similarity = ["bm25_chinese", "bm25_cjk"]
    print(
        "fastrag demo: CMRC 2018 dev (CC BY-SA 4.0, bundled) as the LazyLLM tutorial's "
        "knowledge base; all questions retrieved as one batch per analyzer, timed "
        f"{args.runs} times after an untimed run"
    )
    if not kernels_ready():
        print(
            "note: first run after an install: the timed batches wait for the kernels "
            "compiling in the background (about a minute), so queries/s is the engine's",
            file=sys.stderr,
        )
    return _run_eval(load_cmrc2018_dev(), args)


def _eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kb-per-file", type=int, default=10, help="paragraphs per .txt file")
    p.add_argument("--group", default="block")
    p.add_argument(
        "--similarity",
        action="append",
        default=None,
        help="repeatable; default: by the data's language (bm25 for English, "
        "bm25_chinese and bm25_cjk side by side for Chinese)",
    )
    p.add_argument("--topk", default="1,3,5", help="comma-separated cut-offs")
    p.add_argument("--workdir", help="keep the knowledge base and store here")
    p.add_argument("--json", help="also write the results as JSON to this path")
    p.add_argument(
        "--runs",
        type=int,
        default=5,
        help="timed batches per similarity, after one untimed (>= 3; queries/s is their median)",
    )


def add_eval_arguments(ev: argparse.ArgumentParser) -> None:
    """The arguments of ``fastrag eval`` (its handler, ``cmd_eval``, as ``func``)."""
    add_store_argument(ev, help="a store built with fastrag ingest", required=False)
    ev.add_argument("--questions", help="JSONL/JSON/CSV: question + answer | source | node_ids")
    ev.add_argument("--squad", help="SQuAD-format JSON file (e.g. CMRC 2018)")
    _eval_args(ev)
    ev.set_defaults(func=cmd_eval, group=None)


def add_demo_arguments(demo: argparse.ArgumentParser) -> None:
    """The arguments of ``fastrag demo`` (its handler, ``cmd_demo``, as ``func``)."""
    _eval_args(demo)
    demo.set_defaults(func=cmd_demo)
