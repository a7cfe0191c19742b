"""Top-k selection kernels: a bounded min-heap keyed by ``(score, -row)``.

The heap keeps the k best ``(score, row)`` pairs seen so far with the *worst* at the root, where
"better" means a higher score, and on equal scores the lower row (ties broken by row order, so
results are reproducible). Helpers take the heap as two parallel arrays (``heap_scores``,
``heap_rows``) plus an optional ``pos`` array mapping a row to its heap slot (``-1`` when absent),
which lets BM25 scoring raise the score of a row already in the heap in ``O(log k)``.

Public kernels: :func:`topk_dense` (one score vector) and :func:`topk_rows` (a matrix, one row
per query, ``prange`` over rows). Both skip ``-inf`` and NaN scores.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._config import FASTMATH, PARALLEL_MIN_QUERIES


@njit(cache=True, inline="always")
def worse(s1, r1, s2, r2) -> bool:
    """True when ``(s1, r1)`` ranks strictly below ``(s2, r2)``: lower score, or same score
    and a later row."""
    return s1 < s2 or (s1 == s2 and r1 > r2)


@njit(cache=True, fastmath=FASTMATH, nogil=True, _nrt=False)
def heap_sift_down(heap_scores, heap_rows, pos, track, n, i):
    """Move the item at slot ``i`` toward the leaves until both children rank above it."""
    s = heap_scores[i]
    r = heap_rows[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        rc = c + 1
        if rc < n and worse(heap_scores[rc], heap_rows[rc], heap_scores[c], heap_rows[c]):
            c = rc
        if worse(heap_scores[c], heap_rows[c], s, r):
            heap_scores[i] = heap_scores[c]
            heap_rows[i] = heap_rows[c]
            if track:
                pos[heap_rows[i]] = i
            i = c
        else:
            break
    heap_scores[i] = s
    heap_rows[i] = r
    if track:
        pos[r] = i


@njit(cache=True, fastmath=FASTMATH, nogil=True, _nrt=False)
def heap_sift_up(heap_scores, heap_rows, pos, track, i):
    """Move the item at slot ``i`` toward the root while it ranks below its parent."""
    s = heap_scores[i]
    r = heap_rows[i]
    while i > 0:
        p = (i - 1) >> 1
        if worse(s, r, heap_scores[p], heap_rows[p]):
            heap_scores[i] = heap_scores[p]
            heap_rows[i] = heap_rows[p]
            if track:
                pos[heap_rows[i]] = i
            i = p
        else:
            break
    heap_scores[i] = s
    heap_rows[i] = r
    if track:
        pos[r] = i


@njit(cache=True, fastmath=FASTMATH, nogil=True, _nrt=False)
def heap_offer(heap_scores, heap_rows, pos, track, n, k, score, row) -> int:
    """Offer ``(score, row)`` (row not in the heap) to a heap of ``n`` <= ``k`` items; return
    the new size. When full, it replaces the root only if it ranks above it."""
    if n < k:
        heap_scores[n] = score
        heap_rows[n] = row
        heap_sift_up(heap_scores, heap_rows, pos, track, n)
        return n + 1
    if worse(heap_scores[0], heap_rows[0], score, row):
        if track:
            pos[heap_rows[0]] = -1
        heap_scores[0] = score
        heap_rows[0] = row
        heap_sift_down(heap_scores, heap_rows, pos, track, n, 0)
    return n


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def heap_drain_sorted(heap_scores, heap_rows, pos, track, n, out_rows, out_scores):
    """Empty the heap into ``out_rows[:n]``/``out_scores[:n]`` best first (ties by row)."""
    for j in range(n - 1, -1, -1):
        out_rows[j] = heap_rows[0]
        out_scores[j] = heap_scores[0]
        if track:
            pos[heap_rows[0]] = -1
        last = j
        if last > 0:
            heap_scores[0] = heap_scores[last]
            heap_rows[0] = heap_rows[last]
            heap_sift_down(heap_scores, heap_rows, pos, track, last, 0)


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def topk_dense(scores, k, out_rows, out_scores) -> int:
    """Top-``k`` of one score vector into ``out_rows``/``out_scores`` (length >= k), best first,
    ties by row order; ``-inf`` and NaN are never selected. Unused slots get ``-1``/``-inf``.
    Returns the number of rows written."""
    n = scores.shape[0]
    kk = min(k, n)
    heap_s = np.empty(max(kk, 1), np.float32)
    heap_r = np.empty(max(kk, 1), np.int64)
    dummy = np.empty(0, np.int32)
    size = np.int64(0)
    neg_inf = np.float32(-np.inf)
    for i in range(n):
        s = np.float32(scores[i])
        if not (s > neg_inf):  # -inf and NaN
            continue
        if size == kk and not worse(heap_s[0], heap_r[0], s, i):
            continue
        size = heap_offer(heap_s, heap_r, dummy, False, size, kk, s, i)
    heap_drain_sorted(heap_s, heap_r, dummy, False, size, out_rows, out_scores)
    for j in range(size, out_rows.shape[0]):
        out_rows[j] = -1
        out_scores[j] = neg_inf
    return size


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def _topk_rows_parallel(scores, k, out_rows, out_scores, out_counts):
    for i in prange(scores.shape[0]):
        out_counts[i] = topk_dense(scores[i], k, out_rows[i], out_scores[i])


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _topk_rows_serial(scores, k, out_rows, out_scores, out_counts):
    for i in range(scores.shape[0]):
        out_counts[i] = topk_dense(scores[i], k, out_rows[i], out_scores[i])


def topk_rows(scores, k, out_rows, out_scores, out_counts) -> None:
    """Row-wise top-``k`` of a 2-D score matrix (``prange`` over rows from
    ``PARALLEL_MIN_QUERIES`` rows up). Outputs: ``out_rows`` int64 ``[n, k]``, ``out_scores``
    float32 ``[n, k]``, ``out_counts`` int32 ``[n]``."""
    if scores.shape[0] >= PARALLEL_MIN_QUERIES:
        _topk_rows_parallel(scores, k, out_rows, out_scores, out_counts)
    else:
        _topk_rows_serial(scores, k, out_rows, out_scores, out_counts)
