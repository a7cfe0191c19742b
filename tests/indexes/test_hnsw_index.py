"""HNSWIndex (hnswlib adapter): recall against exact search, persistence, deletes, masks."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import fastrag.indexes.hnsw as hnsw_mod
from fastrag.errors import ConfigError, MissingExtraError, StoreError
from fastrag.indexes.flat import FlatIndex
from fastrag.indexes.hnsw import HNSWIndex

hnswlib = pytest.importorskip("hnswlib")

DIM = 24


def structured(rng, n, dim=DIM):
    """Per-dimension variance 1/j: a spectrum like real embeddings (i.i.d. Gaussians would
    make any ANN index look bad and prove nothing)."""
    return (rng.standard_normal((n, dim)) / np.sqrt(np.arange(1, dim + 1))).astype(np.float32)


def recall(got_rows, exact_rows):
    hits = [
        len(set(a[a >= 0]) & set(b[b >= 0])) / max(1, (b >= 0).sum())
        for a, b in zip(got_rows, exact_rows, strict=False)
    ]
    return float(np.mean(hits))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return structured(rng, 3000), structured(rng, 100)


@pytest.fixture(scope="module")
def built(data):
    x, _ = data
    index = HNSWIndex(DIM, "cosine", M=16, ef_construction=100, ef=64, seed=1)
    index.add(x)
    return index


@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_recall_at_10_against_exact(data, metric):
    x, q = data
    index = HNSWIndex(DIM, metric, M=16, ef_construction=100, ef=64, max_elements=500)
    index.add(x)  # grows past max_elements by resizing
    rows, scores, counts = index.search(q, 10)
    exact = FlatIndex.from_vectors(x, metric).search(q, 10)
    assert recall(rows, exact[0]) >= 0.95
    assert (counts == 10).all()
    # scores are exact similarities of the returned rows, best first
    ref = FlatIndex.from_vectors(x, metric).vectors
    qq = q / np.linalg.norm(q, axis=1, keepdims=True) if metric == "cosine" else q
    np.testing.assert_allclose(scores, np.einsum("qkd,qd->qk", ref[rows], qq), atol=1e-5)
    assert (np.diff(scores, axis=1) <= 0).all()


def test_ties_are_broken_by_row_and_k_beyond_n_pads():
    index = HNSWIndex(4, "cosine")
    v = np.array([[1, 0, 0, 0], [0, 1, 0, 0]], np.float32)
    index.add(np.repeat(v, 3, axis=0))  # rows 0,1,2 equal; rows 3,4,5 equal
    rows, scores, counts = index.search(np.array([1.0, 0.2, 0, 0]), 8)
    np.testing.assert_array_equal(rows, [[0, 1, 2, 3, 4, 5, -1, -1]])
    assert counts.tolist() == [6] and np.isneginf(scores[0, 6:]).all()


def test_cutoff(built, data):
    _, q = data
    rows, scores, counts = built.search(q, 10, cutoff=0.9)
    _, full_scores, _ = built.search(q, 10)
    np.testing.assert_array_equal(counts, (full_scores >= np.float32(0.9)).sum(axis=1))
    assert (scores[rows >= 0] >= np.float32(0.9)).all()
    assert (rows[rows < 0] == -1).all()


def test_incremental_add_and_explicit_rows(data):
    x, q = data
    index = HNSWIndex(DIM, ef_construction=100)
    index.add(x[:1000])
    index.add(x[1000:2000])  # rows continue at 1000
    index.add(x[2000:], rows=np.arange(5000, 6000))
    assert index.n == 3000 and index.n_rows == 6000
    rows, _, _ = index.search(q, 10)
    exact_rows = FlatIndex.from_vectors(x).search(q, 10)[0]
    mapped = np.where(exact_rows >= 2000, exact_rows + 3000, exact_rows)
    assert recall(rows, mapped) >= 0.95
    assert not np.isin(rows, np.arange(2000, 5000)).any()


def test_mark_deleted_rows_never_returned_and_revived_by_add(data):
    x, q = data
    index = HNSWIndex(DIM, ef_construction=100)
    index.add(x)
    top = index.search(q, 10)[0]
    gone = np.unique(top[:, :3])
    index.mark_deleted(gone)
    assert index.n == 3000 - gone.size
    for mask in (None, np.ones(3000, bool)):
        rows, _, counts = index.search(q, 10, mask=mask)
        assert not np.isin(rows, gone).any() and (counts == 10).all()
    exact = FlatIndex.from_vectors(x).search(q, 10, mask=index.alive.copy())[0]
    assert recall(index.search(q, 10)[0], exact) >= 0.95
    index.add(x[gone[:1]], rows=gone[:1])  # re-adding a deleted row brings it back
    assert index.alive[gone[0]] and index.n == 3000 - gone.size + 1
    with pytest.raises(ConfigError, match=rf"cannot delete row {gone[1]}: it is not a live row"):
        index.mark_deleted([gone[1]])
    with pytest.raises(ConfigError, match=r"cannot delete row 99999"):
        index.mark_deleted([99999])


def test_save_load_identical_results(built, data, tmp_path):
    x, q = data
    index = HNSWIndex(DIM, ef_construction=100, seed=3)
    index.add(x)
    index.mark_deleted([5, 17, 2999])
    before = index.search(q, 10)
    path = tmp_path / "hnsw.bin"
    index.save(path)
    loaded = HNSWIndex.load(path, DIM, "cosine", ef=64)
    assert (loaded.M, loaded.ef_construction, loaded.n, loaded.n_rows) == (16, 100, 2997, 3000)
    assert not loaded.alive[[5, 17, 2999]].any()
    for a, b in zip(before, loaded.search(q, 10), strict=False):
        np.testing.assert_array_equal(a, b)
    loaded.add(x[:1], rows=[3000])  # a loaded index keeps growing
    assert loaded.n_rows == 3001
    raw = hnswlib.Index(space="ip", dim=DIM)  # the file is plain hnswlib format
    raw.load_index(str(path))
    assert raw.element_count == 3000


def test_load_errors(built, tmp_path):
    path = tmp_path / "h.bin"
    built.save(path)
    with pytest.raises(StoreError, match=r"holds vectors of dim 24, not dim=8"):
        HNSWIndex.load(path, 8)
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(StoreError, match=r"is truncated \(50 bytes\); rebuild the index"):
        HNSWIndex.load(path, DIM)
    path.write_bytes(bytes(200))
    with pytest.raises(StoreError, match=r"holds vectors of dim 0|cannot load HNSW index"):
        HNSWIndex.load(path, DIM)
    with pytest.raises(StoreError, match=r"cannot read HNSW index"):
        HNSWIndex.load(tmp_path / "missing.bin", DIM)


class RecordingIndex:
    """Wraps the hnswlib index and records the ``filter`` each knn_query receives."""

    def __init__(self, inner):
        self.inner = inner
        self.filters = []

    def knn_query(self, data, k, num_threads, filter):
        self.filters.append(filter)
        return self.inner.knn_query(data, k=k, num_threads=num_threads, filter=filter)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def thresholds(monkeypatch):
    """At most 100 rows or 5% of live rows -> exact; more -> hnswlib's filter."""
    monkeypatch.setattr(hnsw_mod, "EXACT_MAX_ROWS", 100)
    monkeypatch.setattr(hnsw_mod, "EXACT_MAX_FRACTION", 0.05)
    monkeypatch.setattr(hnsw_mod, "EXACT_MAX_FRACTION_BATCH", 0.05)


