"""BM25 rank directories: a term in many documents finds a candidate's posting by popcount.

Facts checked: the directory's bits and counts, bit-identical top-k with and without
directories (serial, parallel, masks, cut-offs), that searches really take the directory path
(sabotaged directories change the results), one build per term under concurrent searches, and
corrupt postings reported instead of read."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from fastrag._kernels.bm25 import heads as kb

import fastrag.indexes.bm25.index as bm25_mod
from fastrag.errors import StoreError
from fastrag.indexes.bm25.index import BM25Index

N_DOCS = 30_000  # above _DENSE_MAX_DOCS: `auto` prunes (maxscore)
N_VOCAB = 3_000


@pytest.fixture(autouse=True)
def _kernels_now():
    """These tests exercise the numba path, never the NumPy one of a cold process."""
    from fastrag import _coldstart

    _coldstart.use_kernels()


def corpus(seed=0):
    rng = np.random.default_rng(seed)
    lens = rng.integers(3, 40, N_DOCS)
    offsets = np.zeros(N_DOCS + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    values = ((rng.zipf(1.25, int(offsets[-1])) - 1) % N_VOCAB).astype(np.int32)
    # rare terms first (their bounds are highest: admitted), then frequent ones (looked up)
    queries = [
        np.concatenate(
            [
                rng.integers(200, N_VOCAB, int(rng.integers(1, 3))),
                rng.integers(0, 12, int(rng.integers(1, 4))),
            ]
        ).astype(np.int32)
        for _ in range(300)
    ]
    q_off = np.zeros(len(queries) + 1, np.int64)
    np.cumsum([len(q) for q in queries], out=q_off[1:])
    return values, offsets, np.concatenate(queries), q_off


def build(values, offsets, *, rank: bool) -> BM25Index:
    old = bm25_mod.RANK_MIN_DOCS
    bm25_mod.RANK_MIN_DOCS = 1_000 if rank else 10**12
    try:
        return BM25Index.build(values, offsets, N_VOCAB)
    finally:
        bm25_mod.RANK_MIN_DOCS = old


def assert_same(a, b):
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1].view(np.int32), b[1].view(np.int32))  # bit-identical
    np.testing.assert_array_equal(a[2], b[2])


@pytest.fixture(scope="module")
def data():
    return corpus()


def test_directory_bits_and_counts_describe_each_terms_postings(data):
    values, offsets, _, _ = data
    index = build(values, offsets, rank=True)
    df = np.diff(index.indptr)
    eligible = np.flatnonzero(df >= N_DOCS // bm25_mod.RANK_DF_DIVISOR)
    assert 5 <= eligible.size < 200
    nbytes = index.build_rank_directories()
    assert index.rank_nbytes == eligible.size * 2 * ((N_DOCS + 63) // 64) * 8
    assert nbytes == index.rank_nbytes + index.head_nbytes  # (heads: test_bm25_heads.py)
    slots = index._rank_slot
    assert sorted(slots[eligible].tolist()) == list(range(eligible.size))
    assert (slots[np.setdiff1d(np.arange(N_VOCAB), eligible)] == -1).all()
    for t in eligible[:8]:
        docs = index.indices[index.indptr[t] : index.indptr[t + 1]]
        row = index._rank_dir[slots[t]]
        bits = np.zeros(row.shape[0] // 2 * 64, bool)
        bits[docs] = True
        words = np.packbits(bits.reshape(-1, 64)[:, ::-1], axis=1).view(">u8").ravel()
        np.testing.assert_array_equal(row[0::2], words.astype(np.uint64))
        per_word = np.bincount(docs // 64, minlength=row.shape[0] // 2)
        np.testing.assert_array_equal(row[1::2], np.concatenate([[0], np.cumsum(per_word)[:-1]]))


@pytest.mark.parametrize("threads", [1, 2])
def test_results_are_bit_identical_with_and_without_directories(data, threads):
    values, offsets, qv, qo = data
    plain = build(values, offsets, rank=False)
    ranked = build(values, offsets, rank=True)
    mask = np.random.default_rng(1).random(N_DOCS) < 0.7
    for kw in ({}, {"mask": mask}, {"cutoff": 3.0}, {"mask": mask, "cutoff": 2.0}):
        want = plain.search_csr(qv, qo, 10, num_threads=threads, **kw)
        got = ranked.search_csr(qv, qo, 10, num_threads=threads, **kw)
        assert_same(got, want)
        # and both equal the plain dense accumulation (no pruning at all)
        assert_same(plain.search_csr(qv, qo, 10, strategy="dense", **kw), want)
    assert ranked.rank_nbytes > 0 and plain.rank_nbytes == 0


def test_searches_take_the_directory_path(data):
    """Zeroed directories say no candidate holds the frequent terms: the scores must change,
    which they can only if the search reads the directories."""
    values, offsets, qv, qo = data
    index = build(values, offsets, rank=True)
    want = index.search_csr(qv, qo, 10)
    index._rank_dir[:] = 0
    got = index.search_csr(qv, qo, 10)
    changed = (got[1] != want[1]).any(axis=1).sum()
    assert changed >= 20, changed


def test_concurrent_first_searches_build_each_directory_once(data):
    values, offsets, qv, qo = data
    want = build(values, offsets, rank=False).search_csr(qv, qo, 10)
    index = build(values, offsets, rank=True)
    calls = []
    real = kb.build_rank_rows

    def counting(*args):
        calls.append(args[3].copy())
        return real(*args)

    errors, results = [], {}
    barrier = threading.Barrier(8)

    def worker(i):
        try:
            barrier.wait()
            for _ in range(3):
                results[i] = index.search_csr(qv, qo, 10, num_threads=1 + i % 2)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    kb.build_rank_rows = counting
    try:
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        kb.build_rank_rows = real
    assert not errors
    for got in results.values():
        assert_same(got, want)
    built = np.concatenate(calls)
    assert len(set(built.tolist())) == built.size  # no term built twice
    used = np.flatnonzero(index._rank_slot >= 0)
    assert sorted(built.tolist()) == used.tolist() and index._rank_used == used.size


def test_corrupt_postings_are_reported_not_read(data):
    values, offsets, _, _ = data
    index = build(values, offsets, rank=True)
    t = int(np.argmax(np.diff(index.indptr)))
    indices = index.indices.copy()
    indices[index.indptr[t] + 3] = N_DOCS + 5
    terms = np.array([t], np.int64)
    rank_dir = np.ones((1, 2 * ((N_DOCS + 63) // 64)), np.uint64)
    assert (
        kb.build_rank_rows(index.indptr, indices, N_DOCS, terms, np.zeros(1, np.int64), rank_dir)
        == 0
    )
    assert not rank_dir.any()  # left zero, never half-built
    arrays = dict(index.to_arrays(), indices=indices)
    old = bm25_mod.RANK_MIN_DOCS
    bm25_mod.RANK_MIN_DOCS = 1_000
    try:
        loaded = BM25Index.from_arrays(arrays, index.meta())
    finally:
        bm25_mod.RANK_MIN_DOCS = old
    with pytest.raises(StoreError, match="corrupt"):
        loaded.build_rank_directories()
    with pytest.raises(StoreError, match="corrupt"):
        loaded.search_csr(np.array([t], np.int32), np.array([0, 1]), 10)


def test_small_indexes_have_no_directories(data):
    values, offsets, qv, qo = data
    index = BM25Index.build(values, offsets, N_VOCAB)  # 30k docs < RANK_MIN_DOCS
    index.search_csr(qv, qo, 10)
    assert index.rank_nbytes == 0 and index.build_rank_directories() == 0
