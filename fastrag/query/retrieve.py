"""Retrievers as the query layer sees them: a batch of query texts in, one hit list per text.

A fastrag :class:`~fastrag.Retriever` (or anything with a ``batch(texts)`` method) is called
once per batch, in a worker thread so the event loop stays free. A pipeline (a
:class:`~fastrag.RAGPipeline`, its ``retrieve`` / ``retrieve_batch`` / ``aretrieve`` /
``aretrieve_batch``, or anything with ``aretrieve_batch``) is awaited once per batch on the
same loop. A plain callable ``str -> hits`` is called once per text, in a worker thread (an
async one is awaited). Hits may be ``NodeWithScore``, ``DocNode`` or ``str``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastrag._async import call_sync, to_thread
from fastrag.errors import ConfigError
from fastrag.query.base import Query
from fastrag.retrieval.retriever import Retriever
from fastrag.schema import DocNode, NodeWithScore

__all__ = ["RetrieverAdapter", "as_retriever"]


def _hits(value: Any, who: str) -> list[NodeWithScore]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(
            f"{who} returned {type(value).__name__}; a retriever must return a "
            "list of NodeWithScore / DocNode / str"
        )
    out = []
    for i, h in enumerate(value):
        if isinstance(h, NodeWithScore):
            out.append(h)
        elif isinstance(h, DocNode):
            out.append(NodeWithScore(h, None))
        elif isinstance(h, str):
            out.append(NodeWithScore(DocNode(h), None))
        else:
            raise ConfigError(
                f"{who} returned hit {i} of type {type(h).__name__}; expected "
                "NodeWithScore, DocNode or str"
            )
    return out


class RetrieverAdapter:
    """One retriever behind ``abatch(texts, filter) -> list[list[NodeWithScore]]``;
    ``calls`` counts the calls made to the underlying retriever."""

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name
        self.calls = 0
        self.is_fastrag = isinstance(inner, Retriever)
        self._abatch = _pipeline_batch(inner)
        batch = getattr(inner, "batch", None)
        self._batch = (
            batch if (self.is_fastrag or callable(batch)) and self._abatch is None else None
        )
        if self._batch is None and self._abatch is None and not callable(inner):
            raise ConfigError(
                f"{name} must be a fastrag.Retriever or a callable query str -> list of nodes, "
                f"got {type(inner).__name__}"
            )

    def label(self) -> str:
        if self.is_fastrag:
            r = self.inner
            return f"{r.group_name}/{r.similarity}"
        return getattr(self.inner, "__name__", type(self.inner).__name__)

    async def abatch(self, texts: list[str], flt: Any = None) -> list[list[NodeWithScore]]:
        if not texts:
            return []
        if self._abatch is not None:  # a pipeline: one batch, awaited on this loop
            self.calls += 1
            if flt is not None:
                out = await self._abatch([Query(t, context={"filter": flt}) for t in texts])
            else:
                out = await self._abatch(list(texts))
            return [_hits(h, self.name) for h in out]
        if self._batch is not None:
            self.calls += 1
            if flt is not None:
                out = await to_thread(self._batch, texts, filter=flt)
            else:
                out = await to_thread(self._batch, texts)
            if not isinstance(out, Sequence) or len(out) != len(texts):
                raise ConfigError(
                    f"{self.name}.batch returned {len(out)} lists for {len(texts)} queries"
                )
            return [_hits(h, self.name) for h in out]
        if flt is not None:
            raise ConfigError(
                f"{self.name} is a plain callable and cannot take the query's filter "
                f"{flt!r}; use a fastrag.Retriever or drop context['filter']"
            )
        out = []
        for t in texts:
            self.calls += 1
            out.append(_hits(await call_sync(self.inner, t), self.name))
        return out


_PIPELINE_METHODS = ("retrieve", "retrieve_batch", "aretrieve", "aretrieve_batch")


def _pipeline_batch(obj: Any) -> Any:
    """The async batch retrieval of a pipeline given as itself or as one of its retrieval
    methods (so it runs as one batch on the caller's loop), else None."""
    owner = getattr(obj, "__self__", None)
    if owner is not None and getattr(obj, "__name__", None) in _PIPELINE_METHODS:
        obj = owner
    abatch = getattr(obj, "aretrieve_batch", None)
    return abatch if callable(abatch) and hasattr(obj, "retrieve_batch") else None


def as_retriever(obj: Any, name: str) -> RetrieverAdapter:
    """Wrap ``obj`` (checked; errors name the argument as ``name``)."""
    if isinstance(obj, RetrieverAdapter):
        return obj
    return RetrieverAdapter(obj, name)
