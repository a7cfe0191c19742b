"""FastragRetriever in LangChain: Documents, an LCEL chain answering through an
OpenAI-compatible server, and ``batch`` / ``abatch`` (also a chain's) as ONE fastrag call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import fastrag as fr

pytest.importorskip("langchain_core")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.language_models.llms import LLM  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import PromptTemplate  # noqa: E402
from langchain_core.runnables import RunnablePassthrough  # noqa: E402

from fastrag.integrations.langchain import FastragRetriever  # noqa: E402

Q = "What is the capital of Denmark?"


class FastragLC(LLM):
    """A LangChain LLM over fr.OpenAILike (langchain-openai is not a dependency): every call
    is a real HTTP request to the test server."""

    inner: Any = None

    @property
    def _llm_type(self) -> str:
        return "fastrag-openai-like"

    def _call(
        self, prompt: str, stop: list[str] | None = None, run_manager: Any = None, **kw: Any
    ) -> str:
        return self.inner.complete(prompt)


def format_docs(docs) -> str:
    return "\n\n".join(d.page_content for d in docs)


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_retriever_start(self, serialized, query, **kw):
        self.events.append(("start", query))

    def on_retriever_end(self, documents, **kw):
        self.events.append(("end", len(documents)))


def test_documents_carry_text_id_score_metadata(ret, store):
    denmark = Path(store).parent / "docs" / "en" / "denmark.md"
    want = ret(Q)
    docs = FastragRetriever(retriever=ret).invoke(Q)
    assert [d.page_content for d in docs] == [h.text for h in want]
    assert [d.id for d in docs] == [h.id for h in want]
    top = docs[0]
    assert top.metadata["score"] == want[0].score
    assert top.metadata["node_id"] == want[0].id
    assert top.metadata["doc_id"] == want[0].node.doc_id
    assert top.metadata["file_name"] == "denmark.md"
    # LangChain loaders' key: the file's path on disk; file_path is under the folder ingested
    assert top.metadata["source"] == top.metadata["abs_path"] == str(denmark.resolve())
    assert top.metadata["file_path"] == "en/denmark.md"
    assert len(FastragRetriever(retriever=ret, topk=1).invoke(Q)) == 1
    only = FastragRetriever(retriever=ret, filter={"file_name": "france.md"}).invoke("capital")
    assert [d.metadata["file_name"] for d in only] == ["france.md"]


def test_batch_of_100_is_one_fastrag_call(ret, batch_calls):
    queries = [
        f"{w} capital city Denmark France {i}"
        for i, w in enumerate(["which", "what", "the", "a"] * 25)
    ]
    adapter = FastragRetriever(retriever=ret)
    got = adapter.batch(queries)
    assert len(batch_calls) == 1 and batch_calls[0] == queries
    assert adapter.calls == 1
    assert [[d.id for d in docs] for docs in got] == [
        [h.id for h in hits] for hits in ret.batch(queries)
    ]
    batch_calls.clear()
    assert asyncio.run(adapter.abatch(queries)) == got
    assert len(batch_calls) == 1 and len(batch_calls[0]) == 100


def test_batch_reports_each_query_to_callbacks(ret):
    rec = Recorder()
    FastragRetriever(retriever=ret).batch([Q, "Spring Boot"], config={"callbacks": [rec]})
    assert rec.events == [("start", Q), ("start", "Spring Boot"), ("end", 3), ("end", 1)]


def test_batch_failure_fails_every_query(ret):
    adapter = FastragRetriever(retriever=ret)
    out = adapter.batch([Q, 5], return_exceptions=True)
    assert all(isinstance(e, fr.ConfigError) for e in out) and len(out) == 2
    with pytest.raises(fr.ConfigError, match="query 1 is int, expected str"):
        adapter.batch([Q, 5])


def test_gathered_ainvoke_calls_coalesce(ret, batch_calls):
    adapter = FastragRetriever(retriever=ret)

    async def main():
        return await asyncio.gather(*(adapter.ainvoke(q) for q in (Q, "Paris", "BM25")))

    got = asyncio.run(main())
    assert batch_calls == [[Q, "Paris", "BM25"]]
    assert "Copenhagen" in got[0][0].page_content


def test_lcel_chain_answers_through_the_llm(ret, fr_llm, llm_server):
    prompt = PromptTemplate.from_template(
        "Answer from the context.\nContext:\n{context}\nQuestion: {question}"
    )
    chain = (
        {
            "context": FastragRetriever(retriever=ret) | format_docs,
            "question": RunnablePassthrough(),
        }
        | prompt
        | FastragLC(inner=fr_llm)
        | StrOutputParser()
    )
    assert chain.invoke(Q) == "Copenhagen (from the context)"
    sent = llm_server.requests[-1].body["messages"][-1]["content"]
    assert "Copenhagen is the capital of Denmark" in sent and Q in sent
    # a dict step's abatch gathers one ainvoke per input: coalesced into one fastrag call
    calls = []
    inner = ret.batch
    ret.batch = lambda queries, **kw: calls.append(list(queries)) or inner(queries, **kw)
    questions = [Q, "Where is Paris?", "What is BM25?"]
    answers = asyncio.run(chain.abatch(questions))
    assert answers[0] == "Copenhagen (from the context)"
    assert len(calls) == 1 and sorted(calls[0]) == sorted(questions)


def test_lcel_sequence_batch_is_one_fastrag_call(ret, batch_calls, fr_llm, llm_server):
    prompt = PromptTemplate.from_template("Answer from the context.\nContext:\n{context}")
    chain = FastragRetriever(retriever=ret) | format_docs | prompt | FastragLC(inner=fr_llm)
    questions = [Q, "Where is Paris?", "What is BM25?"]
    answers = chain.batch(questions)
    assert answers == ["Copenhagen (from the context)", "I don't know", "I don't know"]
    assert batch_calls == [questions]


def test_a_pipeline_works_as_the_target(ret):
    docs = FastragRetriever(retriever=fr.RAGPipeline(ret), topk=2).invoke(Q)
    assert [d.id for d in docs] == [h.id for h in ret(Q)[:2]]


def test_bad_target_is_named():
    with pytest.raises(fr.ConfigError, match="needs a fastrag.Retriever or fastrag.RAGPipeline"):
        FastragRetriever(retriever="kb.store")
