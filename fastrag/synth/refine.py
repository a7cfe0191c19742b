"""Refine and compact (pack, then refine): one sequential async loop for both.

Each step answers from the next context with ``text_qa_template`` (first step) or
``refine_template`` (later steps, which carry the existing answer). The step's budget is
computed exactly from the filled template -- including the *current* existing answer -- so
compact packs each prompt full instead of reserving LlamaIndex's fixed 500-token padding,
and it never repeats text between prompts. An empty answer never replaces the previous one.

With ``structured_answer_filtering=True`` every step asks for
``{"answer": str, "query_satisfied": bool}`` (JSON mode where the LLM has it, else text
parsed tolerantly) and answers with ``query_satisfied=false`` -- or unparseable ones -- are
dropped, so irrelevant chunks cannot change the answer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastrag._checks import check_str
from fastrag.llms.base import (
    StructuredOutputError,
    check_schema,
    parse_json_object,
    schema_instruction,
)
from fastrag.synth.base import BaseSynthesizer
from fastrag.synth.calls import note
from fastrag.synth.packing import Piece
from fastrag.synth.prompts import PromptTemplate

__all__ = ["REFINE_SCHEMA", "CompactAndRefine", "Refine"]

REFINE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "description": "the answer, from the context only"},
        "query_satisfied": {
            "type": "boolean",
            "description": "true if the context was enough to answer the query",
        },
    },
    "required": ["answer", "query_satisfied"],
}


class Refine(BaseSynthesizer):
    """Answer from the first chunk, then refine the answer with each next chunk (one call per
    chunk; a chunk too big for the prompt is split token-exactly)."""

    response_mode = "refine"
    _template_kinds = ("text_qa_template", "refine_template")
    _compact = False

    def __init__(
        self,
        llm: Any = None,
        streaming: bool = False,
        *,
        text_qa_template: PromptTemplate | str | None = None,
        refine_template: PromptTemplate | str | None = None,
        structured_answer_filtering: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(llm, streaming, **kwargs)
        self._set_template("text_qa_template", text_qa_template)
        self._set_template("refine_template", refine_template)
        self.structured_answer_filtering = bool(structured_answer_filtering)
        self._schema_tokens = self._prompt_helper.count(schema_instruction(REFINE_SCHEMA))

    async def aget_response(
        self,
        query_str: str,
        text_chunks: Sequence[str],
        prev_response: str | None = None,
        **response_kwargs: Any,
    ) -> str | AsyncIterator[str]:
        """The refined answer (or, when streaming, an async iterator over the last step)."""
        check_str("prev_response", prev_response, empty=True, none=True)
        lang = self._lang(query_str, text_chunks)
        self._check_vars(self._template_kinds, lang, response_kwargs)
        helper = self._prompt_helper
        qa = self._template("text_qa_template", lang)
        refine = self._template("refine_template", lang)
        filtering = self.structured_answer_filtering
        extra = self._schema_tokens if filtering else 0
        base_vals = {**response_kwargs, "query_str": query_str}

        # compact needs every count to pack; refine only needs one where a cheap bound fails
        queue: deque[Piece] = deque(helper.prepare(text_chunks, exact=self._compact))
        answer = prev_response if prev_response and prev_response.strip() else None
        n_steps = 0
        while queue:
            if answer is None:
                tmpl, cvar, vals = qa, "context_str", base_vals
            else:
                tmpl, cvar, vals = refine, "context_msg", {**base_vals, "existing_answer": answer}
            head = queue[0]
            if (
                not self._compact
                and head.n_tokens < 0
                and self._overhead_bytes(tmpl, cvar, vals) + extra + _utf8_len(head.text)
                <= helper.room
            ):
                # tokens <= UTF-8 bytes: the chunk fits for sure, no tokenizing needed
                piece = queue.popleft()
            else:
                budget = helper.budget(self._overhead(tmpl, cvar, vals) + extra)
                if self._compact:
                    piece = helper.take(queue, budget)
                else:
                    piece = helper.counted(queue.popleft())
                    if piece.n_tokens > budget:
                        parts = helper.split(piece.text, budget)
                        queue.extendleft(reversed(parts[1:]))
                        piece = parts[0]
            prompt = tmpl.format(**vals, **{cvar: piece.text})
            n_steps += 1
            if self.verbose:
                n = helper.counted(piece).n_tokens
                print(f"[{self.response_mode}] step {n_steps}: {n} context tokens")
            last = not queue
            if last and self._streaming and not filtering:
                note("steps", n_steps)
                return self._astream_text(prompt, answer or self.empty_response)
            if filtering:
                new = await self._astructured_step(prompt)
            else:
                new = await self._apredict(prompt)
            if new is not None and new.strip():
                answer = new
        note("steps", n_steps)
        final = answer if answer is not None else self.empty_response
        if self._streaming:
            return _single(final)
        return final

    async def _astructured_step(self, prompt: str) -> str | None:
        """The step's answer if the LLM says the query is satisfied, else None."""
        llm = self._require_llm()
        try:
            if llm.supports_json_mode:
                obj = await llm.astructured(prompt, REFINE_SCHEMA, **self.llm_kwargs)
            else:
                comp = await llm.acomplete_with_usage(
                    prompt + schema_instruction(REFINE_SCHEMA), **self.llm_kwargs
                )
                obj = _parse_refine(comp.text)
        except (StructuredOutputError, ValueError):
            note("structured_errors", 1, add=True)
            return None
        if not obj.get("query_satisfied"):
            note("filtered", 1, add=True)
            return None
        return str(obj.get("answer", ""))


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _parse_refine(text: str) -> dict:
    return check_schema(parse_json_object(text), REFINE_SCHEMA)


async def _single(text: str) -> AsyncIterator[str]:
    yield text


class CompactAndRefine(Refine):
    """Pack as many whole chunks as fit into each prompt, then refine across the packs
    (LlamaIndex's default "compact" mode, with exact budgets and no overlap)."""

    response_mode = "compact"
    _compact = True
