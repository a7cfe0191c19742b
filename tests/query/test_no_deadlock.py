"""Sync callables that call fastrag's sync API never exhaust the worker pool: a plain callable
calling a pipeline, used as a retriever by 32 threads at once; an ``accumulate`` synthesis over
12 chunks whose ``FunctionLLM`` calls another pipeline; two levels of user ``asyncio.to_thread``.
Before the pool gave a blocked worker a stand-in, each of these held every worker of a fixed
pool (``min(32, cpus + 4)``) waiting for one. Each runs under a timeout that dumps every
thread's stack and fails instead of hanging."""

from __future__ import annotations

import asyncio
import threading

import pytest
from hangs import within
from query_support import DOCS

import fastrag as fr
import fastrag._workers as workers
from fastrag._workers import WorkerPool, worker_pool

QUESTIONS = ["capital of Denmark", "second largest city", "what is BM25", "Spring Boot main"]


@pytest.fixture(params=["default pool", "pool of 2"])
def pool(request, monkeypatch) -> WorkerPool:
    """The process's pool, or one of 2 workers (the deadlock then needs only 2 callers, on any
    machine)."""
    if request.param == "pool of 2":
        monkeypatch.setattr(workers, "_POOL", WorkerPool(2, name="fastrag-worker-t2"))
    return worker_pool()


def _ids(lists):
    return [[h.id for h in hits] for hits in lists]


def _in_threads(n: int, fn):
    results: list = [None] * n
    errors: list = []

    def one(i: int) -> None:
        try:
            results[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def test_a_lambda_calling_a_pipeline_as_the_retriever_of_32_threads(doc, pool):
    inner = fr.RAGPipeline(fr.Retriever(doc, "root", "bm25", topk=2))
    outer = fr.RAGPipeline([lambda q: inner.retrieve(q)])
    want = within(lambda: _ids(inner.retrieve_batch(QUESTIONS)))
    got = within(lambda: _in_threads(32, lambda i: _ids(outer.retrieve_batch(QUESTIONS))))
    assert got == [want] * 32
    assert pool.threads <= pool.size + 32  # bounded: one stand-in per blocked worker at most


def test_accumulate_over_12_chunks_with_an_llm_that_calls_a_pipeline(doc, pool):
    other = fr.RAGPipeline(fr.Retriever(doc, "root", "bm25", topk=1))
    llm = fr.FunctionLLM(
        lambda prompt: "from the other pipeline: " + other.retrieve(prompt)[0].text
    )
    syn = fr.get_response_synthesizer(response_mode="accumulate", llm=llm)
    chunks = [fr.DocNode(f"Chunk {i}: Aarhus is a city.") for i in range(12)]
    resp = within(lambda: syn.synthesize("second largest city of Denmark", chunks))
    assert llm.n_calls == 12 and llm.max_in_flight == 12  # all 12 at once, none waiting
    want = "from the other pipeline: " + DOCS[1]
    assert resp.response.split("\n---------------------\n") == [
        f"Response {i + 1}: {want}" for i in range(12)
    ]


def test_a_pipeline_whose_llm_function_queries_another_pipeline(doc, pool):
    leaf_llm = fr.FunctionLLM(lambda p: "leaf answer")
    leaf = fr.RAGPipeline(fr.Retriever(doc, "root", "bm25", topk=2), llm=leaf_llm)
    top_llm = fr.FunctionLLM(lambda p: "top sees: " + leaf.query("capital of Denmark").response)
    top = fr.RAGPipeline(
        [lambda q: leaf.retrieve(q)],
        llm=top_llm,
        synthesizer=fr.get_response_synthesizer(response_mode="accumulate", llm=top_llm),
    )
    want = within(lambda: [r.response for r in top.batch(QUESTIONS)])
    assert want[0].startswith("Response 1: top sees: leaf answer\n---")
    got = within(lambda: _in_threads(8, lambda i: [r.response for r in top.batch(QUESTIONS)]))
    assert got == [want] * 8
    assert leaf_llm.n_calls == top_llm.n_calls  # one leaf query per top LLM call


def test_user_to_thread_two_levels_deep_on_fastrag_loops(doc, pool):
    base = fr.RAGPipeline(fr.Retriever(doc, "root", "bm25", topk=2))
    middle = fr.RAGPipeline([lambda q: base.retrieve(q)])

    async def user_retriever(q: str):  # user async code handing a sync call to a thread
        return await asyncio.to_thread(middle.retrieve, q)

    outer = fr.RAGPipeline([user_retriever])
    want = within(lambda: _ids(base.retrieve_batch(QUESTIONS)))
    got = within(lambda: _in_threads(32, lambda i: _ids(outer.retrieve_batch(QUESTIONS))))
    assert got == [want] * 32


def test_a_loop_run_by_a_worker_counts_it_as_blocked(doc, pool):
    """A retriever that runs its own loop (``asyncio.run``) around fastrag's async API."""
    inner = fr.RAGPipeline([lambda q: [DOCS[0]]])

    def retriever(q: str):
        return asyncio.run(inner.aretrieve(q))

    outer = fr.RAGPipeline([retriever])
    got = within(lambda: _in_threads(32, lambda i: _ids(outer.retrieve_batch(QUESTIONS))))
    assert len(got) == 32 and all(len(g) == len(QUESTIONS) for g in got)
