"""The fixed-order dot product the exact dense scores come from, and the row-grouped rescoring
of a batch's candidates: both must give the scores and heaps of the plain forms bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from fastrag._kernels import dense as dense_kernels
from fastrag._kernels import dense_quant


def reference_dot(q: np.ndarray, x: np.ndarray) -> np.float32:
    """The written order: float64 products in 8 lanes by dimension mod 8, the lanes pairwise,
    then the tail, rounded to float32 (plain Python floats)."""
    n8 = q.shape[0] // 8 * 8
    lanes = [0.0] * 8
    for d in range(n8):
        lanes[d % 8] += float(q[d]) * float(x[d])
    tail = 0.0
    for d in range(n8, q.shape[0]):
        tail += float(q[d]) * float(x[d])
    a = lanes
    return np.float32((((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))) + tail)


@pytest.mark.parametrize("dim", [1, 7, 8, 9, 64, 385, 768])
def test_fixed_dot2_is_the_written_order_for_contiguous_and_strided_rows(dim):
    rng = np.random.default_rng(dim)
    x = rng.standard_normal((4, dim)).astype(np.float32) * np.float32(1e3)
    x[1, ::3] *= np.float32(1e-6)  # magnitudes far apart: any other order rounds differently
    got = dense_kernels.fixed_dot2(x[0], x[1], x[2])
    assert got == (reference_dot(x[0], x[1]), reference_dot(x[0], x[2]))
    swapped = dense_kernels.fixed_dot2(x[1], x[0], x[3])  # product order does not matter
    assert swapped[0] == got[0] and swapped[1] == reference_dot(x[1], x[3])
    cols = np.ascontiguousarray(x.T)  # columns of a C array: rows of another layout
    strided = dense_kernels.fixed_dot2(cols.T[0], cols.T[1], cols.T[2])
    assert strided == got


def candidates(n_q: int, n: int, k: int, seed: int) -> tuple[np.ndarray, ...]:
    """Two workers' candidate buffers: rows shared between queries, exact-duplicate rows
    (equal scores: ties broken by row), lower ends both below and above each query's bar, and
    two queries flagged ``over`` (left to the caller)."""
    rng = np.random.default_rng(seed)
    cap = 64
    cand_r = rng.integers(0, n, (2, n_q, cap)).astype(np.int64)
    cand_s = rng.standard_normal((2, n_q, cap)).astype(np.float32)
    n_cand = rng.integers(0, cap + 1, (2, n_q)).astype(np.int64)
    low_s = np.full((n_q, k), -np.inf, np.float32)
    low_s[:, 0] = rng.standard_normal(n_q).astype(np.float32) - 1.0
    low_s[::7, 0] = -np.inf
    over = np.zeros(n_q, np.bool_)
    over[[3, n_q - 1]] = True
    return low_s, cand_s, cand_r, n_cand, over


@pytest.mark.parametrize("n_q", [40, 200])
def test_rescoring_by_row_gives_the_per_query_heaps(n_q):
    rng = np.random.default_rng(n_q)
    n, dim, k = 500, 70, 10
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors[1::50] = vectors[::50]  # equal rows: equal scores, order by row
    queries = rng.standard_normal((n_q, dim)).astype(np.float32)
    args = (vectors, queries, *candidates(n_q, n, k, n_q))
    results = []
    for small_batches in (True, False):
        heap_s = np.full((n_q, k), -np.inf, np.float32)
        heap_r = np.full((n_q, k), dense_kernels.ROW_SENTINEL, np.int64)
        if small_batches:  # under BY_ROW_MIN_QUERIES: the per-query path, one block at a time
            step = dense_quant.BY_ROW_MIN_QUERIES - 1
            for q0 in range(0, n_q, step):
                part = slice(q0, q0 + step)
                low_s, cand_s, cand_r, n_cand, over = args[2:]
                dense_quant.rescore_candidates(
                    vectors,
                    queries[part],
                    low_s[part],
                    cand_s[:, part],
                    cand_r[:, part],
                    n_cand[:, part],
                    over[part],
                    heap_s[part],
                    heap_r[part],
                )
        else:
            dense_quant.rescore_candidates(*args, heap_s, heap_r)
        results.append((heap_s, heap_r))
    (s_a, r_a), (s_b, r_b) = results
    np.testing.assert_array_equal(s_a, s_b)
    np.testing.assert_array_equal(r_a, r_b)
    over = args[6]
    assert (r_a[over] == dense_kernels.ROW_SENTINEL).all()  # left to the caller
    live = ~over & (r_a[:, 0] != dense_kernels.ROW_SENTINEL)
    assert live.sum() > n_q // 2
    for q in np.flatnonzero(live)[:5]:  # the heaps hold the fixed-order scores of their rows
        for s, r in zip(s_a[q], r_a[q], strict=True):
            if r != dense_kernels.ROW_SENTINEL:
                assert s == reference_dot(queries[q], vectors[r])
