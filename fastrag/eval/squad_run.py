"""Retrieval evaluation over a SQuAD-style dataset, the LazyLLM tutorial's way.

The unique paragraphs become a knowledge base of ``.txt`` files (``per_file`` paragraphs each,
newline-separated); a ``block`` group splits them on newlines (one node per paragraph); every
question is retrieved in one batch and scored against its gold paragraph.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from fastrag._checks import check_int, check_number
from fastrag._coldstart import kernels_ready, wait_for_kernels
from fastrag.datasets import build_squad_kb
from fastrag.documents.document import Document
from fastrag.errors import ConfigError
from fastrag.eval.loaders import normalize_paragraph, squad_questions
from fastrag.eval.metrics import context_relevance, evaluate_retrieval
from fastrag.eval.timing import describe_load, machine_load, time_batches
from fastrag.retrieval.retriever import Retriever


def _split_lines(text: str) -> list[str]:
    return text.split("\n")


def evaluate_squad(
    squad: Mapping,
    workdir: str | Path,
    *,
    similarities: Sequence[str] = ("bm25_chinese", "bm25_cjk"),
    topks: Sequence[int] = (1, 3, 5),
    per_file: int = 10,
    group: str = "block",
    wait_s: float = 300.0,
    runs: int = 5,
) -> dict[str, Any]:
    """Recall, context relevance and MRR per similarity; also build time and queries/s (the
    median of ``runs`` timed batches after an untimed one, with min, max and CPU seconds) and
    the machine load before and after.

    On a fresh install the kernels compile in the background: the timed batch waits up to
    ``wait_s`` seconds for them, so queries/s is the engine's; a row timed on the NumPy path
    (``wait_s=0``, or a compile that did not finish) has ``"kernels": False`` and
    :func:`format_table` labels it.
    """
    if not topks:
        raise ConfigError(f"topks must be a non-empty list of ints >= 1, got {list(topks)}")
    for i, k in enumerate(topks):
        check_int(f"topks[{i}]", k, min=1)
    wait_s = check_number("wait_s", wait_s, min=0.0)
    check_int("runs", runs, min=3, note="a median and its spread need three timed batches")
    questions, gold_idx, contexts = squad_questions(squad)
    workdir = Path(workdir)
    build_squad_kb(squad, workdir / "kb", per_file=per_file)
    doc = Document(workdir / "kb", store=workdir / "store")
    if group != "block":
        raise ConfigError("only the tutorial's 'block' group (one node per line) is built here")
    doc.create_node_group("block", transform=_split_lines)
    nodes = doc.group("block")
    row_of_text = {t: i for i, t in enumerate(nodes.texts())}
    gold_texts = [normalize_paragraph(contexts[i]) for i in gold_idx]
    gold_ids = [nodes.ids[row_of_text[t]] for t in gold_texts]
    kmax = max(topks)
    results: dict[str, Any] = {
        "n_queries": len(questions),
        "n_nodes": len(nodes),
        "topks": list(topks),
        "similarities": {},
        "load_before": machine_load(),
    }
    for sim in similarities:
        ret = Retriever(doc, group, similarity=sim, topk=kmax)
        t0 = time.perf_counter()
        ret("warm up")  # builds (or loads) the index
        build_s = time.perf_counter() - t0
        engine = kernels_ready() or wait_for_kernels(wait_s)
        table, timing = time_batches(partial(ret.batch_arrow, questions), len(questions), runs=runs)
        hits: list[list[str]] = [[] for _ in questions]
        for q, nid in zip(
            table.column("query_idx").to_pylist(), table.column("node_id").to_pylist(), strict=True
        ):
            hits[q].append(nid)
        metrics = evaluate_retrieval(hits, gold_ids, ks=topks)
        text_of = dict(zip(nodes.ids, nodes.texts(), strict=True))
        row = {
            "build_s": build_s,
            "search_s": statistics.median(timing.wall_s),
            "kernels": engine,
            **timing.as_dict(),
            "mrr": metrics["mrr"],
        }
        for k in topks:
            row[f"recall@{k}"] = metrics[f"recall@{k}"]
            retrieved = [[text_of[n] for n in h[:k]] for h in hits]
            row[f"context_relevance@{k}"] = context_relevance(retrieved, [[g] for g in gold_texts])
        results["similarities"][sim] = row
    results["load_after"] = machine_load()
    return results


def format_table(results: Mapping[str, Any]) -> str:
    """The tutorial's table: recall and context relevance at each top-k, MRR, queries/s (the
    median, min-max in brackets) and CPU seconds per batch; then how it was timed and the load."""
    ks = results["topks"]
    head = (
        ["similarity"]
        + [f"recall@{k}" for k in ks]
        + [f"ctx_rel@{k}" for k in ks]
        + ["MRR", "queries/s (min-max)", "CPU s"]
    )
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    runs = set()
    for sim, r in results["similarities"].items():
        runs.add(r.get("runs", 1))
        qps = f"{r['queries_per_s']:,.0f}"
        if "queries_per_s_min" in r:
            qps += f" ({r['queries_per_s_min']:,.0f}-{r['queries_per_s_max']:,.0f})"
        if not r.get("kernels", True):
            qps += " (NumPy path: kernels still compiling)"
        cells = (
            [sim]
            + [f"{r[f'recall@{k}']:.3f}" for k in ks]
            + [f"{r[f'context_relevance@{k}']:.3f}" for k in ks]
            + [f"{r['mrr']:.3f}", qps, f"{r.get('cpu_s_median', r.get('search_s', 0.0)):.3f}"]
        )
        lines.append(" | ".join(cells))
    n = "/".join(str(x) for x in sorted(runs))
    lines.append("")
    lines.append(
        f"queries/s: median of {n} timed batches per similarity after one untimed batch "
        "(kernels loaded), query analysis included; CPU s: CPU seconds of one batch (median, "
        "all threads). Measured on this machine now, not a fixed figure."
    )
    loads = [x for x in (results.get("load_before"), results.get("load_after")) if x]
    if loads:
        load = max(loads, key=lambda x: (x.get("loadavg") or [0.0])[0])
        lines.append(describe_load(load))
    return "\n".join(lines)
