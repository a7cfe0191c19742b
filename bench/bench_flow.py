"""LazyLLM's dataflow app (shared/seeds/004, "基于 LazyLLM 数据流实现") in fastrag:
``ppl.batch(qs)`` vs the per-query loop ``[ppl(q) for q in qs]``, same app, same data, one
process.

The app, as the seed writes it (fastrag's names)::

    with pipeline() as ppl:
        with parallel().sum as ppl.prl:
            ppl.prl.retriever1 = Retriever(doc=docs, group_name="block",
                                           similarity="bm25_chinese", topk=3)
            ppl.prl.retriever2 = Retriever(doc=docs, group_name="block",
                                           similarity="cosine", topk=3)
        ppl.reranker = Reranker(name="ModuleReranker", model=..., topk=3) | bind(
            query=ppl.input)
        ppl.formatter = (lambda nodes, query: dict(context_str=..., query=query)) | bind(
            query=ppl.input)
        ppl.llm = llm.prompt(ChatPrompter(instruction=prompt, extra_keys=["context_str"]))

* Data: the tutorial's ``data_kb`` (CMRC 2018 dev paragraphs, 10 per .txt file, one per line:
  the "block" group), questions from CMRC 2018 dev (one per paragraph, spread evenly).
* Embeddings (the cosine retriever and the reranker's ``"embedding-cosine"`` model): one cheap
  deterministic embedder (hashed character unigrams and bigrams, 256-d), as in
  bench_pipeline.py; the corpus is embedded before timing, queries inside the timed run.
* LLM: ``FunctionLLM`` with 50 ms latency per call (``asyncio.sleep``), a fixed answer (no
  thread hop, usage estimated from characters: the fake model's own costs stay out).
* Counted: retriever ``batch`` calls per branch, reranker ``batch`` calls, LLM calls and their
  peak concurrency. Answers of the loop and of the batch must be identical.
* Timed: wall and process CPU of each run; loop and batch interleaved, ``--repeats`` each.

    python bench/bench_flow.py             # 100 questions over the whole data_kb
    python bench/bench_flow.py --smoke     # 10 questions over 40 paragraphs (CI)

Writes bench/results/flow.{json,md} (``--smoke``: flow_smoke.*).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import machine_info, markdown_table, median, write_results

import fastrag as fr
from fastrag.datasets import build_squad_kb, load_cmrc2018_dev
from fastrag.eval.loaders import squad_questions

DIM = 256
LATENCY = 0.05
GOAL = 10.0
PROMPT = "你是一个知识问答助手，请通过给定的文档回答用户问题。"
ANSWER = "根据上下文，答案见第一段。"


_VECTORS: dict[str, np.ndarray] = {}


def embed(texts: list[str]) -> np.ndarray:
    """Hashed character unigrams + bigrams, 256-d, unit norm (deterministic, cheap; a text's
    vector is computed once, so the reranker's re-embedding of corpus texts is a lookup, as
    the model is not what is measured)."""
    todo = [t for t in dict.fromkeys(texts) if t not in _VECTORS]
    for t, v in zip(todo, _embed(todo), strict=True):
        _VECTORS[t] = v
    if not texts:
        return np.zeros((0, DIM), dtype=np.float32)
    return np.stack([_VECTORS[t] for t in texts])


def _embed(texts: list[str]) -> np.ndarray:
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, t in enumerate(texts):
        grams = list(t) + [t[j : j + 2] for j in range(len(t) - 1)]
        idx = np.fromiter((zlib.crc32(g.encode()) for g in grams), dtype=np.int64, count=len(grams))
        np.add.at(out[i], idx % DIM, 1.0)
    n = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(n > 0, n, 1.0)


class Counted:
    """Counts the calls of one method of one object (an instance attribute over the class's)."""

    def __init__(self, obj: Any, name: str) -> None:
        self.n = 0
        inner = getattr(obj, name)

        def wrapped(*a: Any, **kw: Any) -> Any:
            self.n += 1
            return inner(*a, **kw)

        setattr(obj, name, wrapped)


def build_app(docs: fr.Document, llm: fr.FunctionLLM):
    with fr.pipeline() as ppl:
        with fr.parallel().sum as ppl.prl:
            ppl.prl.retriever1 = fr.Retriever(
                doc=docs, group_name="block", similarity="bm25_chinese", topk=3
            )
            ppl.prl.retriever2 = fr.Retriever(
                doc=docs, group_name="block", similarity="cosine", topk=3
            )
        ppl.reranker = fr.Reranker(
            name="ModuleReranker", model="embedding-cosine", embed=embed, topk=3
        ) | fr.bind(query=ppl.input)
        ppl.formatter = (
            lambda nodes, query: dict(
                context_str="".join([node.get_content() for node in nodes]),
                query=query,
            )
        ) | fr.bind(query=ppl.input)
        ppl.llm = llm.prompt(fr.ChatPrompter(instruction=PROMPT, extra_keys=["context_str"]))
    return ppl


def load(n_paragraphs: int | None, n_questions: int, kb: Path) -> tuple[list[str], int]:
    """Write the data_kb (all paragraphs, or the first ``n_paragraphs``) and pick questions."""
    squad = load_cmrc2018_dev()
    questions, gold, contexts = squad_questions(squad)
    if n_paragraphs is None:
        build_squad_kb(squad, kb)
    else:
        questions = [q for q, g in zip(questions, gold, strict=True) if g < n_paragraphs]
        contexts = contexts[:n_paragraphs]
        kb.mkdir(parents=True)
        for f in range(0, len(contexts), 10):
            lines = [c.replace("\n", " ") for c in contexts[f : f + 10]]
            (kb / f"part_{f // 10:04d}.txt").write_text("\n".join(lines), encoding="utf-8")
    step = max(1, len(questions) // n_questions)
    picked = [questions[i] for i in range(0, len(questions), step)][:n_questions]
    return picked, len(contexts)


def run_once(ppl, qs: list[str], mode: str) -> tuple[float, float, list[str]]:
    w0, c0 = time.perf_counter(), time.process_time()
    out = ppl.batch(qs) if mode == "batch" else [ppl(q) for q in qs]
    return time.perf_counter() - w0, time.process_time() - c0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="10 questions over 40 paragraphs")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    n_q, n_p, repeats = (10, 40, 1) if args.smoke else (args.queries, None, args.repeats)
    info = machine_info()
    with tempfile.TemporaryDirectory() as tmp:
        kb = Path(tmp) / "data_kb"
        qs, n_paragraphs = load(n_p, n_q, kb)
        docs = fr.Document(dataset_path=str(kb), embed=embed, manager=False)
        docs.create_node_group(name="block", transform=(lambda d: d.split("\n")))
        # the fake model's own costs stay out: no thread hop, usage estimated from characters
        llm = fr.FunctionLLM(
            lambda p: ANSWER, latency=LATENCY, to_thread=False, token_counter=lambda s: len(s) // 4
        )
        ppl = build_app(docs, llm)
        ppl("预热")  # builds the BM25 index and the corpus' vectors; compiles kernels
        counters = {
            "retriever1": Counted(ppl.prl.retriever1, "batch"),
            "retriever2": Counted(ppl.prl.retriever2, "batch"),
            "reranker": Counted(ppl.reranker.f, "batch"),
        }
        runs: dict[str, list[tuple[float, float]]] = {"loop": [], "batch": []}
        calls: dict[str, dict[str, int]] = {}
        answers: dict[str, list[str]] = {}
        for _ in range(repeats):
            for mode in ("loop", "batch"):
                before = {k: c.n for k, c in counters.items()}
                llm.reset()
                wall, cpu, out = run_once(ppl, qs, mode)
                runs[mode].append((wall, cpu))
                answers[mode] = out
                calls[mode] = {k: c.n - before[k] for k, c in counters.items()}
                calls[mode]["llm"] = llm.n_calls
                calls[mode]["llm_max_in_flight"] = llm.max_in_flight
    assert answers["loop"] == answers["batch"] == [ANSWER] * len(qs), "loop and batch differ"
    load_end = list(os.getloadavg())
    rows, table = [], []
    for mode in ("loop", "batch"):
        wall = median([w for w, _ in runs[mode]])
        cpu = median([c for _, c in runs[mode]])
        row = {"flow": mode, "n_queries": len(qs), "wall_s": wall, "cpu_s": cpu, **calls[mode]}
        rows.append(row)
        label = "`[ppl(q) for q in qs]`" if mode == "loop" else "`ppl.batch(qs)`"
        c = calls[mode]
        table.append(
            [
                label,
                f"{wall:.2f}",
                f"{cpu:.2f}",
                f"{c['retriever1']} + {c['retriever2']}",
                c["reranker"],
                c["llm"],
                c["llm_max_in_flight"],
            ]
        )
    speedup = rows[0]["wall_s"] / rows[1]["wall_s"]
    cpu_ratio = rows[0]["cpu_s"] / rows[1]["cpu_s"]
    verdict = "PASS" if speedup >= GOAL else "FAIL"
    md = "\n".join(
        [
            "# LazyLLM's dataflow app: `ppl.batch` vs a per-query loop",
            "",
            f"CPU: {info['cpu']} ({info['usable_cores']} usable cores); load at start "
            f"{info['loadavg_at_start']}, at end {load_end}; commit {info['commit']}; "
            f"{len(qs)} CMRC questions over {n_paragraphs} paragraphs (data_kb, 'block' group); "
            f"LLM: FunctionLLM, {LATENCY * 1000:.0f} ms per call; median of {repeats} run(s) "
            "each, loop and batch interleaved.",
            "",
            "App (shared/seeds/004): parallel().sum of BM25 (jieba) + cosine retrievers, top-3 "
            "each -> ModuleReranker('embedding-cosine') top-3 | bind(query=ppl.input) -> "
            "formatter | bind(query=ppl.input) -> llm.prompt(ChatPrompter(extra_keys="
            "['context_str'])).",
            "",
            markdown_table(
                [
                    "run",
                    "wall s",
                    "CPU s",
                    "retriever batch calls",
                    "rerank batch calls",
                    "LLM calls",
                    "LLM peak in flight",
                ],
                table,
            ),
            "",
            f"- {verdict}: batch >= {GOAL:.0f}x the per-query loop (wall): {speedup:.1f}x",
            f"- CPU: the loop uses {cpu_ratio:.1f}x the batch's process CPU",
            "- identical answers (loop == batch) checked",
            "",
            "Reproduce: `python bench/bench_flow.py` (see the module docstring for the setup).",
        ]
    )
    payload = {
        "machine": info,
        "loadavg_at_end": load_end,
        "latency_s": LATENCY,
        "n_paragraphs": n_paragraphs,
        "rows": rows,
        "speedup_wall": speedup,
        "cpu_ratio": cpu_ratio,
        "goal": GOAL,
        "pass": speedup >= GOAL,
    }
    name = "flow_smoke" if args.smoke else "flow"
    jp, mp = write_results(name, payload, md)
    print(md)
    print(f"wrote {jp} and {mp}")


if __name__ == "__main__":
    main()
