"""Compressed BM25 postings (issue 40, first part): doc ids and term frequencies in blocks of
``BLOCK`` postings, bit-packed at a width chosen per block, with the exact float32 weight
recomputed from the term frequency and the document's length.

Layout, for the postings of term ``t`` (ascending doc ids, tf >= 1) in blocks
``term_block[t]:term_block[t + 1]``; block ``j`` holds ``n_j = min(BLOCK, rest)`` postings:

* ``blk_last[j]`` (uint32): its last doc id (the skip entry: a search for doc ``d`` starts at
  the first block whose last doc id is >= ``d``);
* ``blk_word[j]`` (int64, ``[n_blocks + 1]``): where its words start in ``words``;
* ``blk_dw[j]`` / ``blk_tw[j]`` (uint8): bit widths of its doc-id gaps and of its tf codes;
* ``blk_max[j]`` (float32, :func:`block_maxima`): its largest weight;
* ``words`` (uint32): ``n_j`` gaps ``d_i - d_{i-1} - 1`` (the first from the previous block's
  last doc id, or from -1) at ``blk_dw[j]`` bits each, little-endian across words, then from
  the next word ``n_j`` codes ``tf - 1`` at ``blk_tw[j]`` bits each. A width of 0 stores
  nothing (all gaps 1, or all tf 1). One zero word ends the stream (a reader takes two
  words at a time).

A weight is ``float32(idf[t] * tfc(tf, dl) - base[t])`` in float64, the expression and
rounding of :func:`.build.weigh_postings` (no fastmath in either), so it equals the
uncompressed index's stored weight bit for bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .build import tf_component

BLOCK = 128


@njit(cache=True, nogil=True)
def bit_width(x):
    """Bits needed to write the non-negative integer ``x`` (0 for 0)."""
    w = 0
    v = np.uint64(x)
    while v > 0:
        w += 1
        v >>= np.uint64(1)
    return w


@njit(cache=True, nogil=True)
def _words_of(n, w):
    return (n * w + 31) // 32


@njit(cache=True, nogil=True)
def _put(words, w0, i, w, v):
    """Write ``v`` as the ``i``-th value of width ``w`` of the bit stream starting at word
    ``w0`` (the words start zeroed)."""
    pos = np.uint64(i) * np.uint64(w)
    k = np.uint64(w0) + (pos >> np.uint64(5))
    sh = pos & np.uint64(31)
    vv = np.uint64(v) << sh
    words[k] |= np.uint32(vv & np.uint64(0xFFFFFFFF))
    if sh + np.uint64(w) > np.uint64(32):
        words[k + np.uint64(1)] |= np.uint32(vv >> np.uint64(32))


@njit(cache=True, nogil=True, inline="always")
def _get(words, w0, i, w, mask):
    """The ``i``-th value of width ``w`` of the bit stream starting at word ``w0``: two words
    read always (``words`` ends with a pad word), no branch."""
    pos = np.uint64(i) * np.uint64(w)
    k = np.uint64(w0) + (pos >> np.uint64(5))
    lo = np.uint64(words[k]) | (np.uint64(words[k + np.uint64(1)]) << np.uint64(32))
    return (lo >> (pos & np.uint64(31))) & mask


@njit(cache=True, nogil=True)
def encode_postings(indptr, indices, tf):
    """Encode term-major postings (``indices`` ascending per term, ``tf`` >= 1 as integers or
    integral floats). Returns ``(term_block, blk_last, blk_word, blk_dw, blk_tw, words)``
    (see the module docstring), or raises ValueError on a doc id that does not ascend or a tf
    below 1."""
    n_vocab = indptr.shape[0] - 1
    term_block = np.zeros(n_vocab + 1, np.int64)
    for t in range(n_vocab):
        n = indptr[t + 1] - indptr[t]
        term_block[t + 1] = term_block[t] + (n + BLOCK - 1) // BLOCK
    n_blocks = term_block[n_vocab]
    blk_last = np.zeros(n_blocks, np.uint32)
    blk_word = np.zeros(n_blocks + 1, np.int64)
    blk_dw = np.zeros(n_blocks, np.uint8)
    blk_tw = np.zeros(n_blocks, np.uint8)
    # pass 1: widths and sizes
    for t in range(n_vocab):
        prev = np.int64(-1)
        for j in range(term_block[t], term_block[t + 1]):
            p0 = indptr[t] + (j - term_block[t]) * BLOCK
            p1 = min(p0 + BLOCK, indptr[t + 1])
            gmax = np.int64(0)
            tmax = np.int64(0)
            for p in range(p0, p1):
                d = np.int64(indices[p])
                g = d - prev - 1
                f = np.int64(tf[p])
                if g < 0 or f < 1 or f != tf[p]:
                    raise ValueError("postings must ascend per term and tf be integers >= 1")
                gmax = max(gmax, g)
                tmax = max(tmax, f - 1)
                prev = d
            blk_last[j] = np.uint32(prev)
            blk_dw[j] = bit_width(gmax)
            blk_tw[j] = bit_width(tmax)
            n = p1 - p0
            blk_word[j + 1] = blk_word[j] + _words_of(n, blk_dw[j]) + _words_of(n, blk_tw[j])
    words = np.zeros(blk_word[n_blocks] + 1, np.uint32)  # + a pad word for the reader
    # pass 2: pack
    for t in range(n_vocab):
        prev = np.int64(-1)
        for j in range(term_block[t], term_block[t + 1]):
            p0 = indptr[t] + (j - term_block[t]) * BLOCK
            p1 = min(p0 + BLOCK, indptr[t + 1])
            n = p1 - p0
            dw = np.int64(blk_dw[j])
            tw = np.int64(blk_tw[j])
            w0 = blk_word[j]
            t0 = w0 + _words_of(n, dw)
            for i in range(n):
                d = np.int64(indices[p0 + i])
                if dw > 0:
                    _put(words, w0, i, dw, d - prev - 1)
                if tw > 0:
                    _put(words, t0, i, tw, np.int64(tf[p0 + i]) - 1)
                prev = d
    return term_block, blk_last, blk_word, blk_dw, blk_tw, words


@njit(cache=True, nogil=True)
def block_maxima(term_block, indptr, data):
    """The largest weight of each block (float32 ``[n_blocks]``), from the weights ``data`` of
    the uncompressed layout: the bound that lets a search skip a block without decoding it."""
    out = np.zeros(term_block[term_block.shape[0] - 1], np.float32)
    for t in range(indptr.shape[0] - 1):
        for j in range(term_block[t], term_block[t + 1]):
            p0 = indptr[t] + (j - term_block[t]) * BLOCK
            p1 = min(p0 + BLOCK, indptr[t + 1])
            m = data[p0]
            for p in range(p0 + 1, p1):
                m = max(m, data[p])
            out[j] = m
    return out


@njit(cache=True, nogil=True)
def decode_block(blk_last, blk_word, blk_dw, blk_tw, words, j, first_block, n, docs, tfs):
    """Decode block ``j`` (``n`` postings; ``first_block``: whether it is its term's first)
    into ``docs[:n]`` (int64 doc ids) and ``tfs[:n]`` (int64 term frequencies)."""
    dw = np.int64(blk_dw[j])
    tw = np.int64(blk_tw[j])
    w0 = blk_word[j]
    t0 = w0 + _words_of(n, dw)
    dmask = (np.uint64(1) << np.uint64(dw)) - np.uint64(1)
    tmask = (np.uint64(1) << np.uint64(tw)) - np.uint64(1)
    prev = np.int64(-1) if first_block else np.int64(blk_last[j - 1])
    for i in range(n):
        g = np.int64(_get(words, w0, i, dw, dmask)) if dw > 0 else np.int64(0)
        prev = prev + g + 1
        docs[i] = prev
        tfs[i] = (np.int64(_get(words, t0, i, tw, tmask)) if tw > 0 else np.int64(0)) + 1


@njit(cache=True, nogil=True)
def posting_weight(method, idf_t, base_t, tf, dl, avgdl, k1, b, delta):
    """The float32 BM25 weight of one posting, as :func:`.build.weigh_postings` computes
    it (``avgdl`` already replaced by 1 when it is 0)."""
    return np.float32(idf_t * tf_component(method, float(tf), dl, avgdl, k1, b, delta) - base_t)


@njit(cache=True, nogil=True)
def decode_term(
    term_block,
    blk_last,
    blk_word,
    blk_dw,
    blk_tw,
    words,
    t,
    df,
    doc_len,
    idf_t,
    base_t,
    method,
    avgdl,
    k1,
    b,
    delta,
    out_docs,
    out_w,
):
    """Every posting of term ``t`` (``df`` of them): doc ids into ``out_docs[:df]`` (any
    integer dtype) and exact weights into ``out_w[:df]`` (``doc_len``: each document's
    length)."""
    docs = np.empty(BLOCK, np.int64)
    tfs = np.empty(BLOCK, np.int64)
    avg = avgdl if avgdl > 0.0 else 1.0
    top = doc_len.shape[0] - 1  # a damaged stream's doc id is clamped here, then rejected
    k = 0
    for j in range(term_block[t], term_block[t + 1]):
        n = min(BLOCK, df - k)
        decode_block(blk_last, blk_word, blk_dw, blk_tw, words, j, j == term_block[t], n, docs, tfs)
        for i in range(n):
            d = docs[i]
            out_docs[k + i] = d
            dl = float(doc_len[min(max(d, 0), top)])
            out_w[k + i] = posting_weight(method, idf_t, base_t, tfs[i], dl, avg, k1, b, delta)
        k += n


@njit(cache=True, nogil=True)
def decode_postings(
    term_block,
    blk_last,
    blk_word,
    blk_dw,
    blk_tw,
    words,
    indptr,
    doc_len,
    idf,
    base,
    method,
    avgdl,
    k1,
    b,
    delta,
):
    """Every term's postings back in the uncompressed layout: ``(indices int32, data
    float32)`` under ``indptr``, with the exact weights of :func:`decode_term` (ValueError
    on a damaged stream, see :func:`decode_terms`)."""
    nnz = indptr[indptr.shape[0] - 1]
    indices = np.empty(nnz, np.int32)
    data = np.empty(nnz, np.float32)
    n_vocab = indptr.shape[0] - 1
    bad, _ = decode_terms(
        term_block,
        blk_last,
        blk_word,
        blk_dw,
        blk_tw,
        words,
        indptr,
        np.arange(n_vocab),
        doc_len,
        idf,
        base,
        method,
        avgdl,
        k1,
        b,
        delta,
        np.full(n_vocab, np.inf, np.float32),
        indices,
        data,
    )
    if bad != -1:
        raise ValueError("the packed postings are damaged")
    return indices, data


@njit(cache=True, nogil=True)
def tf_codes(indptr, indices, data, doc_len, idf, base, method, avgdl, k1, b, delta):
    """The smallest term frequency that gives each posting its stored weight ``data[p]``
    (int32 ``[nnz]``: the weight is non-decreasing in tf, at most the document's length), so
    that the codec's recomputed weight equals it bit for bit. Returns ``(tf, bad)``: ``bad``
    is the first posting no tf reproduces (weights not computed from these lengths and
    parameters), or -1."""
    nnz = indptr[indptr.shape[0] - 1]
    out = np.ones(nnz, np.int32)
    avg = avgdl if avgdl > 0.0 else 1.0
    one = np.int64(1)  # a variable: a literal 1 would compile posting_weight once more
    for t in range(indptr.shape[0] - 1):
        i_t = idf[t]
        b_t = base[t]
        for p in range(indptr[t], indptr[t + 1]):
            w = data[p]
            dl = np.int64(doc_len[indices[p]])
            fdl = float(dl)
            if posting_weight(method, i_t, b_t, one, fdl, avg, k1, b, delta) == w:
                continue
            lo = np.int64(2)
            hi = max(dl, np.int64(2))
            while lo < hi:  # smallest tf in [2, dl] whose weight reaches w
                mid = (lo + hi) // 2
                if posting_weight(method, i_t, b_t, mid, fdl, avg, k1, b, delta) >= w:
                    hi = mid
                else:
                    lo = mid + 1
            if posting_weight(method, i_t, b_t, lo, fdl, avg, k1, b, delta) != w:
                found = np.int64(-1)
                for f in range(2, dl + 1):  # rounding made the weight non-monotone here
                    if posting_weight(method, i_t, b_t, f, fdl, avg, k1, b, delta) == w:
                        found = f
                        break
                if found < 0:
                    return out, p
                lo = found
            out[p] = lo
    return out, np.int64(-1)


@njit(cache=True, nogil=True)
def _decode_checked(
    term_block,
    blk_last,
    blk_word,
    blk_dw,
    blk_tw,
    words,
    t,
    df,
    doc_len,
    idf_t,
    base_t,
    method,
    avgdl,
    k1,
    b,
    delta,
    out_docs,
    out_w,
):
    """:func:`decode_term` into ``out_docs[:df]`` / ``out_w[:df]``, then the checks of the doc
    ids: 0 when sound, else the problem code of :func:`decode_terms` (1 or 2)."""
    decode_term(
        term_block,
        blk_last,
        blk_word,
        blk_dw,
        blk_tw,
        words,
        t,
        df,
        doc_len,
        idf_t,
        base_t,
        method,
        avgdl,
        k1,
        b,
        delta,
        out_docs,
        out_w,
    )
    first = term_block[t]
    for j in range(first, term_block[t + 1]):  # each block ends at its skip entry
        end = min((j - first + 1) * BLOCK, df) - 1
        if np.int64(out_docs[end]) != np.int64(blk_last[j]):
            return 1
    if np.int64(blk_last[term_block[t + 1] - 1]) >= doc_len.shape[0] or out_docs[0] < 0:
        return 2
    return 0


@njit(cache=True, nogil=True)
def weight_ok(w, bound):
    """Whether a decoded weight is sound under its term's bound ``term_max[t]``: finite, at
    most the bound, and not negative under a positive bound."""
    return np.isfinite(w) & (w <= bound) & ((w >= 0) | (bound <= 0))


@njit(cache=True, nogil=True)
def decode_term_checked(
    term_block,
    blk_last,
    blk_word,
    blk_dw,
    blk_tw,
    words,
    t,
    df,
    doc_len,
    idf_t,
    base_t,
    method,
    avgdl,
    k1,
    b,
    delta,
    bound,
    out_docs,
    out_w,
):
    """:func:`decode_term` into ``out_docs[:df]`` / ``out_w[:df]``, checked: 0 when sound,
    else the problem code of :func:`decode_terms` (``bound``: the term's ``term_max``)."""
    problem = _decode_checked(
        term_block,
        blk_last,
        blk_word,
        blk_dw,
        blk_tw,
        words,
        t,
        df,
        doc_len,
        idf_t,
        base_t,
        method,
        avgdl,
        k1,
        b,
        delta,
        out_docs,
        out_w,
    )
    if problem:
        return problem
    ok = True
    for p in range(df):
        ok &= weight_ok(out_w[p], bound)
    return 0 if ok else 3


@njit(cache=True, nogil=True)
def decode_terms(
    term_block,
    blk_last,
    blk_word,
    blk_dw,
    blk_tw,
    words,
    indptr,
    terms,
    doc_len,
    idf,
    base,
    method,
    avgdl,
    k1,
    b,
    delta,
    term_max,
    indices,
    data,
):
    """Decode the postings of ``terms`` into their places ``indptr[t]:indptr[t + 1]`` of the
    uncompressed arrays ``indices`` (int32) and ``data`` (float32), checking them on the way
    (the kernels rely on it). Returns ``(term, problem)`` for the first bad term, ``problem``
    1: a block does not end at its skip entry (a damaged stream), 2: a doc id outside
    ``doc_len``, 3: a weight NaN, infinite, above ``term_max[t]`` or negative under a
    positive bound; ``(-1, 0)`` when all are sound. Doc ids ascend by construction (gaps are
    unsigned)."""
    for i in range(terms.shape[0]):
        t = terms[i]
        lo, hi = indptr[t], indptr[t + 1]
        if hi == lo:
            continue
        problem = decode_term_checked(
            term_block,
            blk_last,
            blk_word,
            blk_dw,
            blk_tw,
            words,
            t,
            hi - lo,
            doc_len,
            idf[t],
            base[t],
            method,
            avgdl,
            k1,
            b,
            delta,
            term_max[t],
            indices[lo:hi],
            data[lo:hi],
        )
        if problem:
            return t, problem
    return np.int64(-1), 0


@njit(cache=True, nogil=True)
def gather_window(c_indptr, c_indices, c_tf, cursor, out_indices, out_tf):
    """Append one chunk's postings of a window of terms (``c_indptr``: the chunk's offsets of
    those terms, the first at ``c_indices[0]``) to each term's place ``cursor[t]`` of the
    merged window, advancing ``cursor``."""
    base = c_indptr[0]
    for t in range(c_indptr.shape[0] - 1):
        k = cursor[t]
        for p in range(c_indptr[t] - base, c_indptr[t + 1] - base):
            out_indices[k] = c_indices[p]
            out_tf[k] = c_tf[p]
            k += 1
        cursor[t] = k


@njit(cache=True, nogil=True)
def term_bounds(
    term_block,
    blk_last,
    blk_word,
    blk_dw,
    blk_tw,
    words,
    indptr,
    doc_len,
    idf,
    base,
    method,
    avgdl,
    k1,
    b,
    delta,
):
    """Each term's largest weight (float32 ``[n_vocab]``, 0 for a term without postings, as
    :func:`.build.weigh_postings` returns it), each term decoded into one scratch buffer.
    Returns ``(bounds, term, problem)``: ``problem`` 1 or 2 (see :func:`decode_terms`) for the
    first term whose blocks are damaged, else ``(bounds, -1, 0)``."""
    n_vocab = indptr.shape[0] - 1
    out = np.zeros(n_vocab, np.float32)
    longest = np.int64(0)
    for t in range(n_vocab):
        longest = max(longest, np.int64(indptr[t + 1] - indptr[t]))
    docs = np.empty(longest, np.int64)
    weights = np.empty(longest, np.float32)
    for t in range(n_vocab):
        df = indptr[t + 1] - indptr[t]
        if df == 0:
            continue
        problem = _decode_checked(
            term_block,
            blk_last,
            blk_word,
            blk_dw,
            blk_tw,
            words,
            t,
            df,
            doc_len,
            idf[t],
            base[t],
            method,
            avgdl,
            k1,
            b,
            delta,
            docs,
            weights,
        )
        if problem:
            return out, t, problem
        mx = np.float32(0.0)
        for i in range(df):
            mx = max(mx, weights[i])
        out[t] = mx
    return out, np.int64(-1), 0
