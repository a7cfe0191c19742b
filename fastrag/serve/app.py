"""The ASGI app of ``fastrag serve`` (FastAPI): an OpenAI-compatible RAG server.

Endpoints (every error is ``{"error": {"message", "type", "param"}}``, OpenAI style)::

    POST   /v1/chat/completions   OpenAI chat completions (stream or not) answered by a RAG
                                  pipeline; the last user message is the question, earlier ones
                                  the history; answers carry ``sources``
    POST   /v1/retrieve           {"queries": [...], "topk"?, "filter"?, "group"?} ->
                                  {"results": [[{id, score, text, metadata}, ...], ...]}, or an
                                  Arrow IPC stream with Accept: application/vnd.apache.arrow.stream
    POST   /v1/documents          multipart file upload or {"texts": [...], "metadatas"?}
                                  -> 202 {"task_id"}; run by the single writer
    DELETE /v1/documents/{doc_id} -> 202 {"task_id"}
    GET    /v1/tasks/{task_id}    queued | running | done | failed, error, doc_ids
    GET    /v1/groups             the knowledge bases (node groups) with node counts
    GET    /v1/models             the one model name this server answers to
    GET    /health                liveness (always 200, no auth)
    GET    /ready                 200 once the store is open and the kernels are compiled
    GET    /metrics               Prometheus text format
    GET    /                      the chat page (static/index.html)

With an API key every endpoint except ``/health`` and the static chat page (which holds no
data; it sends the key with its API calls) needs ``Authorization: Bearer <key>``. Bodies are
capped (``max_body_bytes``; uploads ``max_upload_bytes``): 413 beyond. Upstream LLM failures
are 502 naming the upstream status. Secrets (the API key, the LLM's key, and the values of
query parameters such as ``api_key``, ``key`` or ``token``) are scrubbed from every error body
and log line. A malformed or too deeply nested JSON body is a 400.

Uploads and deletes are tasks in a tasks folder that outlives the server (``tasks_dir``;
default one per store under ``$XDG_STATE_HOME/fastrag/serve-tasks/``, logged at startup): a
task interrupted by a crash ends, after the restart, ``done`` if its change had committed and
``failed`` with ``"interrupted: resubmit"`` if not; queued tasks run after the restart.

``Idempotency-Key: <unique string>`` (optional, on ``POST /v1/documents`` and ``DELETE``; as
Stripe's and OpenAI's SDKs send it): a retry with the same key and request gets the first
request's task back (same ``task_id``, header ``Idempotent-Replayed: true``), so a document is
never added twice; the same key with a different request is a 422, a retry while the first is
still being accepted a 409. Keys are remembered for 24 hours, across restarts; the key of a
``failed`` task may be sent again to resubmit.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fastrag.errors import ConfigError, FastragError, missing_extra

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import FileResponse, Response, StreamingResponse
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise missing_extra(exc.name or "fastapi", "serve", "fastrag serve") from None

from fastrag.serve.engine import ServeEngine
from fastrag.serve.guard import (
    ApiError,
    Guard,
    ServeSettings,
    error_body,
    install_error_handlers,
    install_log_filter,
    setup_logging,
)
from fastrag.serve.idempotency import IdempotencyKeys
from fastrag.serve.metrics import Metrics
from fastrag.serve.parsing import check_filter, check_lengths, checked_retriever, parse_body
from fastrag.serve.schemas import UNSUPPORTED_CHAT_FIELDS, ChatCompletionRequest, RetrieveRequest
from fastrag.serve.tasks import TaskStore, Writer, default_tasks_dir
from fastrag.serve.uploads import install_document_routes

__all__ = [
    "ARROW_STREAM",
    "ServeSettings",
    "app_from_config",
    "app_from_env",
    "create_app",
    "setup_logging",
]

log = logging.getLogger("fastrag.serve")

ARROW_STREAM = "application/vnd.apache.arrow.stream"
STATIC_DIR = Path(__file__).resolve().parent / "static"
CONFIG_ENV = "FASTRAG_SERVE_CONFIG"


# -- the app ---------------------------------------------------------------------------------------
def create_app(
    target: Any,
    *,
    group: str | None = None,
    similarity: str | Mapping[str, str] | None = None,
    topk: int = 5,
    llm: Any = None,
    mode: str = "compact",
    compress_history: bool = False,
    api_key: str | None = None,
    batching: bool = True,
    batch_window_ms: float = 3.0,
    max_batch: int = 256,
    search_threads: int = 1,
    tasks_dir: str | os.PathLike | None = None,
    secrets: Sequence[str] = (),
    chat_memory: Any = None,
    **limits: Any,
) -> Any:
    """The ASGI app serving ``target``: a store path (opened read-only), a
    :class:`~fastrag.Document` or a :class:`~fastrag.RAGPipeline`. Mount it in your own
    service or run it with uvicorn (:func:`fastrag.serve.serve` does).

    ``group``/``similarity``/``topk``: the default retriever (default: the store's last built
    group, ``"bm25"``); ``similarity`` may also give groups their own (``"bm25,faq=hybrid"``
    or ``{"faq": "hybrid"}``), and requests may name one (``"similarity"`` in the body).
    ``chat_memory``: where conversations of chats with a ``session_id`` (or ``user``) are
    kept: a ``fastrag.ChatMemory`` or a path (default: in this process, 40 messages each).
    ``llm`` (an LLM such as ``fr.OpenAILike``) answers
    chats with ``response_mode=mode``; ``compress_history`` rewrites chat history and question
    into one standalone query first (``CompressionQueryTransformer``). ``api_key``: require
    ``Authorization: Bearer <key>``. ``batching``: coalesce concurrent retrievals into one
    ``Retriever.batch`` call, waiting at most ``batch_window_ms`` for company, up to
    ``max_batch`` queries; ``search_threads``: numba threads per batch call (default 1;
    concurrent calls already use the cores). ``tasks_dir``: where upload tasks are queued
    (default: :func:`~fastrag.serve.tasks.default_tasks_dir` of the store, so tasks outlive a
    restart; a new temporary folder, removed at shutdown, for an in-memory Document).
    ``secrets``: more strings never to show in errors or logs (the LLM key).
    ``limits``: ``max_body_bytes`` (1 MiB), ``max_upload_bytes`` (50 MiB), ``max_queries``
    (1024), ``max_query_chars`` (8192), ``max_messages`` (256), ``max_upload_files`` (32),
    ``model_name`` ("fastrag").
    """
    llm_key = getattr(llm, "api_key", None)
    settings = ServeSettings(
        api_key=api_key, secrets=(*secrets, *([llm_key] if llm_key else [])), **limits
    )
    metrics = Metrics()
    engine = ServeEngine(
        target,
        group=group,
        similarity=similarity,
        topk=topk,
        llm=llm,
        mode=mode,
        compress_history=compress_history,
        batching=batching,
        batch_window_ms=batch_window_ms,
        max_batch=max_batch,
        search_threads=search_threads,
        metrics=metrics,
        chat_memory=chat_memory,
    )
    store = _store_of(target)
    if tasks_dir is None and store is not None:
        tasks_dir = default_tasks_dir(store)
    owned = tasks_dir is None  # an in-memory Document's: a temporary folder, removed at stop
    tasks = TaskStore(tempfile.mkdtemp(prefix="fastrag-serve-tasks-") if owned else tasks_dir)
    keys = IdempotencyKeys(tasks)
    writer = Writer(tasks, engine, metrics=metrics, scrub=settings.scrub, janitor=keys.prune)
    return _build(engine, settings, metrics, tasks, keys, writer, owned)


def _store_of(target: Any) -> Path | None:
    """The store folder ``target`` serves: a path, a stored Document's, or that of the Document
    of a pipeline's first fastrag retriever (as :class:`ServeEngine` picks it)."""
    from fastrag.documents.document import Document

    if isinstance(target, (str, os.PathLike)):
        return Path(target)
    doc = (
        target
        if isinstance(target, Document)
        else next((a.inner.doc for a in getattr(target, "retrievers", ()) if a.is_fastrag), None)
    )
    return Path(doc.store.path) if doc is not None and doc.store is not None else None


