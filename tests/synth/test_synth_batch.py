"""Batch synthesis: one shared concurrency limit, per-query metadata, failure and cancel."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from wallclock import below

from fastrag.errors import ConfigError
from fastrag.llms import LLMError, MockLLM
from fastrag.synth import get_response_synthesizer

WORDS = [
    "the",
    "river",
    "city",
    "school",
    "music",
    "north",
    "energy",
    "bridge",
    "law",
    "of",
    "and",
    "to",
    "in",
    "was",
]


def chunks_for(q: int, n: int = 6) -> list[str]:
    return [
        f"[Q{q}] chunk {j}: " + " ".join(WORDS[(q + j + k) % len(WORDS)] for k in range(60))
        for j in range(n)
    ]


def tag_of(prompt: str) -> str:
    """The query tag of a prompt (every chunk of query q carries "[Qq]")."""
    return re.search(r"\[Q(\d+)\]", prompt).group(1)


def test_batch_runs_call_graphs_concurrently_under_one_limit():
    n = 30
    llm = MockLLM(lambda p: "answer for Q" + tag_of(p), latency=0.03)
    syn = get_response_synthesizer(
        "compact", llm=llm, context_window=350, num_output=50, max_concurrency=64
    )
    queries = [f"question {i}?" for i in range(n)]
    t0 = time.perf_counter()
    resps = syn.batch(queries, [chunks_for(i) for i in range(n)])
    wall = time.perf_counter() - t0
    calls_per_query = len(llm.calls) / n
    assert calls_per_query >= 2  # each query is a sequential chain of calls
    serial = len(llm.calls) * 0.03
    below(wall, serial / 4, "the batch")  # ~ calls per query x latency, not n times that
    assert n <= llm.max_in_flight <= 64
    for i, r in enumerate(resps):  # results in query order, metadata per query
        assert str(r) == f"answer for Q{i}"
        mine = [c for c in llm.calls if tag_of(c.prompt) == str(i)]
        assert r.metadata["llm_calls"] == len(mine)
        assert r.metadata["prompt_tokens"] == sum(c.prompt_tokens for c in mine)
        assert r.metadata["completion_tokens"] == sum(c.completion_tokens for c in mine)
        assert 0 < r.metadata["seconds"] <= wall + 0.05


def test_max_concurrency_is_shared_by_all_queries():
    llm = MockLLM(latency=0.01)
    syn = get_response_synthesizer(
        "tree_summarize", llm=llm, context_window=400, num_output=50, max_concurrency=4
    )
    syn.batch([f"q{i}" for i in range(6)], [chunks_for(i) for i in range(6)])
    assert llm.max_in_flight == 4


def test_streaming_synthesizer_batch_returns_complete_answers():
    llm = MockLLM("streamed answer")
    syn = get_response_synthesizer("compact", llm=llm, streaming=True)
    resps = syn.batch(["a", "b"], [["x"], ["y"]])
    assert [r.response for r in resps] == ["streamed answer"] * 2
    assert all(not r.is_streaming and r.metadata["llm_calls"] == 1 for r in resps)


def test_failure_cancels_the_other_queries():
    async def answer(prompt: str) -> str:
        if "[Q3]" in prompt:
            raise LLMError("upstream 503", status=503)
        await asyncio.sleep(1.0)
        return "late"

    llm = MockLLM(answer)
    syn = get_response_synthesizer("accumulate", llm=llm, max_concurrency=100)
    t0 = time.perf_counter()
    with pytest.raises(LLMError, match="upstream 503") as info:
        syn.batch([f"q{i}" for i in range(8)], [chunks_for(i, 2) for i in range(8)])
    below(time.perf_counter() - t0, 0.8, "failing")  # did not wait for the 1 s calls
    assert "in batch query index 3" in info.value.__notes__
    assert llm.in_flight == 0
    assert sum(1 for c in llm.calls if c.error and "CancelledError" in c.error) >= 10

    llm.reset()
    out = syn.batch(["q0", "q3"], [chunks_for(0, 1), chunks_for(3, 1)], return_exceptions=True)
    assert str(out[0]) == "Response 1: late" and isinstance(out[1], LLMError)


def test_cancelling_a_batch_cancels_in_flight_calls():
    llm = MockLLM(latency=5.0)
    syn = get_response_synthesizer(
        "tree_summarize", llm=llm, context_window=400, num_output=50, max_concurrency=8
    )

    async def main() -> None:
        task = asyncio.create_task(
            syn.abatch([f"q{i}" for i in range(5)], [chunks_for(i) for i in range(5)])
        )
        await asyncio.sleep(0.1)
        assert llm.in_flight == 8
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    t0 = time.perf_counter()
    asyncio.run(main())
    below(time.perf_counter() - t0, 2, "cancelling")
    assert llm.in_flight == 0
    assert [c.error for c in llm.calls] == ["CancelledError: "] * 8


def test_batch_argument_errors_and_progress(capsys):
    syn = get_response_synthesizer("no_text")
    with pytest.raises(ConfigError, match="2 queries but 1 node lists"):
        syn.batch(["a", "b"], [["x"]])
    with pytest.raises(ConfigError, match="queries must be a list of str"):
        syn.batch("abc", [["x"]] * 3)
    with pytest.raises(ConfigError, match=r"queries\[1\] must be a str"):
        syn.batch(["a", 5], [["x"], ["y"]])
    assert syn.batch([], []) == []
    out = syn.batch(["a", "b", "c"], [["x"]] * 3, show_progress=True)
    assert len(out) == 3
    assert "synthesize (no_text)" in capsys.readouterr().err


def test_sync_api_works_inside_a_running_event_loop():
    llm = MockLLM("inside")
    syn = get_response_synthesizer("compact", llm=llm)

    async def notebook_cell() -> list[str]:
        one = syn.synthesize("q", ["ctx"])  # sync call while this loop is running
        many = syn.batch(["a", "b"], [["x"], ["y"]])
        return [str(one)] + [str(r) for r in many]

    assert asyncio.run(notebook_cell()) == ["inside"] * 3
