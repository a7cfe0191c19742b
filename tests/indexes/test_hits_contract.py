"""Every index answers a search with the one :data:`fastrag.indexes.base.Hits` contract: rows
int64 ``[n_q, k]`` best first and padded with -1, scores float32 padded with -inf, counts
int32; ``mask``, ``cutoff`` and ``num_threads`` mean the same everywhere."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from fastrag.errors import ConfigError
from fastrag.indexes import BM25Index, FlatIndex, HNSWIndex, SparseIndex
from fastrag.indexes.base import Index

N_DOCS = 40


def _bm25():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 6, N_DOCS)
    values = rng.integers(0, 12, int(lengths.sum())).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    index = BM25Index.build(values, offsets, 12)
    return index, [[0, 1], [2, 3], [11]]


def _vectors():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((N_DOCS, 8)).astype(np.float32)
    return x, x[[3, 7, 11]] + 0.01


def _flat():
    x, q = _vectors()
    return FlatIndex.from_vectors(x, bf16=False, int8=False), q


def _hnsw():
    x, q = _vectors()
    index = HNSWIndex(8)
    index.add(x)
    return index, q


def _sparse():
    rng = np.random.default_rng(3)
    dicts = [
        {f"t{j}": float(rng.uniform(0.1, 1)) for j in rng.choice(10, 3, replace=False)}
        for _ in range(N_DOCS)
    ]
    return SparseIndex.from_dicts(dicts), [{"t1": 1.0}, {"t2": 0.5, "t3": 1.0}, {"t9": 2.0}]


INDEXES = {"bm25": _bm25, "flat": _flat, "hnsw": _hnsw, "sparse": _sparse}


def _searcher(name):
    index, queries = INDEXES[name]()
    return lambda k, **kw: index.search(queries, k, **kw)


@pytest.mark.parametrize("name", sorted(INDEXES))
def test_index_keeps_the_protocol(name):
    index, queries = INDEXES[name]()
    assert isinstance(index, Index)
    params = inspect.signature(type(index).search).parameters
    assert list(params)[1:3] == ["queries", "k"]
    for kw in ("mask", "cutoff", "num_threads"):
        assert params[kw].kind is inspect.Parameter.KEYWORD_ONLY and params[kw].default is None
    one = index.search(queries[0], 4)  # one query is a batch of one
    assert all(x.shape[0] == 1 for x in one)
    for a, b in zip(one, index.search(queries[:1], 4), strict=True):
        assert np.array_equal(a, b)


def test_bm25_search_is_search_csr_of_the_batch():
    index, queries = _bm25()
    want = index.search_csr(np.array([0, 1, 2, 3, 11], np.int32), np.array([0, 2, 4, 5]), 7)
    for got in (index.search(queries, 7), index.search([np.array(q) for q in queries], 7)):
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(a, b)
    assert [x.shape[0] for x in index.search([], 3)] == [0, 0, 0]


def _check_hits(hits, n_q: int, k: int) -> None:
    rows, scores, counts = hits
    assert rows.dtype == np.int64 and rows.shape == (n_q, k)
    assert scores.dtype == np.float32 and scores.shape == (n_q, k)
    assert counts.dtype == np.int32 and counts.shape == (n_q,)
    for i in range(n_q):
        c = int(counts[i])
        assert 0 <= c <= k
        assert np.all(rows[i, c:] == -1) and np.all(np.isneginf(scores[i, c:]))
        assert np.all(rows[i, :c] >= 0) and np.all(np.isfinite(scores[i, :c]))
        assert np.all(np.diff(scores[i, :c]) <= 0)  # best first


@pytest.mark.parametrize("name", sorted(INDEXES))
def test_search_answers_hits(name):
    search = _searcher(name)
    for k in (1, 5, N_DOCS + 3):
        _check_hits(search(k), 3, k)
    full = search(N_DOCS + 3)
    assert full[2].sum() > 0
    mask = np.zeros(N_DOCS, bool)
    mask[::2] = True
    rows, _, counts = hits = search(N_DOCS + 3, mask=mask)
    _check_hits(hits, 3, N_DOCS + 3)
    assert all(mask[r] for i in range(3) for r in rows[i, : counts[i]])
    cut = float(np.median(full[1][0, : full[2][0]]))
    _, scores, counts = hits = search(N_DOCS + 3, cutoff=cut)
    _check_hits(hits, 3, N_DOCS + 3)
    assert all(s >= cut for i in range(3) for s in scores[i, : counts[i]])
    one = search(5, num_threads=1)
    for a, b in zip(one, search(5, num_threads=None), strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("name", sorted(INDEXES))
@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_num_threads_is_checked_alike(name, bad):
    search = _searcher(name)
    with pytest.raises(ConfigError, match="num_threads"):
        search(3, num_threads=bad)
