"""Accumulate: the query asked of every chunk (or, compact, of every pack) concurrently.

All calls of a query are one ``gather`` bounded by the shared semaphore; the answers are
joined in chunk order as ``Response 1: ...``, separated by a dashed line (LlamaIndex's format).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastrag.synth.base import BaseSynthesizer
from fastrag.synth.calls import gather_all, note
from fastrag.synth.packing import Piece
from fastrag.synth.prompts import PromptTemplate

__all__ = ["ACCUMULATE_SEPARATOR", "Accumulate", "CompactAndAccumulate"]

ACCUMULATE_SEPARATOR = "\n---------------------\n"


async def _single(text: str) -> AsyncIterator[str]:
    yield text


class Accumulate(BaseSynthesizer):
    """One answer per chunk (a chunk too big for a prompt is split), all concurrently."""

    response_mode = "accumulate"
    default_concurrency = 256  # a query's calls are independent
    _template_kinds = ("text_qa_template",)
    _compact = False

    def __init__(
        self,
        llm: Any = None,
        streaming: bool = False,
        *,
        text_qa_template: PromptTemplate | str | None = None,
        separator: str = ACCUMULATE_SEPARATOR,
        **kwargs: Any,
    ) -> None:
        super().__init__(llm, streaming, **kwargs)
        self._set_template("text_qa_template", text_qa_template)
        self.separator = separator

    async def aget_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ) -> str | AsyncIterator[str]:
        tmpl, vals, budget = self._single_template_setup(
            "text_qa_template", query_str, text_chunks, response_kwargs
        )
        helper = self._prompt_helper
        if self._compact:
            packs = helper.pack(helper.prepare(text_chunks), budget)
        else:
            # tokens <= UTF-8 bytes: only chunks that might not fit are tokenized
            room = helper.room - self._overhead_bytes(tmpl, "context_str", vals)
            packs: list[Piece] = []
            for p in helper.prepare(text_chunks, exact=False):
                if len(p.text.encode("utf-8")) <= room:
                    packs.append(p)
                    continue
                p = helper.counted(p)
                packs.extend(helper.split(p.text, budget) if p.n_tokens > budget else [p])
        note("prompts", len(packs))
        answers = await gather_all(
            self._apredict(tmpl.format(**vals, context_str=p.text)) for p in packs
        )
        text = self.separator.join(
            f"Response {i + 1}: {a if a.strip() else self.empty_response}"
            for i, a in enumerate(answers)
        )
        if not answers:
            text = self.empty_response
        return _single(text) if self._streaming else text


class CompactAndAccumulate(Accumulate):
    """Accumulate over packs of whole chunks (fewest prompts) instead of single chunks."""

    response_mode = "compact_accumulate"
    default_concurrency = 256  # a query's calls are independent
    _compact = True
