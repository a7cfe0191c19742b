"""BM25 impact heads: a term in many documents keeps its heaviest postings, heaviest first, and
a query whose bar leaves only those able to lift a new row admits new rows from them alone.

Facts checked: each head holds exactly its term's heaviest postings (ties by document) and
nothing left out weighs more than its last entry; top-k of queries made of common terms are
bit-identical to the dense accumulation and to an index without heads (serial, parallel,
masks, cut-offs, repeated terms, k from 1 to past the seeding limit); a one-term query's top-k
is the head's first k entries; searches really take the head path (sabotaged heads change the
results); two heads completed in one query never count a document twice; concurrent first
searches build every head once and completely."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import fastrag.indexes.bm25.index as bm25_mod
from fastrag.indexes.bm25.index import BM25Index

N_DOCS = 30_000
N_VOCAB = 3_000


@pytest.fixture(autouse=True)
def _kernels_now():
    """These tests exercise the numba path, never the NumPy one of a cold process."""
    from fastrag import _coldstart

    _coldstart.use_kernels()


def build(values, offsets, *, heads: bool) -> BM25Index:
    old = bm25_mod.RANK_MIN_DOCS
    bm25_mod.RANK_MIN_DOCS = 1_000 if heads else 10**12
    try:
        return BM25Index.build(values, offsets, N_VOCAB)
    finally:
        bm25_mod.RANK_MIN_DOCS = old


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    lens = rng.integers(3, 40, N_DOCS)
    offsets = np.zeros(N_DOCS + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    values = ((rng.zipf(1.2, int(offsets[-1])) - 1) % N_VOCAB).astype(np.int32)
    df = np.bincount(values, minlength=N_VOCAB)  # token counts: common terms are 0, 1, ...
    common = np.flatnonzero(df >= 3 * N_DOCS // bm25_mod.RANK_DF_DIVISOR)
    assert common.size >= 6
    # Queries of common terms only (the heads' case), some with a repeated term, and a few
    # with a rarer term too.
    queries = []
    for i in range(400):
        q = rng.choice(common, int(rng.integers(1, 5)))
        if i % 5 == 0:
            q = np.append(q, rng.integers(20, 400))
        queries.append(q.astype(np.int32))
    q_off = np.zeros(len(queries) + 1, np.int64)
    np.cumsum([len(q) for q in queries], out=q_off[1:])
    return values, offsets, np.concatenate(queries), q_off, common


def assert_same(a, b):
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1].view(np.int32), b[1].view(np.int32))  # bit-identical
    np.testing.assert_array_equal(a[2], b[2])


def expected_head(index, t):
    lo, hi = index.indptr[t], index.indptr[t + 1]
    docs, w = index.indices[lo:hi], index.data[lo:hi]
    n = int(hi - lo)
    h = min(n, max(bm25_mod.HEAD_MIN, n // bm25_mod.HEAD_DF_DIVISOR))
    order = np.lexsort((docs, -w))[:h]
    return docs[order], w[order], w


def check_heads(index):
    df = np.diff(index.indptr)
    eligible = np.flatnonzero(df >= N_DOCS // bm25_mod.RANK_DF_DIVISOR)
    total = 0
    for t in eligible[index._rank_slot[eligible] >= 0]:  # those built
        s = index._rank_slot[t]
        j0, j1 = index._head_ptr[s], index._head_ptr[s + 1]
        docs, w, all_w = expected_head(index, t)
        np.testing.assert_array_equal(index._head_doc[j0:j1], docs)
        np.testing.assert_array_equal(index._head_w[j0:j1].view(np.int32), w.view(np.int32))
        assert np.sort(all_w)[::-1][j1 - j0 :].max(initial=0) <= w[-1]
        total += j1 - j0
    assert index.head_nbytes == total * 8
    return eligible


def test_heads_hold_each_terms_heaviest_postings(data):
    values, offsets, *_ = data
    index = build(values, offsets, heads=True)
    assert index.head_nbytes == 0
    nbytes = index.build_rank_directories()
    eligible = check_heads(index)
    assert eligible.size >= 6 and (index._rank_slot[eligible] >= 0).all()
    assert nbytes == index.rank_nbytes + index.head_nbytes
    assert index.head_nbytes < index.rank_nbytes  # 1/32 of the postings


@pytest.mark.parametrize("threads", [1, 2])
def test_common_term_queries_are_exact(data, threads):
    values, offsets, qv, qo, _ = data
    plain = build(values, offsets, heads=False)
    headed = build(values, offsets, heads=True)
    mask = np.random.default_rng(2).random(N_DOCS) < 0.6
    for k in (1, 10, 64, 150):
        for kw in ({}, {"mask": mask}, {"cutoff": 1.5}, {"mask": mask, "cutoff": 1.0}):
            want = plain.search_csr(qv, qo, k, strategy="dense", **kw)
            assert_same(plain.search_csr(qv, qo, k, num_threads=threads, **kw), want)
            assert_same(headed.search_csr(qv, qo, k, num_threads=threads, **kw), want)
    assert headed.head_nbytes > 0 and plain.head_nbytes == 0


def test_one_term_query_is_the_heads_first_entries(data):
    values, offsets, _, _, common = data
    index = build(values, offsets, heads=True)
    for t in common[:6]:
        rows, scores, counts = index.search_csr(np.array([t], np.int32), np.array([0, 1]), 10)
        docs, w, _ = expected_head(index, t)
        np.testing.assert_array_equal(rows[0], docs[:10])
        np.testing.assert_array_equal(scores[0], w[:10])
        assert counts[0] == 10


def test_searches_take_the_head_path(data):
    """Heads whose documents are shifted by one admit the wrong rows: the results must change,
    which they can only if searches admit new rows from the heads."""
    values, offsets, qv, qo, _ = data
    index = build(values, offsets, heads=True)
    want = index.search_csr(qv, qo, 10)
    index._head_doc[:] = (index._head_doc + 1) % N_DOCS
    got = index.search_csr(qv, qo, 10)
    changed = (got[0] != want[0]).any(axis=1).sum()
    assert changed >= 100, changed


def test_concurrent_first_searches_build_complete_heads(data):
    values, offsets, qv, qo, _ = data
    want = build(values, offsets, heads=False).search_csr(qv, qo, 10, strategy="dense")
    index = build(values, offsets, heads=True)
    errors, results = [], {}
    barrier = threading.Barrier(8)

    def worker(i):
        try:
            barrier.wait()
            for j in range(3):  # different first queries: different terms built first
                a = (i * 37 + j * 11) % 300
                results[(i, j)] = (a, index.search_csr(qv, qo[a:], 10, num_threads=1 + i % 2))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    for a, got in results.values():
        assert_same(got, (want[0][a:], want[1][a:], want[2][a:]))
    check_heads(index)
    assert index._rank_used >= 6


def test_heads_of_two_terms_never_count_a_document_twice():
    """A mask leaves 6 short documents, at the top of both common terms' heads: with
    fewer than k hits there is no bar, so both heads are completed in turn; each head's k-th
    score must come from distinct documents, or the bar overshoots and drops hits."""
    rng = np.random.default_rng(9)
    lens = rng.integers(8, 40, N_DOCS)
    lens[:50] = 2  # "A B ...": the heaviest postings of both terms
    hits = [3, 7, 11, 19, 23, 42]
    lens[hits] = [2, 3, 4, 5, 6, 40]  # distinct scores; the last not in the heads' tops
    offsets = np.zeros(N_DOCS + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    values = rng.integers(2, N_VOCAB, int(offsets[-1])).astype(np.int32)
    values[offsets[:-1]] = 0
    values[offsets[:-1] + 1] = 1
    mask = np.zeros(N_DOCS, bool)
    mask[hits] = True
    plain = build(values, offsets, heads=False)
    headed = build(values, offsets, heads=True)
    qv, qo = np.array([0, 1], np.int32), np.array([0, 2])
    want = plain.search_csr(qv, qo, 10, mask=mask, strategy="dense")
    assert want[2][0] == 6
    assert_same(headed.search_csr(qv, qo, 10, mask=mask), want)
    assert headed.head_nbytes > 0
