"""``fr.OnlineEmbeddingModuleBase`` (LazyLLM's base class for an embedding service of its own
shape) against real HTTP on 127.0.0.1: the default OpenAI shape (tests/openai_server.py), a
subclass with its own request and answer shapes, retries, refusals, bad answers, bad
arguments; and ``fr.config`` (LazyLLM's ``lazyllm.config``)."""

from __future__ import annotations

import numpy as np
import pytest
from openai_server import OpenAIServer
from platform_server import PlatformServer

import fastrag as fr
from fastrag.embeddings.base import EmbeddingServiceError
from fastrag.errors import ConfigError, EmbeddingError


class Platform(fr.OnlineEmbeddingModuleBase):
    def __init__(self, url: str, key: str | None = "k1") -> None:
        super().__init__("platform", url, key, "m-1")

    def _encapsulated_data(self, text: str, **kwargs):
        return {"input": [text], "model": self._embed_model_name, **kwargs}

    def _parse_response(self, response):
        return response["embeddings"][0]["embedding"]


def test_default_shape_is_openais_and_vectors_are_the_servers():
    with OpenAIServer(dim=8) as server:
        emb = fr.OnlineEmbeddingModuleBase("openai", server.url + "/embeddings", None, "m")
        texts = ["alpha", "beta", "gamma"]
        got = emb.embed(texts)
        assert got.dtype == np.float32 and got.shape == (3, 8)
        for row, t in zip(got, texts, strict=True):
            np.testing.assert_array_equal(row, OpenAIServer.embedding(t, 8))
        assert sorted(r.body["input"] for r in server.requests) == texts  # one text a request
        assert {r.body["model"] for r in server.requests} == {"m"}
        np.testing.assert_array_equal(emb("alpha"), got[0])  # LazyLLM's embed("text")
        assert emb.name == "openai:m" and emb.dim == 8


def test_a_subclass_defines_the_request_and_answer_shapes(tmp_path):
    with PlatformServer(dim=6) as srv:
        emb = Platform(srv.url)
        got = emb.embed(["one", "two"])
        np.testing.assert_array_equal(got[1], OpenAIServer.embedding("two", 6))
        assert sorted(b["input"][0] for b in srv.bodies) == ["one", "two"]
        assert all(b["model"] == "m-1" for b in srv.bodies)
        assert srv.auth == ["Bearer k1", "Bearer k1"]
        (tmp_path / "a.txt").write_text("one\n\ntwo\n", encoding="utf-8")
        doc = fr.Document(str(tmp_path), embed=emb)  # a Document's embedder, as in LazyLLM
        hits = fr.Retriever(doc, "root", "cosine", topk=1)("one")
        assert [h.node.text for h in hits] == ["one\n\ntwo\n"]


def test_retries_refusals_and_unreadable_answers_are_named():
    with OpenAIServer(dim=4) as server:
        emb = fr.OnlineEmbeddingModuleBase(
            "openai", server.url + "/embeddings", None, "m", max_retries=1
        )
        server.script(["503", "ok"])
        assert emb.embed(["x"]).shape == (1, 4)
        server.script(["400:model unknown"])
        with pytest.raises(EmbeddingServiceError, match="refused the request.*model unknown"):
            emb.embed(["x"])
    with PlatformServer() as srv:  # answers in its own shape: the default parser fails
        emb = fr.OnlineEmbeddingModuleBase("platform", srv.url, None, "m")
        with pytest.raises(EmbeddingError, match="_parse_response could not read the answer"):
            emb.embed(["x"])


@pytest.mark.parametrize(
    "args, match",
    [
        (("p", "<new platform embedding url>", None, "m"), "embed_url must be an http"),
        (("p", "http://127.0.0.1:1/e", None, ""), "embed_model_name"),
        (("", "http://127.0.0.1:1/e", None, "m"), "model_series"),
    ],
)
def test_bad_arguments_say_what_to_pass(args, match):
    with pytest.raises(ConfigError, match=match):
        fr.OnlineEmbeddingModuleBase(*args)


def test_config_reads_declared_settings_from_the_environment(monkeypatch):
    cfg = fr.settings.Config()
    cfg.add("api_key", str, "", "NEW_PLATFORM_API_KEY").add("fast", bool, False, "FAST")
    assert cfg["api_key"] == "" and "api_key" in cfg and "other" not in cfg
    monkeypatch.setenv("LAZYLLM_NEW_PLATFORM_API_KEY", "from-lazyllm")
    assert cfg["api_key"] == "from-lazyllm"
    monkeypatch.setenv("FASTRAG_NEW_PLATFORM_API_KEY", "from-fastrag")  # fastrag's wins
    assert cfg["api_key"] == "from-fastrag"
    monkeypatch.setenv("FASTRAG_FAST", "yes")
    assert cfg["fast"] is True
    monkeypatch.setenv("FASTRAG_FAST", "maybe")
    with pytest.raises(ConfigError, match=r"\$FASTRAG_FAST='maybe' is not a boolean"):
        cfg["fast"]
    with pytest.raises(ConfigError, match="declare it first with config.add"):
        cfg["other"]
    with pytest.raises(ConfigError, match="env must name an environment variable"):
        cfg.add("x", str, "", "")
    assert fr.config is fr.settings.config
