"""Dense-vector kernels of the quantised first pass: bf16 and int8 copies of the vectors, the
bound-screened merge of first-pass scores and the exact rescoring of the candidates.

A batch can be scored first with bfloat16 inputs (AMX matrix units run that ~7x faster than
float32 sgemm) or int8 codes and then *rescored exactly* in float32: the first pass only chooses
candidates, with an error bound wide enough that no row of the exact top-k is lost (see
fastrag.indexes.quantized). Heaps are the worst-at-root heaps of ``dense``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._config import FASTMATH
from .dense import GROUP, replace_root
from .topk import worse


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


# ----------------------------------------------------------------------------------- bf16 copy
# bf16 values travel as their uint16 bit patterns (numba has no bf16).


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


# ----------------------------------------------------------------------------------- int8 copy
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


# ----------------------------------------------------------------------- merge and rescoring


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
    ``GROUP`` scores has one at or above ``thr16``; the tail group is not skipped."""
    while j + GROUP <= m:
        grp = srow[j : j + GROUP]  # indices from range(): no negative-index fix-ups
        hit = 0
        for t in range(GROUP):
            hit |= np.int32(grp[t] >= thr16)
        if hit:
            return j
        j += GROUP
    return j


@njit(cache=True, inline="always")
def _seed_bar(row, m, e_max, rel, bits, vals, gtop):
    """A lower bound on the k-th best exact score (``k = len(gtop)``) from the scores
    ``row[:m]`` alone: the k-th largest of the maxima of the first groups of ``GROUP`` is
    the approximate score ``a`` of k rows scoring at least ``a``, whose lower ends are at least
    ``a``'s with the largest norm's error. -inf when there are fewer than k groups or ``a``
    is not finite. A row whose upper end is below it cannot be in the top k."""
    k = gtop.shape[0]
    n_groups = m // GROUP
    if k == 0 or n_groups < k:
        return np.float32(-np.inf)
    gtop[:] = -np.inf  # ascending: gtop[0] is the k-th largest so far
    for gi in range(n_groups):
        grp = row[gi * GROUP : (gi + 1) * GROUP]
        for t in range(GROUP):
            bits[t] = np.uint32(grp[t]) << np.uint32(16)
        mx = np.float32(-np.inf)
        for t in range(GROUP):
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
    bits = np.empty(GROUP, np.uint32)
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
            g = min(GROUP, m - j)
            grp = row[j : j + g]
            for t in range(GROUP):
                bits[t] = (np.uint32(grp[t]) << np.uint32(16)) if t < g else neg_inf_bits
            hit = 0
            for t in range(GROUP):
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
                        replace_root(hs, hr, k, lo, r)
                        low = hs[0]
                        bar = max(low, seed)
                        thr = _prefilter(bar, e_max, rel)
                        thr16 = _bf16_floor_bits(thr, vals, bits)
            j += GROUP
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
                replace_root(hs, hr, k, acc, r)


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