class _State:
    """Startup (in the background, so /health answers at once) and shutdown of one app.
    ``start`` runs from the lifespan, or from the first request when the app is mounted in
    another app (Starlette runs no lifespan of a mounted app)."""

    def __init__(
        self,
        engine: ServeEngine,
        writer: Writer,
        metrics: Metrics,
        settings: ServeSettings,
        tasks_dir: Path,
        owned_tasks_dir: bool,
    ) -> None:
        self.engine, self.writer, self.metrics, self.settings = engine, writer, metrics, settings
        self.tasks_dir = tasks_dir
        self.remove_at_stop = tasks_dir if owned_tasks_dir else None
        self.ready = False
        self.error: str | None = None
        self.started = time.time()
        self.seconds: float | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None:
            install_log_filter(self.settings.scrub)
            self._task = asyncio.get_running_loop().create_task(self._startup())

    async def _startup(self) -> None:
        engine = self.engine
        t0 = time.perf_counter()
        try:
            await asyncio.to_thread(engine.start)
        except Exception as exc:
            self.error = self.settings.scrub(f"{type(exc).__name__}: {exc}")
            log.error("fastrag serve could not start: %s", self.error)
            return
        if engine.doc is not None:
            self.writer.start()
        self.seconds = time.perf_counter() - t0
        self.ready = True
        self.metrics.set("fastrag_ready", 1)
        batching = "on" if engine.batcher is not None else "off"
        temporary = " (temporary)" if self.remove_at_stop is not None else ""
        log.info(
            "fastrag serve ready in %.1f s: group %r, micro-batching %s; upload tasks in %s%s",
            self.seconds,
            engine.default_group,
            batching,
            self.tasks_dir,
            temporary,
        )

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.writer.stop()
        self.engine.close()
        if self.remove_at_stop is not None:
            shutil.rmtree(self.remove_at_stop, ignore_errors=True)


