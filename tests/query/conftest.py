"""Fixtures of the query-layer tests: the local OpenAI-compatible server answering by prompt
kind (so one server serves every stage), an ``OpenAILike`` client on it, a small corpus."""

from __future__ import annotations

import pytest
from query_support import DOCS, META, prompts, route  # noqa: F401

import fastrag as fr


@pytest.fixture
def server(openai_server):
    openai_server.reply = route
    return openai_server


@pytest.fixture
def llm(server) -> fr.OpenAILike:
    return fr.OpenAILike("test-model", server.url, retry_backoff=0.01, timeout=10.0)


@pytest.fixture(scope="module")
def doc() -> fr.Document:
    return fr.Document.from_texts(DOCS, metadatas=META)
