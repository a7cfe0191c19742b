"""Dense-vector kernels: row norms, normalisation and streaming exact top-k.

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

``finalize_topk`` turns heaps into sorted, padded outputs. All kernels accept read-only arrays.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._config import FASTMATH
from .topk import worse

ROW_SENTINEL = np.iinfo(np.int64).max
# Scores are compared 64 at a time with an OR-reduction before any heap work (64 vectorises;
# measured: 32 does not, with numba 0.68 on AVX-512).
_GROUP = 64
# Rows per score tile of the fused scan (n_queries x 512 float32 stays in L1/L2).
_FUSED_TILE = 512


@njit(cache=True, inline="always")
def _replace_root(hs, hr, k, s, r):
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
            _replace_root(hs, hr, k, s, r)
            thr = hs[0]
    return thr


@njit(cache=True, inline="always")
def _merge_row(srow, m, row0, row_map, use_map, mask, use_mask, hs, hr, k):
    """Merge ``srow[:m]`` (scores of rows ``row0 + j`` or ``row_map[j]``, ascending) into a heap.

    Groups of ``_GROUP`` scores are first tested with an integer OR of the comparisons (a
    fixed-length loop LLVM vectorises: ~0.1 ns per score against ~0.6 for a scalar scan);
    only a group holding a candidate is offered score by score.
    """
    thr = hs[0]
    j = 0
    while j + _GROUP <= m:
        hit = 0
        for t in range(_GROUP):
            hit |= np.int32(srow[j + t] > thr)
        if hit:
            thr = _offer_range(
                srow, j, j + _GROUP, thr, row0, row_map, use_map, mask, use_mask, hs, hr, k
            )
        j += _GROUP
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
                    _replace_root(hs, hr, k, s, r)


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
                _replace_root(hs, hr, size - 1, last_s, last_r)
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


# ------------------------------------------------------------------------------ bf16 first pass
# A batch can be scored first with bfloat16 inputs (AMX matrix units run that ~7x faster than
# float32 sgemm) and then *rescored exactly* in float32: the bf16 pass only chooses candidates,
# with an error bound wide enough that no row of the exact top-k is lost (see
# fastrag.indexes.flat). bf16 values travel as their uint16 bit patterns (numba has no bf16).


@njit(cache=True, inline="always")
def _to_bf16_row(src, dst):
    bits = src.view(np.uint32)
    sq = 0.0
    for d in range(src.shape[0]):
        v = np.float64(src[d])
        sq += v * v
        b = bits[d]
        dst[d] = np.uint16(
            (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
        )
    return np.sqrt(sq)


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def to_bf16(vectors, out, norms):
    """``out[i]`` = bf16 bits of ``vectors[i]`` (round to nearest even, finite inputs),
    ``norms[i]`` = its float32 norm, rounded up."""
    for i in prange(vectors.shape[0]):
        norms[i] = _round_up(_to_bf16_row(vectors[i], out[i]))


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def to_bf16_serial(vectors, out, norms):
    """:func:`to_bf16` on the calling thread (small inputs such as queries)."""
    for i in range(vectors.shape[0]):
        norms[i] = _round_up(_to_bf16_row(vectors[i], out[i]))


# ------------------------------------------------------------------------------ int8 first pass
# The same idea with int8 codes (AVX512-VNNI runs them at twice bf16's rate): each vector ``v``
# becomes ``s * c`` with ``s = max|v| / 127`` and integer codes ``c = round(v / s)`` in
# [-127, 127]; ``||v - s c||`` is measured exactly (float64) and bounds the first pass's error.
# No fastmath here: the error terms must be the written arithmetic.


@njit(cache=True, inline="always")
def _row_scale(src):
    """``(s, ||src||)``: the scale ``max|src| / 127`` (float32) and the norm (float64)."""
    amax = 0.0
    sq = 0.0
    for d in range(src.shape[0]):
        v = np.float64(src[d])
        amax = max(amax, abs(v))
        sq += v * v
    return np.float32(amax / 127.0), np.sqrt(sq)


@njit(cache=True, inline="always")
def _code(v, s, inv):
    """The code of ``v`` (a float64 integer in [-127, 127]) and ``(v - s * code)**2``, exact:
    ``s * code`` has at most 31 significant bits."""
    c = min(127.0, max(-127.0, np.floor(v * inv + 0.5)))
    e = v - s * c
    return c, e * e


@njit(cache=True, inline="always")
def _quantize_row(src, codes):
    """Codes of ``src`` into ``codes[:len(src)]``; returns ``(scale, ||src||, ||src - scale c||)``
    with the norms in float64 (the scale is float32)."""
    scale, norm = _row_scale(src)
    s = np.float64(scale)
    inv = 1.0 / s if scale > 0 else 0.0
    err = 0.0
    for d in range(src.shape[0]):
        c, e2 = _code(np.float64(src[d]), s, inv)
        codes[d] = np.int8(c)
        err += e2
    return scale, norm, np.sqrt(err)


@njit(cache=True, inline="always")
def _pack_row(vectors, r, row0, packed, scales, weights, weights2):
    src = vectors[r]
    dim = src.shape[0]
    scale, norm = _row_scale(src)
    s = np.float64(scale)
    inv = 1.0 / s if scale > 0 else 0.0
    g = (row0 + r) >> 4
    lane = (row0 + r) & 15
    err = 0.0
    for d in range(dim):  # codes go straight to their packed place, past dim they stay 128
        c, e2 = _code(np.float64(src[d]), s, inv)
        packed[g, d >> 2, lane, d & 3] = np.uint8(np.int32(c) + 128)
        err += e2
    err = np.sqrt(err)
    scales[row0 + r] = scale
    # float64 sums and square roots err by ~d 2**-53: the factor covers it, rounding up
    slack = 1.0 + 2.0**-30
    weights[row0 + r] = _round_up((err + 2.0 * dim * 2.0**-24 * norm) * slack)
    weights2[row0 + r] = _round_up((norm + err) * slack)


@njit(cache=True, parallel=True)
def to_int8(vectors, row0, packed, scales, weights, weights2):
    """Rows ``vectors[r]`` become row ``row0 + r`` of the int8 copy: unsigned codes ``c + 128``
    packed 16 rows at a time for VPDPBUSD (``packed[row // 16, t // 4, row % 16, t % 4]``;
    dimensions past ``dim`` stay 128, i.e. code 0) and their scale; and the row's error
    weights (float32, rounded up): ``weights`` = ``||x - s c||`` plus the float32 rescoring's
    share ``2 d 2**-24 ||x||``, ``weights2`` = ``||x|| + ||x - s c||`` (at least ``||s c||``)."""
    for r in prange(vectors.shape[0]):
        _pack_row(vectors, r, row0, packed, scales, weights, weights2)


@njit(cache=True, nogil=True)
def to_int8_serial(vectors, row0, packed, scales, weights, weights2):
    """:func:`to_int8` on the calling thread (small inputs)."""
    for r in range(vectors.shape[0]):
        _pack_row(vectors, r, row0, packed, scales, weights, weights2)


@njit(cache=True, nogil=True)
def quantize_queries(queries, codes, offsets, scales, norms, errors):
    """Signed codes of each query (``codes[i, :dim]``; the rest of the row is left as is),
    ``offsets[i] = 128 * sum(codes[i])`` (what the unsigned row codes add to the dot product),
    the scale and, in float64, ``||q||`` and ``||q - s c||``."""
    for i in range(queries.shape[0]):
        scale, norm, err = _quantize_row(queries[i], codes[i, : queries.shape[1]])
        total = 0
        for d in range(queries.shape[1]):
            total += np.int64(codes[i, d])
        offsets[i] = np.int32(128 * total)
        scales[i] = scale
        norms[i] = norm
        errors[i] = err


@njit(cache=True, inline="always")
def _round_up(x):
    """float64 -> the float32 at or above it."""
    t = np.float32(x)
    return np.nextafter(t, np.float32(np.inf)) if np.float64(t) < x else t


@njit(cache=True, inline="always")
def _round_down(x):
    """float64 -> the float32 at or below it."""
    t = np.float32(x)
    return np.nextafter(t, np.float32(-np.inf)) if np.float64(t) > x else t


@njit(cache=True, inline="always")
def _prefilter(low, e_max, rel):
    """The lowest approximate score ``x`` with ``x + e_max + rel * |x| >= low`` (rounded down,
    with slack): a row scoring less cannot reach ``low`` if its error is at most ``e_max``."""
    if low == -np.inf:
        return np.float32(-np.inf)
    y = np.float64(low) - e_max
    x = y / (1.0 + rel) if y >= 0.0 else y / (1.0 - rel)
    return _round_down(x - 2.0**-20 * (abs(x) + e_max))


@njit(cache=True, inline="always")
def _bf16_floor_bits(thr, vals, bits):
    """For a float32 ``thr > 0``: the int16 bits ``b`` of ``thr`` truncated to bf16, so every
    bf16 ``v >= thr`` has bits ``>= b`` as int16 (positive values sort by their bits, negative
    ones are below 0); 0 when ``thr <= 0`` or ``b`` is 0 (the int16 test then does not apply).
    ``vals`` / ``bits``: float32 / uint32 views of one scratch buffer."""
    if not thr > 0.0:
        return np.int16(0)
    vals[0] = thr
    return np.int16(bits[0] >> np.uint32(16))


@njit(cache=True, inline="always")
def _skip_below(srow, j, m, thr16):
    """The first ``j' >= j`` (a multiple of the group size from ``j``) whose group of
    ``_GROUP`` scores has one at or above ``thr16``; the tail group is not skipped."""
    while j + _GROUP <= m:
        grp = srow[j : j + _GROUP]  # indices from range(): no negative-index fix-ups
        hit = 0
        for t in range(_GROUP):
            hit |= np.int32(grp[t] >= thr16)
        if hit:
            return j
        j += _GROUP
    return j


@njit(cache=True, inline="always")
def _seed_bar(row, m, e_max, rel, bits, vals, gtop):
    """A lower bound on the k-th best exact score (``k = len(gtop)``) from the scores
    ``row[:m]`` alone: the k-th largest of the maxima of the first groups of ``_GROUP`` is
    the approximate score ``a`` of k rows scoring at least ``a``, whose lower ends are at least
    ``a``'s with the largest norm's error. -inf when there are fewer than k groups or ``a``
    is not finite. A row whose upper end is below it cannot be in the top k."""
    k = gtop.shape[0]
    n_groups = m // _GROUP
    if k == 0 or n_groups < k:
        return np.float32(-np.inf)
    gtop[:] = -np.inf  # ascending: gtop[0] is the k-th largest so far
    for gi in range(n_groups):
        grp = row[gi * _GROUP : (gi + 1) * _GROUP]
        for t in range(_GROUP):
            bits[t] = np.uint32(grp[t]) << np.uint32(16)
        mx = np.float32(-np.inf)
        for t in range(_GROUP):
            if vals[t] > mx:  # NaN never wins
                mx = vals[t]
        if mx > gtop[0]:
            u = 0
            while u + 1 < k and gtop[u + 1] < mx:
                gtop[u] = gtop[u + 1]
                u += 1
            gtop[u] = mx
    a = np.float64(gtop[0])
    if not (a > -np.inf and a < np.inf):
        return np.float32(-np.inf)
    e = e_max + rel * abs(a)
    e += 2.0**-20 * (abs(a) + e)
    return _round_down(a - e)


@njit(cache=True, nogil=True)
def merge_block_bf16(
    block,
    m,
    row0,
    norms,
    norms2,
    mask,
    use_mask,
    q0,
    coef,
    coef2,
    rel,
    heap_s,
    heap_r,
    cand_s,
    cand_r,
    n_cand,
    over,
):
    """Merge approximate scores ``block[i, :m]`` (bf16 bits; rows ``row0 + j`` with error
    weights ``norms[j]``, ``norms2[j]``) for queries ``q0 + i``.

    Row ``j`` of query ``q`` has an exact score within
    ``e = coef[q] * norms[j] + coef2[q] * norms2[j] + rel * |a|`` of its approximate score
    ``a``, so in ``[a - e, a + e]``. ``heap_*[q]`` keeps the k largest
    lower ends: its root ``low`` is at most the exact k-th best score. Every row whose upper end
    reaches ``low`` may belong to the exact top-k and goes to ``cand_*[q, :n_cand[q]]`` (with
    its upper end). A query whose candidates outgrow the buffer gets ``over[q]`` set and is
    left for an exact pass. Scores are first screened 64 at a time against the bound for the
    largest norm of the block; once that bound is positive, on their int16 bits."""
    k = heap_s.shape[1]
    cap = cand_s.shape[1]
    bits = np.empty(_GROUP, np.uint32)
    vals = bits.view(np.float32)
    neg_inf_bits = np.uint32(0xFF800000)
    sblock = block.view(np.int16)
    gtop = np.empty(k, np.float32)
    n_max = 0.0
    n2_max = 0.0
    for j in range(m):
        n_max = max(n_max, np.float64(norms[j]))
        n2_max = max(n2_max, np.float64(norms2[j]))
    for i in range(block.shape[0]):
        q = q0 + i
        if over[q]:
            continue
        hs = heap_s[q]
        hr = heap_r[q]
        c = coef[q]
        c2 = coef2[q]
        e_max = c * n_max + c2 * n2_max
        low = hs[0]
        row = block[i]
        srow = sblock[i]
        seed = -np.inf
        if low == -np.inf and not use_mask:
            seed = _seed_bar(row, m, e_max, rel, bits, vals, gtop)
        bar = max(low, seed)
        thr = _prefilter(bar, e_max, rel)
        thr16 = _bf16_floor_bits(thr, vals, bits)
        n = n_cand[q]
        j = 0
        while j < m and not over[q]:
            if thr16 > 0:  # skip groups on one int16 compare per score
                j = _skip_below(srow, j, m, thr16)
                if j >= m:
                    break
            g = min(_GROUP, m - j)
            grp = row[j : j + g]
            for t in range(_GROUP):
                bits[t] = (np.uint32(grp[t]) << np.uint32(16)) if t < g else neg_inf_bits
            hit = 0
            for t in range(_GROUP):
                hit |= np.int32(vals[t] >= thr)
            if hit:
                for t in range(g):
                    a = np.float64(vals[t])
                    if not a >= thr:
                        continue
                    r = row0 + j + t
                    if use_mask and not mask[r]:
                        continue
                    e = c * np.float64(norms[j + t]) + c2 * np.float64(norms2[j + t]) + rel * abs(a)
                    e += 2.0**-20 * (abs(a) + e)
                    hi = _round_up(a + e)
                    if not hi >= bar:
                        continue
                    if n == cap:  # drop candidates the risen bar has left behind
                        keep = 0
                        for u in range(n):
                            if cand_s[q, u] >= low:
                                cand_s[q, keep] = cand_s[q, u]
                                cand_r[q, keep] = cand_r[q, u]
                                keep += 1
                        n = keep
                        if 4 * n > 3 * cap:
                            over[q] = True
                            break
                    cand_s[q, n] = hi
                    cand_r[q, n] = r
                    n += 1
                    lo = _round_down(a - e)
                    if lo > low:
                        _replace_root(hs, hr, k, lo, r)
                        low = hs[0]
                        bar = max(low, seed)
                        thr = _prefilter(bar, e_max, rel)
                        thr16 = _bf16_floor_bits(thr, vals, bits)
            j += _GROUP
        n_cand[q] = n


@njit(cache=True, inline="always")
def _rescore_query(vectors, query, low, cand_s, cand_r, n_cand, hs, hr):
    k = hs.shape[0]
    for w in range(cand_s.shape[0]):
        for c in range(n_cand[w]):
            if not cand_s[w, c] >= low:
                continue
            r = cand_r[w, c]
            x = vectors[r]
            acc = np.float32(0.0)
            for d in range(x.shape[0]):
                acc += x[d] * query[d]
            if worse(hs[0], hr[0], acc, r):
                _replace_root(hs, hr, k, acc, r)


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def rescore_candidates(vectors, queries, low_s, cand_s, cand_r, n_cand, over, heap_s, heap_r):
    """Exact float32 scores of each query's candidates (``cand_*[w, q, :n_cand[w, q]]`` over
    workers ``w``) whose upper end reaches ``low_s[q, 0]`` (the k-th largest lower end over
    all workers), merged into the exact heaps ``heap_*[q]``. Queries with ``over[q]`` are
    skipped (the caller searches them exactly)."""
    for q in prange(queries.shape[0]):
        if over[q]:
            continue
        _rescore_query(
            vectors,
            queries[q],
            low_s[q, 0],
            cand_s[:, q],
            cand_r[:, q],
            n_cand[:, q],
            heap_s[q],
            heap_r[q],
        )


@njit(cache=True, inline="always")
def _fixed_dot2(q, x, y):
    """``(q . x, q . y)`` each in one fixed order: float64 products summed in 8 lanes by
    dimension mod 8, the lanes pairwise, the tail, then rounded to float32."""
    dim = q.shape[0]
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
    b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = 0.0
    d = 0
    while d + 8 <= dim:
        a0 += np.float64(q[d]) * np.float64(x[d])
        a1 += np.float64(q[d + 1]) * np.float64(x[d + 1])
        a2 += np.float64(q[d + 2]) * np.float64(x[d + 2])
        a3 += np.float64(q[d + 3]) * np.float64(x[d + 3])
        a4 += np.float64(q[d + 4]) * np.float64(x[d + 4])
        a5 += np.float64(q[d + 5]) * np.float64(x[d + 5])
        a6 += np.float64(q[d + 6]) * np.float64(x[d + 6])
        a7 += np.float64(q[d + 7]) * np.float64(x[d + 7])
        b0 += np.float64(q[d]) * np.float64(y[d])
        b1 += np.float64(q[d + 1]) * np.float64(y[d + 1])
        b2 += np.float64(q[d + 2]) * np.float64(y[d + 2])
        b3 += np.float64(q[d + 3]) * np.float64(y[d + 3])
        b4 += np.float64(q[d + 4]) * np.float64(y[d + 4])
        b5 += np.float64(q[d + 5]) * np.float64(y[d + 5])
        b6 += np.float64(q[d + 6]) * np.float64(y[d + 6])
        b7 += np.float64(q[d + 7]) * np.float64(y[d + 7])
        d += 8
    ta = 0.0
    tb = 0.0
    while d < dim:
        ta += np.float64(q[d]) * np.float64(x[d])
        tb += np.float64(q[d]) * np.float64(y[d])
        d += 1
    return (
        np.float32(((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ta),
        np.float32(((b0 + b1) + (b2 + b3)) + ((b4 + b5) + (b6 + b7)) + tb),
    )


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
            out_scores[i, t], out_scores[i, t + 1] = _fixed_dot2(
                q, vectors[out_rows[i, t]], vectors[out_rows[i, t + 1]]
            )
            t += 2
        if t < c:
            out_scores[i, t] = _fixed_dot2(q, vectors[out_rows[i, t]], q)[0]
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
