"""Synthesis benchmark: fastrag vs llama-index-core, same simulated LLM, same input, one run.

Setup (as in issue 5): a simulated LLM that sleeps 50 ms + 0.02 ms per prompt token and
answers 128 tokens (fastrag's ``MockLLM``; LlamaIndex gets it through a ``CustomLLM``
subclass with real async ``acomplete``), context_window 4096, num_output 256, and 200 CMRC
chunks of about 400 tokens (the longest-first prefix of unique CMRC 2018 paragraphs cut to
<= 400 tokens at a character boundary).

Sections:
1. per mode: LLM calls, prompt tokens, wall time and process CPU time, both libraries
   (async entry points: ``await asynthesize``; LlamaIndex with ``use_async=True``);
2. framework CPU with a zero-latency LLM on 200 generated English chunks (seeded): the
   LLM returns a fixed 128-token answer and reports usage the way an OpenAI-compatible server
   does, so what is measured is the framework's own work;
3. batch: 100 CMRC questions x 50 chunks, compact: ``syn.batch`` vs LlamaIndex's
   ``synthesize`` called 100 times in a loop.

    python bench/bench_synthesis.py            # full run (a few minutes)
    python bench/bench_synthesis.py --smoke    # tiny CI run (< 20 s)

Writes bench/results/synthesis.{json,md,png} (``--smoke``: synthesis_smoke.*).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import machine_info, markdown_table, median, write_results

from fastrag.analysis.tokens import get_encoding
from fastrag.llms import MockLLM
from fastrag.llms.base import BaseLLM, Completion
from fastrag.synth import get_response_synthesizer

CONTEXT_WINDOW = 4096
NUM_OUTPUT = 256
LATENCY = 0.050
LATENCY_PER_TOKEN = 0.00002
ANSWER_TOKENS = 128
CHUNK_TOKENS = 400
MODES = [
    "compact",
    "refine",
    "tree_summarize",
    "simple_summarize",
    "accumulate",
    "compact_accumulate",
    "generation",
    "no_text",
    "context_only",
]
CPU_MODES = [
    "compact",
    "refine",
    "tree_summarize",
    "simple_summarize",
    "accumulate",
    "compact_accumulate",
]
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cmrc2018_dev.json"


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------


def load_cmrc() -> dict:
    if SHARED_DATA.exists():
        return json.loads(SHARED_DATA.read_text(encoding="utf-8"))
    from fastrag.datasets import load_cmrc2018_dev

    return load_cmrc2018_dev()


def cmrc_chunks_and_questions(n_chunks: int) -> tuple[list[str], list[str]]:
    """``n_chunks`` paragraphs of ~400 tokens (unique CMRC contexts, longest first, each cut to
    at most 400 tokens at a character boundary) and the dev questions, in file order."""
    data = load_cmrc()
    enc = get_encoding()
    contexts: list[str] = []
    questions: list[str] = []
    seen = set()
    for art in data["data"]:
        for para in art["paragraphs"]:
            ctx = " ".join(para["context"].split())
            if ctx not in seen:
                seen.add(ctx)
                contexts.append(ctx)
            questions += [qa["question"] for qa in para["qas"]]
    ids = enc.encode_ordinary_batch(contexts)
    order = sorted(range(len(contexts)), key=lambda i: -len(ids[i]))[:n_chunks]
    order.sort()  # keep file order among the chosen
    chunks = []
    for i in order:
        text = contexts[i]
        if len(ids[i]) > CHUNK_TOKENS:
            # longest character prefix with <= CHUNK_TOKENS tokens
            lo, hi = 0, len(text)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if len(enc.encode_ordinary(text[:mid])) <= CHUNK_TOKENS:
                    lo = mid
                else:
                    hi = mid - 1
            text = text[:lo]
        chunks.append(text)
    return chunks, questions


_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "his",
    "her",
    "are",
    "which",
    "this",
    "be",
    "an",
    "it",
    "or",
    "were",
    "also",
    "had",
    "has",
    "first",
    "new",
    "their",
    "one",
    "after",
    "two",
    "city",
    "river",
    "school",
    "system",
    "during",
    "between",
    "under",
    "government",
    "music",
    "world",
    "including",
    "national",
    "history",
    "water",
    "known",
    "later",
    "people",
    "company",
    "used",
    "war",
    "team",
    "several",
    "season",
    "state",
    "high",
    "built",
    "early",
    "population",
    "north",
    "south",
    "century",
    "family",
    "area",
    "life",
    "name",
    "work",
    "number",
    "group",
    "including",
    "public",
    "power",
    "design",
    "second",
    "game",
    "village",
    "university",
    "series",
    "became",
    "small",
    "large",
    "modern",
    "light",
    "research",
    "local",
    "station",
    "island",
    "church",
    "market",
    "energy",
    "mountain",
    "language",
    "film",
    "record",
    "album",
    "building",
    "road",
    "science",
    "border",
    "region",
    "army",
    "court",
    "union",
    "force",
    "trade",
    "law",
    "bridge",
    "park",
    "library",
    "council",
]


def english_chunks(n: int, tokens: int = CHUNK_TOKENS, seed: int = 7) -> list[str]:
    """``n`` deterministic English-like paragraphs of about ``tokens`` tokens."""
    rng = random.Random(seed)
    enc = get_encoding()
    out = []
    for _ in range(n):
        sents: list[str] = []
        count = 0
        while count < tokens - 25:
            words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 22))]
            s = " ".join(words).capitalize() + "."
            sents.append(s)
            count = len(enc.encode_ordinary(" ".join(sents)))
        out.append(" ".join(sents))
    return out


# ----------------------------------------------------------------------------------------------
# LLMs
# ----------------------------------------------------------------------------------------------


def sim_llm(latency: float = LATENCY, per_token: float = LATENCY_PER_TOKEN) -> MockLLM:
    return MockLLM(latency=latency, latency_per_token=per_token, answer_tokens=ANSWER_TOKENS)


_FIXED_ANSWER = None


def fixed_answer() -> str:
    global _FIXED_ANSWER
    if _FIXED_ANSWER is None:
        enc = get_encoding()
        text = "The answer is " + " a" * ANSWER_TOKENS
        _FIXED_ANSWER = enc.decode(enc.encode_ordinary(text)[:ANSWER_TOKENS])
    return _FIXED_ANSWER


class ZeroLatencyLLM(BaseLLM):
    """Answers at once with a fixed 128-token text; reports usage like a server does
    (prompt tokens estimated as characters / 4, so no tokenizer runs on the client)."""

    model = "zero"

    def __init__(self) -> None:
        self.calls = 0
        self.answer = fixed_answer()

    async def acomplete_with_usage(self, prompt: str, **kw: Any) -> Completion:
        self.calls += 1
        return Completion(self.answer, len(prompt) // 4, ANSWER_TOKENS)


def llama_llm(mock: MockLLM | None, zero: bool = False):
    """A LlamaIndex CustomLLM driven by the same MockLLM (or the zero-latency answer)."""
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.llms import (
        CompletionResponse,
        CompletionResponseGen,
        CustomLLM,
        LLMMetadata,
    )
    from llama_index.core.llms.callbacks import llm_completion_callback

    class SimLLM(CustomLLM):
        context_window: int = CONTEXT_WINDOW
        num_output: int = NUM_OUTPUT
        model_name: str = "sim"
        _mock: Any = PrivateAttr(default=None)
        _zero: bool = PrivateAttr(default=False)
        _calls: int = PrivateAttr(default=0)

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(
                context_window=self.context_window,
                num_output=self.num_output,
                model_name=self.model_name,
            )

        def _answer_sync(self, prompt: str) -> str:
            self._calls += 1
            if self._zero:
                return fixed_answer()
            return self._mock.complete(prompt)

        async def _answer_async(self, prompt: str) -> str:
            self._calls += 1
            if self._zero:
                return fixed_answer()
            return await self._mock.acomplete(prompt)

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            return CompletionResponse(text=self._answer_sync(prompt))

        @llm_completion_callback()
        async def acomplete(
            self, prompt: str, formatted: bool = False, **kw: Any
        ) -> CompletionResponse:
            return CompletionResponse(text=await self._answer_async(prompt))

        @llm_completion_callback()
        def stream_complete(
            self, prompt: str, formatted: bool = False, **kw: Any
        ) -> CompletionResponseGen:
            text = self._answer_sync(prompt)

            def gen() -> CompletionResponseGen:
                yield CompletionResponse(text=text, delta=text)

            return gen()

    llm = SimLLM()
    llm._mock = mock
    llm._zero = zero
    return llm


# ----------------------------------------------------------------------------------------------
# Runners
# ----------------------------------------------------------------------------------------------


def _li_synth(mode: str, llm):
    from llama_index.core import Settings
    from llama_index.core import get_response_synthesizer as li_get

    Settings.llm = llm  # its no_text / context_only classes read the global LLM
    return li_get(response_mode=mode, llm=llm, use_async=True)


def _li_nodes(chunks: list[str]):
    from llama_index.core.schema import NodeWithScore, TextNode

    return [NodeWithScore(node=TextNode(text=t), score=1.0) for t in chunks]


def _measure(coro_factory) -> tuple[float, float, Any]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = asyncio.run(coro_factory())
    return time.perf_counter() - t0, time.process_time() - c0, out


def run_modes(
    chunks: list[str],
    query: str,
    repeats: int,
    modes: list[str],
    max_concurrency: int | None,
    libs: tuple[str, ...] = ("fastrag", "llama_index"),
    label: str = "",
) -> list[dict]:
    rows = []
    li_nodes = _li_nodes(chunks)
    for mode in modes:
        reps = 1 if mode == "refine" else repeats
        for lib in libs:
            walls, cpus = [], []
            calls = ptoks = None
            for _ in range(reps):
                mock = sim_llm()
                if lib == "fastrag":
                    syn = get_response_synthesizer(
                        mode,
                        llm=mock,
                        context_window=CONTEXT_WINDOW,
                        num_output=NUM_OUTPUT,
                        max_concurrency=max_concurrency,
                    )
                    wall, cpu, resp = _measure(lambda s=syn: s.asynthesize(query, chunks))
                    assert resp.metadata["llm_calls"] == len(mock.calls)
                else:
                    syn = _li_synth(mode, llama_llm(mock))
                    wall, cpu, resp = _measure(lambda s=syn: s.asynthesize(query, li_nodes))
                walls.append(wall)
                cpus.append(cpu)
                calls, ptoks = len(mock.calls), mock.prompt_tokens
                extra = dict(resp.metadata) if lib == "fastrag" else {}
            rows.append(
                {
                    "mode": mode + label,
                    "library": lib,
                    "llm_calls": calls,
                    "prompt_tokens": ptoks,
                    "wall_s": median(walls),
                    "cpu_s": median(cpus),
                    "repeats": reps,
                    "levels": extra.get("levels"),
                }
            )
            print(
                f"  {mode:18s} {lib:12s} calls={calls:4d} prompt_tokens={ptoks:7d} "
                f"wall={median(walls):7.3f}s cpu={median(cpus):6.3f}s",
                flush=True,
            )
    return rows


def run_cpu(chunks: list[str], query: str, repeats: int) -> list[dict]:
    rows = []
    li_nodes = _li_nodes(chunks)
    for mode in CPU_MODES:
        res = {}
        for lib in ("fastrag", "llama_index"):
            cpus = []
            for _ in range(repeats + 1):  # first run warms caches / imports, dropped
                if lib == "fastrag":
                    syn = get_response_synthesizer(
                        mode,
                        llm=ZeroLatencyLLM(),
                        context_window=CONTEXT_WINDOW,
                        num_output=NUM_OUTPUT,
                    )
                    _, cpu, _ = _measure(lambda s=syn: s.asynthesize(query, chunks))
                else:
                    syn = _li_synth(mode, llama_llm(None, zero=True))
                    _, cpu, _ = _measure(lambda s=syn: s.asynthesize(query, li_nodes))
                cpus.append(cpu)
            res[lib] = median(cpus[1:])
        rows.append(
            {
                "mode": mode,
                "fastrag_cpu_s": res["fastrag"],
                "llama_index_cpu_s": res["llama_index"],
                "ratio": res["llama_index"] / max(res["fastrag"], 1e-9),
            }
        )
        print(
            f"  cpu {mode:18s} fastrag={res['fastrag'] * 1e3:7.1f} ms "
            f"llama_index={res['llama_index'] * 1e3:8.1f} ms "
            f"ratio={rows[-1]['ratio']:.1f}x",
            flush=True,
        )
    return rows


def run_batch(
    pool: list[str], questions: list[str], n_queries: int, per_query: int, concurrencies: list[int]
) -> dict:
    queries = questions[:n_queries]
    nodes = [[pool[(i * 7 + j) % len(pool)] for j in range(per_query)] for i in range(n_queries)]
    out: dict[str, Any] = {"n_queries": n_queries, "chunks_per_query": per_query}
    for conc in concurrencies:
        mock = sim_llm()
        syn = get_response_synthesizer(
            "compact",
            llm=mock,
            context_window=CONTEXT_WINDOW,
            num_output=NUM_OUTPUT,
            max_concurrency=conc,
        )
        t0, c0 = time.perf_counter(), time.process_time()
        resps = syn.batch(queries, nodes, show_progress=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert len(resps) == n_queries
        out[f"fastrag_c{conc}"] = {
            "wall_s": wall,
            "cpu_s": cpu,
            "llm_calls": len(mock.calls),
            "max_in_flight": mock.max_in_flight,
            "calls_per_query": len(mock.calls) / n_queries,
        }
        print(
            f"  batch fastrag max_concurrency={conc}: {wall:.2f}s wall, {cpu:.2f}s cpu, "
            f"{len(mock.calls)} calls, peak in flight {mock.max_in_flight}",
            flush=True,
        )
    mock = sim_llm()
    li = _li_synth("compact", llama_llm(mock))
    li_nodes = [_li_nodes(n) for n in nodes]
    t0, c0 = time.perf_counter(), time.process_time()
    for q, n in zip(queries, li_nodes, strict=False):
        li.synthesize(q, n)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out["llama_index_loop"] = {"wall_s": wall, "cpu_s": cpu, "llm_calls": len(mock.calls)}
    print(
        f"  batch llama_index loop: {wall:.2f}s wall, {cpu:.2f}s cpu, {len(mock.calls)} calls",
        flush=True,
    )
    for conc in concurrencies:
        out[f"speedup_c{conc}"] = wall / out[f"fastrag_c{conc}"]["wall_s"]
    return out


# ----------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------


def plot(rows: list[dict], cpu_rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [r["mode"] for r in rows if r["library"] == "fastrag"]
    get = {(r["mode"], r["library"]): r for r in rows}
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    x = range(len(modes))
    for ax, key, title in (
        (axes[0], "llm_calls", "LLM calls"),
        (axes[1], "wall_s", "wall time (s, simulated LLM)"),
    ):
        ax.bar(
            [i - 0.2 for i in x], [get[(m, "fastrag")][key] for m in modes], 0.4, label="fastrag"
        )
        ax.bar(
            [i + 0.2 for i in x],
            [get[(m, "llama_index")][key] for m in modes],
            0.4,
            label="llama-index-core",
        )
        ax.set_xticks(list(x), modes, rotation=40, ha="right")
        ax.set_title(title)
        ax.set_yscale("log")
        ax.legend()
    cm = [r["mode"] for r in cpu_rows]
    cx = range(len(cm))
    axes[2].bar(
        [i - 0.2 for i in cx], [r["fastrag_cpu_s"] * 1e3 for r in cpu_rows], 0.4, label="fastrag"
    )
    axes[2].bar(
        [i + 0.2 for i in cx],
        [r["llama_index_cpu_s"] * 1e3 for r in cpu_rows],
        0.4,
        label="llama-index-core",
    )
    axes[2].set_xticks(list(cx), cm, rotation=40, ha="right")
    axes[2].set_yscale("log")
    axes[2].set_title("framework CPU, zero-latency LLM (ms)")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny run for CI (< 20 s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        help="fastrag's max_concurrency in the per-mode table (default: each "
        "mode's own default, 256 for accumulate / compact_accumulate / "
        "tree_summarize, 16 for the others)",
    )
    args = ap.parse_args(argv)

    if args.smoke:
        n_chunks, n_en, repeats, n_q, per_q = 24, 24, 1, 5, 10
        modes = ["compact", "tree_summarize", "simple_summarize", "compact_accumulate"]
        concurrencies = [16]
    else:
        n_chunks, n_en, repeats, n_q, per_q = 200, 200, args.repeats, 100, 50
        modes = MODES
        concurrencies = [16, 128]

    info = machine_info(extra_versions=["llama-index-core", "tiktoken"])
    chunks, questions = cmrc_chunks_and_questions(n_chunks)
    enc = get_encoding()
    chunk_tokens = [len(x) for x in enc.encode_ordinary_batch(chunks)]
    query = questions[0]
    print(
        f"{len(chunks)} CMRC chunks, {sum(chunk_tokens)} tokens "
        f"(mean {sum(chunk_tokens) / len(chunks):.0f}); query {query!r}",
        flush=True,
    )

    print("per-mode (simulated LLM):", flush=True)
    rows = run_modes(chunks, query, repeats, modes, args.max_concurrency)
    # accumulate issues all its calls at once: also run it with a limit of the chunk count,
    # the concurrency LlamaIndex's unbounded gather uses
    wide = len(chunks)
    extra = (
        run_modes(
            chunks,
            query,
            repeats,
            ["accumulate"],
            wide,
            libs=("fastrag",),
            label=f" (max_concurrency={wide})",
        )
        if "accumulate" in modes
        else []
    )
    if not args.smoke:  # tree levels of up to ~23 calls: one wave instead of two
        extra += run_modes(
            chunks,
            query,
            repeats,
            ["tree_summarize"],
            32,
            libs=("fastrag",),
            label=" (max_concurrency=32)",
        )
    print("framework CPU (zero-latency LLM, English chunks):", flush=True)
    en = english_chunks(n_en)
    cpu_rows = run_cpu(en, "What is the history of the river and the city?", max(repeats, 3))
    print("batch (compact):", flush=True)
    batch = run_batch(chunks, questions, n_q, per_q, concurrencies)

    payload = {
        "benchmark": "synthesis",
        "smoke": args.smoke,
        "machine": info,
        "setup": {
            "context_window": CONTEXT_WINDOW,
            "num_output": NUM_OUTPUT,
            "llm_latency_s": LATENCY,
            "llm_latency_per_prompt_token_s": LATENCY_PER_TOKEN,
            "answer_tokens": ANSWER_TOKENS,
            "n_chunks": len(chunks),
            "chunk_tokens_total": sum(chunk_tokens),
            "query": query,
            "fastrag_max_concurrency": args.max_concurrency,
            "repeats": repeats,
            "english_chunks": n_en,
        },
        "modes": rows,
        "extra_runs": extra,
        "framework_cpu": cpu_rows,
        "batch": batch,
    }
    get = {(r["mode"], r["library"]): r for r in rows}
    table_rows = []
    for m in modes:
        f, li = get[(m, "fastrag")], get[(m, "llama_index")]
        table_rows.append(
            [
                m,
                f["llm_calls"],
                li["llm_calls"],
                f["prompt_tokens"],
                li["prompt_tokens"],
                f["wall_s"],
                li["wall_s"],
                f["cpu_s"],
                li["cpu_s"],
            ]
        )
    for f in extra:
        li = get[(f["mode"].split(" ")[0], "llama_index")]
        table_rows.append(
            [
                f["mode"],
                f["llm_calls"],
                li["llm_calls"],
                f["prompt_tokens"],
                li["prompt_tokens"],
                f["wall_s"],
                li["wall_s"],
                f["cpu_s"],
                li["cpu_s"],
            ]
        )
    md = [
        f"# Synthesis: fastrag vs llama-index-core {info.get('llama-index-core')}",
        "",
        (
            f"Machine: {info['cpu']}, {info['usable_cores']} usable cores, load at start "
            f"{info['loadavg_at_start']}; commit {info['commit']}; {info['date']}."
        ),
        (
            f"Simulated LLM: {LATENCY * 1e3:.0f} ms + {LATENCY_PER_TOKEN * 1e3:.2f} ms per prompt "
            f"token, {ANSWER_TOKENS}-token answers; context_window {CONTEXT_WINDOW}, num_output "
            f"{NUM_OUTPUT}; {len(chunks)} CMRC chunks, {sum(chunk_tokens):,} tokens. "
            f"fastrag max_concurrency="
            f"{args.max_concurrency or 'each mode default (256 accumulate, compact_accumulate, '}"
            f"{'' if args.max_concurrency else 'tree_summarize; 16 others)'}; LlamaIndex "
            "use_async=True. "
            f"Medians of {repeats} (refine: 1)."
        ),
        "",
        "## Per mode",
        "",
        markdown_table(
            [
                "mode",
                "calls fastrag",
                "calls LlamaIndex",
                "prompt tok fastrag",
                "prompt tok LlamaIndex",
                "wall s fastrag",
                "wall s LlamaIndex",
                "CPU s fastrag",
                "CPU s LlamaIndex",
            ],
            table_rows,
        ),
        "",
        f"## Framework CPU, zero-latency LLM, {n_en} English chunks",
        "",
        markdown_table(
            ["mode", "fastrag ms", "LlamaIndex ms", "LlamaIndex / fastrag"],
            [
                [r["mode"], r["fastrag_cpu_s"] * 1e3, r["llama_index_cpu_s"] * 1e3, r["ratio"]]
                for r in cpu_rows
            ],
        ),
        "",
        f"## Batch: {n_q} queries x {per_q} chunks, compact",
        "",
        markdown_table(
            ["run", "wall s", "CPU s", "LLM calls", "speedup vs LlamaIndex loop"],
            [
                [
                    f"fastrag batch, max_concurrency={c}",
                    batch[f"fastrag_c{c}"]["wall_s"],
                    batch[f"fastrag_c{c}"]["cpu_s"],
                    batch[f"fastrag_c{c}"]["llm_calls"],
                    batch[f"speedup_c{c}"],
                ]
                for c in concurrencies
            ]
            + [
                [
                    "LlamaIndex synthesize x N (loop)",
                    batch["llama_index_loop"]["wall_s"],
                    batch["llama_index_loop"]["cpu_s"],
                    batch["llama_index_loop"]["llm_calls"],
                    1.0,
                ]
            ],
        ),
    ]
    name = "synthesis_smoke" if args.smoke else "synthesis"
    jp, mp = write_results(name, payload, "\n".join(md))
    png = jp.with_suffix(".png")
    plot(rows, cpu_rows, png)
    print(f"wrote {jp}, {mp}, {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
