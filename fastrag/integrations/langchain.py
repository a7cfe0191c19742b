"""fastrag as a LangChain retriever (the ``[langchain]`` extra: ``langchain-core``).

``FastragRetriever(retriever=fr.Retriever(doc, "chunk", "bm25", topk=5))`` is a LangChain
``BaseRetriever`` (a Runnable): ``invoke``, ``ainvoke``, LCEL chains
(``retriever | format_docs | prompt | llm``). ``batch`` and ``abatch`` of N queries -- also a
chain's ``batch``, which hands each step the whole list -- are **one** fastrag batch call, with
the usual retriever callbacks (one run per query, for tracing). Hits become ``Document``s:
``page_content`` is the node's text, ``id`` its node id, ``metadata`` the node's complete
metadata plus ``score``, ``node_id`` and ``doc_id`` (these three replace user fields of the same
name) and, for nodes read from a file, ``source``: the file's absolute path, as LangChain's
loaders set it (a ``source`` of the node's own is kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastrag.errors import missing_extra
from fastrag.integrations._core import BatchRetrieval

try:
    from langchain_core.callbacks import (
        AsyncCallbackManager,
        AsyncCallbackManagerForRetrieverRun,
        CallbackManager,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableConfig
    from langchain_core.runnables.config import get_config_list
    from pydantic import PrivateAttr
except ImportError:  # pragma: no cover - exercised without the extra
    raise missing_extra("langchain-core", "langchain", "fastrag.integrations.langchain") from None

__all__ = ["FastragRetriever", "to_documents"]


def to_documents(hits: Sequence[Any]) -> list[Document]:
    """fastrag hits (``NodeWithScore``) as LangChain ``Document``s."""
    out = []
    for hit in hits:
        node = hit.node
        meta = {**node.metadata, "score": hit.score, "node_id": node.id, "doc_id": node.doc_id}
        path = meta.get("abs_path") or meta.get("file_path")
        if "source" not in meta and isinstance(path, str) and path:
            meta["source"] = path
        out.append(Document(page_content=node.text, metadata=meta, id=node.id))
    return out


class FastragRetriever(BaseRetriever):
    """A fastrag ``Retriever`` or ``RAGPipeline`` as a LangChain retriever.

    Fields: ``retriever`` (a :class:`fastrag.Retriever` or :class:`fastrag.RAGPipeline`),
    ``topk`` (hits per query; default the retriever's own, a pipeline's lists are cut),
    ``filter`` (a metadata filter for every query: Spring AI syntax, a dict, ...). ``calls``
    counts the fastrag batch calls made so far.
    """

    retriever: Any
    topk: int | None = None
    filter: Any = None
    _fastrag: BatchRetrieval = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        # checked before pydantic, so a bad value is fastrag's ConfigError, not a ValidationError
        source = BatchRetrieval(
            data.get("retriever"),
            topk=data.get("topk"),
            filter=data.get("filter"),
            who="FastragRetriever",
        )
        super().__init__(**data)
        self._fastrag = source

    @property
    def calls(self) -> int:
        return self._fastrag.calls

    # -- one query -------------------------------------------------------------------------------
    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return to_documents(self._fastrag.batch([query])[0])

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        # concurrent ainvoke calls (a RunnableParallel, an asyncio.gather) share one batch
        return to_documents(await self._fastrag.coalesce(query))

    # -- many queries: one fastrag call ----------------------------------------------------------
    def batch(
        self,
        inputs: list[str],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """The documents of every query in ``inputs`` from one fastrag batch call. A failing
        call fails every query (``return_exceptions=True``: each gets the exception)."""
        if not inputs:
            return []
        configs = get_config_list(config, len(inputs))
        runs = [
            self._callbacks(CallbackManager, c, kwargs).on_retriever_start(
                None, q, name=c.get("run_name") or self.get_name(), run_id=c.pop("run_id", None)
            )
            for q, c in zip(inputs, configs, strict=True)
        ]
        try:
            results = [to_documents(h) for h in self._fastrag.batch(inputs)]
        except Exception as exc:
            for run in runs:
                run.on_retriever_error(exc)
            if return_exceptions:
                return [exc] * len(inputs)
            raise
        for run, docs in zip(runs, results, strict=True):
            run.on_retriever_end(docs)
        return results

    async def abatch(
        self,
        inputs: list[str],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Async :meth:`batch`: one fastrag batch call (a Retriever runs in a worker
        thread)."""
        if not inputs:
            return []
        configs = get_config_list(config, len(inputs))
        runs = [
            await self._callbacks(AsyncCallbackManager, c, kwargs).on_retriever_start(
                None, q, name=c.get("run_name") or self.get_name(), run_id=c.pop("run_id", None)
            )
            for q, c in zip(inputs, configs, strict=True)
        ]
        try:
            results = [to_documents(h) for h in await self._fastrag.abatch(inputs)]
        except Exception as exc:
            for run in runs:
                await run.on_retriever_error(exc)
            if return_exceptions:
                return [exc] * len(inputs)
            raise
        for run, docs in zip(runs, results, strict=True):
            await run.on_retriever_end(docs)
        return results

    def _callbacks(self, manager: type, config: RunnableConfig, kwargs: dict[str, Any]) -> Any:
        """The callback manager of one query's run, configured as ``invoke`` configures it."""
        return manager.configure(
            config.get("callbacks"),
            None,
            verbose=kwargs.get("verbose", False),
            inheritable_tags=config.get("tags"),
            local_tags=self.tags,
            inheritable_metadata={**(config.get("metadata") or {}), **self._get_ls_params()},
            local_metadata=self.metadata,
        )