def _build(
    engine: ServeEngine,
    settings: ServeSettings,
    metrics: Metrics,
    tasks: TaskStore,
    keys: IdempotencyKeys,
    writer: Writer,
    owned_tasks_dir: bool,
) -> Any:
    state = _State(engine, writer, metrics, settings, tasks.root, owned_tasks_dir)

    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.start()
        try:
            yield
        finally:
            state.stop()

    app = FastAPI(
        title="fastrag serve",
        lifespan=contextlib.asynccontextmanager(lifespan),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.engine, app.state.settings, app.state.metrics = engine, settings, metrics
    app.state.tasks, app.state.writer = tasks, writer
    install_error_handlers(app, settings, metrics)

    def ready_engine() -> ServeEngine:
        if not state.ready:
            if state.error is not None:
                raise ApiError(503, f"the server failed to start: {state.error}", "unavailable")
            raise ApiError(
                503,
                "the server is starting (opening the store, compiling kernels); poll GET /ready",
                "unavailable",
            )
        return engine

    # -- probes --------------------------------------------------------------------------------
    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> Any:
        ready_engine()
        doc = engine.doc
        return {
            "status": "ready",
            "group": engine.default_group,
            "similarity": (engine.retriever().similarity if doc is not None else None),
            "documents": len(doc.group("root")) if doc is not None else None,
            "batching": engine.batcher is not None,
            "chat": engine.can_chat,
            "startup_seconds": state.seconds,
        }

    @app.get("/metrics")
    async def metrics_text() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/")
    async def index() -> Any:
        page = STATIC_DIR / "index.html"
        if not page.is_file():
            raise ApiError(
                404,
                "the chat page is not installed (fastrag/serve/static/index.html)",
                "not_found_error",
            )
        return FileResponse(page, media_type="text/html; charset=utf-8")

    @app.get("/static/{name}")
    async def static(name: str) -> Any:
        path = (STATIC_DIR / name).resolve()
        if path.parent != STATIC_DIR or not path.is_file():
            raise ApiError(404, f"no static file {name!r}", "not_found_error")
        return FileResponse(path)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": settings.model_name,
                    "object": "model",
                    "created": int(state.started),
                    "owned_by": "fastrag",
                }
            ],
        }

    # -- retrieval -------------------------------------------------------------------------------
    @app.post("/v1/retrieve")
    async def retrieve(request: Request) -> Any:
        eng = ready_engine()
        req = await parse_body(request, RetrieveRequest)
        if len(req.queries) > settings.max_queries:
            raise ApiError(
                400,
                f"{len(req.queries)} queries exceed the limit of "
                f"{settings.max_queries} per request; split them",
                param="queries",
            )
        check_lengths(req.queries, "queries", settings.max_query_chars)
        flt = check_filter(req.filter)
        ret = await checked_retriever(eng, req.group, req.similarity)
        arrow = ARROW_STREAM in request.headers.get("accept", "")
        try:
            hits = await eng.search(ret, req.queries, flt=flt, topk=req.topk, as_json=not arrow)
        except ConfigError as exc:  # e.g. a filter naming a field the metadata lacks
            raise ApiError(
                400, str(exc), param="filter" if flt and "filter" in str(exc) else None
            ) from None
        if arrow:
            return Response(_arrow_ipc(hits), media_type=ARROW_STREAM)
        enc = json.encoder.encode_basestring  # each query's hits came as JSON from the batch
        empty = [i for i, h in enumerate(hits) if h == "[]"]
        notes = ""
        if empty:
            reasons = await eng.why_no_hits(ret, [req.queries[i] for i in empty], flt)
            notes = ',"no_hits":' + json.dumps(
                [{"query_idx": i, "reason": r} for i, r in zip(empty, reasons, strict=True)],
                ensure_ascii=False,
            )
        return Response(
            f'{{"object":"list","group":{enc(ret.group_name)},"similarity":'
            f'{enc(ret.similarity)},"results":[{",".join(hits)}]{notes}}}'.encode(),
            media_type="application/json",
        )

    @app.get("/v1/groups")
    async def groups() -> dict[str, Any]:
        eng = ready_engine()
        listed = await asyncio.to_thread(eng.groups)
        return {
            "object": "list",
            "default": eng.default_group,
            "data": listed,
            "similarities": eng.similarities(),
        }

    # -- chat ------------------------------------------------------------------------------------
    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        eng = ready_engine()
        req = await parse_body(request, ChatCompletionRequest)
        query = _chat_query(req, settings)
        if not eng.can_chat:
            raise ApiError(
                503,
                "no LLM is configured for chat: start the server with "
                "--llm-base-url and --llm-model (create_app(..., llm=...)); "
                "POST /v1/retrieve works without one",
                "unavailable",
            )
        ret = None
        if req.group is not None or req.similarity is not None:  # unknown names: a 400
            ret = await checked_retriever(eng, req.group, req.similarity)
        try:
            pipe = await eng.apipeline(req.group, req.llm_options(), req.similarity)
        except ConfigError as exc:
            raise ApiError(400, str(exc), param="group") from None
        cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        model = req.model or settings.model_name
        created = int(time.time())
        session = req.session_id or req.user
        if session is not None and eng.user_pipeline is None:
            resp = await _session_answer(eng, pipe, query, session, req.stream, metrics)
        else:
            resp = await _answer(pipe, query, metrics)
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
            ),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    install_document_routes(app, engine, tasks, writer, keys, settings, ready_engine)
    return Guard(app, settings, metrics, state)