@pytest.mark.parametrize("use_vectors", [True, False])
def test_selective_mask_is_exact(built, data, use_vectors, thresholds):
    x, q = data
    mask = np.zeros(3000, bool)
    mask[np.random.default_rng(1).choice(3000, 60, replace=False)] = True
    spy = RecordingIndex(built._index)
    built._index = spy
    try:
        got = built.search(q, 10, mask=mask, exact_fallback_vectors=x if use_vectors else None)
    finally:
        built._index = spy.inner
    exact = FlatIndex.from_vectors(x).search(q, 10, mask=mask)
    assert spy.filters == []  # no graph walk at all
    np.testing.assert_array_equal(got[0], exact[0])
    np.testing.assert_allclose(got[1], exact[1], atol=1e-6)


def test_broad_mask_uses_hnswlib_filter(built, data, thresholds):
    x, q = data
    mask = np.random.default_rng(2).random(3000) < 0.5
    spy = RecordingIndex(built._index)
    built._index = spy
    try:
        rows, _, counts = built.search(q, 10, mask=mask)
    finally:
        built._index = spy.inner
    assert len(spy.filters) == 1 and spy.filters[0] is not None
    assert mask[rows].all() and (counts == 10).all()
    exact = FlatIndex.from_vectors(x).search(q, 10, mask=mask)[0]
    assert recall(rows, exact) >= 0.95


