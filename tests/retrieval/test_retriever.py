"""Retriever: exact BM25 against the reference, batch/Arrow equality, filters, map index,
custom similarities, persistence and errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest

import fastrag as fr
from fastrag.errors import ConfigError
from fastrag.retrieval.retriever import Retriever
from fastrag.retrieval.similarity import register_similarity

DOCS = [
    "the cat sat on the mat",
    "the dog chased the cat",
    "dogs and cats are pets",
    "a mat is on the floor",
    "nothing relevant here at all",
    "cat cat cat",
]
META = [
    {"kind": "a", "year": 2020},
    {"kind": "b", "year": 2021},
    {"kind": "a", "year": 2022},
    {"kind": "b", "year": 2023},
    {"kind": "a", "year": 2024},
    {"kind": "c", "year": 2025},
]


def ws(text: str) -> list[str]:
    return text.lower().split()


def ref_lucene(corpus: list[list[str]], query: list[str], k1=1.5, b=0.75) -> list[float]:
    """Lucene BM25 (bm25s's default) written out plainly."""
    n = len(corpus)
    avgdl = sum(len(d) for d in corpus) / n
    vocab = {t for d in corpus for t in d}
    scores = []
    for d in corpus:
        s = 0.0
        for t in query:
            if t not in vocab:
                continue
            df = sum(t in x for x in corpus)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            tf = d.count(t)
            s += idf * tf / (tf + k1 * (1 - b + b * len(d) / avgdl))
        scores.append(s)
    return scores


@pytest.fixture()
def doc():
    return fr.Document.from_texts(DOCS, metadatas=META)


def test_bm25_scores_and_order_equal_the_reference(doc):
    ret = Retriever(doc, "root", similarity="bm25", topk=10, analyzer=ws)
    for q in ["cat mat", "the dog", "pets floor", "cat"]:
        expected = ref_lucene([ws(d) for d in DOCS], ws(q))
        order = sorted(
            (i for i in range(len(DOCS)) if expected[i] > 0), key=lambda i: (-expected[i], i)
        )
        hits = ret(q)
        assert [DOCS.index(h.text) for h in hits] == order
        np.testing.assert_allclose([h.score for h in hits], [expected[i] for i in order], rtol=1e-5)


def test_batch_equals_single_and_arrow_equals_batch(doc):
    ret = Retriever(doc, "root", similarity="bm25", topk=3, analyzer=ws)
    queries = ["cat", "", "dog mat", "zebra", "cat mat floor"]
    batch = ret.batch(queries)
    assert batch[1] == [] and batch[3] == []
    for q, hits in zip(queries, batch, strict=False):
        single = ret(q)
        assert [(h.id, h.score) for h in single] == [(h.id, h.score) for h in hits]
    table = ret.batch_arrow(queries)
    assert table.schema.names == ["query_idx", "rank", "node_id", "score"]
    flat = [
        (qi, r, h.id, pytest.approx(h.score))
        for qi, hits in enumerate(batch)
        for r, h in enumerate(hits, 1)
    ]
    columns = [table.column(c).to_pylist() for c in table.schema.names]
    assert list(zip(*columns, strict=True)) == flat


def test_arrow_text_and_metadata_columns_equal_the_hits():
    """``columns=["text", "metadata"]`` adds each hit's text and complete metadata (a child
    group's node: its document's metadata updated by its own) as the hits carry them."""
    doc = fr.Document.from_texts(
        ["the cat sat. " * 30, "a dog ran. " * 30, "cat, dog. " * 30],
        metadatas=[{"a": 1, "k": "x"}, {"a": 2}, {"a": 3, "é": "ü"}],
    )
    doc.create_node_group("lines", transform=lambda t: [t[:40], t[40:]], parent="root")
    for group in ("root", "lines"):
        ret = fr.Retriever(doc, group, "bm25", topk=3)
        qs = ["cat", "", "dog", "zebra"]
        table = ret.batch_arrow(qs, columns=["text", "metadata"])
        hits = [(qi, h) for qi, hs in enumerate(ret.batch(qs)) for h in hs]
        assert table.column("query_idx").to_pylist() == [qi for qi, _ in hits]
        assert table.column("text").to_pylist() == [h.text for _, h in hits]
        assert [json.loads(m) for m in table.column("metadata").to_pylist()] == [
            h.metadata for _, h in hits
        ]
        assert table.column("score").to_pylist() == [h.score for _, h in hits]
    assert ret.batch_arrow(["cat"], columns=["text"]).column_names[-1] == "text"
    with pytest.raises(
        fr.ConfigError,
        match=r"unknown hit column\(s\) \['vector'\]; "
        r"batch_arrow can add \['text', 'metadata'\]",
    ):
        ret.batch_arrow(["cat"], columns=["vector"])
    with pytest.raises(fr.ConfigError, match="columns must be a list of column names"):
        ret.batch_arrow(["cat"], columns="text")


def test_topk_cutoff_and_topk_larger_than_group(doc):
    ret = Retriever(doc, "root", similarity="bm25", topk=50, analyzer=ws)
    assert len(ret("cat")) == 3  # only nodes with a query term, never more than the group
    cut = Retriever(doc, "root", similarity="bm25", topk=5, analyzer=ws, similarity_cut_off=0.3)
    assert [h.text for h in cut("cat")] == ["cat cat cat"]
    assert len(ret("cat", topk=1)) == 1


def test_filters_dict_expression_callable_and_per_call_override(doc):
    ret = Retriever(doc, "root", similarity="bm25", topk=10, analyzer=ws, filter={"kind": "a"})
    assert {h.metadata["kind"] for h in ret("cat mat")} == {"a"}
    expr = Retriever(
        doc, "root", similarity="bm25", topk=10, analyzer=ws, filter="year >= 2022 && kind != 'c'"
    )
    assert [h.metadata["year"] for h in expr("cat mat dogs floor")] == [2023, 2022]
    # a per-call filter wins over the static one
    assert {h.metadata["kind"] for h in ret("cat", filter={"kind": "c"})} == {"c"}
    by_table = Retriever(
        doc,
        "root",
        similarity="bm25",
        topk=10,
        analyzer=ws,
        filter=lambda t: np.asarray(pa.compute.starts_with(t["text"], "the")),
    )
    assert {h.text for h in by_table("cat")} == {DOCS[0], DOCS[1]}
    with pytest.raises(ConfigError, match="bool mask of 6 rows"):
        Retriever(doc, "root", similarity="bm25", analyzer=ws, filter=lambda t: [1])("cat")


def test_builtin_analyzers_and_chinese(doc):
    zh = fr.Document.from_texts(
        ["亚硫酸盐是一种食品添加剂，可以防腐。", "猫坐在垫子上。", "今天天气很好"]
    )
    for sim in ("bm25_chinese", "bm25_cjk"):
        hits = Retriever(zh, "root", similarity=sim, topk=2)("亚硫酸盐有什么作用？")
        assert hits[0].text.startswith("亚硫酸盐")
    assert (
        Retriever(doc, "root", similarity="bm25", stemmer=None, topk=1)("cats")[0].text == DOCS[2]
    )
    # stemmed (the default), "cats" is "cat": the document saying it three times wins
    assert Retriever(doc, "root", similarity="bm25", topk=1)("cats")[0].text == DOCS[5]


def test_map_index_exact_lookup(doc):
    ret = Retriever(doc, "root", index="map", topk=3)
    assert [h.text for h in ret(DOCS[3])] == [DOCS[3]]
    assert ret("not a node") == []
    by_key = Retriever(doc, "root", index="map", map_key="kind", topk=5)
    assert [h.text for h in by_key("b")] == [DOCS[1], DOCS[3]]
    with pytest.raises(ConfigError, match="map_key 'nope' is not a metadata key"):
        Retriever(doc, "root", index="map", map_key="nope")("x")


def test_register_similarity_text_mode(doc):
    @register_similarity(mode="text", batch=True)
    def overlap(query, texts, **kw):
        q = set(query.split())
        return [len(q & set(t.split())) for t in texts]

    hits = Retriever(doc, "root", similarity="overlap", topk=2)("the cat")
    assert [h.text for h in hits] == [DOCS[0], DOCS[1]] and hits[0].score == 2.0

    @register_similarity(name="length", mode="text", batch=False)
    def _len(query, text):
        return -abs(len(text) - len(query))

    assert Retriever(doc, "root", similarity="length", topk=1)("x" * 11)[0].text == "cat cat cat"


def test_index_persisted_in_store_and_reused(tmp_path, monkeypatch):
    doc = fr.Document.from_texts(DOCS, store=tmp_path / "st")
    first = [(h.id, h.score) for h in Retriever(doc, "root", similarity="bm25", topk=3)("cat")]
    assert any(k.startswith("root/bm25/") for k in doc.store.manifest["indexes"])
    from fastrag import analysis

    def no_tokenizing(*a, **k):
        raise AssertionError("index was rebuilt")

    monkeypatch.setattr(analysis, "tokenize_corpus", no_tokenizing)
    again = fr.Document.from_texts(DOCS, store=tmp_path / "st")
    hits = Retriever(again, "root", similarity="bm25", topk=3)("cat")
    assert [(h.id, h.score) for h in hits] == first
    monkeypatch.undo()
    # a changed group rebuilds the index
    changed = fr.Document.from_texts(DOCS[:3], store=tmp_path / "st")
    # (stemmed, "cat" is in all 3 nodes; the stale 6-node index would give 4 hits)
    assert len(Retriever(changed, "root", similarity="bm25", topk=10)("cat")) == 3


def test_errors(doc):
    with pytest.raises(ConfigError, match="unknown node group 'nope'"):
        Retriever(doc, "nope")
    with pytest.raises(ConfigError, match=r"unknown similarity 'bm99'; known: \["):
        Retriever(doc, "root", similarity="bm99")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(
            ConfigError, match=r"topk must be an int >= 1 \(the number of hits per query\)"
        ):
            Retriever(doc, "root", topk=bad)
    with pytest.raises(ConfigError, match="query 0 is int"):
        Retriever(doc, "root", analyzer=ws)(5)
    with pytest.raises(ConfigError, match="queries must be a list"):
        Retriever(doc, "root", analyzer=ws).batch("one string")
    with pytest.raises(ConfigError, match="unknown BM25 parameters"):
        Retriever(doc, "root", kk=1)
    with pytest.raises(ConfigError, match="needs embeddings"):
        Retriever(doc, "root", similarity="cosine")
    with pytest.raises(ConfigError, match="index='hnsw' needs a dense similarity"):
        Retriever(doc, "root", index="hnsw")
    with pytest.raises(ConfigError, match="unknown index"):
        Retriever(doc, "root", index="ivf")
    empty = fr.Document.from_texts(["x"])
    empty.create_node_group("none", transform=lambda t: [])
    with pytest.raises(ConfigError, match="group 'none' has no nodes"):
        Retriever(empty, "none")("x")
    assert Retriever(doc, "root", analyzer=ws)("   ") == []
