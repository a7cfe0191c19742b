"""What every framework adapter calls: a fastrag ``Retriever`` or ``RAGPipeline`` behind one
batch call, plus a micro-batcher that turns concurrent single-query calls into one batch.

The adapters only convert: query text in, :class:`~fastrag.NodeWithScore` out, then into the
framework's own node or document type. Retrieval, filters, top-k and batching are fastrag's
(``Retriever.batch``, ``RAGPipeline.retrieve_batch``, :class:`~fastrag.serve.batching.
MicroBatcher`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from fastrag._async import to_thread
from fastrag._checks import check_int
from fastrag.errors import ConfigError
from fastrag.query.base import Query
from fastrag.rag import RAGPipeline
from fastrag.retrieval.retriever import Retriever
from fastrag.schema import NodeWithScore
from fastrag.serve.batching import MicroBatcher

__all__ = ["BatchRetrieval"]

# concurrent calls coalesced into one batch call at most (a larger burst becomes several)
MAX_COALESCED = 1024


class BatchRetrieval:
    """``target`` (a :class:`~fastrag.Retriever` or a :class:`~fastrag.RAGPipeline`) as one
    batch call: ``batch(queries)`` / ``abatch(queries)`` give one hit list per query, best
    first; ``coalesce(query)`` awaits one query's hits from a batch shared with the other
    calls made on the same event loop in the same tick (``asyncio.gather`` of many
    ``aretrieve`` calls: one fastrag call).

    ``topk`` overrides the retriever's (a pipeline's final lists are cut to it); ``filter``
    (Spring AI syntax, a dict of equalities, ...) applies to every query. ``calls`` counts the
    batch calls made to ``target``.
    """

    def __init__(
        self,
        target: Any,
        *,
        topk: int | None = None,
        filter: Any = None,
        who: str = "FastragRetriever",
    ) -> None:
        if isinstance(target, BatchRetrieval):
            target = target.target
        if not isinstance(target, (Retriever, RAGPipeline)):
            raise ConfigError(
                f"{who} needs a fastrag.Retriever or fastrag.RAGPipeline, got "
                f"{type(target).__name__}; build one with fr.Retriever(doc, group_name, "
                "'bm25', topk=5)"
            )
        self.target = target
        self.is_pipeline = isinstance(target, RAGPipeline)
        self.topk = check_int(
            "topk", topk, min=1, none="the retriever's own", note="the number of hits per query"
        )
        self.filter = filter
        self.calls = 0
        self._batcher: Any = None

    # -- one batch call ------------------------------------------------------------------------
    def batch(self, queries: Sequence[str]) -> list[list[NodeWithScore]]:
        """One hit list per query, from one call to the target."""
        queries = list(queries)
        if not queries:
            return []
        self.calls += 1
        if not self.is_pipeline:
            return self.target.batch(queries, filter=self.filter, topk=self.topk)
        return self._cut(self.target.retrieve_batch(self._pipeline_queries(queries)))

    async def abatch(self, queries: Sequence[str]) -> list[list[NodeWithScore]]:
        """:meth:`batch` without blocking the loop: a Retriever runs in a worker thread, a
        pipeline is awaited on this loop."""
        queries = list(queries)
        if not queries:
            return []
        if not self.is_pipeline:
            return await to_thread(self.batch, queries)
        self.calls += 1
        return self._cut(await self.target.aretrieve_batch(self._pipeline_queries(queries)))

    # -- many concurrent calls, one batch ------------------------------------------------------
    async def coalesce(self, query: str) -> list[NodeWithScore]:
        """One query's hits; the queries of every call awaiting this on the same loop in the
        same tick go to the target as one :meth:`batch` call (in a worker thread)."""
        if self._batcher is None:
            # window 0: wait one loop tick for company, so a gather's calls all join
            self._batcher = MicroBatcher(
                lambda _key, qs: self.batch(qs),
                executor=None,
                window_s=0.0,
                max_batch=MAX_COALESCED,
            )
        # one queue per event loop: a waiter is only ever resolved on its own loop
        return (await self._batcher.submit(asyncio.get_running_loop(), [query]))[0]

    # -- helpers -------------------------------------------------------------------------------
    def _pipeline_queries(self, queries: list[str]) -> list[Any]:
        if self.filter is None:
            return queries
        return [Query(q, context={"filter": self.filter}) for q in queries]

    def _cut(self, lists: list[list[NodeWithScore]]) -> list[list[NodeWithScore]]:
        return lists if self.topk is None else [hits[: self.topk] for hits in lists]
