"""Run async code from sync code.

fastrag writes each I/O path once, async; the sync methods call :func:`run_sync`. Coroutines
run on one shared background event loop (a daemon thread, started on first use), so sync
callers in any thread -- also a thread whose own loop is already running, such as a Jupyter
kernel -- get a loop to run on, and clients bound to a loop (httpx connection pools) are
reused across sync calls. contextvars of the caller are visible to the coroutine.

fastrag never runs user code (retrievers, rerank models, transforms, callables) on a loop's
thread: sync callables go to worker threads (:func:`call_sync`, :func:`to_thread`, and any
``asyncio.to_thread`` on fastrag's loops) of :func:`~fastrag._workers.worker_pool`, where a
worker blocked in a sync wrapper gets a stand-in, so callables that call back into fastrag
never wait on each other for a free worker, from any number of threads. A sync wrapper reached from
such a worker runs its coroutine on the loop that started the worker (a context variable
names it), so nested pipelines share one free loop. A sync wrapper called *on* a loop's thread
(user async code calling a sync method) gets a fresh loop in a worker thread; workers it
starts use that loop, so nothing waits on the blocked one.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextvars
import functools
import inspect
import os
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from fastrag._workers import worker_pool
from fastrag.errors import ConfigError

T = TypeVar("T")

__all__ = ["call_sync", "iter_sync", "run_sync", "shared_loop", "to_thread"]


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(worker_pool())
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this loop and block until it is done (cancels it if interrupted)."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            with worker_pool().blocking():  # on a worker: another takes its place meanwhile
                return fut.result()
        except concurrent.futures.CancelledError:
            raise asyncio.CancelledError() from None
        except BaseException:
            # KeyboardInterrupt (or another interruption of the waiting thread): cancel the
            # task so its in-flight requests close, then re-raise.
            fut.cancel()
            raise

    def stop(self) -> None:
        """Finalize async generators (closing clients registered on this loop) and stop."""
        if self.loop.is_closed() or not self.thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self.loop.shutdown_asyncgens(), self.loop).result(
                timeout=5
            )
        except (concurrent.futures.TimeoutError, RuntimeError):  # pragma: no cover
            return  # best effort at shutdown: the loop is stuck or already gone
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=5)


_shared: _LoopThread | None = None
_shared_pid: int | None = None
_shared_lock = threading.Lock()


def shared_loop() -> asyncio.AbstractEventLoop:
    """The shared background loop that sync wrappers run on (started on first use)."""
    return _shared_runner().loop


def _shared_runner() -> _LoopThread:
    global _shared, _shared_pid
    with _shared_lock:
        # A forked child inherits the object but not the thread: start a new one there.
        if _shared is None or _shared_pid != os.getpid() or not _shared.thread.is_alive():
            _shared = _LoopThread("fastrag-async")
            _shared_pid = os.getpid()
        return _shared


@atexit.register
def _stop_shared() -> None:  # pragma: no cover - runs at interpreter exit
    if _shared is not None and _shared_pid == os.getpid():
        _shared.stop()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# The runner whose loop runs the coroutine this context belongs to (set by run_sync; worker
# threads started with asyncio.to_thread / call_sync inherit it).
_RUNNER: contextvars.ContextVar[_LoopThread | None] = contextvars.ContextVar(
    "fastrag_runner", default=None
)


def _pick_runner() -> tuple[_LoopThread, bool]:
    """(runner, is_temporary): the loop that started this worker thread if any, else the
    shared loop; a temporary one when this thread is running a loop (blocking it)."""
    running = _running_loop()
    if running is not None:
        mine = _RUNNER.get()
        if running is shared_loop() or (mine is not None and running is mine.loop):
            return _LoopThread("fastrag-async-nested"), True
        return _shared_runner(), False  # another loop (Jupyter): blocks it, as asked
    mine = _RUNNER.get()
    if mine is not None and mine.thread.is_alive() and not mine.loop.is_closed():
        return mine, False
    return _shared_runner(), False


async def _on(runner: _LoopThread, coro: Coroutine[Any, Any, T]) -> T:
    _RUNNER.set(runner)  # in the task's own context copy
    return await coro


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from sync code and return its result.

    Works with or without an event loop running in the calling thread (Jupyter): the
    coroutine runs on fastrag's background loop thread, or on a fresh worker thread with its
    own loop when called from that background loop. Exceptions propagate unchanged;
    KeyboardInterrupt cancels the coroutine.
    """
    if not inspect.iscoroutine(coro):
        raise ConfigError(
            f"run_sync expects a coroutine object (call the async function first), "
            f"got {type(coro).__name__}"
        )
    runner, temporary = _pick_runner()
    try:
        return runner.run(_on(runner, coro))
    finally:
        if temporary:
            runner.stop()


async def call_sync(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` off the event loop: a coroutine function is awaited here, anything else
    runs in a worker thread (with this context), and an awaitable it returns is awaited."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        inspect.getattr_static(type(fn), "__call__", None)
    ):
        out = fn(*args, **kwargs)
    else:
        out = await to_thread(fn, *args, **kwargs)
    if inspect.isawaitable(out):
        out = await out
    return out


async def to_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a worker thread (with this context), as ``asyncio.to_thread``
    but on fastrag's worker pool on any loop. A loop run by a worker (``asyncio.run`` inside a
    callable) counts that worker as blocked while it waits."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    pool = worker_pool()
    with pool.blocking():
        return await loop.run_in_executor(pool, call)


async def _anext(agen: AsyncIterator[T], done: object) -> T | object:
    try:
        return await agen.__anext__()
    except StopAsyncIteration:
        return done


async def _aclose(agen: AsyncIterator[Any]) -> None:
    aclose = getattr(agen, "aclose", None)
    if aclose is not None:
        await aclose()


def iter_sync(agen: AsyncIterator[T]) -> Iterator[T]:
    """Iterate an async iterator from sync code; every step runs on the same loop.

    Breaking out of the loop (or garbage-collecting the iterator) closes ``agen`` on its loop,
    so an HTTP stream behind it is released.
    """
    if not hasattr(agen, "__anext__"):
        raise ConfigError(f"iter_sync expects an async iterator, got {type(agen).__name__}")
    runner, temporary = _pick_runner()
    done = object()
    finished = False
    try:
        while True:
            item = runner.run(_on(runner, _anext(agen, done)))
            if item is done:
                finished = True
                return
            yield item  # type: ignore[misc]
    finally:
        try:
            if not finished:
                runner.run(_on(runner, _aclose(agen)))
        finally:
            if temporary:
                runner.stop()
