"""``RAGPipeline``: transform -> expand -> retrieve -> join -> postprocess -> rerank -> answer.

Spring AI's ``RetrievalAugmentationAdvisor`` as one batch-first object. For N queries every
stage runs once over all of them: each transformer is one concurrent round of LLM calls, the
expander one more, and **each retriever is called once** with every variant of every query
(grouped by per-query filter); joining, post-processing and reranking run as batches, and the
answers are synthesized concurrently. ``Response.metadata["trace"]`` shows what each stage did.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastrag._async import call_sync, iter_sync, run_sync
from fastrag._checks import check_bool, check_choice, check_int
from fastrag.documents.base import BaseDocument
from fastrag.errors import ConfigError
from fastrag.llms.base import Completion
from fastrag.llms.usage import Usage
from fastrag.query.augmenter import ContextualQueryAugmenter
from fastrag.query.base import (
    Query,
    QueryComponent,
    as_queries,
    as_query,
    resolve_default_llm,
)
from fastrag.query.expanders import QueryExpander
from fastrag.query.retrieve import as_retriever
from fastrag.query.transformers import QueryTransformer
from fastrag.retrieval.args import context_filter
from fastrag.retrieval.joiners import ConcatenationDocumentJoiner
from fastrag.retrieval.rerankers import Reranker
from fastrag.retrieval.retriever import Retriever
from fastrag.schema import NodeWithScore
from fastrag.settings import DEFAULT_TOPK
from fastrag.synth.base import BaseSynthesizer
from fastrag.synth.factory import get_response_synthesizer
from fastrag.synth.response import Response

__all__ = ["RAGPipeline"]

ON_ERROR = ("raise", "skip")
ANSWER_QUERY = ("auto", "original", "transformed")


@dataclass
class _State:
    """One query on its way through the pipeline."""

    original: Query
    query: Query
    trace: dict[str, Any]
    usage: dict[str, Usage] = field(default_factory=dict)
    variants: list[Query] = field(default_factory=list)
    hits: list[NodeWithScore] = field(default_factory=list)
    error: BaseException | None = None
    error_stage: str | None = None

    def use(self, stage: str) -> Usage:
        return self.usage.setdefault(stage, Usage())


def _ids(hits: Sequence[NodeWithScore]) -> list[list[Any]]:
    return [[h.node.id, None if h.score is None else float(h.score)] for h in hits]


def _builtin(obj: Any) -> bool:
    """A fastrag joiner: pure array work, cheap enough to run on the loop itself."""
    return type(obj).__module__.startswith("fastrag.retrieval.")


def _name(obj: Any) -> str:
    return getattr(obj, "__name__", None) or type(obj).__name__


class RAGPipeline:
    """Modular RAG in one object.

    Args:
        retrievers: one or a list of fastrag ``Retriever`` (or callables ``str -> hits``).
        query_transformers: applied in order (``RewriteQueryTransformer``,
            ``CompressionQueryTransformer``, ``TranslationQueryTransformer``, or a callable
            ``Query -> Query | str``).
        query_expander: ``MultiQueryExpander``, ``SubQuestionExpander`` or a callable
            ``Query -> list[Query | str]``; every variant is retrieved.
        joiner: merges the hit lists of all variants and retrievers (default: Spring AI's
            ``ConcatenationDocumentJoiner`` when there is more than one list).
        postprocessors: ``NodePostprocessor`` objects or callables ``(hits, query) -> hits``.
        reranker: a ``fr.Reranker`` (with ``output_format=None``).
        augmenter: ``ContextualQueryAugmenter``. Without a synthesizer it builds the prompt
            sent to ``llm``; with one, it decides what happens when nothing was retrieved
            (``allow_empty_context=False``: the model is told not to answer).
        synthesizer: a response synthesizer (``fr.get_response_synthesizer(...)``).
        llm: the LLM answering augmented prompts (default: ``fr.Settings.llm``; with neither a
            synthesizer nor an augmenter, a default ``ContextualQueryAugmenter`` is used).
        streaming: stream answers of the augmenter path (a synthesizer streams when it was
            built with ``streaming=True``).
        answer_query: which query the answer (and reranking) is for: "original", "transformed"
            or "auto" (the transformed one when the query had chat history, else the original).
        on_error: "raise" (a failing stage fails the call, naming query and stage) or "skip"
            (that query gets a Response with ``metadata["error"]``; the others complete).
        max_concurrency: LLM calls in flight at once in the augmenter answer stage.
    """

    #: Spring AI's ``QuestionAnswerAdvisor.FILTER_EXPRESSION``: a Query context key for a filter
    FILTER_EXPRESSION = "qa_filter_expression"

    def __init__(
        self,
        retrievers: Any,
        *,
        query_transformers: Sequence[Any] = (),
        query_expander: Any = None,
        joiner: Any = None,
        postprocessors: Sequence[Any] = (),
        reranker: Any = None,
        augmenter: ContextualQueryAugmenter | None = None,
        synthesizer: BaseSynthesizer | None = None,
        llm: Any = None,
        streaming: bool = False,
        answer_query: str = "auto",
        on_error: str = "raise",
        max_concurrency: int = 16,
    ) -> None:
        if retrievers is None:
            raise ConfigError("retrievers is required: pass fr.Retriever(doc, ...) or a list")
        if isinstance(retrievers, (list, tuple)):
            if not retrievers:
                raise ConfigError("retrievers is an empty list; pass at least one retriever")
            self.retrievers = [
                as_retriever(r, f"retrievers[{i}]") for i, r in enumerate(retrievers)
            ]
        else:
            self.retrievers = [as_retriever(retrievers, "retrievers")]
        if isinstance(query_transformers, (QueryTransformer, str)) or not isinstance(
            query_transformers, Sequence
        ):
            query_transformers = [query_transformers]
        for i, t in enumerate(query_transformers):
            if not isinstance(t, QueryTransformer) and not callable(t):
                raise ConfigError(
                    f"query_transformers[{i}] must be a QueryTransformer or a "
                    f"callable Query -> Query, got {type(t).__name__}"
                )
        self.query_transformers = list(query_transformers)
        if (
            query_expander is not None
            and not isinstance(query_expander, QueryExpander)
            and not callable(query_expander)
        ):
            raise ConfigError(
                f"query_expander must be a QueryExpander or a callable Query -> "
                f"list of queries, got {type(query_expander).__name__}"
            )
        self.query_expander = query_expander
        if joiner is not None and not (hasattr(joiner, "batch") or callable(joiner)):
            raise ConfigError(
                f"joiner must be a document joiner (e.g. "
                f"fr.ReciprocalRankFusionJoiner()), got {type(joiner).__name__}"
            )
        self.joiner = joiner
        if not isinstance(postprocessors, Sequence) or isinstance(postprocessors, str):
            postprocessors = [postprocessors]
        for i, p in enumerate(postprocessors):
            if not (hasattr(p, "batch") or callable(p)):
                raise ConfigError(
                    f"postprocessors[{i}] must be a node postprocessor or a "
                    f"callable (hits, query) -> hits, got {type(p).__name__}"
                )
        self.postprocessors = list(postprocessors)
        if reranker is not None:
            if not isinstance(reranker, Reranker):
                raise ConfigError(f"reranker must be a fr.Reranker, got {type(reranker).__name__}")
            if reranker.output_format is not None:
                raise ConfigError(
                    f"reranker has output_format={reranker.output_format!r}; the pipeline "
                    "needs nodes: build it with output_format=None"
                )
        self.reranker = reranker
        if augmenter is not None and not isinstance(augmenter, ContextualQueryAugmenter):
            raise ConfigError(
                f"augmenter must be a fr.ContextualQueryAugmenter, got {type(augmenter).__name__}"
            )
        if synthesizer is not None and not isinstance(synthesizer, BaseSynthesizer):
            raise ConfigError(
                f"synthesizer must be a fastrag synthesizer (from "
                f"fr.get_response_synthesizer), got {type(synthesizer).__name__}"
            )
        self.synthesizer = synthesizer
        fallback = synthesizer.llm if synthesizer is not None else None
        self.llm = resolve_default_llm(
            llm if llm is not None else fallback, "RAGPipeline", required=False
        )
        if augmenter is None and synthesizer is None and self.llm is not None:
            augmenter = ContextualQueryAugmenter()
        self.augmenter = augmenter
        self.streaming = check_bool("streaming", streaming)
        self.answer_query = check_choice("answer_query", answer_query, ANSWER_QUERY)
        self.on_error = check_choice("on_error", on_error, ON_ERROR)
        self.max_concurrency = check_int("max_concurrency", max_concurrency, min=1)

    @classmethod
    def from_document(
        cls,
        doc: BaseDocument,
        group_name: str = "root",
        similarity: str = "bm25",
        topk: int = DEFAULT_TOPK,
        response_mode: str = "compact",
        llm: Any = None,
        response_synthesizer: Any = None,
        **kw: Any,
    ) -> RAGPipeline:
        """A pipeline over one :class:`~fastrag.Retriever` of ``doc`` and one synthesizer
        (``doc.as_query_engine(...)``, LlamaIndex's ``index.as_query_engine()``).

        Keyword arguments go to the ``Retriever`` (``filter``, ``similarity_cut_off``,
        ``index``, ``embed_keys``, BM25/HNSW parameters), to
        ``get_response_synthesizer`` (``streaming``, ``max_concurrency``, ``language``,
        ``text_qa_template``, ...) or to the pipeline (``query_transformers``,
        ``query_expander``, ``postprocessors``, ``reranker``, ``augmenter``, ``on_error``).
        ``llm=None`` uses ``fr.Settings.llm``; ``response_synthesizer`` (LlamaIndex's name) is
        a synthesizer from ``get_response_synthesizer`` to use as it is.
        """
        pipe_kw = {k: kw.pop(k) for k in list(kw) if k in _PIPELINE_KEYS - _SHARED_KEYS}
        for shared in _SHARED_KEYS:  # both the synthesizer's and ours
            if shared in kw:
                pipe_kw[shared] = kw[shared]
        ret_kw = {k: kw.pop(k) for k in list(kw) if k in _RETRIEVER_KEYS}
        retriever = Retriever(doc, group_name, similarity, topk=topk, **ret_kw)
        if response_synthesizer is not None:
            if kw:
                raise ConfigError(
                    f"synthesizer options {sorted(kw)} were given with "
                    "response_synthesizer=; set them on that synthesizer"
                )
            return cls(
                retriever,
                synthesizer=response_synthesizer,
                llm=llm if llm is not None else response_synthesizer.llm,
                **pipe_kw,
            )
        llm = resolve_default_llm(llm, "as_query_engine", required=False)
        synthesizer = get_response_synthesizer(response_mode=response_mode, llm=llm, **kw)
        return cls(retriever, synthesizer=synthesizer, llm=llm, **pipe_kw)

    # -- public: answers ---------------------------------------------------------------------
    def query(self, query: Query | str) -> Response:
        """Answer one query; a streaming synthesizer (or ``streaming=True``) gives a streaming
        Response (``resp.response_gen``)."""
        if self._streams():
            states = run_sync(self._aretrieve_states([as_query(query)]))
            return self._stream_sync(states[0])
        return self.batch([query])[0]

    __call__ = query

    async def aquery(self, query: Query | str) -> Response:
        """Async :meth:`query` (streaming: ``resp.async_response_gen``)."""
        if self._streams():
            states = await self._aretrieve_states([as_query(query)])
            return await self._astream(states[0])
        return (await self.abatch([query]))[0]

    def batch(self, queries: Sequence[Query | str]) -> list[Response]:
        """Answer many queries, every stage batched across all of them (complete responses,
        in query order)."""
        return run_sync(self.abatch(queries))

    async def abatch(self, queries: Sequence[Query | str]) -> list[Response]:
        """Async :meth:`batch`."""
        states = await self._aretrieve_states(as_queries(queries))
        if not states:
            return []
        if self.synthesizer is None and self.augmenter is None:
            raise ConfigError(
                "this RAGPipeline has no answer stage: pass llm=..., synthesizer=... or "
                "augmenter=... (or call retrieve() / retrieve_batch() for the nodes only)"
            )
        t0 = time.perf_counter()
        await self._aanswer(states)
        stage_seconds = time.perf_counter() - t0
        return [self._finish(s, stage_seconds) for s in states]

    # -- public: retrieval only --------------------------------------------------------------
    def retrieve(self, query: Query | str) -> list[NodeWithScore]:
        """The final node list for one query (every stage before the answer)."""
        return self.retrieve_batch([query])[0]

    async def aretrieve(self, query: Query | str) -> list[NodeWithScore]:
        return (await self.aretrieve_batch([query]))[0]

    def retrieve_batch(self, queries: Sequence[Query | str]) -> list[list[NodeWithScore]]:
        """The final node lists of many queries."""
        return run_sync(self.aretrieve_batch(queries))

    async def aretrieve_batch(self, queries: Sequence[Query | str]) -> list[list[NodeWithScore]]:
        states = await self._aretrieve_states(as_queries(queries))
        for s in states:
            if s.error is not None:
                raise s.error
        return [s.hits for s in states]

    # -- stages ------------------------------------------------------------------------------
    async def _aretrieve_states(self, queries: list[Query]) -> list[_State]:
        t_start = time.perf_counter()
        states = [_State(q, q, {"query": q.text, "history": len(q.history)}) for q in queries]
        if not states:
            return []
        seconds: dict[str, float] = {}
        for t in self.query_transformers:
            t0 = time.perf_counter()
            await self._component_stage(states, t, "transform", self._apply_transform)
            seconds["transform"] = seconds.get("transform", 0.0) + time.perf_counter() - t0
        for s in states:
            s.trace["transformed_query"] = s.query.text
        t0 = time.perf_counter()
        if self.query_expander is None:
            for s in self._alive(states):
                s.variants = [s.query]
        else:
            await self._component_stage(states, self.query_expander, "expand", self._apply_expand)
        seconds["expand"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        lists = await self._aretrieve(states)
        seconds["retrieve"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        await self._join(states, lists)
        seconds["join"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        await self._postprocess(states)
        seconds["postprocess"] = time.perf_counter() - t0
        for s in states:
            s.trace["seconds"] = dict(seconds)
            s.trace["seconds"]["retrieval_total"] = time.perf_counter() - t_start
        return states

    def _alive(self, states: list[_State]) -> list[_State]:
        return [s for s in states if s.error is None]

    def _fail(self, s: _State, stage: str, exc: BaseException, index: int) -> None:
        if hasattr(exc, "add_note"):
            exc.add_note(
                f"in RAGPipeline stage {stage!r}, query index {index}: {s.original.text[:80]!r}"
            )
        if self.on_error == "raise":
            raise exc
        s.error, s.error_stage = exc, stage

    async def _component_stage(self, states, comp, stage, apply) -> None:
        alive = [(i, s) for i, s in enumerate(states) if s.error is None]
        if isinstance(comp, QueryComponent):
            results = await comp.arun_with_usage([s.query for _, s in alive])
            for (i, s), (r, usage) in zip(alive, results, strict=True):
                s.use(stage).add(usage)
                if isinstance(r, Exception):
                    self._fail(s, stage, r, i)
                else:
                    apply(s, comp, r)
            return
        for i, s in alive:  # a plain callable: in a worker thread (or awaited)
            try:
                apply(s, comp, await call_sync(comp, s.query))
            except Exception as exc:
                self._fail(s, stage, exc, i)

    @staticmethod
    def _apply_transform(s: _State, comp: Any, r: Any) -> None:
        if isinstance(r, str):
            q = s.query.mutate(text=r)
        elif isinstance(r, Query):
            q = r
        else:
            raise ConfigError(f"{_name(comp)} must return a Query or str, got {type(r).__name__}")
        s.trace.setdefault("transformed", []).append({"transformer": _name(comp), "query": q.text})
        s.query = q

    @staticmethod
    def _apply_expand(s: _State, comp: Any, r: Any) -> None:
        if isinstance(r, (str, Query)) or not isinstance(r, Sequence):
            raise ConfigError(
                f"{_name(comp)} must return a list of queries, got {type(r).__name__}"
            )
        s.variants = [
            v if isinstance(v, Query) else s.query.mutate(text=as_query(v).text) for v in r
        ] or [s.query]
        s.trace["expanded"] = [v.text for v in s.variants]

    async def _aretrieve(self, states: list[_State]) -> dict[int, list[list[NodeWithScore]]]:
        """Per query index: its hit lists, variant by variant, retriever by retriever."""
        groups: list[tuple[Any, list[str], dict[str, int]]] = []  # (filter, texts, text->pos)
        where: dict[tuple[int, int], tuple[int, int]] = {}
        for i, s in enumerate(states):
            if s.error is not None:
                continue
            for j, v in enumerate(s.variants):
                flt = context_filter(v.context)
                g = next((k for k, grp in enumerate(groups) if grp[0] == flt), None)
                if g is None:
                    groups.append((flt, [], {}))
                    g = len(groups) - 1
                texts, pos = groups[g][1], groups[g][2]
                if v.text not in pos:
                    pos[v.text] = len(texts)
                    texts.append(v.text)
                where[(i, j)] = (g, pos[v.text])
        if not where:
            return {}
        jobs = [(r, g) for r in range(len(self.retrievers)) for g in range(len(groups))]
        try:
            found = await asyncio.gather(
                *(self.retrievers[r].abatch(groups[g][1], groups[g][0]) for r, g in jobs)
            )
        except Exception as exc:
            for i, s in enumerate(states):
                if s.error is None:
                    self._fail(s, "retrieve", exc, i)
            return {}
        by_job = {job: res for job, res in zip(jobs, found, strict=True)}
        out: dict[int, list[list[NodeWithScore]]] = {}
        for i, s in enumerate(states):
            if s.error is not None:
                continue
            lists, trace = [], []
            for j, v in enumerate(s.variants):
                g, p = where[(i, j)]
                for r, adapter in enumerate(self.retrievers):
                    hits = by_job[(r, g)][p]
                    lists.append(hits)
                    trace.append(
                        {"retriever": adapter.label(), "query": v.text, "hits": _ids(hits)}
                    )
            out[i] = lists
            s.trace["retrieved"] = trace
        return out

    async def _join(
        self, states: list[_State], lists: dict[int, list[list[NodeWithScore]]]
    ) -> None:
        idx = [i for i in lists if states[i].error is None]
        if not idx:
            return
        if self.joiner is None:
            needs = any(len(lists[i]) > 1 for i in idx)
            joiner = ConcatenationDocumentJoiner() if needs else None
        else:
            joiner = self.joiner
        if joiner is None:
            joined = [list(lists[i][0]) for i in idx]
        elif _builtin(joiner):
            joined = joiner.batch([lists[i] for i in idx])
        elif hasattr(joiner, "batch"):
            joined = await call_sync(joiner.batch, [lists[i] for i in idx])
        else:
            joined = [await call_sync(joiner, lists[i]) for i in idx]
        for i, hits in zip(idx, joined, strict=True):
            states[i].hits = list(hits)
            states[i].trace["joined"] = _ids(hits)

    def _answer_text(self, s: _State) -> str:
        if self.answer_query == "original" or (
            self.answer_query == "auto" and not s.original.history
        ):
            return s.original.text
        return s.query.text

    async def _postprocess(self, states: list[_State]) -> None:
        alive = [(i, s) for i, s in enumerate(states) if s.error is None]
        steps = [(p, "postprocess") for p in self.postprocessors]
        if self.reranker is not None:
            steps.append((self.reranker, "rerank"))
        for p, stage in steps:
            if not alive:
                return
            hits = [s.hits for _, s in alive]
            texts = [self._answer_text(s) for _, s in alive]
            try:
                if hasattr(p, "abatch"):
                    out = await p.abatch(hits, texts)
                elif hasattr(p, "batch"):  # may call a model or a service: off the loop
                    out = await call_sync(p.batch, hits, texts)
                else:
                    out = [await call_sync(p, h, t) for h, t in zip(hits, texts, strict=True)]
            except Exception as exc:
                for i, s in alive:
                    self._fail(s, stage, exc, i)
                return
            for (_, s), h in zip(alive, out, strict=True):
                s.hits = list(h)
                if stage == "rerank":
                    s.trace["reranked"] = _ids(s.hits)
                else:
                    s.trace.setdefault("postprocessed", []).append(
                        {"postprocessor": _name(p), "hits": _ids(s.hits)}
                    )

    def as_chat_engine(self, **kw: Any) -> Any:
        """A :class:`~fastrag.chat.ChatEngine` over this pipeline (LlamaIndex's
        ``as_chat_engine``): ``memory``, ``condense``, ``llm``, ``system_prompt``, ``chat_mode``."""
        from fastrag.chat.engine import as_chat_engine  # upward: LlamaIndex-shaped entry point

        return as_chat_engine(self, **kw)

    # -- the answer ----------------------------------------------------------------------------
    def _streams(self) -> bool:
        if self.synthesizer is not None:
            return self.synthesizer.streaming
        return self.streaming and self.augmenter is not None

    def _prompt_for(self, s: _State) -> str | None:
        """The augmented prompt for the augmenter path, or None for the synthesizer path."""
        if self.synthesizer is not None and s.hits:
            return None
        if self.augmenter is None:  # synthesizer with no hits: its own on_empty policy
            return None
        return self.augmenter.augment(s.query.mutate(text=self._answer_text(s)), s.hits).text

    def _require_llm(self):
        if self.llm is None:
            raise ConfigError("RAGPipeline needs an LLM for the augmented prompt: pass llm=...")
        return self.llm

    async def _aanswer(self, states: list[_State]) -> None:
        alive = [(i, s) for i, s in enumerate(states) if s.error is None]
        prompts = {i: self._prompt_for(s) for i, s in alive}
        direct = [(i, s) for i, s in alive if prompts[i] is not None]
        synth = [(i, s) for i, s in alive if prompts[i] is None]
        sem = asyncio.Semaphore(self.max_concurrency)

        async def ask(i: int, s: _State) -> None:
            llm = self._require_llm()
            async with sem:
                comp = await llm.acomplete_with_usage(prompts[i])
            s.use("answer").record(comp)
            s.trace["answer"] = Response(comp.text, s.hits, {"response_mode": "augmented"})

        async def ask_safe(i: int, s: _State) -> None:
            try:
                await ask(i, s)
            except Exception as exc:
                self._fail(s, "answer", exc, i)

        async def synthesize() -> None:
            if not synth:
                return
            resps = await self.synthesizer.abatch(
                [self._answer_text(s) for _, s in synth],
                [s.hits for _, s in synth],
                return_exceptions=True,
            )
            for (i, s), r in zip(synth, resps, strict=True):
                if isinstance(r, Exception):
                    self._fail(s, "synthesize", r, i)
                    continue
                s.use("synthesize").add(Usage.from_metadata(r.metadata))
                s.trace["answer"] = r

        tasks = [asyncio.ensure_future(ask_safe(i, s)) for i, s in direct]
        tasks.append(asyncio.ensure_future(synthesize()))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()

    def _metadata(self, s: _State, base: dict[str, Any] | None = None) -> dict[str, Any]:
        total = Usage.total(s.usage.values())
        trace = s.trace
        trace["llm"] = {k: u.as_dict() for k, u in s.usage.items()}
        meta = dict(base or {})
        meta.update(total.as_dict())
        meta["trace"] = trace
        return meta

    def _finish(self, s: _State, stage_seconds: float) -> Response:
        s.trace.setdefault("seconds", {})["answer"] = stage_seconds
        if s.error is not None:
            meta = self._metadata(s)
            meta.update(error=f"{type(s.error).__name__}: {s.error}", error_stage=s.error_stage)
            return Response("", s.hits, meta)
        r: Response = s.trace.pop("answer")
        r.metadata = self._metadata(s, r.metadata)
        return r

    # -- streaming (one query) -----------------------------------------------------------------
    def _synth_done(self, s: _State, synth_meta: dict[str, Any]) -> dict[str, Any]:
        s.use("synthesize").add(Usage.from_metadata(synth_meta))
        return self._metadata(s, synth_meta)

    def _stream_sync(self, s: _State) -> Response:
        if s.error is not None:
            raise s.error
        if self.synthesizer is not None and (s.hits or self.augmenter is None):
            return self._wrap_synth(
                s, self.synthesizer.synthesize(self._answer_text(s), s.hits), sync=True
            )
        return self._stream_augmented(s, sync=True)

    async def _astream(self, s: _State) -> Response:
        if s.error is not None:
            raise s.error
        if self.synthesizer is not None and (s.hits or self.augmenter is None):
            r = await self.synthesizer.asynthesize(self._answer_text(s), s.hits)
            return self._wrap_synth(s, r, sync=False)
        return self._stream_augmented(s, sync=False)

    def _wrap_synth(self, s: _State, r: Response, sync: bool) -> Response:
        """The synthesizer's response with the pipeline's totals and trace (completed when a
        stream ends)."""
        if not r.is_streaming:
            r.metadata = self._synth_done(s, r.metadata)
            return r
        gen = (
            {"response_gen": iter(r.response_gen)}
            if sync
            else {"async_response_gen": r.async_response_gen}
        )
        out = Response(
            None,
            r.source_nodes,
            self._metadata(s, r.metadata),
            on_done=lambda _t: out.metadata.update(self._synth_done(s, r.metadata)),
            **gen,
        )
        return out

    def _stream_augmented(self, s: _State, sync: bool) -> Response:
        prompt = self._prompt_for(s)
        llm = self._require_llm()

        async def gen():
            async for item in llm.astream_with_usage(prompt):
                if isinstance(item, Completion):
                    s.use("answer").record(item)
                elif item:
                    yield item

        def done(_text: str) -> None:
            out.metadata.update(self._metadata(s, {"response_mode": "augmented"}))

        meta = self._metadata(s, {"response_mode": "augmented"})
        if sync:
            out = Response(None, s.hits, meta, response_gen=iter_sync(gen()), on_done=done)
        else:
            out = Response(None, s.hits, meta, async_response_gen=gen(), on_done=done)
        return out

    def __repr__(self) -> str:
        parts = [f"retrievers={[r.label() for r in self.retrievers]}"]
        for name in (
            "query_transformers",
            "query_expander",
            "joiner",
            "postprocessors",
            "reranker",
            "augmenter",
            "synthesizer",
        ):
            v = getattr(self, name)
            if v:
                parts.append(f"{name}={v!r}")
        return f"RAGPipeline({', '.join(parts)})"


# from_document's keyword arguments, by receiver
_PIPELINE_KEYS = set(inspect.signature(RAGPipeline).parameters) - {
    "retrievers",
    "synthesizer",
    "llm",
}
_SHARED_KEYS = {"max_concurrency", "streaming"}
_RETRIEVER_KEYS = (
    set(inspect.signature(Retriever).parameters)
    - {"doc", "group_name", "similarity", "topk", "params", "args"}
) | {"method", "k1", "b", "delta", "M", "ef_construction", "ef"}
