"""Chat: ``POST /v1/chat/completions``, OpenAI's chat completions (streamed as server-sent
events or not) answered by the engine's RAG pipeline. The last user message is the question,
earlier ones the history (or the server's memory of the conversation, for a ``session_id`` or
``user``); answers carry ``sources`` and ``answer_type``: ``"generated"`` by the server's LLM,
or, when none is configured, ``"extractive"`` (the best-matching sentences, as ``fastrag ask``
gives without an LLM) with a ``note`` saying so."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from fastrag.chat import ChatEngine
from fastrag.errors import ConfigError, FastragError
from fastrag.llms.base import LLMError
from fastrag.query.base import Query
from fastrag.retrieval.present import hit_record
from fastrag.serve.extractive import (
    ANSWER_TYPE,
    EXTRACTIVE,
    GENERATED,
    aextractive_response,
    no_llm_note,
)
from fastrag.serve.guard import ApiError, ServeSettings, error_body
from fastrag.serve.lifecycle import ready_engine
from fastrag.serve.metrics import Metrics
from fastrag.serve.parsing import (
    check_filter,
    check_lengths,
    checked_retriever,
    not_ready,
    parse_body,
)
from fastrag.serve.readiness import NotReady
from fastrag.serve.schemas import UNSUPPORTED_CHAT_FIELDS, ChatCompletionRequest

__all__ = ["router"]

log = logging.getLogger("fastrag.serve")

router = APIRouter()

NO_LLM_NOTE = no_llm_note(
    "start the server with --llm-base-url and --llm-model (create_app(..., llm=...))"
)


@router.post("/v1/chat/completions")
async def chat(request: Request) -> Any:
    eng = ready_engine(request)
    settings, metrics = request.app.state.settings, request.app.state.metrics
    req = await parse_body(request, ChatCompletionRequest)
    query = _chat_query(req, settings)
    ret = None
    if req.group is not None or req.similarity is not None or not eng.can_chat:
        ret = await checked_retriever(eng, req.group, req.similarity)  # unknown names: a 400
    if eng.can_chat:
        resp = await _generated(eng, req, query, metrics)
    else:  # no LLM: the sentences that answer best, as `fastrag ask` without one
        resp = await _extractive(eng, ret, query)
    label = _label(resp.metadata)
    cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    model = req.model or settings.model_name
    created = int(time.time())
    note = None
    if not resp.source_nodes and eng.user_pipeline is None:  # say why, never a bare
        ret = ret or await eng.aretriever(req.group)  # "Empty Response"
        reason = (await eng.why_no_hits(ret, [query.text], req.filter))[0]
        note = f"No passage in the knowledge base matches the question: {reason}."
    if not req.stream:
        text = note or await _first_or_all(resp, metrics)
        metrics.inc("fastrag_chat_completions_total", stream="false")
        _count_llm(metrics, resp.metadata)
        return {
            "id": cid,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "logprobs": None,
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": _usage(resp.metadata),
            "sources": _sources(resp.source_nodes, eng.source_path),
            **label,
        }
    pieces = resp.async_response_gen if resp.is_streaming and note is None else None
    first = note
    if pieces is not None:
        try:  # the first piece before the 200: an upstream failure is still a 502
            first = await anext(pieces, None)
        except FastragError as exc:
            raise _llm_error(exc, metrics) from None
    elif first is None:
        first = resp.response or ""
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    return StreamingResponse(
        _sse(
            cid,
            created,
            model,
            first,
            pieces,
            resp,
            include_usage,
            metrics,
            settings,
            eng.source_path,
            label,
        ),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _chat_query(req: ChatCompletionRequest, settings: ServeSettings) -> Any:
    for name in UNSUPPORTED_CHAT_FIELDS:
        value = getattr(req, name)
        if value not in (None, False, [], {}, "auto") and not (
            name == "response_format" and value == {"type": "text"}
        ):
            raise ApiError(400, f"{name!r} is not supported by fastrag serve", param=name)
    msgs = req.messages
    if len(msgs) > settings.max_messages:
        raise ApiError(
            400,
            f"{len(msgs)} messages exceed the limit of {settings.max_messages}",
            param="messages",
        )
    last = msgs[-1]
    if last.role != "user":
        raise ApiError(
            400,
            f"the last message must be the user's question, not a {last.role!r} message",
            param=f"messages.{len(msgs) - 1}.role",
        )
    text = last.text()
    if not text.strip():
        raise ApiError(
            400,
            "the last message (the question) is empty",
            param=f"messages.{len(msgs) - 1}.content",
        )
    check_lengths([text], "messages", settings.max_query_chars)
    history = [(m.role if m.role != "developer" else "system", m.text()) for m in msgs[:-1]]
    check_filter(req.filter)
    context = {"filter": req.filter} if req.filter is not None else {}
    return Query(text, history=history, context=context)


async def _generated(eng: Any, req: ChatCompletionRequest, query: Any, metrics: Metrics) -> Any:
    """The answer of the server's LLM (its pipeline), remembered for a ``session_id``."""
    try:
        pipe = await eng.apipeline(req.group, req.llm_options(), req.similarity)
    except NotReady as exc:
        raise not_ready(exc, "similarity") from None
    except ConfigError as exc:
        raise ApiError(400, str(exc), param="group") from None
    session = req.session_id or req.user
    if session is not None and eng.user_pipeline is None:
        return await _session_answer(eng, pipe, query, session, req.stream, metrics)
    return await _answer(pipe, query, metrics)


