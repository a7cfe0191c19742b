"""Micro-batching: retrieval requests that arrive together become one ``Retriever.batch`` call.

Each request awaits :meth:`MicroBatcher.submit` with a *key* (retriever, filter, topk: the
arguments one batch call can share) and its queries. The first request of a key starts a drain
task that waits ``window_s`` (a few milliseconds) for company, then hands every waiting query
of that key, up to ``max_batch``, to one call run in a worker thread (the event loop stays free).
While a call runs, new requests queue; when it returns, they go out as the next call at once, so
under load the batches grow by themselves (a batch call is cheap per query: BM25 scoring runs
over the whole batch in one kernel, parallel over queries). Results are sliced back to each
waiter in order; an exception fails just the waiters of that call. A waiter that went away
(client disconnected) before its call started is dropped from it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from fastrag.serve.config import ServeConfig

__all__ = ["MicroBatcher"]


@dataclass
class _Waiter:
    queries: Sequence[str]
    future: asyncio.Future


class MicroBatcher:
    """Coalesce concurrent ``submit(key, queries)`` calls into ``run(key, all_queries)``.

    ``run(key, queries) -> list`` (one result per query, in order) runs in ``executor``;
    ``window_s`` is how long the first request of an idle key waits for others; ``max_batch``
    caps the queries per call (a single request larger than that goes alone, unsplit).
    """

    def __init__(
        self,
        run: Callable[[Any, list[str]], list],
        *,
        executor: Executor,
        window_s: float = ServeConfig.batch_window_ms / 1000.0,
        max_batch: int = ServeConfig.max_batch,
    ) -> None:
        self._run = run
        self._executor = executor
        self.window_s = float(window_s)
        self.max_batch = int(max_batch)
        self._queues: dict[Hashable, list[_Waiter]] = {}
        self._drains: dict[Hashable, asyncio.Task] = {}

    async def submit(self, key: Hashable, queries: Sequence[str]) -> list:
        """The results of ``queries`` (one per query), computed in a shared batch call."""
        if not queries:
            return []
        loop = asyncio.get_running_loop()
        waiter = _Waiter(list(queries), loop.create_future())
        self._queues.setdefault(key, []).append(waiter)
        if key not in self._drains:
            self._drains[key] = loop.create_task(self._drain(key))
        return await waiter.future

    def _take(self, key: Hashable) -> list[_Waiter]:
        """The waiters of the next call: in arrival order, up to ``max_batch`` queries."""
        queue = self._queues.get(key, [])
        queue[:] = [w for w in queue if not w.future.done()]  # cancelled: client went away
        taken: list[_Waiter] = []
        n = 0
        while queue and (not taken or n + len(queue[0].queries) <= self.max_batch):
            w = queue.pop(0)
            taken.append(w)
            n += len(w.queries)
        return taken

    async def _drain(self, key: Hashable) -> None:
        loop = asyncio.get_running_loop()
        try:
            queue = self._queues.get(key, [])
            if sum(len(w.queries) for w in queue) < self.max_batch:
                await asyncio.sleep(self.window_s)
            while True:
                taken = self._take(key)
                if not taken:
                    return
                queries = [q for w in taken for q in w.queries]
                try:
                    results = await loop.run_in_executor(self._executor, self._run, key, queries)
                except Exception as exc:  # handed to every waiter of this call
                    for w in taken:
                        if not w.future.done():
                            w.future.set_exception(exc)
                    continue
                except BaseException:  # the drain was cancelled (shutdown): so are they
                    for w in taken:
                        w.future.cancel()
                    raise
                pos = 0
                for w in taken:
                    part = results[pos : pos + len(w.queries)]
                    pos += len(w.queries)
                    if not w.future.done():
                        w.future.set_result(part)
        finally:
            del self._drains[key]
            rest = self._queues.pop(key, [])
            for w in rest:  # only when the drain itself was cancelled (shutdown)
                if not w.future.done():
                    w.future.cancel()
