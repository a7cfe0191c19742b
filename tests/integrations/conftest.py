"""Fixtures of the integration tests: a small corpus as a store on disk (folders, so hits have
source paths), a retriever over it, a spy counting fastrag batch calls, and the local
OpenAI-compatible server answering as a test model."""

from __future__ import annotations

import pytest
from integrations_support import FILES, GENERATED, model_reply  # noqa: F401

import fastrag as fr


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> str:
    """A store of FILES with a sentence-level group ``chunk`` (built and persisted)."""
    base = tmp_path_factory.mktemp("kb")
    for rel, text in FILES.items():
        (base / "docs" / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / "docs" / rel).write_text(text + "\n", encoding="utf-8")
    path = str(base / "kb.store")
    doc = fr.Document(str(base / "docs"), store=path)
    doc.create_node_group("chunk", transform=fr.SentenceSplitter, chunk_size=64, chunk_overlap=0)
    doc.group("chunk")
    fr.Retriever(doc, "chunk", "bm25").batch(["warm up"])  # stores the BM25 index too
    return path


@pytest.fixture(scope="session")
def doc(store) -> fr.Document:
    return fr.Document(store=store, mode="r")


@pytest.fixture
def ret(doc) -> fr.Retriever:
    return fr.Retriever(doc, "chunk", "bm25", topk=3)


@pytest.fixture
def batch_calls(ret) -> list[list[str]]:
    """The query lists of every ``ret.batch`` call, in order."""
    calls: list[list[str]] = []
    inner = ret.batch

    def batch(queries, **kw):
        calls.append(list(queries))
        return inner(queries, **kw)

    ret.batch = batch
    return calls


@pytest.fixture
def llm_server(openai_server):
    openai_server.reply = model_reply
    return openai_server


@pytest.fixture
def fr_llm(llm_server) -> fr.OpenAILike:
    return fr.OpenAILike("test-model", llm_server.url, retry_backoff=0.01, timeout=10.0)
