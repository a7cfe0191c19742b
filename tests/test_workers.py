"""fastrag's worker pool: at most ``size`` callables run at once, a worker blocked on nested
work gets a stand-in (so nesting never exhausts the pool), the stand-ins retire afterwards,
and results, exceptions and cancellation pass through as with a ThreadPoolExecutor."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest
from hangs import TIMEOUT, within

from fastrag._async import shared_loop
from fastrag._workers import WorkerPool, worker_pool


def test_results_exceptions_and_the_limit():
    pool = WorkerPool(3, name="t-limit")
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    def work(i):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.01)
        with lock:
            state["now"] -= 1
        if i == 5:
            raise KeyError(i)
        return i * i

    futs = [pool.submit(work, i) for i in range(20)]
    done = within(lambda: [f.exception() or f.result() for f in futs])
    assert [d for d in done if not isinstance(d, KeyError)] == [i * i for i in range(20) if i != 5]
    assert isinstance(done[5], KeyError)
    assert state["peak"] <= 3 and pool.peak == 3 and pool.started == 3


def test_a_blocked_worker_gets_a_stand_in_and_stand_ins_retire():
    pool = WorkerPool(2, name="t-nest")

    def outer(i):
        inner = pool.submit(lambda: i + 100)
        with pool.blocking():  # as run_sync does on a worker
            return inner.result(timeout=TIMEOUT)

    futs = [pool.submit(outer, i) for i in range(16)]
    assert within(lambda: [f.result() for f in futs]) == [i + 100 for i in range(16)]
    assert 2 < pool.peak <= 2 + 16
    deadline = time.monotonic() + 10
    while pool.threads > 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.threads == 2  # the stand-ins retired once their blocked workers came back


def test_blocking_is_reentrant_and_a_no_op_off_the_pool():
    pool = WorkerPool(1, name="t-reent")
    with pool.blocking():  # not a worker: nothing counted
        assert not pool.is_worker()

    def nested():
        assert pool.is_worker()
        with pool.blocking(), pool.blocking():
            return pool.submit(lambda: "inner").result(timeout=TIMEOUT)

    assert within(lambda: pool.submit(nested).result()) == "inner"


def test_cancelled_work_never_runs_and_shutdown_keeps_the_pool():
    pool = WorkerPool(1, name="t-cancel")
    gate = threading.Event()
    ran = []
    first = pool.submit(gate.wait)
    second = pool.submit(ran.append, 1)
    assert second.cancel()
    pool.shutdown()  # a closing loop calls this: the pool is process-wide
    gate.set()
    assert within(first.result) is True
    assert within(lambda: pool.submit(lambda: 7).result()) == 7 and ran == []


def test_bad_size():
    with pytest.raises(ValueError, match="size must be an int >= 1, got 0"):
        WorkerPool(0)


def test_fastrag_loops_use_the_pool_for_asyncio_to_thread():
    async def where():
        return await asyncio.to_thread(threading.current_thread)

    t = asyncio.run_coroutine_threadsafe(where(), shared_loop()).result(TIMEOUT)
    assert t.name.startswith(worker_pool().name + "_")
    assert isinstance(worker_pool(), concurrent.futures.ThreadPoolExecutor)
