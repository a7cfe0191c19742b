"""Dense-vector kernels of the quantised first pass: bf16 and int8 copies of the vectors, the
bound-screened merge of first-pass scores and the exact rescoring of the candidates.

A batch can be scored first with bfloat16 inputs (AMX matrix units run that ~7x faster than
float32 sgemm) or int8 codes and then *rescored exactly* in float32: the first pass only chooses
candidates, with an error bound wide enough that no row of the exact top-k is lost (see
fastrag.indexes.quantized). Heaps are the worst-at-root heaps of ``dense``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._config import FASTMATH
from .dense import GROUP, fixed_dot2, replace_root
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
# The same idea with int8 codes. Rows are first centred on the corpus mean ``m`` and divided by
# per-dimension spreads ``sigma`` (``y = (x - m) / sigma``); ``y`` becomes ``s * c`` with a
# per-row scale ``s = max|y| / xmax`` and integer codes ``c = round(y / s)`` in
# ``[-xmax, xmax]``. ``q . x = q . m + (q * sigma) . (s c) + q . dx`` with the residual
# ``dx = x - m - sigma * s c``, measured in float64: the first term is the same for every row of
# a query, so rankings only need the other two. No fastmath: the error terms must be the
# written arithmetic.


@njit(cache=True, inline="always")
def _row_scale(src, center, sigma):
    """``(max|y|, ||src||)`` in float64, ``y = (src - center) / sigma``."""
    amax = 0.0
    sq = 0.0
    for d in range(src.shape[0]):
        v = np.float64(src[d])
        sq += v * v
        amax = max(amax, abs((v - np.float64(center[d])) / np.float64(sigma[d])))
    return amax, np.sqrt(sq)


@njit(cache=True, inline="always")
def _pack_row(vectors, r, row0, packed, scales, weights, weights2, center, sigma, fmt):
    """Row ``vectors[r]`` becomes row ``row0 + r`` of the copy; ``fmt = (xmax, offset, lanes,
    center_norm)``."""
    xmax, offset, lanes, center_norm = fmt
    src = vectors[r]
    dim = src.shape[0]
    amax, norm = _row_scale(src, center, sigma)
    scale = np.float32(amax / xmax)
    s = np.float64(scale)
    inv = 1.0 / s if scale > 0 else 0.0
    g = (row0 + r) // lanes
    lane = (row0 + r) % lanes
    err = 0.0
    code_sq = 0.0
    recon_sq = 0.0
    for d in range(dim):  # codes go straight to their packed place; past dim they stay offset
        v = np.float64(src[d])
        m = np.float64(center[d])
        sg = np.float64(sigma[d])
        c = min(xmax, max(-xmax, np.floor((v - m) / sg * inv + 0.5)))
        packed[g, d >> 2, lane, d & 3] = np.uint8(np.int32(c) + offset)
        sc = s * c  # exact: a float32 times an integer of at most 8 bits
        part = sg * sc
        e = v - (m + part)
        err += e * e
        code_sq += sc * sc
        recon_sq += part * part
    scales[row0 + r] = scale
    # float64 rounding of the residual: a few units of 2**-53 of each term, covered by the
    # 2**-48 term; float64 sums and square roots by the factor (both rounding up)
    slack = 1.0 + 2.0**-30
    fuzz = 2.0**-48 * (center_norm + np.sqrt(recon_sq) + norm)
    weights[row0 + r] = _round_up((np.sqrt(err) + fuzz + 2.0 * dim * 2.0**-24 * norm) * slack)
    weights2[row0 + r] = _round_up(np.sqrt(code_sq) * slack)


@njit(cache=True, parallel=True)
def to_int8(vectors, row0, packed, scales, weights, weights2, center, sigma, fmt):
    """Rows ``vectors[r]`` become row ``row0 + r`` of the int8 copy: unsigned codes
    ``c + offset`` packed ``lanes`` rows at a time (``packed[row // lanes, t // 4, row % lanes,
    t % 4]``; dimensions past ``dim`` stay ``offset``, i.e. code 0), their scale, and the row's
    error weights (float32, rounded up): ``weights`` = ``||dx||`` plus the float32 rescoring's
    share ``2 d 2**-24 ||x||``, ``weights2`` = ``||s c||``. ``fmt = (xmax, offset, lanes,
    ||center||)``."""
    for r in prange(vectors.shape[0]):
        _pack_row(vectors, r, row0, packed, scales, weights, weights2, center, sigma, fmt)


@njit(cache=True, nogil=True)
def to_int8_serial(vectors, row0, packed, scales, weights, weights2, center, sigma, fmt):
    """:func:`to_int8` on the calling thread (small inputs)."""
    for r in range(vectors.shape[0]):
        _pack_row(vectors, r, row0, packed, scales, weights, weights2, center, sigma, fmt)


@njit(cache=True, nogil=True)
def quantize_queries(
    queries, sigma, qmax, offset, block, cap, codes, offsets, scales, norms, errors
):
    """Signed codes of each query times ``sigma`` (``codes[i, :dim]``, in ``[-qmax, qmax]``; the
    rest of the row is left as is), ``offsets[i] = offset * sum(codes[i])`` (what the unsigned
    row codes add to the dot product), the scale and, in float64, ``||q||`` and
    ``||q * sigma - s c||`` (rounded up). With ``cap > 0`` the codes of the dimensions ``t``
    with the same ``t // block`` and ``t % 4 // 2`` (one int16 lane of the AVX2 kernel) sum to
    at most ``cap`` in absolute value: the scale grows where a lane would need more."""
    dim = queries.shape[1]
    n_lanes = 2 * (-(-dim // block)) if cap > 0 else 1
    lane = np.zeros(n_lanes)
    slack = 0.25 * block  # each of a lane's block / 2 codes rounds up by at most 0.5
    for i in range(queries.shape[0]):
        src = queries[i]
        amax = 0.0
        sq = 0.0
        ysq = 0.0
        lane[:] = 0.0
        for d in range(dim):
            v = np.float64(src[d])
            y = v * np.float64(sigma[d])  # exact: two float32 factors
            sq += v * v
            ysq += y * y
            amax = max(amax, abs(y))
            if cap > 0:
                lane[d // block * 2 + d % 4 // 2] += abs(y)
        scale = np.float32(amax / qmax)
        if cap > 0:
            need = lane.max() / (cap - slack) * (1.0 + 2.0**-20)  # float32 rounds it up
            if need > np.float64(scale):
                scale = np.float32(need)
        s = np.float64(scale)
        inv = 1.0 / s if scale > 0 else 0.0
        err = 0.0
        total = 0
        lane[:] = 0.0
        for d in range(dim):
            y = np.float64(src[d]) * np.float64(sigma[d])
            c = min(qmax, max(-qmax, np.floor(y * inv + 0.5)))
            codes[i, d] = np.int8(c)
            total += np.int64(c)
            e = y - s * c
            err += e * e
            if cap > 0:
                lane[d // block * 2 + d % 4 // 2] += abs(c)
        if cap > 0 and lane.max() > cap:
            raise ValueError("int8 query codes exceed the kernel's int16 lane cap")
        offsets[i] = np.int32(offset * total)
        scales[i] = scale
        norms[i] = np.sqrt(sq)
        errors[i] = (np.sqrt(err) + 2.0**-48 * np.sqrt(ysq)) * (1.0 + 2.0**-30)


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
def lowered_bar(bar, e_max):
    """``bar`` lowered past the float32 rounding of a tile test's upper ends (each at most
    ``|a| + e_max`` with ``|a| <= |bar| + e_max`` where it matters; four roundings)."""
    if bar == -np.inf:
        return np.float32(-np.inf)
    return _round_down(np.float64(bar) - 2.0**-18 * (abs(np.float64(bar)) + 2.0 * e_max) - 1e-30)


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
    flags,
    win,
    e_all,
    thr_out,
    vectors,
    queries,
    shift,
    shift_err,
    exact_lows,
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
    largest norm of the block; once that bound is positive, on their int16 bits.

    With ``win > 0`` the scorer has flagged the rows whose upper end, in float32 with the
    coefficients rounded up, reaches ``thr_out[q]`` (bit ``t`` of ``flags[i, j // win]`` for
    row ``j + t`` of a tile of ``win``), and only those are read; ``thr_out[q]`` is then set
    for the next block: the bar lowered past that float32 rounding, for the largest error of
    any row (``e_all``: ``(coef-, coef2-weight)`` maxima over all rows).

    With ``exact_lows``, a row about to enter the heap is scored exactly (the fixed-order
    product the search reports, ``vectors[r] . queries[q]``) and its interval narrowed to that
    score minus ``shift[q]`` (the constant the approximate scores leave out, within
    ``shift_err[q]``): the bar rises to the k-th best exact score sooner, so fewer rows pass."""
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
        step = win if win > 0 else GROUP
        frow = flags[min(i, flags.shape[0] - 1)]  # a 1 x 1 array where there are none
        tile = 0
        n_tiles = -(-m // win) if win > 0 else 0
        while j < m and not over[q]:
            if win > 0:  # skip the tiles with no row flagged
                while tile < n_tiles and frow[tile] == 0:
                    tile += 1
                if tile == n_tiles:
                    break
                j = tile * win
            elif thr16 > 0:  # skip groups on one int16 compare per score
                j = _skip_below(srow, j, m, thr16)
                if j >= m:
                    break
            g = min(step, m - j)
            grp = row[j : j + g]
            hit = np.uint64(0)
            if win > 0:  # the rows the scorer flagged
                hit = np.uint64(frow[tile])
                tile += 1
            else:
                for t in range(GROUP):
                    bits[t] = (np.uint32(grp[t]) << np.uint32(16)) if t < g else neg_inf_bits
                for t in range(GROUP):
                    if vals[t] >= thr:
                        hit |= np.uint64(1) << np.uint64(t)
            if hit:
                for t in range(g):
                    if not (hit >> np.uint64(t)) & np.uint64(1):
                        continue
                    bits[0] = np.uint32(grp[t]) << np.uint32(16)
                    a = np.float64(vals[0])
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
                    lo = _round_down(a - e)
                    if exact_lows and lo > low:
                        sx = np.float64(fixed_dot2(queries[q], vectors[r], vectors[r])[0])
                        d = sx - shift[q]
                        slack = shift_err[q] + 2.0**-50 * (abs(sx) + abs(shift[q]))
                        lo = max(lo, _round_down(d - slack))
                        hi = min(hi, _round_up(d + slack))
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
                    if lo > low:
                        replace_root(hs, hr, k, lo, r)
                        low = hs[0]
                        bar = max(low, seed)
                        thr = _prefilter(bar, e_max, rel)
                        thr16 = _bf16_floor_bits(thr, vals, bits)
            j += step
        n_cand[q] = n
        if win > 0:
            thr_out[q] = lowered_bar(max(hs[0], seed), c * e_all[0] + c2 * e_all[1])


@intrinsic
def _prefetch_row(typingctx, vectors, row):
    """Ask the CPU to start loading row ``row`` of the 2-d C-contiguous ``vectors`` (its
    first 1,536 bytes) into cache; no effect on results."""

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        strides = cgutils.unpack_tuple(builder, ary.strides)
        start = builder.mul(args[1], strides[0])
        base = builder.gep(builder.bitcast(ary.data, _I8P), [start])
        fnty = ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        for off in range(0, 1536, 64):
            ptr = builder.gep(base, [ir.Constant(ir.IntType(64), off)])
            hints = [ir.Constant(_I32, 0), ir.Constant(_I32, 3), ir.Constant(_I32, 1)]
            builder.call(fn, [ptr, *hints])
        return context.get_dummy_value()

    return types.void(vectors, types.int64), codegen


_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)
# Candidate rows are read in random order: the next rows are prefetched this far ahead
# (measured on 240,000 random 384-d rows: 0.23 s without, 0.17 s at 8).
_AHEAD = 8