async def _extractive(eng: Any, ret: Any, query: Any) -> Any:
    """The answer without an LLM (:mod:`fastrag.serve.extractive`); a bad filter is a 400."""
    flt = query.context.get("filter")
    try:
        return await aextractive_response(eng, ret, query.text, flt)
    except ConfigError as exc:
        raise ApiError(
            400, str(exc), param="filter" if flt and "filter" in str(exc) else None
        ) from None


def _label(meta: dict[str, Any]) -> dict[str, str]:
    """How the answer was made, as fields of the chat answer: ``answer_type`` and, for an
    extractive answer, a ``note`` saying no LLM is configured and how to configure one."""
    if meta.get(ANSWER_TYPE) != EXTRACTIVE:
        return {ANSWER_TYPE: GENERATED}
    return {ANSWER_TYPE: EXTRACTIVE, "note": NO_LLM_NOTE}


async def _session_answer(
    eng: Any, pipe: Any, query: Any, session: str, stream: bool, metrics: Metrics
) -> Any:
    """A turn of the conversation ``session``: its history comes from the server's memory
    (seeded from the request's earlier messages when the server has none) and the turn is
    remembered, through the same :class:`~fastrag.chat.ChatEngine` the library offers."""
    memory = eng.chat_memory
    if query.history and not await asyncio.to_thread(memory.get, session):
        await asyncio.to_thread(memory.extend, session, list(query.history))
    engine = ChatEngine(pipe, memory=memory)
    try:
        if stream:
            return await engine.astream_chat(query.text, session, dict(query.context))
        return await engine.achat(query.text, session, dict(query.context))
    except ConfigError as exc:
        raise ApiError(400, str(exc)) from None
    except FastragError as exc:
        raise _llm_error(exc, metrics) from None


async def _answer(pipe: Any, query: Any, metrics: Metrics) -> Any:
    try:
        return await pipe.aquery(query)
    except ConfigError as exc:
        flt = query.context.get("filter")
        raise ApiError(
            400, str(exc), param="filter" if flt and "filter" in str(exc) else None
        ) from None
    except FastragError as exc:
        raise _llm_error(exc, metrics) from None


async def _first_or_all(resp: Any, metrics: Metrics) -> str:
    try:
        return await resp.aget_response()
    except FastragError as exc:
        raise _llm_error(exc, metrics) from None


def _llm_error(exc: BaseException, metrics: Metrics) -> ApiError:
    if not isinstance(exc, LLMError):
        if isinstance(exc, ConfigError):
            return ApiError(400, str(exc))
        return ApiError(500, f"{type(exc).__name__}: {exc}", "server_error")
    metrics.inc("fastrag_llm_errors_total")
    status = f"HTTP {exc.status}" if exc.status is not None else "no HTTP status"
    return ApiError(502, f"the upstream LLM failed ({status}): {exc.message}", "upstream_error")


def _usage(meta: dict[str, Any]) -> dict[str, int]:
    p, c = int(meta.get("prompt_tokens", 0) or 0), int(meta.get("completion_tokens", 0) or 0)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _count_llm(metrics: Metrics, meta: dict[str, Any]) -> None:
    metrics.inc("fastrag_llm_calls_total", int(meta.get("llm_calls", 0) or 0))
    metrics.inc("fastrag_llm_prompt_tokens_total", int(meta.get("prompt_tokens", 0) or 0))
    metrics.inc("fastrag_llm_completion_tokens_total", int(meta.get("completion_tokens", 0) or 0))


def _sources(hits: Sequence[Any], source_path: Callable[[str], str]) -> list[dict[str, Any]]:
    """The hits as the chat answer's sources: their records (``retrieval.present``)."""
    return [hit_record(h, source_path) for h in hits]


def _chunk(
    cid: str,
    created: int,
    model: str,
    delta: dict[str, Any],
    finish: str | None = None,
    **extra: Any,
) -> str:
    body = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **extra,
    }
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


async def _sse(
    cid: str,
    created: int,
    model: str,
    first: str | None,
    pieces: AsyncIterator[str] | None,
    resp: Any,
    include_usage: bool,
    metrics: Metrics,
    settings: ServeSettings,
    source_path: Callable[[str], str],
    label: dict[str, str],
) -> AsyncIterator[str]:
    yield _chunk(cid, created, model, {"role": "assistant", "content": ""})
    if first:
        yield _chunk(cid, created, model, {"content": first})
    if pieces is not None and first is not None:
        try:
            async for piece in pieces:
                if piece:
                    yield _chunk(cid, created, model, {"content": piece})
        except FastragError as exc:  # after the 200: an error event, as OpenAI sends
            err = _llm_error(exc, metrics)
            log.warning("chat stream %s failed: %s", cid, settings.scrub(err.message))
            yield f"data: {json.dumps(error_body(settings.scrub(err.message), err.type))}\n\n"
            yield "data: [DONE]\n\n"
            return
    metrics.inc("fastrag_chat_completions_total", stream="true")
    _count_llm(metrics, resp.metadata)
    sources = _sources(resp.source_nodes, source_path)
    yield _chunk(cid, created, model, {}, "stop", sources=sources, **label)
    if include_usage:
        body = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": _usage(resp.metadata),
        }
        yield f"data: {json.dumps(body)}\n\n"
    yield "data: [DONE]\n\n"
