"""The micro-batcher of ``fastrag serve`` on its own: concurrent submissions become one call,
results go back to each waiter in order, ``max_batch`` splits, an error fails only its call's
waiters, and a waiter that went away is left out of the call."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from fastrag.serve.batching import MicroBatcher


class Recorder:
    def __init__(self, fail_on: str | None = None, delay: float = 0.0) -> None:
        self.calls: list[tuple[object, list[str]]] = []
        self.fail_on = fail_on
        self.delay = delay
        self.threads: set[str] = set()

    def __call__(self, key, queries):
        self.calls.append((key, list(queries)))
        self.threads.add(threading.current_thread().name)
        if self.delay:
            threading.Event().wait(self.delay)
        if self.fail_on in queries:
            raise ValueError(f"bad query {self.fail_on!r}")
        return [f"{key}:{q}" for q in queries]


def _run(coro):
    return asyncio.run(coro)


@pytest.fixture()
def pool():
    with ThreadPoolExecutor(2, thread_name_prefix="batch-test") as ex:
        yield ex


def test_concurrent_submissions_become_one_call_with_results_in_order(pool):
    rec = Recorder()
    mb = MicroBatcher(rec, executor=pool, window_s=0.01)

    async def go():
        return await asyncio.gather(*(mb.submit("k", [f"q{i}", f"r{i}"]) for i in range(10)))

    out = _run(go())
    assert out == [[f"k:q{i}", f"k:r{i}"] for i in range(10)]
    assert len(rec.calls) == 1 and len(rec.calls[0][1]) == 20
    assert all(name.startswith("batch-test") for name in rec.threads)  # off the event loop


def test_keys_are_batched_apart_and_max_batch_splits(pool):
    rec = Recorder()
    mb = MicroBatcher(rec, executor=pool, window_s=0.01, max_batch=4)

    async def go():
        a = [mb.submit("a", [f"a{i}"]) for i in range(10)]
        b = [mb.submit("b", [f"b{i}", f"c{i}"]) for i in range(3)]
        big = mb.submit("a", [f"x{i}" for i in range(9)])  # larger than max_batch: alone
        return await asyncio.gather(*a, *b, big)

    out = _run(go())
    assert out[:10] == [[f"a:a{i}"] for i in range(10)]
    assert out[10:13] == [[f"b:b{i}", f"b:c{i}"] for i in range(3)]
    assert out[13] == [f"a:x{i}" for i in range(9)]
    sizes = {k: [len(q) for kk, q in rec.calls if kk == k] for k in ("a", "b")}
    assert sizes["a"] == [4, 4, 2, 9] and sizes["b"] == [4, 2]


def test_an_error_fails_only_the_waiters_of_its_call(pool):
    rec = Recorder(fail_on="bad", delay=0.05)
    mb = MicroBatcher(rec, executor=pool, window_s=0.01)

    async def go():
        first = asyncio.gather(
            mb.submit("k", ["ok1"]), mb.submit("k", ["bad"]), return_exceptions=True
        )
        await asyncio.sleep(0.03)  # the first call is running: these form the next one
        later = await mb.submit("k", ["ok2"])
        return await first, later

    (r1, r2), later = _run(go())
    assert isinstance(r1, ValueError) and isinstance(r2, ValueError)
    assert later == ["k:ok2"] and len(rec.calls) == 2


def test_a_cancelled_waiter_is_left_out(pool):
    rec = Recorder()
    mb = MicroBatcher(rec, executor=pool, window_s=0.05)

    async def go():
        gone = asyncio.ensure_future(mb.submit("k", ["gone"]))
        kept = asyncio.ensure_future(mb.submit("k", ["kept"]))
        await asyncio.sleep(0.01)
        gone.cancel()
        return await kept

    assert _run(go()) == ["k:kept"]
    assert rec.calls == [("k", ["kept"])]
