"""Pipelines nest without deadlocks: LazyLLM's QA-pair shape (one pipeline's retrieval, with an
HTTP reranker and an LLM stage, as a retriever of another), from 8 threads, from inside a
running loop, and from user async code on fastrag's own loop. Every case runs under a timeout
that fails loudly; afterwards an LLM call in the same process proves the loop is healthy."""

from __future__ import annotations

import asyncio
import faulthandler
import sys
import threading

import pytest
from query_support import DOCS

import fastrag as fr
from fastrag._async import shared_loop

TIMEOUT = 300.0  # a deadlock detector: generous, so load alone never trips it
QUESTIONS = ["capital of Denmark", "second largest city", "what is BM25", "Spring Boot main"]


def within(fn, timeout: float = TIMEOUT):
    """``fn()`` in a thread; a hang fails the test with every thread's stack."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        faulthandler.dump_traceback(file=sys.stderr)
        pytest.fail(f"no result after {timeout:.0f} s: a deadlock (stacks above)")
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.fixture
def pipes(server, llm, doc):
    rerank = fr.ModuleReranker(model=fr.OpenAIRerank(server.url, "rr", max_retries=0), topk=2)
    inner = fr.RAGPipeline(
        fr.Retriever(doc, "root", "bm25", topk=4),
        query_transformers=[fr.RewriteQueryTransformer(llm)],
        reranker=rerank,
    )
    qa = fr.Retriever(doc, "root", "bm25", topk=1)
    return inner, qa, llm


def _ids(lists):
    return [[h.id for h in hits] for hits in lists]


@pytest.mark.parametrize(
    "shape", ["retrieve", "retrieve_batch", "aretrieve", "pipeline", "callable"]
)
def test_a_pipeline_is_a_retriever_of_another(pipes, shape):
    inner, qa, llm = pipes
    source = {
        "retrieve": inner.retrieve,
        "retrieve_batch": inner.retrieve_batch,
        "aretrieve": inner.aretrieve,
        "pipeline": inner,
        "callable": lambda q: inner.retrieve(q),
    }[shape]
    outer = fr.RAGPipeline([source, qa], llm=llm)
    got = within(lambda: outer.retrieve_batch(QUESTIONS))
    want = [inner.retrieve(q) for q in QUESTIONS]
    for hits, inner_hits in zip(got, want, strict=True):
        assert [h.id for h in inner_hits] == [h.id for h in hits[: len(inner_hits)]]
    if shape != "callable":  # batched end to end: one inner batch, one inner retriever call
        adapter = outer.retrievers[0]
        before = inner.retrievers[0].calls
        within(lambda: outer.retrieve_batch([q + " again" for q in QUESTIONS]))
        assert adapter.calls >= 2 and inner.retrievers[0].calls == before + 1
    answers = within(lambda: outer.batch(QUESTIONS[:2]))
    assert [a.response for a in answers] == ["ANSWER", "ANSWER"]
    assert within(lambda: llm.complete("ping")) == "OTHER"  # the shared loop is healthy


def test_nested_pipelines_from_eight_threads(pipes):
    inner, qa, llm = pipes
    outer = fr.RAGPipeline([inner.retrieve, qa], llm=llm)
    want = _ids(outer.retrieve_batch(QUESTIONS))
    results: list = [None] * 8

    def worker(i: int) -> None:
        results[i] = _ids(outer.retrieve_batch(QUESTIONS))

    def run_all():
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    assert within(run_all) == [want] * 8
    assert within(lambda: llm.complete("ping")) == "OTHER"


def test_sync_calls_from_inside_running_loops(pipes):
    inner, qa, llm = pipes
    outer = fr.RAGPipeline([inner.retrieve, qa], llm=llm)
    want = _ids(outer.retrieve_batch(QUESTIONS))

    async def in_a_user_loop():  # Jupyter, a FastAPI handler: sync calls block it, and work
        sync = _ids(outer.retrieve_batch(QUESTIONS))
        asynchronous = _ids(await outer.aretrieve_batch(QUESTIONS))
        return sync, asynchronous

    assert within(lambda: asyncio.run(in_a_user_loop())) == (want, want)

    async def user_retriever(q: str):  # user async code that calls a sync fastrag method
        assert asyncio.get_running_loop() is shared_loop()
        return inner.retrieve(q)

    mixed = fr.RAGPipeline([user_retriever, qa], llm=llm)
    assert within(lambda: _ids(mixed.retrieve_batch(QUESTIONS))) == want
    assert within(lambda: llm.complete("ping")) == "OTHER"


def test_user_callables_never_run_on_the_loop_thread(pipes, doc):
    inner, qa, llm = pipes
    seen: list[str] = []

    def note(name):
        seen.append(threading.current_thread().name)
        return name

    def transform(q):
        note("transform")
        return q

    def retriever(q):
        note("retriever")
        return [DOCS[0]]

    def post(hits, q):
        note("post")
        return hits

    pipe = fr.RAGPipeline(
        [retriever, qa], query_transformers=[transform], postprocessors=[post], llm=llm
    )
    within(lambda: pipe.retrieve_batch(QUESTIONS[:2]))
    assert len(seen) == 6 and "fastrag-async" not in seen
