"""Streaming: only the final call streams; sync and async iteration; metadata completes."""

from __future__ import annotations

import asyncio
import random

import pytest

from fastrag.llms import MockLLM
from fastrag.synth import Response, get_response_synthesizer

Q = "Which river?"


def paragraphs(n: int, words: int = 60) -> list[str]:
    rng = random.Random(4)
    vocab = [
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
    return [f"P{i}: " + " ".join(rng.choice(vocab) for _ in range(words)) + "." for i in range(n)]


@pytest.mark.parametrize("mode", ["compact", "refine", "tree_summarize", "simple_summarize"])
def test_final_call_streams_and_text_matches_non_streaming(mode):
    chunks = paragraphs(12)
    kw = {"context_window": 500, "num_output": 60}
    plain_llm = MockLLM()
    expected = str(get_response_synthesizer(mode, llm=plain_llm, **kw).synthesize(Q, chunks))

    llm = MockLLM()
    resp = get_response_synthesizer(mode, llm=llm, streaming=True, **kw).synthesize(Q, chunks)
    assert resp.is_streaming and resp.response is None
    pieces = list(resp.response_gen)
    assert len(pieces) > 1 and "".join(pieces) == expected == resp.response
    assert [c.method for c in llm.calls] == ["complete"] * (len(llm.calls) - 1) + ["stream"]
    assert llm.prompts == plain_llm.prompts
    # metadata is completed once the stream is consumed
    assert resp.metadata["llm_calls"] == len(llm.calls)
    assert resp.metadata["completion_tokens"] == llm.completion_tokens
    assert resp.metadata["prompt_tokens"] == llm.prompt_tokens


def test_async_stream_and_str_drains():
    chunks = paragraphs(10)
    llm = MockLLM()

    async def run() -> tuple[list[str], Response]:
        syn = get_response_synthesizer(
            "tree_summarize", llm=llm, streaming=True, context_window=500, num_output=60
        )
        resp = await syn.asynthesize(Q, chunks)
        return [p async for p in resp.async_response_gen], resp

    pieces, resp = asyncio.run(run())
    assert "".join(pieces) == resp.response and llm.calls[-1].method == "stream"
    assert resp.metadata["llm_calls"] == len(llm.calls)
    with pytest.raises(TypeError, match="streams asynchronously"):
        resp.response_gen  # noqa: B018

    sync = get_response_synthesizer("generation", llm=MockLLM("one two three"), streaming=True)
    r = sync.synthesize(Q, ["x"])
    assert str(r) == "one two three"  # str() drains a sync stream
    assert list(r.response_gen) == ["one two three"]  # already consumed: the whole text
    with pytest.raises(TypeError, match="not streaming"):
        Response("done").response_gen  # noqa: B018


def test_blank_streamed_final_answer_keeps_previous_answer():
    answers = iter(["Kept answer", "  "])
    llm = MockLLM(lambda p: next(answers))
    syn = get_response_synthesizer("refine", llm=llm, streaming=True)
    resp = syn.synthesize(Q, ["a", "b"])
    assert "".join(resp.response_gen) == "Kept answer"


def test_no_llm_modes_and_empty_nodes_stream_too():
    r = get_response_synthesizer("context_only", streaming=True).synthesize(Q, ["a", "b"])
    assert list(r.response_gen) == ["a\n\nb"]
    r = get_response_synthesizer("compact", llm=MockLLM(), streaming=True).synthesize(Q, [])
    assert list(r.response_gen) == ["Empty Response"]
    r = get_response_synthesizer("accumulate", llm=MockLLM("z"), streaming=True).synthesize(
        Q, ["a"]
    )
    assert "".join(r.response_gen) == "Response 1: z"
