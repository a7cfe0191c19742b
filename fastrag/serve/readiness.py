"""What one request may make a server search: only data that is ready, so that no request does
unbounded work (embedding a whole group, building a group for the first time).

* A **group** must be built: held by the store (for an in-memory Document: built in this
  process). The server's configured groups are built when it starts; a request builds none.
* A **similarity over embeddings** (``cosine``, ``dot``, ``hybrid``, ``sparse``, custom
  embedding similarities) answers only when its vectors are ready: every node's vector known,
  in memory or in the store, or all but :data:`MAX_REQUEST_EMBED` of them (nodes an upload just
  added, embedded in the request). Otherwise the request fails at once with :class:`NotReady`
  (HTTP 409), which says what to run.
* A **filter** is at most :data:`~fastrag.serve.config.MAX_FILTER_CHARS` characters
  (:func:`check_filter_text`).
* The similarities a server is **configured** with (``--similarity GROUP=NAME``) are built in
  the background: by the server's single writer as a task with progress (``GET
  /v1/tasks/ID``; the vectors are stored, so every worker and every restart uses them), or, for
  a sparse index (kept in memory only) and servers without a writer (the MCP server), by one
  builder thread of the process (:class:`Builds`). A failed build is remembered and not retried
  per request; a restart tries again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from fastrag.errors import ConfigError
from fastrag.indexes.filters import parse_filter
from fastrag.retrieval.similarity import get_similarity
from fastrag.serve.config import MAX_FILTER_CHARS

__all__ = [
    "MAX_REQUEST_EMBED",
    "Builds",
    "NotReady",
    "check_filter_text",
    "check_group_built",
    "embed_keys",
    "needs_vectors",
    "not_ready_error",
    "why_not_ready",
]

#: nodes without vectors a request may embed itself (those an upload just added)
MAX_REQUEST_EMBED = 256


class NotReady(ConfigError):
    """The data a request needs is not built (HTTP 409); the message says what to run.
    ``task_id``: the build task when one is queued or running; ``building``: whether a build
    is under way (a client may retry later)."""

    def __init__(self, message: str, *, task_id: str | None = None, building: bool = False):
        super().__init__(message)
        self.task_id = task_id
        self.building = building


def needs_vectors(similarity: str) -> bool:
    """Whether ``similarity`` scores with embeddings (dense, hybrid, sparse, custom ones)."""
    return get_similarity(similarity).embedded


def embed_keys(doc: Any, similarity: str) -> list[str]:
    """The embed keys a Retriever with ``similarity`` uses on ``doc`` (``hybrid`` without an
    embedder: the default one, ``"default"``)."""
    keys = list(doc.embed)
    if not keys and get_similarity(similarity).path.default_embedding:
        keys = ["default"]
    return keys


def check_group_built(doc: Any, name: str, allowed: Collection[str] = ()) -> None:
    """Raise :class:`NotReady` when group ``name`` is not built (``allowed``: groups the
    server builds itself); an unknown group is a plain ConfigError."""
    doc.check_group(name)
    if name in allowed or doc.is_built(name):
        return
    stored = sorted(doc.store.manifest["groups"]) if doc.store is not None else []
    where = (
        f"the store holds {', '.join(['root', *stored])}; build it once with `fastrag ingest "
        f"SOURCES --store STORE --builtin {name}` (a built-in group) or `--group "
        f"{name}=SPEC`"
        if doc.store is not None
        else "build it first (doc.group(name)) or serve it as the server's group"
    )
    raise NotReady(
        f"group {name!r} is not built, and a request does not build a group (that reads "
        f"every document): {where}; or start the server with --group {name}"
    )


def why_not_ready(doc: Any, group: str, similarity: str) -> str | None:
    """Why ``similarity`` cannot answer from the built group ``group`` without building
    (None: it can)."""
    if not needs_vectors(similarity):
        return None
    g = doc.group(group)
    in_memory = not get_similarity(similarity).path.stored
    for key in embed_keys(doc, similarity):
        if in_memory:
            if not doc.derived.sparse_ready(g, key):
                return f"its sparse index (embed key {key!r}) is not built in this process"
            continue
        missing = doc.derived.vectors_missing(g, key)
        if missing is None:
            return f"the vectors of group {group!r} (embed key {key!r}) are not built"
        if missing > MAX_REQUEST_EMBED:
            return (
                f"{missing} of the {len(g)} nodes of group {group!r} have no vectors (embed key "
                f"{key!r}) yet; a request embeds at most {MAX_REQUEST_EMBED}"
            )
    return None


def not_ready_error(group: str, similarity: str, why: str, build: tuple | None) -> NotReady:
    """The error of a request for ``similarity`` over ``group`` that is not ready (``why``).
    ``build``: None when the server is not configured with that pair, else its background
    build as ``(task id or None, status, error, progress)``."""
    what = f"similarity {similarity!r} cannot answer from group {group!r}"
    if build is None:
        return NotReady(
            f"{what} now: {why}. A request never builds them (that embeds the whole group); "
            f"start the server with `--similarity {group}={similarity}` (create_app("
            f"similarity={{{group!r}: {similarity!r}}})) to have them built once in the "
            f"background, or build and store them in Python: fr.Retriever(fr.Document("
            f"store=STORE), {group!r}, {similarity!r})('warm-up')"
        )
    task_id, status, error, progress = build
    task = f"task {task_id}, " if task_id else ""
    if status == "failed":
        return NotReady(
            f"{what}: {why}, and building them failed ({task}{error}); fix that and restart "
            "the server to try again",
            task_id=task_id,
        )
    done = f", {progress['done']:,} of {progress['total']:,} texts embedded" if progress else ""
    where = f"; GET /v1/tasks/{task_id} shows progress" if task_id else ""
    return NotReady(
        f"{what} yet: {why}; they are being built in the background ({task}{status}{done})"
        f"{where}. Try again later; BM25 similarities answer meanwhile",
        task_id=task_id,
        building=True,
    )


def check_filter_text(text: Any) -> str | None:
    """A request's filter expression, checked: at most :data:`MAX_FILTER_CHARS` characters
    (a longer one costs seconds to parse) and valid; a ConfigError saying what is wrong."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise ConfigError(f"filter must be a string expression, got {type(text).__name__}")
    if len(text) > MAX_FILTER_CHARS:
        raise ConfigError(
            f"filter has {len(text):,} characters, over the limit of {MAX_FILTER_CHARS}; "
            "shorten it, e.g. file_type == 'md' && language in ['en', 'de']"
        )
    try:
        parse_filter(text)
    except ConfigError as exc:
        raise ConfigError(f"filter: {exc}") from None
    return text


class Builds:
    """Builds run by one background thread of this process, one per key and version: a key
    asked again while its build runs (or after it failed, for the same version) gets the same
    future, so a failure is remembered and no build is started twice."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[Hashable, tuple[Any, Future]] = {}
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, key: Hashable, version: Any, build: Callable[[], Any]) -> Future:
        """The build of ``key`` at ``version``, started when there is none."""
        with self._lock:
            job = self._jobs.get(key)
            if job is not None and job[0] == version:
                return job[1]
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="fastrag-build")
            fut = self._pool.submit(build)
            self._jobs[key] = (version, fut)
            return fut

    def state(self, key: Hashable, version: Any, build: Callable[[], Any]) -> tuple:
        """The build of ``key`` at ``version`` (started when there is none) as
        ``(None, status, error, None)``, the shape :func:`not_ready_error` takes."""
        fut = self.submit(key, version, build)
        if not fut.done():
            return None, "running in this process", None, None
        exc = fut.exception()
        if exc is None:
            return None, "finishing", None, None
        return None, "failed", f"{type(exc).__name__}: {exc}", None

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
