"""LlamaIndex-style user code: a custom synthesizer and the tone-variable example, with the
import path changed to fastrag (docs: module_guides/querying/response_synthesizers)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from fastrag.llms import MockLLM
from fastrag.schema import DocNode, NodeWithScore
from fastrag.synth import BaseSynthesizer, PromptTemplate, TreeSummarize


class JoinSynthesizer(BaseSynthesizer):
    """Response builder class (the docs' skeleton, with bodies)."""

    def __init__(self, llm: Any = None, streaming: bool = False) -> None:
        super().__init__(llm=llm, streaming=streaming)

    def get_response(self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any):
        """Get response."""
        context = "\n".join(text_chunks)
        return self._llm.complete(f"{context}\nQuestion: {query_str}")

    async def aget_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ):
        """Get response."""
        context = "\n".join(text_chunks)
        return await self._llm.acomplete(f"{context}\nQuestion: {query_str}")


def test_custom_synthesizer_runs_as_written():
    llm = MockLLM(lambda p: p.upper())
    syn = JoinSynthesizer(llm=llm)
    nodes = [NodeWithScore(DocNode("fact one"), 1.0), "fact two"]
    resp = syn.synthesize("why?", nodes)
    assert str(resp) == "FACT ONE\nFACT TWO\nQUESTION: WHY?"
    assert resp.metadata["llm_calls"] == 1
    assert resp.metadata["prompt_tokens"] == llm.prompt_tokens
    assert [n.text for n in resp.source_nodes] == ["fact one", "fact two"]
    # the sync contract method itself
    assert syn.get_response("q", ["a"]) == "A\nQUESTION: Q"
    # async and batch come for free
    aresp = asyncio.run(syn.asynthesize("why?", nodes))
    assert str(aresp) == str(resp)
    batch = syn.batch(["q1", "q2"], [["x"], ["y"]])
    assert [str(r) for r in batch] == ["X\nQUESTION: Q1", "Y\nQUESTION: Q2"]
    assert [r.metadata["llm_calls"] for r in batch] == [1, 1]


def test_one_method_is_enough_and_none_is_an_error():
    class SyncOnly(BaseSynthesizer):
        def get_response(self, query_str, text_chunks, **kw):
            return self._llm.complete(query_str + "|" + "|".join(text_chunks))

    class AsyncOnly(BaseSynthesizer):
        async def aget_response(self, query_str, text_chunks, **kw):
            return await self._llm.acomplete(query_str + "|" + "|".join(text_chunks))

    llm = MockLLM(lambda p: p[::-1])
    for cls in (SyncOnly, AsyncOnly):
        syn = cls(llm=llm)
        resp = syn.synthesize("q", ["a", "b"])
        assert str(resp) == "b|a|q"
        assert resp.metadata["llm_calls"] == 1  # counted also through the sync LLM wrapper
        assert syn.get_response("q", ["c"]) == "c|q"
        assert asyncio.run(syn.aget_response("q", ["d"])) == "d|q"

    class Neither(BaseSynthesizer):
        pass

    with pytest.raises(TypeError, match="must implement aget_response"):
        Neither(llm=llm)


def test_tone_name_example(capsys):
    qa_prompt_tmpl = (
        "Context information is below.\n"
        "---------------------\n"
        "{context_str}\n"
        "---------------------\n"
        "Given the context information and not prior knowledge, "
        "answer the query.\n"
        "Please also write the answer in the tone of {tone_name}.\n"
        "Query: {query_str}\n"
        "Answer: "
    )
    qa_prompt = PromptTemplate(qa_prompt_tmpl)
    llm = MockLLM("Thou art a programmer.")
    text = "Paul Graham is an essayist and programmer who co-founded Y Combinator."
    # initialize response synthesizer
    summarizer = TreeSummarize(verbose=True, summary_template=qa_prompt, llm=llm)
    # get response
    response = summarizer.get_response(
        "who is Paul Graham?", [text], tone_name="a Shakespeare play"
    )
    assert response == "Thou art a programmer."
    assert llm.prompts == [
        qa_prompt_tmpl.format(
            context_str=text, tone_name="a Shakespeare play", query_str="who is Paul Graham?"
        )
    ]
    assert "level 0: 1 prompt(s)" in capsys.readouterr().out
