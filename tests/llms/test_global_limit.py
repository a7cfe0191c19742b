"""One LLM client, one limit: ``OpenAILike(max_concurrency=n)`` keeps at most n requests in
flight across every thread and event loop that uses it; synthesizers default by mode."""

from __future__ import annotations

import asyncio
import threading

import pytest

import fastrag as fr
from fastrag._http import GlobalLimiter


def test_one_client_shared_by_threads_and_loops_stays_under_its_limit(openai_server):
    llm = fr.OpenAILike("m", openai_server.url, max_concurrency=3, max_retries=0)
    openai_server.script(["slow:0.15"] * 24)

    async def many() -> list[str]:
        return await asyncio.gather(*(llm.acomplete(f"q{i}") for i in range(8)))

    out: list = []
    threads = [threading.Thread(target=lambda: out.append(asyncio.run(many()))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(out) == 3 and all(len(x) == 8 for x in out)
    reqs = openai_server.requests
    assert len(reqs) == 24
    # each request sleeps 0.15 s on the server after it starts; the inner part of those
    # windows shows true overlap (the server's own in-flight counter also counts the moment
    # between a client's release and the handler's exit)
    events = sorted([(r.started + 0.02, 1) for r in reqs] + [(r.started + 0.13, -1) for r in reqs])
    depth = peak = 0
    for _, step in events:
        depth += step
        peak = max(peak, depth)
    assert peak == 3  # reached, never passed, across 3 loops


def test_a_cancelled_waiter_loses_no_slot():
    lim = GlobalLimiter(1)

    async def main() -> None:
        await lim.acquire()
        waiter = asyncio.ensure_future(lim.acquire())
        await asyncio.sleep(0.01)
        lim.release()  # the slot moves to the waiter...
        waiter.cancel()  # ...which is cancelled before it runs: the slot comes back
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert lim.held == 0
        await asyncio.wait_for(lim.acquire(), 60)  # at once; generous under load
        assert lim.held == 1
        lim.release()

    asyncio.run(main())
    assert lim.held == 0


def test_synthesizer_concurrency_defaults_by_mode():
    llm = fr.MockLLM()
    get = fr.get_response_synthesizer
    assert get("accumulate", llm).max_concurrency == 256
    assert get("compact_accumulate", llm).max_concurrency == 256
    assert get("tree_summarize", llm).max_concurrency == 256
    assert get("compact", llm).max_concurrency == 16
    assert get("refine", llm).max_concurrency == 16
    assert get("accumulate", llm, max_concurrency=5).max_concurrency == 5