@njit(cache=True, inline="always")
def _rescore_query(vectors, query, low, cand_s, cand_r, n_cand, hs, hr, live):
    """The candidates whose upper end reaches ``low``, scored as
    :func:`dense.exact_final_scores` scores hits (so the heap holds the top-k of the scores
    the search reports), two rows at a time. ``live``: scratch for their rows."""
    k = hs.shape[0]
    n = 0
    for w in range(cand_s.shape[0]):
        for c in range(n_cand[w]):
            if cand_s[w, c] >= low:
                live[n] = cand_r[w, c]
                n += 1
    vmax = vectors.shape[0]
    for u in range(0, n, 2):
        if u + _AHEAD < n:
            _prefetch_row(vectors, min(live[u + _AHEAD], vmax - 1))
            if u + _AHEAD + 1 < n:
                _prefetch_row(vectors, min(live[u + _AHEAD + 1], vmax - 1))
        ra = live[u]
        rb = live[u + 1] if u + 1 < n else ra
        sa, sb = fixed_dot2(query, vectors[ra], vectors[rb])
        if worse(hs[0], hr[0], sa, ra):
            replace_root(hs, hr, k, sa, ra)
        if u + 1 < n and worse(hs[0], hr[0], sb, rb):
            replace_root(hs, hr, k, sb, rb)


