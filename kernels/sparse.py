"""Sparse-vector kernels: an inverted index over learned sparse embeddings and exact top-k
dot-product search (bge-m3 "lexical weights", SPLADE and the like).

Input layout (doc-major CSR, as scipy): document ``d`` has dims ``indices[indptr[d]:
indptr[d+1]]`` (int32) with weights ``data[...]`` (float32). :func:`build_postings` turns it
into the dim-major layout (CSC) that search reads: dim ``t`` has documents
``rows[p_indptr[t]:p_indptr[t+1]]`` (int32, ascending) with weights ``weights[...]``. A dim
listed twice in one document gets two postings; their products add up, as in scipy.

Search (:func:`search_serial`, :func:`search_parallel`): for each query, walk the postings of
its dims and add ``q_weight * doc_weight`` into a float64 accumulator, remembering which rows
were touched (a row is appended by bumping a counter, no branch); then offer every touched row
to a bounded heap (:mod:`.topk`) and reset only those accumulator slots. Each product of two
float32 numbers is exact in float64, and every row's products are added in the query's dim
order, so a score is the float32 rounding of one well-defined float64 sum: a plain-Python
reference that adds in the same order gets bit-equal scores, equal documents get equal scores,
and ties fall back to the lower row (fused multiply-add cannot change an exact product's sum).

A *hit* is a row with a nonzero float32 score (untouched rows score exactly 0, so this is "a
touched row whose score is not 0"; a row whose products cancel, or underflow float32, is no
hit), allowed by the mask when one is given, and with ``score >= cutoff``. Negative weights are
allowed; negative scores then rank below every positive one. Query dims of weight 0 are
skipped (they change no score).

The wrapper checks every index against its bounds before calling: kernels do no bounds checks.
A parallel search splits the batch into one contiguous block of queries per thread (numba's
``prange`` schedules statically anyway), so each thread allocates its accumulator once.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._config import FASTMATH, PARALLEL_MIN_QUERIES
from .topk import heap_drain_sorted, heap_offer, worse

__all__ = ["PARALLEL_MIN_QUERIES", "build_postings", "search_parallel", "search_serial"]


@njit(cache=True, nogil=True)
def build_postings(n_dims, indptr, indices, data, out_indptr, out_rows, out_weights):
    """CSR ``(indptr, indices, data)`` of ``len(indptr) - 1`` documents -> dim-major postings.

    ``out_indptr`` int64 ``[n_dims + 1]``; ``out_rows`` int32 and ``out_weights`` float32, both
    ``[indptr[-1] - indptr[0]]``. Rows are ascending within each dim. Returns -1, or the
    position ``j`` of the first ``indices[j]`` outside ``[0, n_dims)`` (nothing is written past
    the counting pass then). ``indptr`` must be non-decreasing and within ``indices``.
    """
    n_docs = indptr.shape[0] - 1
    counts = np.zeros(n_dims + 1, np.int64)
    for d in range(n_docs):
        for j in range(indptr[d], indptr[d + 1]):
            t = indices[j]
            if t < 0 or t >= n_dims:
                return j
            counts[t + 1] += 1
    out_indptr[0] = 0
    for t in range(n_dims):
        out_indptr[t + 1] = out_indptr[t] + counts[t + 1]
    fill = out_indptr[:n_dims].copy()
    for d in range(n_docs):
        for j in range(indptr[d], indptr[d + 1]):
            t = indices[j]
            p = fill[t]
            out_rows[p] = d
            out_weights[p] = data[j]
            fill[t] = p + 1
    return -1


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _search_range(
    p_indptr,
    p_rows,
    p_weights,
    n_docs,
    q_indptr,
    q_indices,
    q_data,
    q0,
    q1,
    k,
    mask,
    use_mask,
    cutoff,
    out_rows,
    out_scores,
    out_counts,
):
    """Queries ``q0 <= q < q1``: accumulate, then top-``k`` of the touched rows."""
    acc = np.zeros(n_docs, np.float64)
    seen = np.zeros(n_docs, np.uint8)
    touched = np.empty(n_docs + 1, np.int32)  # +1: a seen row is written, then not kept
    kk = min(k, n_docs)
    heap_s = np.empty(max(kk, 1), np.float32)
    heap_r = np.empty(max(kk, 1), np.int64)
    dummy = np.empty(0, np.int32)
    neg_inf = np.float32(-np.inf)
    width = out_rows.shape[1]
    for q in range(q0, q1):
        n_touched = 0
        for j in range(q_indptr[q], q_indptr[q + 1]):
            qw = np.float64(q_data[j])
            if qw == 0.0:
                continue
            t = q_indices[j]
            for p in range(p_indptr[t], p_indptr[t + 1]):
                r = p_rows[p]
                touched[n_touched] = r
                n_touched += 1 - np.int64(seen[r])  # int64 also without the JIT (NEP 50)
                seen[r] = 1
                acc[r] += qw * np.float64(p_weights[p])
        size = np.int64(0)
        for i in range(n_touched):
            r = touched[i]
            s = np.float32(acc[r])
            acc[r] = 0.0
            seen[r] = 0
            if s == 0 or not s >= cutoff or (use_mask and not mask[r]):
                continue
            if size == kk and not worse(heap_s[0], heap_r[0], s, np.int64(r)):
                continue
            size = heap_offer(heap_s, heap_r, dummy, False, size, kk, s, np.int64(r))
        heap_drain_sorted(heap_s, heap_r, dummy, False, size, out_rows[q], out_scores[q])
        for j in range(size, width):
            out_rows[q, j] = -1
            out_scores[q, j] = neg_inf
        out_counts[q] = size


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def search_serial(
    p_indptr,
    p_rows,
    p_weights,
    n_docs,
    q_indptr,
    q_indices,
    q_data,
    k,
    mask,
    use_mask,
    cutoff,
    out_rows,
    out_scores,
    out_counts,
):
    """Exact top-``k`` dot products of the CSR queries ``(q_indptr, q_indices, q_data)`` on the
    calling thread. ``mask`` bool ``[n_docs]`` is read only when ``use_mask``; ``cutoff`` is a
    float (``-inf`` for none). Outputs: ``out_rows`` int64 ``[n_q, >= k]`` (best first, ties by
    the lower row, padded with -1), ``out_scores`` float32 (padded with ``-inf``),
    ``out_counts`` int32 ``[n_q]``."""
    _search_range(
        p_indptr,
        p_rows,
        p_weights,
        n_docs,
        q_indptr,
        q_indices,
        q_data,
        np.int64(0),
        q_indptr.shape[0] - 1,
        k,
        mask,
        use_mask,
        cutoff,
        out_rows,
        out_scores,
        out_counts,
    )


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def search_parallel(
    p_indptr,
    p_rows,
    p_weights,
    n_docs,
    q_indptr,
    q_indices,
    q_data,
    k,
    mask,
    use_mask,
    cutoff,
    n_blocks,
    out_rows,
    out_scores,
    out_counts,
):
    """:func:`search_serial` with the batch split into ``n_blocks`` contiguous blocks of
    queries run under ``prange`` (pass the thread count; each block allocates one
    accumulator of ``13 * n_docs`` bytes)."""
    n_q = q_indptr.shape[0] - 1
    for b in prange(n_blocks):
        q0 = b * n_q // n_blocks
        q1 = (b + 1) * n_q // n_blocks
        _search_range(
            p_indptr,
            p_rows,
            p_weights,
            n_docs,
            q_indptr,
            q_indices,
            q_data,
            q0,
            q1,
            k,
            mask,
            use_mask,
            cutoff,
            out_rows,
            out_scores,
            out_counts,
        )
