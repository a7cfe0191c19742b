"""Dense-vector kernels: row norms, normalisation and exact top-k (float32 scores).

Exact search keeps, per query, a bounded *worst-at-root* heap of ``(score, row)`` pairs:
``heap_scores[i, 0]`` is the current k-th best score, so a candidate is only considered when it
beats it. Heaps start filled with sentinels ``(-inf, ROW_SENTINEL)``; a finite score always
beats a sentinel. "Better" means a higher score, ties broken by the lower row.

Two ways in:

* ``merge_block_serial``: the caller computed a block of scores ``queries @ chunk.T`` with
  BLAS sgemm and the kernel merges it into the heaps. It is ``nogil``: the caller runs one
  worker thread per share of the corpus (each with single-threaded BLAS and its own heaps),
  so threads meet once per search, not once per block. Each worker takes its chunks in
  ascending row order, so a strictly greater score is the whole "better" test;
  ``merge_candidates`` merges the workers' heaps with the full (score, row) order.
* ``fused_search``: for one or a few queries (a memory-bound scan) the kernel computes the dot
  products itself while streaming the corpus once, ``prange`` over corpus blocks, each block
  with its own heaps; ``merge_candidates`` then merges the per-block heaps.

``finalize_topk`` turns heaps into sorted, padded outputs; ``exact_final_scores`` recomputes
the hits' scores in one fixed summation order. The bf16 / int8 first pass of a batch is in
``dense_quant``. All kernels accept read-only arrays.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from ._config import FASTMATH
from .topk import worse

ROW_SENTINEL = np.iinfo(np.int64).max
# Scores are compared GROUP at a time with an OR-reduction before any heap work (64 vectorises;
# measured: 32 does not, with numba 0.68 on AVX-512).
GROUP = 64
# Rows per score tile of the fused scan (n_queries x 512 float32 stays in L1/L2).
_FUSED_TILE = 512


@njit(cache=True, inline="always")
def replace_root(hs, hr, k, s, r):
    """Replace the root (worst) of a worst-at-root heap with ``(s, r)`` and sift it down."""
    i = 0
    while True:
        c = 2 * i + 1
        if c >= k:
            break
        c2 = c + 1
        if c2 < k and worse(hs[c2], hr[c2], hs[c], hr[c]):
            c = c2
        if worse(hs[c], hr[c], s, r):
            hs[i] = hs[c]
            hr[i] = hr[c]
            i = c
        else:
            break
    hs[i] = s
    hr[i] = r


@njit(cache=True, inline="always")
def _offer_range(srow, lo, hi, thr, row0, row_map, use_map, mask, use_mask, hs, hr, k):
    """Offer ``srow[lo:hi]`` to the heap one by one; return the new threshold."""
    for t in range(lo, hi):
        s = srow[t]
        if s > thr:
            r = row_map[t] if use_map else row0 + t
            if use_mask and not mask[r]:
                continue
            replace_root(hs, hr, k, s, r)
            thr = hs[0]
    return thr


@njit(cache=True, inline="always")
def _merge_row(srow, m, row0, row_map, use_map, mask, use_mask, hs, hr, k):
    """Merge ``srow[:m]`` (scores of rows ``row0 + j`` or ``row_map[j]``, ascending) into a heap.

    Groups of ``GROUP`` scores are first tested with an integer OR of the comparisons (a
    fixed-length loop LLVM vectorises: ~0.1 ns per score against ~0.6 for a scalar scan);
    only a group holding a candidate is offered score by score.
    """
    thr = hs[0]
    j = 0
    while j + GROUP <= m:
        hit = 0
        for t in range(GROUP):
            hit |= np.int32(srow[j + t] > thr)
        if hit:
            thr = _offer_range(
                srow, j, j + GROUP, thr, row0, row_map, use_map, mask, use_mask, hs, hr, k
            )
        j += GROUP
    _offer_range(srow, j, m, thr, row0, row_map, use_map, mask, use_mask, hs, hr, k)


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def merge_block_serial(scores, m, row0, row_map, use_map, mask, use_mask, q0, heap_s, heap_r):
    """Merge ``scores[i, :m]`` into heaps ``q0 + i`` for every row ``i`` of ``scores``.

    Column ``j`` is row ``row_map[j]`` if ``use_map`` else ``row0 + j``; with ``use_mask``
    only rows with ``mask[row]`` set are kept (checked for candidates only).
    """
    k = heap_s.shape[1]
    for i in range(scores.shape[0]):
        _merge_row(
            scores[i], m, row0, row_map, use_map, mask, use_mask, heap_s[q0 + i], heap_r[q0 + i], k
        )


@njit(cache=True, inline="always")
def _fused_block(vectors, queries, rows, use_rows, mask, use_mask, start, stop, hs, hr):
    """Heaps ``hs[i]``/``hr[i]`` of query ``i`` over positions ``start .. stop - 1``.

    Dot products go ``_FUSED_TILE`` rows at a time into a small (L1-resident) score tile,
    which :func:`_merge_row` then merges: keeping the heap out of the dot-product loop lets
    that loop run at memory speed. Masked-out rows score ``-inf`` and are never offered.
    """
    n_q = queries.shape[0]
    dim = vectors.shape[1]
    k = hs.shape[1]
    tile = np.empty((n_q, _FUSED_TILE), np.float32)
    for t0 in range(start, stop, _FUSED_TILE):
        m = min(_FUSED_TILE, stop - t0)
        for j in range(m):
            p = t0 + j
            r = rows[p] if use_rows else p
            if use_mask and not mask[r]:
                for i in range(n_q):
                    tile[i, j] = -np.inf
                continue
            x = vectors[r]
            for i in range(n_q):
                q = queries[i]
                acc = np.float32(0.0)
                for d in range(dim):
                    acc += x[d] * q[d]
                tile[i, j] = acc
        for i in range(n_q):
            _merge_row(
                tile[i],
                m,
                t0,
                rows[t0 : t0 + m] if use_rows else rows,
                use_rows,
                mask,
                False,
                hs[i],
                hr[i],
                k,
            )


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def fused_search(vectors, queries, rows, use_rows, mask, use_mask, block, heap_s, heap_r):
    """Exact top-k of a few queries in one streaming pass over the corpus.

    Positions ``p`` run over ``rows`` (ascending row ids) if ``use_rows`` else over all rows of
    ``vectors``; block ``b`` covers positions ``[b*block, (b+1)*block)`` and fills heaps
    ``heap_s[b, i]`` / ``heap_r[b, i]`` (shape ``(n_blocks, n_queries, k)``, sentinel-filled).
    """
    n_pos = rows.shape[0] if use_rows else vectors.shape[0]
    for b in prange(heap_s.shape[0]):
        _fused_block(
            vectors,
            queries,
            rows,
            use_rows,
            mask,
            use_mask,
            b * block,
            min((b + 1) * block, n_pos),
            heap_s[b],
            heap_r[b],
        )


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def fused_search_serial(vectors, queries, rows, use_rows, mask, use_mask, heap_s, heap_r):
    """:func:`fused_search` on the calling thread, one block (small corpora)."""
    n_pos = rows.shape[0] if use_rows else vectors.shape[0]
    _fused_block(vectors, queries, rows, use_rows, mask, use_mask, 0, n_pos, heap_s, heap_r)


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def merge_candidates(cand_s, cand_r, heap_s, heap_r):
    """Merge per-block heaps ``cand_*[b, i, :]`` (any order) into the heaps ``heap_*[i]``."""
    n_blocks, n_q, kc = cand_s.shape
    k = heap_s.shape[1]
    for i in range(n_q):
        hs = heap_s[i]
        hr = heap_r[i]
        for b in range(n_blocks):
            for t in range(kc):
                s = cand_s[b, i, t]
                r = cand_r[b, i, t]
                if worse(hs[0], hr[0], s, r):
                    replace_root(hs, hr, k, s, r)


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def finalize_topk(heap_s, heap_r, cutoff, out_rows, out_scores, counts):
    """Sort each heap best first into ``out_*[:, :k]``; pad with row -1 and score -inf.

    Entries below ``cutoff`` (pass ``-inf`` for none) are dropped; ``counts[i]`` is the number
    of real hits of query ``i``. Destroys the heaps.
    """
    n_q, k = heap_s.shape
    width = out_rows.shape[1]
    for i in range(n_q):
        hs = heap_s[i]
        hr = heap_r[i]
        # heap sort: pop the worst into the last free slot
        for size in range(k, 0, -1):
            s = hs[0]
            r = hr[0]
            last_s = hs[size - 1]
            last_r = hr[size - 1]
            if size > 1:
                replace_root(hs, hr, size - 1, last_s, last_r)
            hs[size - 1] = s
            hr[size - 1] = r
        c = 0
        for t in range(k):
            if hr[t] == ROW_SENTINEL or not hs[t] >= cutoff:
                break
            out_rows[i, t] = hr[t]
            out_scores[i, t] = hs[t]
            c += 1
        for t in range(c, width):
            out_rows[i, t] = -1
            out_scores[i, t] = -np.inf
        counts[i] = c


@njit(cache=True, inline="always")
def _sq_norm(x):
    acc = 0.0
    for d in range(x.shape[0]):
        v = np.float64(x[d])
        acc += v * v
    return acc


@njit(cache=True, inline="always")
def _scale_row(x, sq_norm, out):
    inv = np.float32(1.0 / np.sqrt(sq_norm)) if sq_norm > 0.0 else np.float32(0.0)
    for d in range(x.shape[0]):
        out[d] = x[d] * inv


@njit(cache=True, parallel=True)
def row_sq_norms(vectors, out):
    """``out[i] = sum(vectors[i] ** 2)`` accumulated in float64 (NaN/inf propagate)."""
    for i in prange(vectors.shape[0]):
        out[i] = _sq_norm(vectors[i])


@njit(cache=True, nogil=True)
def row_sq_norms_serial(vectors, out):
    """:func:`row_sq_norms` on the calling thread (small inputs such as queries)."""
    for i in range(vectors.shape[0]):
        out[i] = _sq_norm(vectors[i])


@njit(cache=True, parallel=True)
def normalize_rows(vectors, sq_norms, out):
    """``out[i] = vectors[i] / ||vectors[i]||``; zero rows stay zero."""
    for i in prange(vectors.shape[0]):
        _scale_row(vectors[i], sq_norms[i], out[i])


@njit(cache=True, nogil=True)
def normalize_rows_serial(vectors, sq_norms, out):
    """:func:`normalize_rows` on the calling thread (small inputs such as queries)."""
    for i in range(vectors.shape[0]):
        _scale_row(vectors[i], sq_norms[i], out[i])


@njit(cache=True, nogil=True)
def prepare_queries(queries, cosine, out):
    """Copy ``queries`` into ``out``, normalised when ``cosine`` (zero rows stay zero).

    Returns the first row holding NaN or inf, or -1 when all are finite.
    """
    for i in range(queries.shape[0]):
        sq = _sq_norm(queries[i])
        if not np.isfinite(sq):
            return i
        if cosine:
            _scale_row(queries[i], sq, out[i])
        else:
            for d in range(queries.shape[1]):
                out[i, d] = queries[i, d]
    return -1


@njit(cache=True, nogil=True)
def hnsw_results(labels, distances, cutoff, out_rows, out_scores, counts):
    """hnswlib ``(labels, 1 - similarity)`` -> rows and scores best first (ties by row),
    hits below ``cutoff`` dropped, padded with -1 / -inf to the width of ``out_*``."""
    n_q, kk = labels.shape
    width = out_rows.shape[1]
    for i in range(n_q):
        c = 0
        for t in range(kk):
            s = np.float32(1.0) - distances[i, t]
            if not s >= cutoff:
                continue
            r = np.int64(labels[i, t])
            j = c  # insertion sort: hnswlib's order is already nearly sorted
            while j > 0 and worse(out_scores[i, j - 1], out_rows[i, j - 1], s, r):
                out_scores[i, j] = out_scores[i, j - 1]
                out_rows[i, j] = out_rows[i, j - 1]
                j -= 1
            out_scores[i, j] = s
            out_rows[i, j] = r
            c += 1
        for t in range(c, width):
            out_rows[i, t] = -1
            out_scores[i, t] = -np.inf
        counts[i] = c


@intrinsic
def _lanes8_dot2(typingctx, q, x, y):
    """``(sum_l a_l, sum_l b_l)`` with ``a_l`` the float64 products ``q[d] * x[d]`` summed
    over ``d = l mod 8`` for the first ``len(q) // 8 * 8`` dimensions (``b_l``: ``y``), the lanes
    added as ``((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))``: one <8 x double>
    accumulator per product, so the written order runs eight lanes wide (numba leaves the
    scalar form unvectorised). C-contiguous float32 rows only."""
    rows = (q, x, y)
    if not all(
        isinstance(a, types.Array) and a.ndim == 1 and a.dtype == types.float32 and a.layout == "C"
        for a in rows
    ):
        return None

    def codegen(context, builder, sig, args):
        v8f = ir.VectorType(ir.FloatType(), 8)
        v8d = ir.VectorType(ir.DoubleType(), 8)
        arrays = [
            context.make_array(t)(context, builder, v) for t, v in zip(sig.args, args, strict=True)
        ]
        ptrs = [builder.bitcast(a.data, v8f.as_pointer()) for a in arrays]
        n = builder.extract_value(arrays[0].shape, 0)
        n8 = builder.udiv(n, ir.Constant(n.type, 8))
        zero = ir.Constant(v8d, [0.0] * 8)
        accs = [cgutils.alloca_once_value(builder, zero) for _ in range(2)]
        with cgutils.for_range(builder, n8) as loop:
            vq = builder.fpext(builder.load(builder.gep(ptrs[0], [loop.index]), align=4), v8d)
            for acc, ptr in zip(accs, ptrs[1:], strict=True):
                vr = builder.fpext(builder.load(builder.gep(ptr, [loop.index]), align=4), v8d)
                builder.store(builder.fadd(builder.load(acc), builder.fmul(vq, vr)), acc)
        sums = []
        for acc in accs:
            vec = builder.load(acc)
            lane = [builder.extract_element(vec, ir.Constant(ir.IntType(32), i)) for i in range(8)]
            pairs = [builder.fadd(lane[i], lane[i + 1]) for i in range(0, 8, 2)]
            sums.append(
                builder.fadd(builder.fadd(pairs[0], pairs[1]), builder.fadd(pairs[2], pairs[3]))
            )
        return context.make_tuple(builder, sig.return_type, sums)

    return types.UniTuple(types.float64, 2)(q, x, y), codegen


def _lanes8_sums(q, x, y):
    """The lane sums of :func:`fixed_dot2`: :func:`_lanes8_dot2` for C-contiguous float32
    rows, a scalar loop in the same order for any other rows."""


@overload(_lanes8_sums)
def _lanes8_dot2_any(q, x, y):
    if all(isinstance(a, types.Array) and a.layout == "C" for a in (q, x, y)) and all(
        a.dtype == types.float32 for a in (q, x, y)
    ):
        return lambda q, x, y: _lanes8_dot2(q, x, y)

    def scalar(q, x, y):
        a = np.zeros(8)
        b = np.zeros(8)
        for d in range(q.shape[0] // 8 * 8):
            a[d % 8] += np.float64(q[d]) * np.float64(x[d])
            b[d % 8] += np.float64(q[d]) * np.float64(y[d])
        return (
            ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])),
            ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7])),
        )

    return scalar


@njit(cache=True, inline="always")
def fixed_dot2(q, x, y):
    """``(q . x, q . y)`` each in one fixed order: float64 products summed in 8 lanes by
    dimension mod 8, the lanes pairwise, the tail, then rounded to float32. The products of
    float32 values are exact in float64, so ``fixed_dot2(x, q, y)[0]`` equals
    ``fixed_dot2(q, x, y)[0]`` bit for bit."""
    dim = q.shape[0]
    sa, sb = _lanes8_sums(q, x, y)
    ta = 0.0
    tb = 0.0
    for d in range(dim // 8 * 8, dim):
        ta += np.float64(q[d]) * np.float64(x[d])
        tb += np.float64(q[d]) * np.float64(y[d])
    return np.float32(sa + ta), np.float32(sb + tb)


@njit(cache=True, nogil=True)
def exact_final_scores(vectors, queries, out_rows, out_scores, counts, cutoff):
    """Recompute the score of every hit in one fixed summation order (float64, 8 lanes, then
    float32), re-sort each query's hits (best first, ties by row) and drop those below
    ``cutoff``: a (query, row) pair scores the same whatever path, batch size or BLAS kernel
    found it. No fastmath, so the order is exactly the written one."""
    n_q, width = out_rows.shape
    for i in range(n_q):
        c = counts[i]
        q = queries[i]
        t = 0
        while t + 1 < c:  # two rows at a time: two streams of cache misses in flight
            out_scores[i, t], out_scores[i, t + 1] = fixed_dot2(
                q, vectors[out_rows[i, t]], vectors[out_rows[i, t + 1]]
            )
            t += 2
        if t < c:
            out_scores[i, t] = fixed_dot2(q, vectors[out_rows[i, t]], q)[0]
        for t in range(1, c):  # insertion sort: the order was nearly right already
            s = out_scores[i, t]
            r = out_rows[i, t]
            u = t - 1
            while u >= 0 and (
                out_scores[i, u] < s or (out_scores[i, u] == s and out_rows[i, u] > r)
            ):
                out_scores[i, u + 1] = out_scores[i, u]
                out_rows[i, u + 1] = out_rows[i, u]
                u -= 1
            out_scores[i, u + 1] = s
            out_rows[i, u + 1] = r
        while c > 0 and not out_scores[i, c - 1] >= cutoff:
            out_rows[i, c - 1] = -1
            out_scores[i, c - 1] = -np.inf
            c -= 1
        counts[i] = c
