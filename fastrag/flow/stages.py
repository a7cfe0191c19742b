"""One stage run over a whole batch: each kind of stage its fastest way.

``calls[i] = (args, kwargs)`` is the call the stage would get for item ``i``. A fastrag
:class:`~fastrag.Retriever` answers them in one ``batch`` call (same keyword arguments for
all), a :class:`~fastrag.Reranker` in one ``batch`` call (nodes and query per item), an LLM
(prompted or not) with every request started at once; any other callable is called once per
item, in order, in one worker thread (async callables: all awaited together).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from typing import Any

from fastrag._async import call_sync
from fastrag.llms.base import BaseLLM
from fastrag.llms.prompter import PromptedLLM
from fastrag.retrieval.rerankers import Reranker
from fastrag.retrieval.retriever import Retriever

__all__ = ["Call", "run_stage"]

Call = tuple[tuple, dict]


def _same_kwargs(calls: Sequence[Call]) -> dict | None:
    first = calls[0][1]
    return first if all(kw == first for _, kw in calls) else None


def _retriever_batch(stage: Retriever, calls: Sequence[Call]) -> tuple[list, dict] | None:
    kw = _same_kwargs(calls)
    if kw is None or set(kw) - {"filter", "topk"} or any(len(a) != 1 for a, _ in calls):
        return None
    return [a[0] for a, _ in calls], kw


def _rerank_batch(calls: Sequence[Call]) -> tuple[list, list] | None:
    nodes, queries = [], []
    for args, kw in calls:
        if len(args) == 1 and set(kw) == {"query"}:
            nodes.append(args[0])
            queries.append(kw["query"])
        elif len(args) == 2 and not kw:
            nodes.append(args[0])
            queries.append(args[1])
        else:
            return None
    return nodes, queries


def _is_async(stage: Any) -> bool:
    return inspect.iscoroutinefunction(stage) or inspect.iscoroutinefunction(
        inspect.getattr_static(type(stage), "__call__", None)
    )


async def run_stage(stage: Any, calls: Sequence[Call]) -> list[Any]:
    """``[stage(*args, **kwargs) for args, kwargs in calls]``, batched where the stage can."""
    if not calls:
        return []
    if isinstance(stage, Retriever):
        split = _retriever_batch(stage, calls)
        if split is not None:
            queries, kw = split
            return await asyncio.to_thread(stage.batch, queries, **kw)
    elif isinstance(stage, Reranker):
        split = _rerank_batch(calls)
        if split is not None:
            return await asyncio.to_thread(stage.batch, *split)
    elif isinstance(stage, (PromptedLLM, BaseLLM)):
        stage = stage.stage() if isinstance(stage, BaseLLM) else stage
        return list(await asyncio.gather(*(stage.acall(*a, **kw) for a, kw in calls)))
    if _is_async(stage):
        return list(await asyncio.gather(*(stage(*a, **kw) for a, kw in calls)))
    return await call_sync(lambda: [stage(*a, **kw) for a, kw in calls])
