"""Tree summarize: pack, summarize every pack concurrently, repeat on the summaries.

Each level is one ``gather`` of its calls, bounded by the synthesizer's shared semaphore;
the level with a single pack is the final call (streamed when ``streaming=True``). If a level
would not shrink (summaries as long as their inputs), the summaries are cut to half a prompt
each, so every level at least halves and the recursion ends; ``metadata["truncated_tokens"]``
says how much was cut.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastrag._checks import check_int
from fastrag.synth.base import BaseSynthesizer
from fastrag.synth.calls import gather_all, note
from fastrag.synth.packing import Piece
from fastrag.synth.prompts import PromptTemplate

__all__ = ["TreeSummarize"]


class TreeSummarize(BaseSynthesizer):
    """Bottom-up summary tree over the chunks with ``summary_template``."""

    response_mode = "tree_summarize"
    default_concurrency = 256  # a query's calls are independent
    _template_kinds = ("summary_template",)

    def __init__(
        self,
        llm: Any = None,
        streaming: bool = False,
        *,
        summary_template: PromptTemplate | str | None = None,
        use_async: bool = True,
        num_children: int | None = None,
        **kwargs: Any,
    ) -> None:
        # use_async is accepted for LlamaIndex compatibility: levels always run concurrently.
        super().__init__(llm, streaming, **kwargs)
        self._set_template("summary_template", summary_template)
        #: at most this many chunks (or summaries) per prompt (None: as many as fit)
        self.num_children = check_int("num_children", num_children, min=2, none=True)

    async def aget_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ) -> str | AsyncIterator[str]:
        tmpl, vals, budget = self._single_template_setup(
            "summary_template", query_str, text_chunks, response_kwargs
        )
        helper = self._prompt_helper

        pieces = helper.prepare(text_chunks)
        levels: list[int] = []
        prev_n: int | None = None
        while True:
            if not pieces:
                note("levels", levels)
                return _single(self.empty_response) if self._streaming else self.empty_response
            packed = self._pack(pieces, budget)
            if prev_n is not None and len(packed) >= prev_n:
                packed = helper.pack(self._halve(pieces, budget), budget)
            if self.verbose:
                print(f"[tree_summarize] level {len(levels)}: {len(packed)} prompt(s)")
            levels.append(len(packed))
            if len(packed) == 1:
                note("levels", levels)
                prompt = tmpl.format(**vals, context_str=packed[0].text)
                if self._streaming:
                    return self._astream_text(prompt, self.empty_response)
                answer = await self._apredict(prompt)
                return answer if answer.strip() else self.empty_response
            prompts = [tmpl.format(**vals, context_str=p.text) for p in packed]
            summaries = await gather_all(self._apredict(p) for p in prompts)
            prev_n = len(packed)
            pieces = helper.prepare(summaries)  # blank summaries drop out here

    def _pack(self, pieces: list[Piece], budget: int) -> list[Piece]:
        """Pieces packed into prompts, ``num_children`` at most per prompt when set."""
        n = self.num_children
        if n is None:
            return self._prompt_helper.pack(pieces, budget)
        return [
            p
            for i in range(0, len(pieces), n)
            for p in self._prompt_helper.pack(pieces[i : i + n], budget)
        ]

    def _halve(self, pieces: list[Piece], budget: int) -> list[Piece]:
        """Cut every piece to half a prompt, so the next level packs two per prompt."""
        helper = self._prompt_helper
        share = max(1, (budget - helper.separator_tokens) // 2)
        out: list[Piece] = []
        dropped = 0
        for p in pieces:
            if p.n_tokens <= share:
                out.append(p)
            else:
                head = helper.split(p.text, share)[0]
                out.append(head)
                dropped += p.n_tokens - head.n_tokens
        note("truncated_tokens", dropped, add=True)
        return out


async def _single(text: str) -> AsyncIterator[str]:
    yield text