def test_batches_switch_to_exact_at_a_wider_mask(built, data, monkeypatch):
    _, q = data
    monkeypatch.setattr(hnsw_mod, "EXACT_MAX_ROWS", 0)
    monkeypatch.setattr(hnsw_mod, "EXACT_MAX_FRACTION", 0.05)
    monkeypatch.setattr(hnsw_mod, "EXACT_MAX_FRACTION_BATCH", 0.15)
    mask = np.zeros(3000, bool)
    mask[::10] = True  # 10%: filter for one query, exact for a batch of 16+
    spy = RecordingIndex(built._index)
    built._index = spy
    try:
        built.search(q[0], 5, mask=mask)
        assert len(spy.filters) == 1
        built.search(q[: hnsw_mod.EXACT_BATCH_MIN_QUERIES], 5, mask=mask)
        assert len(spy.filters) == 1
    finally:
        built._index = spy.inner


def test_missing_extra_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "hnswlib", None)  # import hnswlib -> ImportError
    with pytest.raises(
        MissingExtraError,
        match=r"index='hnsw' needs the optional package 'hnswlib'.*"
        r"pip install 'fastrag-engine\[hnsw\]'",
    ):
        HNSWIndex(8)
    with pytest.raises(MissingExtraError, match=r"fastrag-engine\[hnsw\]"):
        HNSWIndex.load("whatever.bin", 8)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"M": 0}, r"M must be an int >= 1, got 0"),
        ({"ef": 0}, r"ef must be an int >= 1, got 0"),
        ({"ef_construction": -1}, r"ef_construction must be an int >= 1, got -1"),
        ({"max_elements": 0}, r"max_elements must be an int >= 1, got 0"),
        ({"metric": "l2"}, r"unknown metric 'l2'"),
        (
            {"num_threads": 0},
            r"num_threads must be None \(numba's current setting\) or an int >= 1, got 0",
        ),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        HNSWIndex(8, **kwargs)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda ix: ix.add(np.ones((2, 8)), rows=[1, 1]), r"rows contains duplicate row ids"),
        (lambda ix: ix.add(np.ones((2, 8)), rows=[1]), r"rows has 1 entries for 2 vectors"),
        (lambda ix: ix.add(np.ones((1, 8)), rows=[-4]), r"rows contains negative row -4"),
        (lambda ix: ix.add(np.ones((1, 8)), rows=[1.5]), r"rows must be a 1-D integer array"),
        (lambda ix: ix.add(np.full((1, 8), np.nan)), r"vectors row 0 contains NaN or inf"),
        (lambda ix: ix.add(np.ones((1, 7))), r"vectors have dim 7 but the index has dim 8"),
        (lambda ix: ix.search(np.ones(8), 0), r"k must be an int >= 1 \(the number of hits.*got 0"),
        (
            lambda ix: ix.search(np.ones(8), 1, mask=np.ones(3, bool)),
            r"mask has 3 entries but the index has rows up to 9",
        ),
        (lambda ix: ix.search(np.ones(8), 1, mask=np.ones(10, int)), r"mask must be a 1-D bool"),
        (
            lambda ix: ix.search(
                np.ones(8),
                1,
                mask=np.eye(10, dtype=bool)[0],
                exact_fallback_vectors=np.ones((4, 8)),
            ),
            r"exact_fallback_vectors has 4 rows but the index has rows up to 9",
        ),
    ],
)
def test_bad_add_and_search_arguments(call, match):
    index = HNSWIndex(8)
    index.add(np.random.default_rng(0).standard_normal((10, 8)))
    with pytest.raises(ConfigError, match=match):
        call(index)


def test_empty_and_fully_masked_searches_pad():
    index = HNSWIndex(4)
    rows, scores, counts = index.search(np.ones((2, 4)), 3)
    assert (rows == -1).all() and np.isneginf(scores).all() and (counts == 0).all()
    index.add(np.eye(4, dtype=np.float32))
    rows, _, counts = index.search(np.ones(4), 3, mask=np.zeros(4, bool))
    assert (rows == -1).all() and counts.tolist() == [0]