# -- chat helpers ---------------------------------------------------------------------------------
def _chat_query(req: ChatCompletionRequest, settings: ServeSettings) -> Any:
    from fastrag.query.base import Query

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


async def _session_answer(
    eng: Any, pipe: Any, query: Any, session: str, stream: bool, metrics: Metrics
) -> Any:
    """A turn of the conversation ``session``: its history comes from the server's memory
    (seeded from the request's earlier messages when the server has none) and the turn is
    remembered, through the same :class:`~fastrag.chat.ChatEngine` the library offers."""
    from fastrag.chat import ChatEngine

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
    from fastrag.llms.base import LLMError

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


def _snippet(text: str, width: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _sources(hits: Sequence[Any], source_path: Callable[[str], str]) -> list[dict[str, Any]]:
    """The hits as the chat answer's sources; ``file`` is the path under the ingested folder."""
    out = []
    for h in hits:
        meta = h.metadata or {}
        path = meta.get("file_path")
        file = source_path(path) if isinstance(path, str) and path else meta.get("file_name")
        out.append(
            {
                "id": h.id,
                "doc_id": getattr(h, "doc_id", None),
                "score": None if h.score is None else float(h.score),
                "file": file,
                "page": meta.get("page_label"),
                "snippet": _snippet(h.text),
            }
        )
    return out


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
    yield _chunk(cid, created, model, {}, "stop", sources=_sources(resp.source_nodes, source_path))
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


def _arrow_ipc(hits: Sequence[Sequence[Any]]) -> bytes:
    """The hits as one Arrow IPC stream: ``batch_arrow``'s columns (query_idx, rank, node_id,
    score) plus ``text`` and ``metadata`` (JSON)."""
    import pyarrow as pa

    qidx, rank, ids, scores, texts, metas = [], [], [], [], [], []
    for qi, hs in enumerate(hits):
        for r, h in enumerate(hs, 1):
            qidx.append(qi)
            rank.append(r)
            ids.append(h.id)
            scores.append(h.score)
            texts.append(h.text)
            metas.append(json.dumps(h.metadata, ensure_ascii=False))
    table = pa.table(
        {
            "query_idx": pa.array(qidx, pa.int32()),
            "rank": pa.array(rank, pa.int32()),
            "node_id": pa.array(ids, pa.string()),
            "score": pa.array(scores, pa.float32()),
            "text": pa.array(texts, pa.large_string()),
            "metadata": pa.array(metas, pa.string()),
        }
    )
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


# -- from a config (the CLI, and each worker process) -------------------------------------------
def app_from_config(cfg: dict[str, Any]) -> Any:
    """The app of a ``fastrag serve`` command line (a JSON-able dict; keys are read from the
    environment variables it names, never stored in it)."""
    setup_logging(cfg.get("log_level", "info"))
    llm = None
    secrets = []
    if cfg.get("llm"):
        from fastrag.llms.openai_like import OpenAILike

        c = cfg["llm"]
        key = os.environ.get(c["api_key_env"]) if c.get("api_key_env") else None
        if key:
            secrets.append(key)
        llm = OpenAILike(
            model=c["model"],
            base_url=c["base_url"],
            api_key=key or None,
            max_retries=c.get("max_retries", 2),
            timeout=c.get("timeout", 60.0),
            max_concurrency=c.get("max_concurrency", 64),
        )
    api_key = None
    if cfg.get("api_key_env"):
        api_key = os.environ.get(cfg["api_key_env"]) or None
        if api_key is None:
            raise ConfigError(
                f"the environment variable {cfg['api_key_env']} (--api-key-env) is not set or empty"
            )
    limits = {
        k: cfg[k]
        for k in ("max_body_bytes", "max_upload_bytes", "max_queries", "max_query_chars")
        if cfg.get(k) is not None
    }
    return create_app(
        cfg["store"],
        group=cfg.get("group"),
        similarity=cfg.get("similarity"),
        topk=cfg.get("topk", 5),
        llm=llm,
        mode=cfg.get("mode", "compact"),
        compress_history=cfg.get("compress_history", False),
        api_key=api_key,
        batching=cfg.get("batching", True),
        batch_window_ms=cfg.get("batch_window_ms", 3.0),
        max_batch=cfg.get("max_batch", 256),
        search_threads=cfg.get("search_threads", 1),
        tasks_dir=cfg.get("tasks_dir"),
        secrets=secrets,
        chat_memory=cfg.get("chat_memory"),
        **limits,
    )


def app_from_env() -> Any:
    """uvicorn's app factory for ``--workers N``: the config is in $FASTRAG_SERVE_CONFIG."""
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        raise ConfigError(f"${CONFIG_ENV} is not set; start the server with `fastrag serve`")
    return app_from_config(json.loads(raw))
