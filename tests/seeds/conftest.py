"""Fixtures of the seed-example tests (tests/seeds/test_<source>.py): the local OpenAI-compatible
server (tests/openai_server.py) as chat model, embedding service and reranker, an
``OpenAILike`` client on it, and the CMRC 2018 knowledge base the LazyLLM tutorial uses."""

from __future__ import annotations

import pytest

import fastrag as fr
from fastrag.datasets import build_squad_kb, load_cmrc2018_dev


@pytest.fixture
def server(openai_server):
    """The test server; each test sets ``server.reply`` to the model it needs."""
    return openai_server


@pytest.fixture
def llm(server) -> fr.OpenAILike:
    return fr.OpenAILike("test-model", server.url, retry_backoff=0.01, timeout=20.0)


@pytest.fixture
def settings_llm(llm):
    """``fr.Settings.llm`` set for the test (LlamaIndex code builds synthesizers without llm=)."""
    old = fr.Settings.llm
    fr.Settings.llm = llm
    yield llm
    fr.Settings.llm = old


@pytest.fixture(scope="session")
def cmrc_squad():
    return load_cmrc2018_dev()


@pytest.fixture(scope="session")
def cmrc_kb(tmp_path_factory, cmrc_squad):
    """The tutorial's ``data_kb`` folder: CMRC 2018 dev paragraphs, 10 per .txt file."""
    kb = tmp_path_factory.mktemp("cmrc2018_data_kb")
    build_squad_kb(cmrc_squad, kb)
    return str(kb)
