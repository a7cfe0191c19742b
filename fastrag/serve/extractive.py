"""Answers without an LLM for the server's chat and the MCP ``ask`` tool: the engine retrieves
(micro-batched like any request), then :func:`~fastrag.synth.extractive.extractive_text` picks
the sentences -- the code path ``fastrag ask`` takes without an LLM. The answer is a
:class:`~fastrag.synth.response.Response` whose ``metadata["answer_type"]`` is
``"extractive"``, so the chat route streams and labels it like a generated one."""

from __future__ import annotations

from typing import Any

from fastrag.retrieval.present import hit_label, hit_record
from fastrag.synth.extractive import extractive_text
from fastrag.synth.response import Response

__all__ = ["ANSWER_TYPE", "EXTRACTIVE", "GENERATED", "aextractive_response", "no_llm_note"]

#: the metadata key (and the chat answer's field) that says how an answer was made
ANSWER_TYPE = "answer_type"
EXTRACTIVE = "extractive"
GENERATED = "generated"


def no_llm_note(how: str) -> str:
    """What an extractive answer tells its reader; ``how``: how to configure an LLM."""
    return (
        "No LLM is configured, so this answer is extractive: the sentences of the sources "
        f"that share the most words with the question. For a written answer, {how}."
    )


async def aextractive_response(engine: Any, ret: Any, question: str, flt: Any = None) -> Response:
    """The extractive answer to ``question`` from ``ret`` (a retriever of ``engine``, a
    :class:`~fastrag.serve.engine.ServeEngine`) with the metadata filter ``flt``: a Response
    with the answer text (None when nothing matches), the hits as ``source_nodes`` and
    ``metadata["answer_type"] == "extractive"``."""
    hits = (await engine.search(ret, [question], flt=flt, source="chat"))[0]
    text = None
    if hits:
        text = extractive_text(
            question,
            hits,
            ret.similarity,
            lambda hit: hit_label(hit_record(hit, engine.source_path)),
        )
    return Response(text, hits, {ANSWER_TYPE: EXTRACTIVE, "llm_calls": 0})
