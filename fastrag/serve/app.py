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

import contextlib
import json
import os
import shutil
import tempfile
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from fastrag.errors import ConfigError, missing_extra

try:
    from fastapi import FastAPI
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise missing_extra(exc.name or "fastapi", "serve", "fastrag serve") from None

from fastrag.documents.document import Document
from fastrag.llms.openai_like import OpenAILike
from fastrag.plugins import load_plugins
from fastrag.serve.config import ServeConfig
from fastrag.serve.engine import ServeEngine
from fastrag.serve.guard import Guard, ServeSettings, install_error_handlers, setup_logging
from fastrag.serve.idempotency import IdempotencyKeys
from fastrag.serve.lifecycle import Lifecycle
from fastrag.serve.metrics import Metrics
from fastrag.serve.routes import ROUTERS
from fastrag.serve.routes.retrieve import ARROW_STREAM
from fastrag.serve.tasks import TaskStore, Writer, default_tasks_dir

__all__ = [
    "ARROW_STREAM",
    "app_from_config",
    "app_from_env",
    "create_app",
]

STATIC_DIR = Path(__file__).resolve().parent / "static"
CONFIG_ENV = "FASTRAG_SERVE_CONFIG"


def create_app(
    target: Any,
    *,
    group: str | None = ServeConfig.group,
    similarity: str | Mapping[str, str] | None = ServeConfig.similarity,
    topk: int = ServeConfig.topk,
    llm: Any = None,
    mode: str = ServeConfig.mode,
    compress_history: bool = ServeConfig.compress_history,
    api_key: str | None = None,
    batching: bool = ServeConfig.batching,
    batch_window_ms: float = ServeConfig.batch_window_ms,
    max_batch: int = ServeConfig.max_batch,
    search_threads: int = ServeConfig.search_threads,
    tasks_dir: str | os.PathLike | None = ServeConfig.tasks_dir,
    secrets: Sequence[str] = (),
    chat_memory: Any = ServeConfig.chat_memory,
    chat_window: int = ServeConfig.chat_window,
    **limits: Any,
) -> Any:
    """The ASGI app serving ``target``: a store path (opened read-only), a
    :class:`~fastrag.Document` or a :class:`~fastrag.RAGPipeline`. Mount it in your own
    service or run it with uvicorn (:func:`fastrag.serve.serve` does). Every default is
    :class:`~fastrag.serve.config.ServeConfig`'s.

    ``group``/``similarity``/``topk``: the default retriever (default: the store's last built
    group, ``"bm25"``); ``similarity`` may also give groups their own (``"bm25,faq=hybrid"``
    or ``{"faq": "hybrid"}``), and requests may name one (``"similarity"`` in the body).
    ``chat_memory``: where conversations of chats with a ``session_id`` (or ``user``) are
    kept, ``chat_window`` messages each: a ``fastrag.chat.ChatMemory``, a path (a SQLite
    database every worker and server on this machine shares) or a ``redis://`` URL (default:
    in this process).
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
    ``limits``: ``max_body_bytes`` (1 MiB), ``max_upload_bytes`` (50 MiB), ``max_queries``,
    ``max_query_chars``, ``max_messages``, ``max_upload_files``, ``model_name``.
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
        chat_window=chat_window,
    )
    store = _store_of(target)
    if tasks_dir is None and store is not None:
        tasks_dir = default_tasks_dir(store)
    owned = tasks_dir is None  # an in-memory Document's: a temporary folder, removed at stop
    tasks = TaskStore(tempfile.mkdtemp(prefix="fastrag-serve-tasks-") if owned else tasks_dir)
    keys = IdempotencyKeys(tasks)
    engine.build_task = tasks.build  # configured similarities' vectors: built by the writer
    writer = Writer(tasks, engine, metrics=metrics, scrub=settings.scrub, janitor=keys.prune)
    lifecycle = Lifecycle(engine, writer, metrics, settings, tasks.root, owned)

    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        lifecycle.start()
        try:
            yield
        finally:
            lifecycle.stop()

    app = FastAPI(
        title="fastrag serve",
        lifespan=contextlib.asynccontextmanager(lifespan),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.engine, app.state.settings, app.state.metrics = engine, settings, metrics
    app.state.tasks, app.state.writer, app.state.keys = tasks, writer, keys
    app.state.lifecycle, app.state.static_dir = lifecycle, STATIC_DIR
    install_error_handlers(app, settings, metrics)
    for router in ROUTERS:
        app.include_router(router)
    guard = Guard(app, settings, metrics, lifecycle)
    if owned:  # also when the lifespan never runs (a mounted app) or never ends
        weakref.finalize(guard, shutil.rmtree, tasks.root, True)
    return guard


def _store_of(target: Any) -> Path | None:
    """The store folder ``target`` serves: a path, a stored Document's, or that of the Document
    of a pipeline's first fastrag retriever (as :class:`ServeEngine` picks it)."""
    if isinstance(target, (str, os.PathLike)):
        return Path(target)
    doc = (
        target
        if isinstance(target, Document)
        else next((a.inner.doc for a in getattr(target, "retrievers", ()) if a.is_fastrag), None)
    )
    return Path(doc.store.path) if doc is not None and doc.store is not None else None


# -- from a config (the CLI, and each worker process) -------------------------------------------
def app_from_config(config: ServeConfig | Mapping[str, Any]) -> Any:
    """The app of a ``fastrag serve`` command line: a :class:`ServeConfig` (or a mapping of
    its fields). Keys are read from the environment variables it names, never stored in it."""
    cfg = config if isinstance(config, ServeConfig) else ServeConfig.from_mapping(config)
    setup_logging(cfg.log_level)
    load_plugins()  # a worker process: the plugins `fastrag --plugin` named
    llm = None
    secrets = []
    if cfg.llm_base_url:
        key = os.environ.get(cfg.llm_api_key_env) if cfg.llm_api_key_env else None
        if key:
            secrets.append(key)
        llm = OpenAILike(
            model=cfg.llm_model,
            base_url=cfg.llm_base_url,
            api_key=key or None,
            max_retries=cfg.llm_max_retries,
            timeout=cfg.llm_timeout,
            max_concurrency=cfg.llm_max_concurrency,
        )
    api_key = None
    if cfg.api_key_env:
        api_key = os.environ.get(cfg.api_key_env) or None
        if api_key is None:
            raise ConfigError(
                f"the environment variable {cfg.api_key_env} (--api-key-env) is not set or empty"
            )
    return create_app(
        cfg.store,
        group=cfg.group,
        similarity=cfg.similarity,
        topk=cfg.topk,
        llm=llm,
        mode=cfg.mode,
        compress_history=cfg.compress_history,
        api_key=api_key,
        batching=cfg.batching,
        batch_window_ms=cfg.batch_window_ms,
        max_batch=cfg.max_batch,
        search_threads=cfg.search_threads,
        tasks_dir=cfg.tasks_dir,
        secrets=secrets,
        chat_memory=cfg.chat_memory,
        chat_window=cfg.chat_window,
        **cfg.limits,
    )


def app_from_env() -> Any:
    """uvicorn's app factory for ``--workers N``: the config is in $FASTRAG_SERVE_CONFIG."""
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        raise ConfigError(f"${CONFIG_ENV} is not set; start the server with `fastrag serve`")
    return app_from_config(ServeConfig.from_mapping(json.loads(raw)))
