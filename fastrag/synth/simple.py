"""One-call and no-call modes: simple_summarize, generation, no_text, context_only."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastrag.synth.base import BaseSynthesizer
from fastrag.synth.calls import note
from fastrag.synth.prompts import PromptTemplate

__all__ = ["ContextOnly", "Generation", "NoText", "SimpleSummarize"]


async def _single(text: str) -> AsyncIterator[str]:
    yield text


class SimpleSummarize(BaseSynthesizer):
    """All chunks joined with blank lines and truncated to one prompt; one LLM call.

    ``metadata["dropped_tokens"]`` counts the context tokens that did not fit.
    """

    response_mode = "simple_summarize"
    _template_kinds = ("text_qa_template",)

    def __init__(
        self,
        llm: Any = None,
        streaming: bool = False,
        *,
        text_qa_template: PromptTemplate | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(llm, streaming, **kwargs)
        self._set_template("text_qa_template", text_qa_template)

    async def aget_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ) -> str | AsyncIterator[str]:
        tmpl, vals, budget = self._single_template_setup(
            "text_qa_template", query_str, text_chunks, response_kwargs
        )
        helper = self._prompt_helper
        piece, dropped = helper.truncate(helper.prepare(text_chunks), budget)
        note("dropped_tokens", dropped)
        note("context_tokens", piece.n_tokens)
        prompt = tmpl.format(**vals, context_str=piece.text)
        if self._streaming:
            return self._astream_text(prompt, self.empty_response)
        answer = await self._apredict(prompt)
        return answer if answer.strip() else self.empty_response


class Generation(BaseSynthesizer):
    """Ignore the context: ask the LLM the query with ``simple_template`` (one call)."""

    response_mode = "generation"
    _template_kinds = ("simple_template",)

    async def aget_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ) -> str | AsyncIterator[str]:
        lang = self._lang(query_str, ())
        self._check_vars(self._template_kinds, lang, response_kwargs)
        prompt = self._template("simple_template", lang).format(
            **response_kwargs, query_str=query_str
        )
        if self._streaming:
            return self._astream_text(prompt, self.empty_response)
        answer = await self._apredict(prompt)
        return answer if answer.strip() else self.empty_response


class NoText(BaseSynthesizer):
    """No LLM call: the response is empty; ``source_nodes`` holds the nodes."""

    response_mode = "no_text"

    async def aget_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ) -> str | AsyncIterator[str]:
        return _single("") if self._streaming else ""


class ContextOnly(BaseSynthesizer):
    """No LLM call: the response is the chunks joined with blank lines."""

    response_mode = "context_only"

    async def aget_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ) -> str | AsyncIterator[str]:
        text = "\n\n".join(text_chunks)
        return _single(text) if self._streaming else text
