"""Low-level kernels behind BM25Index: top-k heap selection, radix sort, build passes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fastrag._kernels import bm25 as kbm25
from fastrag._kernels import topk as ktopk
from fastrag._kernels.bm25.primitives import cmov, heapsort, order_desc_stable

from fastrag.indexes.bm25 import weights as bm25_weights


def topk_reference(scores, k):
    """Best ``k`` (row, score) pairs, ties by row; -inf and NaN never selected."""
    rows = [i for i, s in enumerate(scores.tolist()) if not math.isnan(s) and s != -math.inf]
    rows.sort(key=lambda i: (-scores[i], i))
    return rows[:k]


@pytest.mark.parametrize("k", [1, 3, 10, 50])
def test_topk_dense_matches_reference_with_ties_and_non_finite(k):
    rng = np.random.default_rng(k)
    scores = rng.integers(0, 6, 40).astype(np.float32)  # many exact ties
    scores[[3, 9]] = -np.inf
    scores[[5, 11]] = np.nan
    scores[7] = np.inf
    rows = np.empty(k, np.int64)
    out = np.empty(k, np.float32)
    n = ktopk.topk_dense(scores, k, rows, out)
    ref = topk_reference(scores, k)
    assert n == len(ref) and rows[:n].tolist() == ref
    np.testing.assert_array_equal(out[:n], scores[ref])
    assert (rows[n:] == -1).all() and np.isneginf(out[n:]).all()


def test_topk_rows_serial_and_parallel_agree_with_reference():
    rng = np.random.default_rng(0)
    for n_rows in (3, 20):  # below and above PARALLEL_MIN_QUERIES
        scores = rng.integers(0, 9, (n_rows, 30)).astype(np.float32)
        rows = np.empty((n_rows, 4), np.int64)
        out = np.empty((n_rows, 4), np.float32)
        counts = np.empty(n_rows, np.int32)
        ktopk.topk_rows(scores, 4, rows, out, counts)
        for i in range(n_rows):
            assert rows[i].tolist() == topk_reference(scores[i], 4) and counts[i] == 4


@pytest.mark.parametrize("n", [0, 1, 63, 64, 5000])
@pytest.mark.parametrize("n_docs", [100, 3_000_000])
def test_sort_rows_sorts_in_place(n, n_docs):
    rng = np.random.default_rng(n)
    rows = rng.integers(0, n_docs, n + 5).astype(np.int32)
    expected = np.sort(rows[:n])
    tail = rows[n:].copy()
    kbm25.sort_rows(rows, n, n_docs)
    np.testing.assert_array_equal(rows[:n], expected)
    np.testing.assert_array_equal(rows[n:], tail)  # untouched beyond n


def test_build_passes_count_frequencies_and_postings():
    docs = [[2, 0, 2], [], [1, 2], [2]]
    values = np.array([t for d in docs for t in d], np.int32)
    offsets = np.array([0, 3, 3, 5, 6], np.int64)
    df, bad = kbm25.count_document_frequencies(values, offsets, 4)
    assert bad == -1 and df.tolist() == [1, 1, 3, 0]
    indptr, indices, tf = kbm25.build_postings(values, offsets, 4, df)
    assert indptr.tolist() == [0, 1, 2, 5, 5]
    assert indices.tolist() == [0, 2, 0, 2, 3] and tf.tolist() == [1, 1, 2, 1, 1]
    _, bad = kbm25.count_document_frequencies(np.array([0, 4], np.int32), np.array([0, 2]), 4)
    assert bad == 1


def test_idf_and_base_weights_follow_the_formulas():
    df = np.array([0, 1, 5, 10])
    n = 10
    np.testing.assert_allclose(
        bm25_weights.idf_weights("lucene", df, n)[1:], np.log1p((n - df[1:] + 0.5) / (df[1:] + 0.5))
    )
    assert bm25_weights.idf_weights("robertson", df, n)[3] == 0.0  # clamped, never negative
    np.testing.assert_allclose(bm25_weights.idf_weights("atire", df, n)[1:], np.log(n / df[1:]))
    idf = bm25_weights.idf_weights("bm25l", df, n)
    np.testing.assert_allclose(
        bm25_weights.base_weights_for("bm25l", idf, 1.5, 0.5), idf * 2.5 * 0.5 / 2.0
    )
    np.testing.assert_allclose(bm25_weights.base_weights_for("bm25+", idf, 1.5, 0.5), idf * 0.5)
    assert not bm25_weights.base_weights_for("lucene", idf, 1.5, 0.5).any()
    assert bm25_weights.idf_weights("lucene", df, n)[0] == 0.0


def test_small_sorts_match_numpy():
    """The search path's heapsorts (cheap to compile) order exactly like np.sort and a stable
    descending argsort, ties included."""
    rng = np.random.default_rng(11)
    for n in (0, 1, 2, 3, 7, 64, 1000):
        ints = rng.integers(0, max(1, n // 3), n).astype(np.int64)
        got = ints.copy()
        heapsort(got)
        np.testing.assert_array_equal(got, np.sort(ints))
        floats = rng.random(n).astype(np.float32)
        got = floats.copy()
        heapsort(got)
        np.testing.assert_array_equal(got, np.sort(floats))
        keys = rng.integers(0, 4, n).astype(np.float64)  # many ties
        np.testing.assert_array_equal(
            order_desc_stable(keys, n), np.argsort(-keys, kind="mergesort")
        )


def test_cmov_selects_like_a_conditional_expression():
    from numba import njit

    @njit
    def pick_all(cond, a, b):
        out = np.empty_like(a)
        for i in range(a.shape[0]):
            out[i] = cmov(cond[i], a[i], b[i])
        return out

    rng = np.random.default_rng(0)
    cond = rng.random(1000) < 0.5
    for dtype in (np.float32, np.uint32, np.int64):
        a = rng.integers(1, 1000, 1000).astype(dtype)
        b = rng.integers(1, 1000, 1000).astype(dtype)
        np.testing.assert_array_equal(pick_all(cond, a, b), np.where(cond, a, b))
