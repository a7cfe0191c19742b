"""The worker threads that run sync callables for fastrag's event loops.

A sync callable fastrag runs off a loop (a retriever, an LLM function, a transform) may call
fastrag's sync API again, which waits for work that needs a worker of its own. With a fixed
pool (asyncio's default: ``min(32, cpus + 4)`` threads) enough such callables at once hold
every worker while waiting for one, and wait forever. :class:`WorkerPool` runs ``size``
callables at once, and a worker that blocks waiting for fastrag's own work
(:meth:`WorkerPool.blocking`) does not count: the pool starts another thread in its place,
and the surplus exits once idle. So threads never exceed ``size`` plus the workers blocked in
nested calls, and no wait on a worker is ever made from a worker that holds the last one.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["WorkerPool", "worker_pool"]


class WorkerPool(concurrent.futures.ThreadPoolExecutor):
    """``size`` worker threads, plus one for each worker blocked in :meth:`blocking`.

    A ``ThreadPoolExecutor`` because asyncio accepts nothing else as a loop's default
    executor; only :meth:`submit` and :meth:`shutdown` (which does nothing: the pool is
    process-wide and its threads are daemons) are used. ``peak`` is the most threads alive at
    once and ``started`` the number of threads ever started.
    """

    def __init__(self, size: int, name: str = "fastrag-worker") -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be an int >= 1, got {size!r}")
        super().__init__(max_workers=size, thread_name_prefix=name)
        self.size = size
        self.name = name
        self._cv = threading.Condition()
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._alive = 0  # threads alive
        self._idle = 0  # threads waiting for work
        self._blocked = 0  # workers inside blocking()
        self._mine = threading.local()  # .depth: [this worker's nesting of blocking()]
        self._count = itertools.count(1)
        self.peak = 0
        self.started = 0

    # -- executor --------------------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on a worker; returns its ``concurrent.futures.Future``."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._cv:
            self._queue.append((fut, fn, args, kwargs))
            self._wake()
        return fut

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing: the pool lives as long as the process (a loop closing calls this)."""

    @property
    def threads(self) -> int:
        """Worker threads alive now."""
        return self._alive

    def is_worker(self) -> bool:
        """Whether the calling thread is one of this pool's workers."""
        return hasattr(self._mine, "depth")

    @contextlib.contextmanager
    def blocking(self) -> Iterator[None]:
        """Mark the calling worker as waiting on fastrag's own work while inside (re-entrant;
        nothing from a thread that is not a worker): another thread takes its place."""
        # this worker's [nesting], held here: a coroutine closed later on another thread
        # (garbage collection) still counts down the right worker
        depth = getattr(self._mine, "depth", None)
        if depth is None:
            yield
            return
        depth[0] += 1
        if depth[0] == 1:
            with self._cv:
                self._blocked += 1
                self._wake()
        try:
            yield
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                with self._cv:
                    self._blocked -= 1
                    if self._idle and self._alive - self._blocked > self.size:
                        self._cv.notify()  # an idle stand-in is now surplus: let it retire

    # -- workers ---------------------------------------------------------------------------------
    def _wake(self) -> None:
        """Under the lock: hand queued work to idle workers, start one if all are busy."""
        if not self._queue:
            return
        if self._idle:
            self._cv.notify(len(self._queue))
        if self._idle < len(self._queue) and self._alive - self._blocked < self.size:
            self._alive += 1
            self.started += 1
            self.peak = max(self.peak, self._alive)
            name = f"{self.name}_{next(self._count)}"
            threading.Thread(target=self._main, name=name, daemon=True).start()

    def _main(self) -> None:
        self._mine.depth = [0]
        with self._cv:
            while True:
                if not self._queue:
                    if self._alive - self._blocked > self.size:
                        break  # a stand-in whose blocked worker came back: retire
                    self._idle += 1
                    self._cv.wait()
                    self._idle -= 1
                    continue
                fut, fn, args, kwargs = self._queue.popleft()
                if not fut.set_running_or_notify_cancel():
                    continue
                self._cv.release()
                try:
                    _run(fut, fn, args, kwargs)
                finally:
                    del fut, fn, args, kwargs  # drop references before idling
                    self._cv.acquire()
            self._alive -= 1


def _run(fut: Any, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
        fut.set_exception(exc)
    else:
        fut.set_result(result)


_POOL: WorkerPool | None = None
_POOL_PID: int | None = None
_POOL_LOCK = threading.Lock()


def worker_pool() -> WorkerPool:
    """The process's pool (asyncio's default size, ``min(32, cpus + 4)``), made on first use;
    a forked child makes its own."""
    global _POOL, _POOL_PID
    with _POOL_LOCK:
        if _POOL is None or _POOL_PID != os.getpid():
            _POOL = WorkerPool(min(32, (os.cpu_count() or 1) + 4))
            _POOL_PID = os.getpid()
        return _POOL
