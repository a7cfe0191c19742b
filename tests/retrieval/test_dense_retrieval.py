"""Dense retrieval through Document + Retriever: stored vectors, exact cosine/dot, HNSW, several
embedding keys, filters, and the tutorial's multi-path pipeline."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import fastrag as fr
from fastrag.errors import ConfigError
from fastrag.schema import EMBEDDING_PREFIX

WORDS = [
    "cat",
    "dog",
    "fish",
    "bird",
    "mat",
    "floor",
    "tree",
    "river",
    "stone",
    "cloud",
    "sun",
    "moon",
    "rain",
    "snow",
    "wind",
    "fire",
    "apple",
    "bread",
    "milk",
    "tea",
]


class HashEmbedding:
    """Bag of hashed words (deterministic); counts the texts it embeds."""

    def __init__(self, dim: int = 32, salt: int = 0) -> None:
        self.dim, self.salt, self.name = dim, salt, f"hash{dim}-{salt}"
        self.calls: list[int] = []

    def embed(self, texts):
        self.calls.append(len(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, zlib.crc32(f"{self.salt}:{w}".encode()) % self.dim] += 1.0
            out[i, (i + self.salt) % self.dim] += 1e-3  # never a zero vector
        return out


def corpus(n=120, seed=0):
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(3, 9))) for _ in range(n)]
    meta = [{"shard": i % 3, "lang": "en" if i % 2 else "zh"} for i in range(n)]
    return texts, meta


def brute(vecs, q, metric, k):
    if metric == "cosine":
        vecs = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
        q = q / np.linalg.norm(q)
    s = vecs @ q
    order = sorted(range(len(s)), key=lambda i: (-s[i], i))[:k]
    return order, s[order]


@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_exact_dense_equals_brute_force(metric):
    texts, meta = corpus()
    emb = HashEmbedding()
    doc = fr.Document.from_texts(texts, metadatas=meta, embed=emb)
    ret = fr.Retriever(doc, "root", similarity=metric, topk=7)
    vecs = emb.embed(texts)
    for q in ["cat mat", "river stone sun", "tea"]:
        qv = emb.embed([q])[0]
        rows, scores = brute(vecs, qv, metric, 7)
        hits = ret(q)
        row_of = {nid: i for i, nid in enumerate(doc.group("root").ids)}
        assert [row_of[h.id] for h in hits] == rows
        np.testing.assert_allclose([h.score for h in hits], scores, rtol=1e-5, atol=1e-6)
    batch = ret.batch(["cat mat", "tea"])
    assert [h.id for h in batch[1]] == [h.id for h in ret("tea")]


def test_vectors_are_an_arrow_column_persisted_and_reused(tmp_path):
    texts, meta = corpus(60)
    emb = HashEmbedding()
    doc = fr.Document.from_texts(texts, metadatas=meta, embed=emb, store=tmp_path / "st")
    first = [(h.id, h.score) for h in fr.Retriever(doc, "root", similarity="cosine", topk=5)("cat")]
    table = doc.group("root").table
    col = EMBEDDING_PREFIX + "default"
    assert str(table.schema.field(col).type) == "fixed_size_list<item: float>[32]"
    n_embedded = sum(emb.calls)
    assert n_embedded == 60 + 1  # the nodes once, then the query

    emb2 = HashEmbedding()
    again = fr.Document.from_texts(texts, metadatas=meta, embed=emb2, store=tmp_path / "st")
    hits = fr.Retriever(again, "root", similarity="cosine", topk=5)("cat")
    assert [(h.id, h.score) for h in hits] == first
    assert emb2.calls == [1]  # only the query: node vectors came from the store
    # a new node: only it is embedded
    again.add(["cat cat cat"])
    fr.Retriever(again, "root", similarity="cosine", topk=5)("cat")
    assert emb2.calls[1:] == [1, 1]
    assert again.group("root")[60].embedding["default"][:2] == pytest.approx(
        emb.embed(["cat cat cat"])[0][:2].tolist()
    )


def test_bad_vectors_name_the_node_and_key():
    class Bad(HashEmbedding):
        def embed(self, texts):
            out = super().embed(texts)
            if len(texts) > 1:
                out[1, 0] = np.nan
            return out

    doc = fr.Document.from_texts(["a b", "c d"], ids=["n1", "n2"], embed={"v": Bad()})
    with pytest.raises(ConfigError, match="embed key 'v' returned NaN/inf for node 'n2'"):
        fr.Retriever(doc, "root", similarity="cosine")("a")

    class WrongDim(HashEmbedding):
        def embed(self, texts):
            return super().embed(texts)[:, :5]

    doc = fr.Document.from_texts(["a b"], ids=["n1"], embed={"w": WrongDim()})
    with pytest.raises(ConfigError, match="dimension 5 for node 'n1'.*dim is 32"):
        fr.Retriever(doc, "root", similarity="cosine")("a")


def test_several_embed_keys_merge_and_dedupe():
    texts, meta = corpus(80)
    a, b = HashEmbedding(salt=0), HashEmbedding(salt=7)
    doc = fr.Document.from_texts(texts, metadatas=meta, embed={"a": a, "b": b})
    ra = fr.Retriever(doc, "root", similarity="cosine", topk=5, embed_keys=["a"])
    rb = fr.Retriever(doc, "root", similarity="cosine", topk=5, embed_keys=["b"])
    both = fr.Retriever(doc, "root", similarity="cosine", topk=5, embed_keys=["a", "b"])
    q = "river stone"
    best: dict[str, float] = {}
    for h in ra(q) + rb(q):
        best[h.id] = max(best.get(h.id, -1.0), h.score)
    expected = sorted(best.items(), key=lambda x: -x[1])[:5]
    got = [(h.id, h.score) for h in both(q)]
    assert [s for _, s in got] == pytest.approx([s for _, s in expected])
    assert len({i for i, _ in got}) == len(got)
    cut = fr.Retriever(
        doc,
        "root",
        similarity="cosine",
        topk=10,
        embed_keys=["a", "b"],
        similarity_cut_off={"a": 0.99, "b": 2.0},
    )
    assert all(h.score >= 0.99 for h in cut(q))
    with pytest.raises(ConfigError, match="unknown embed keys"):
        fr.Retriever(doc, "root", similarity="cosine", embed_keys=["zz"])


def test_filters_apply_to_dense():
    texts, meta = corpus()
    doc = fr.Document.from_texts(texts, metadatas=meta, embed=HashEmbedding())
    ret = fr.Retriever(doc, "root", similarity="cosine", topk=10, filter="shard == 1")
    assert {h.metadata["shard"] for h in ret("cat")} == {1}
    assert {h.metadata["lang"] for h in ret("cat", filter="lang == 'zh'")} == {"zh"}


def test_hnsw_retriever_recall_persistence_and_incremental_add(tmp_path):
    pytest.importorskip("hnswlib")
    texts, meta = corpus(400, seed=3)
    emb = HashEmbedding(dim=48)
    doc = fr.Document.from_texts(texts, metadatas=meta, embed=emb, store=tmp_path / "st")
    exact = fr.Retriever(doc, "root", similarity="cosine", topk=10)
    ann = fr.Retriever(
        doc, "root", similarity="cosine", topk=10, index="hnsw", M=16, ef_construction=200, ef=100
    )
    queries = [" ".join(texts[i].split()[:3]) for i in range(0, 400, 20)]
    ex, an = exact.batch(queries), ann.batch(queries)
    recall = np.mean(
        [len({h.id for h in a} & {h.id for h in e}) / len(e) for a, e in zip(an, ex, strict=True)]
    )
    assert recall >= 0.95
    assert any("/hnsw/" in k for k in doc.store.manifest["indexes"])
    # reopened: the same answers from the persisted index
    doc2 = fr.Document.from_texts(
        texts, metadatas=meta, embed=HashEmbedding(dim=48), store=tmp_path / "st"
    )
    ann2 = fr.Retriever(
        doc2, "root", similarity="cosine", topk=10, index="hnsw", M=16, ef_construction=200, ef=100
    )
    assert [[h.id for h in r] for r in ann2.batch(queries)] == [[h.id for h in r] for r in an]
    # incremental: a new node is found, a deleted one never returned
    new_id = doc2.add(["zebra zebra unicorn"])[0]
    assert ann2("zebra unicorn")[0].node.root_node.id == new_id
    gone = ann2(queries[0])[0].id
    doc2.delete([gone])
    assert gone not in {h.id for h in ann2(queries[0])}


def test_multi_path_bm25_block_plus_cosine_coarse_rrf_rerank():
    texts, meta = corpus(60, seed=5)
    kb = ["\n".join(texts[i : i + 3]) for i in range(0, 60, 3)]
    emb = HashEmbedding(dim=64)
    doc = fr.Document.from_texts(kb, embed=emb)
    doc.create_node_group("block", transform=lambda t: t.split("\n"))
    r1 = fr.Retriever(doc, "block", similarity="bm25", topk=6)
    r2 = fr.Retriever(doc, fr.Document.CoarseChunk, similarity="cosine", topk=6)
    joiner = fr.ReciprocalRankFusionJoiner(k=60)

    def overlap(query, passages):
        q = set(query.split())
        return [len(q & set(p.split())) / (1 + len(p.split())) for p in passages]

    reranker = fr.Reranker("ModuleReranker", model=overlap, topk=3)
    q = "river stone cat"
    fused = joiner([r1(q), r2(q)])
    top = reranker(fused, query=q)
    assert len(top) == 3
    expected = sorted(fused, key=lambda h: -overlap(q, [h.text])[0])[:3]
    assert [h.id for h in top] == [h.id for h in expected]
    assert all(h.score is not None for h in top)
    # the batch path gives the same answers
    queries = [q, "tea milk", "snow wind fire"]
    fused_b = joiner.batch(
        [[a, b] for a, b in zip(r1.batch(queries), r2.batch(queries), strict=True)]
    )
    top_b = reranker.batch(fused_b, queries)
    assert [h.id for h in top_b[0]] == [h.id for h in top]
