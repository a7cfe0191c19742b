"""Packed postings decoded block by block as searches reach them.

A packed index (:mod:`.codec`) serves its searches from the uncompressed layout
(``indices``/``data`` under ``indptr``), filled one 128-posting block at a time: a scan decodes
the blocks of its range, a galloping search finds its block through the skip entries
(``blk_last``) and decodes that block alone, a rank-directory lookup decodes the block of the
position it computes. The blocks a search never reaches stay undecoded (their memory is
never written, so never mapped): a term probed for a few candidates costs a few blocks.

The search kernels take the tuple ``lz`` (see :func:`ensure_range`); an index that is not
packed passes one whose ``ready`` is empty, and every helper then returns at once.

``lz`` = ``(ready, term_block, blk_last, blk_word, blk_dw, blk_tw, words, doc_len, idf, base,
term_max, out_indices, out_data, fparams, iparams, bad, term_ready)``: ``ready`` uint8 per
block (1 once decoded and checked), the codec arrays, the weighing (``idf``/``base`` float64
per term, ``fparams`` = ``[avgdl, k1, b, delta]``, ``iparams`` = ``[method]``), the writable
uncompressed arrays, ``bad`` int64 ``[2]``: the term and problem code (those of
:func:`.codec.decode_terms`) of a damaged block, set instead of decoding it, and
``term_ready`` uint8 per term (1 once all its blocks are: lookups then skip the blocks).

Decoding a block is idempotent: two threads that reach it together write the same values,
and ``ready`` is set after the values, behind a release fence.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .codec import BLOCK, decode_block, posting_weight, weight_ok
from .primitives import fence_acquire, fence_release, gallop_find, popcount

_SHIFT = 7  # log2(BLOCK)
assert BLOCK == 1 << _SHIFT


@njit(cache=True, nogil=True, _nrt=True)
def decode_ready(lz, indptr, t, j):
    """Decode block ``j`` of term ``t`` into its place, check it (it must end at its skip
    entry, its weights be sound) and publish it in ``ready``; a damaged block is recorded in
    ``bad`` and left unwritten (zeros: harmless to read)."""
    ready, tb, last, word, dw, tw, words, doc_len, idf, base, term_max, out_i, out_w = lz[:13]
    fp = lz[13]
    method = lz[14][0]
    bad = lz[15]
    lo = indptr[t]
    k0 = (j - tb[t]) << _SHIFT
    n = min(BLOCK, indptr[t + 1] - lo - k0)
    docs = np.empty(BLOCK, np.int64)
    tfs = np.empty(BLOCK, np.int64)
    decode_block(last, word, dw, tw, words, j, j == tb[t], n, docs, tfs)
    # Doc ids ascend from the previous block's skip entry (gaps are unsigned): a block that
    # ends at its own entry, below n_docs, holds doc ids in range.
    problem = 0
    if docs[n - 1] != np.int64(last[j]):
        problem = 1
    elif docs[n - 1] >= doc_len.shape[0]:
        problem = 2
    if problem:
        bad[0] = t
        bad[1] = problem
        return
    avg = fp[0] if fp[0] > 0.0 else 1.0
    bound = term_max[t]
    ws = np.empty(BLOCK, np.float32)
    ok = True
    for i in range(n):
        w = posting_weight(
            method, idf[t], base[t], tfs[i], float(doc_len[docs[i]]), avg, fp[1], fp[2], fp[3]
        )
        ws[i] = w
        ok &= weight_ok(w, bound)
    if not ok:
        bad[0] = t
        bad[1] = 3
        return
    p0 = lo + k0
    for i in range(n):
        out_i[p0 + i] = docs[i]
        out_w[p0 + i] = ws[i]
    fence_release()
    ready[j] = 1


@njit(cache=True, nogil=True, _nrt=False)
def _decode_range(lz, indptr, t, p0, p1):
    ready = lz[0]
    tb = lz[1]
    lo = indptr[t]
    done = True
    for j in range(tb[t] + ((p0 - lo) >> _SHIFT), tb[t] + ((p1 - 1 - lo) >> _SHIFT) + 1):
        if ready[j] == 0:
            decode_ready(lz, indptr, t, j)
            done &= ready[j] == 1
    if done and p0 == lo and p1 == indptr[t + 1]:
        fence_release()
        lz[16][t] = 1


@njit(cache=True, nogil=True, inline="always")
def ensure_range(lz, indptr, t, p0, p1):
    """Positions ``[p0, p1)`` of term ``t``'s postings decoded (no-op for an index that is not
    packed, or a term all decoded)."""
    if lz[0].shape[0] > 0 and p1 > p0:
        if lz[16][t] == 0:
            _decode_range(lz, indptr, t, p0, p1)
        fence_acquire()


@njit(cache=True, nogil=True, _nrt=False)
def ensure_at(lz, indptr, t, p):
    """Position ``p`` of term ``t``'s postings decoded (its block); ``lz`` None: nothing to do
    (the plain twin of a lookup loop, see :func:`plain_terms`)."""
    if lz is None:
        return
    ready = lz[0]
    if ready.shape[0] > 0:
        if lz[16][t] == 0:
            j = lz[1][t] + ((p - indptr[t]) >> _SHIFT)
            if ready[j] == 0:
                decode_ready(lz, indptr, t, j)
        fence_acquire()


@njit(cache=True, nogil=True, _nrt=False)
def plain_terms(lz, terms, i0, i1):
    """Whether the postings of ``terms[i0:i1]`` can be read as they are (an index that is not
    packed, or terms all decoded): a lookup loop then runs its twin compiled with ``lz`` None,
    free of decoding calls and fences (which would keep LLVM from hoisting its loads)."""
    if lz[0].shape[0] == 0:
        return True
    for i in range(i0, i1):
        if lz[16][terms[i]] == 0:
            return False
    fence_acquire()
    return True


@njit(cache=True, nogil=True, _nrt=False)
def ready_ranked(lz, indptr, t, touched, nt, rdir):
    """Decode the blocks of term ``t`` that hold the postings of the rows ``touched[:nt]``,
    found through its rank directory ``rdir`` (see ``heads.build_rank_rows``)."""
    ready = lz[0]
    first = lz[1][t]
    one = np.uint64(1)
    for j in range(nt):
        d = np.uint64(touched[j])
        w = (d >> np.uint64(6)) << one
        b = rdir[w]
        sh = d & np.uint64(63)
        if (b >> sh) & one:
            k = np.int64(rdir[w + one] + popcount(b & ((one << sh) - one)))
            blk = first + (k >> _SHIFT)
            if ready[blk] == 0:
                decode_ready(lz, indptr, t, blk)
    fence_acquire()


@njit(cache=True, nogil=True, _nrt=False)
def plain_term(lz, t):
    """:func:`plain_terms` for one term."""
    if lz[0].shape[0] == 0:
        return True
    if lz[16][t] == 0:
        return False
    fence_acquire()
    return True


@njit(cache=True, nogil=True, _nrt=False)
def find(lz, indptr, indices, t, lo, hi, d, g):
    """:func:`.primitives.gallop_find` in term ``t``'s postings ``[lo, hi)`` (guess ``g``):
    the first position whose doc id is >= ``d``, or ``hi``. Packed: the block that holds it is
    found by its skip entry, decoded if need be, and searched alone; ``lz`` None: plain."""
    if lz is None:
        return gallop_find(indices, lo, hi, d, g)
    ready = lz[0]
    if ready.shape[0] == 0 or lo >= hi:
        return gallop_find(indices, lo, hi, d, g)
    if lz[16][t] == 1:
        fence_acquire()
        return gallop_find(indices, lo, hi, d, g)
    tb = lz[1]
    start = indptr[t]
    first = tb[t]
    j0 = first + ((lo - start) >> _SHIFT)
    j1 = first + ((hi - 1 - start) >> _SHIFT) + 1
    jg = first + ((min(max(g, lo), hi - 1) - start) >> _SHIFT)
    j = gallop_find(lz[2], j0, j1, d, jg)
    if j == j1:
        return hi
    if ready[j] == 0:
        decode_ready(lz, indptr, t, j)
    fence_acquire()
    b0 = start + ((j - first) << _SHIFT)
    return gallop_find(indices, max(lo, b0), min(hi, b0 + BLOCK), d, g)