# A batch of at least this many queries is rescored row by row (rescore_by_row): a row that
# is a candidate of several queries is read from memory once for all of them.
BY_ROW_MIN_QUERIES = 32


@njit(cache=True, parallel=True)
def rescore_candidates(vectors, queries, low_s, cand_s, cand_r, n_cand, over, heap_s, heap_r):
    """Exact float32 scores of each query's candidates (``cand_*[w, q, :n_cand[w, q]]`` over
    workers ``w``) whose upper end reaches ``low_s[q, 0]`` (the k-th largest lower end over
    all workers), merged into the exact heaps ``heap_*[q]``. Queries with ``over[q]`` are
    skipped (the caller searches them exactly)."""
    if queries.shape[0] >= BY_ROW_MIN_QUERIES:
        rescore_by_row(vectors, queries, low_s, cand_s, cand_r, n_cand, over, heap_s, heap_r)
        return
    for q in prange(queries.shape[0]):
        if over[q]:
            continue
        live = np.empty(n_cand[:, q].sum(), np.int64)
        _rescore_query(
            vectors,
            queries[q],
            low_s[q, 0],
            cand_s[:, q],
            cand_r[:, q],
            n_cand[:, q],
            heap_s[q],
            heap_r[q],
            live,
        )


@njit(cache=True, parallel=True)
def rescore_by_row(vectors, queries, low_s, cand_s, cand_r, n_cand, over, heap_s, heap_r):
    """:func:`rescore_candidates` for a batch: the live (query, row) pairs are sorted by row
    (a counting sort), scored in that order, two queries per row read where a row has several
    (``fixed_dot2(row, qa, qb)`` forms the same products in the same order as
    ``fixed_dot2(qa, row, row)``, so every score is bit-identical), then merged per query."""
    n_q = queries.shape[0]
    n_w = cand_s.shape[0]
    starts = np.zeros(n_q + 1, np.int64)
    for q in prange(n_q):
        c = 0
        if not over[q]:
            low = low_s[q, 0]
            for w in range(n_w):
                for j in range(n_cand[w, q]):
                    c += cand_s[w, q, j] >= low
        starts[q + 1] = c
    for q in range(n_q):
        starts[q + 1] += starts[q]
    total = starts[n_q]
    rows = np.empty(total, np.int64)
    owner = np.empty(total, np.int32)  # the query of each pair
    for q in prange(n_q):
        if over[q]:
            continue
        low = low_s[q, 0]
        p = starts[q]
        for w in range(n_w):
            for j in range(n_cand[w, q]):
                if cand_s[w, q, j] >= low:
                    rows[p] = cand_r[w, q, j]
                    owner[p] = q
                    p += 1
    fill = np.zeros(vectors.shape[0] + 1, np.int64)
    for p in range(total):
        fill[rows[p] + 1] += 1
    for r in range(vectors.shape[0]):
        fill[r + 1] += fill[r]
    pair = np.empty(total, np.int64)  # pair indices sorted by row, then by query
    for q in range(n_q):
        for p in range(starts[q], starts[q + 1]):
            r = rows[p]
            pair[fill[r]] = p
            fill[r] += 1
    scores = np.empty(total, np.float32)
    n_seg = max(1, min(total // 4096, 256))
    for g in prange(n_seg):
        t = total * g // n_seg
        end = total * (g + 1) // n_seg
        while t < end:
            pa = pair[t]
            r = rows[pa]
            x = vectors[r]
            if t + 1 < end and rows[pair[t + 1]] == r:
                pb = pair[t + 1]
                scores[pa], scores[pb] = fixed_dot2(x, queries[owner[pa]], queries[owner[pb]])
                t += 2
            else:
                scores[pa] = fixed_dot2(x, queries[owner[pa]], queries[owner[pa]])[0]
                t += 1
    k = heap_s.shape[1]
    for q in prange(n_q):
        hs = heap_s[q]
        hr = heap_r[q]
        for p in range(starts[q], starts[q + 1]):
            if worse(hs[0], hr[0], scores[p], rows[p]):
                replace_root(hs, hr, k, scores[p], rows[p])
