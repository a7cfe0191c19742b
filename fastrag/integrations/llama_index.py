"""fastrag as a LlamaIndex retriever (the ``[llama-index]`` extra: ``llama-index-core``).

``FastragRetriever(fr.Retriever(doc, "chunk", "bm25", topk=5))`` is a LlamaIndex
``BaseRetriever``: use it wherever LlamaIndex takes one (``RetrieverQueryEngine``,
``QueryFusionRetriever``, ``RouterRetriever``, agents' tools). Hits become ``NodeWithScore``
over a ``TextNode`` with fastrag's node id, text, complete metadata and score, and its
document (``ref_doc_id``) and parent as relationships. ``file_path`` is the file's absolute
path, as LlamaIndex's ``SimpleDirectoryReader`` sets it (fastrag's ``abs_path``; the path
relative to the ingested folder, fastrag's ``file_path``, is dropped with it).

Batches stay batches: ``retrieve_batch(queries)`` is one fastrag batch call, and concurrent
``aretrieve`` calls made in the same event-loop tick -- ``QueryFusionRetriever`` gathers one
per generated query -- are coalesced into one call too. Nothing here retrieves by itself: the
work is ``Retriever.batch`` (or ``RAGPipeline.retrieve_batch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastrag.errors import missing_extra
from fastrag.integrations._core import BatchRetrieval

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeRelationship, QueryBundle, RelatedNodeInfo, TextNode
    from llama_index.core.schema import NodeWithScore as LlamaNodeWithScore
except ImportError:  # pragma: no cover - exercised without the extra
    raise missing_extra(
        "llama-index-core", "llama-index", "fastrag.integrations.llama_index"
    ) from None

__all__ = ["FastragRetriever", "to_llama_nodes"]


def to_llama_nodes(hits: Sequence[Any]) -> list[LlamaNodeWithScore]:
    """fastrag hits (``NodeWithScore``) as LlamaIndex ``NodeWithScore`` over ``TextNode``s."""
    out = []
    for hit in hits:
        node = hit.node
        rel: dict[NodeRelationship, RelatedNodeInfo] = {}
        doc_id, parent_id = node.doc_id, node.parent_id
        if doc_id is not None and doc_id != node.id:
            rel[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc_id)
        if parent_id is not None and parent_id != doc_id:
            rel[NodeRelationship.PARENT] = RelatedNodeInfo(node_id=parent_id)
        meta = dict(node.metadata)
        if isinstance(meta.get("abs_path"), str):
            meta["file_path"] = meta.pop("abs_path")
        text_node = TextNode(id_=node.id, text=node.text, metadata=meta, relationships=rel)
        out.append(LlamaNodeWithScore(node=text_node, score=hit.score))
    return out


def _text(query: Any) -> str:
    return query.query_str if isinstance(query, QueryBundle) else query


class FastragRetriever(BaseRetriever):
    """A fastrag ``Retriever`` or ``RAGPipeline`` as a LlamaIndex retriever.

    Args:
        retriever_or_pipeline: a :class:`fastrag.Retriever` or :class:`fastrag.RAGPipeline`.
        topk: hits per query (default: the retriever's ``topk``; a pipeline's lists are cut).
        filter: a metadata filter for every query (Spring AI syntax, a dict, ...).
        callback_manager, verbose: as for any LlamaIndex retriever.

    ``calls`` counts the fastrag batch calls made so far.
    """

    def __init__(
        self,
        retriever_or_pipeline: Any,
        topk: int | None = None,
        *,
        filter: Any = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self._fastrag = BatchRetrieval(
            retriever_or_pipeline, topk=topk, filter=filter, who="FastragRetriever"
        )
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def calls(self) -> int:
        return self._fastrag.calls

    def _retrieve(self, query_bundle: QueryBundle) -> list[LlamaNodeWithScore]:
        return to_llama_nodes(self._fastrag.batch([query_bundle.query_str])[0])

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[LlamaNodeWithScore]:
        return to_llama_nodes(await self._fastrag.coalesce(query_bundle.query_str))

    def retrieve_batch(
        self, queries: Sequence[str | QueryBundle]
    ) -> list[list[LlamaNodeWithScore]]:
        """The hits of many queries from one fastrag batch call (no per-query callback
        events; use ``retrieve`` for those)."""
        return [to_llama_nodes(h) for h in self._fastrag.batch([_text(q) for q in queries])]

    async def aretrieve_batch(
        self, queries: Sequence[str | QueryBundle]
    ) -> list[list[LlamaNodeWithScore]]:
        """Async :meth:`retrieve_batch` (a Retriever runs in a worker thread)."""
        hits = await self._fastrag.abatch([_text(q) for q in queries])
        return [to_llama_nodes(h) for h in hits]
