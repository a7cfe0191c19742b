"""BM25 build and search in NumPy: what a process runs while its numba kernels are still being
compiled in the background (:mod:`fastrag._coldstart`).

Each function mirrors the kernel of the same name in ``fastrag._kernels.bm25``: same inputs,
same outputs, same arithmetic order: index arrays, rows and scores are bit-identical to the
kernels' (a repeated query term is added with one rounding, as the kernels' fused
multiply-add does). Slower per query than the kernels, but no compile.
"""

from __future__ import annotations

import numpy as np


def build_seconds(n_tokens: int, n_vocab: int) -> float:
    """Rough seconds of :func:`postings` plus :func:`weigh_postings` for a corpus of
    ``n_tokens`` tokens (85-90 ns a token from 50,000 to 2M Zipf tokens on AMD EPYC Zen 4,
    rounded up; 0.1 ms for a few hundred)."""
    return 1e-4 + 1e-7 * n_tokens + 1e-9 * n_vocab


def postings(
    values: np.ndarray, offsets: np.ndarray, n_vocab: int
) -> tuple[np.ndarray, int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(df, bad, (indptr, indices, tf))``: ``count_document_frequencies`` and
    ``build_postings`` in one pass (``bad`` as the kernel returns it; the postings are only
    meaningful when it is -1)."""
    n_docs = offsets.shape[0] - 1
    lo, hi = int(offsets[0]), int(offsets[-1])
    v = values[lo:hi]
    out_of_range = np.flatnonzero((v < 0) | (v >= n_vocab))
    if out_of_range.size:
        empty = (np.zeros(n_vocab + 1, np.int64), np.empty(0, np.int32), np.empty(0, np.float32))
        return np.zeros(n_vocab, np.int64), lo + int(out_of_range[0]), empty
    if n_docs == 0 or v.size == 0:
        indptr = np.zeros(n_vocab + 1, np.int64)
        return (
            np.zeros(n_vocab, np.int64),
            -1,
            (indptr, np.empty(0, np.int32), np.empty(0, np.float32)),
        )
    doc = np.repeat(np.arange(n_docs, dtype=np.int64), np.diff(offsets))
    keys, tf = np.unique(v.astype(np.int64) * n_docs + doc, return_counts=True)  # term-major
    terms = keys // n_docs
    df = np.bincount(terms, minlength=n_vocab).astype(np.int64)
    indptr = np.zeros(n_vocab + 1, np.int64)
    np.cumsum(df, out=indptr[1:])
    return df, -1, (indptr, (keys - terms * n_docs).astype(np.int32), tf.astype(np.float32))


def tf_component(method, f, dl, avg, k1, b, delta) -> np.ndarray:
    """``tf_component`` of the kernels over arrays (float64 ``f`` and ``dl``)."""
    norm = (1.0 - b) + b * dl / avg
    if method in (0, 1):  # lucene, robertson
        return f / (k1 * norm + f)
    if method == 2:  # atire
        return f * (k1 + 1.0) / (f + k1 * norm)
    if method == 3:  # bm25l
        c = f / norm
        return (k1 + 1.0) * (c + delta) / (k1 + c + delta)
    return (k1 + 1.0) * f / (k1 * norm + f) + delta  # bm25+


def weigh_postings(
    indptr, indices, tf, offsets, idf, base_weights, method, k1, b, delta, avgdl
) -> np.ndarray:
    """Turn ``tf`` into BM25 weights in place; returns ``term_max`` (the kernel's contract)."""
    n_vocab = indptr.shape[0] - 1
    avg = avgdl if avgdl > 0.0 else 1.0
    lens = np.diff(indptr)
    t = np.repeat(np.arange(n_vocab), lens)
    dl = (offsets[indices.astype(np.int64) + 1] - offsets[indices]).astype(np.float64)
    tfc = tf_component(method, tf.astype(np.float64), dl, avg, k1, b, delta)
    tf[:] = (idf[t] * tfc - base_weights[t]).astype(np.float32)
    term_max = np.zeros(n_vocab, np.float32)
    nonempty = np.flatnonzero(lens)
    if nonempty.size:
        term_max[nonempty] = np.maximum(np.maximum.reduceat(tf, indptr[nonempty]), 0.0)
    return term_max


def check_queries(q_values: np.ndarray, q_offsets: np.ndarray, n_vocab: int) -> int:
    """The kernel's query check: -1 when valid, ``-2 - i`` for a bad ``q_offsets[i]``, else
    the position of the first token id outside ``[0, n_vocab)``."""
    n = q_offsets.shape[0]
    if n == 0:
        return -1
    if q_offsets[0] < 0:
        return -2
    dec = np.flatnonzero(np.diff(q_offsets) < 0)
    if dec.size:
        return -2 - (int(dec[0]) + 1)
    if q_offsets[-1] > q_values.shape[0]:
        return -2 - (n - 1)
    used = q_values[q_offsets[0] : q_offsets[-1]]
    bad = np.flatnonzero((used < 0) | (used >= n_vocab))
    return int(q_offsets[0]) + int(bad[0]) if bad.size else -1


def estimate_seconds(
    indptr: np.ndarray, n_docs: int, q_values: np.ndarray, n_queries: int
) -> float:
    """Rough seconds :func:`search_batch_serial` takes for these queries (per query: a pass over
    ``n_docs`` accumulators; per query term: its postings), measured on a 2-core Xeon."""
    terms = q_values[(q_values >= 0) & (q_values < indptr.shape[0] - 1)].astype(np.int64)
    postings = int((indptr[terms + 1] - indptr[terms]).sum())
    return n_queries * (150e-6 + 4e-9 * n_docs) + terms.size * 6e-6 + postings * 5e-9


def decode_seconds(indptr: np.ndarray, q_values: np.ndarray, undecoded: np.ndarray) -> float:
    """Rough seconds :func:`decode_terms` takes for the terms of ``q_values`` that are still
    ``undecoded`` (57-80 ns a posting and ~0.1 ms a term on AMD EPYC Zen 4, rounded up)."""
    terms = q_values[(q_values >= 0) & (q_values < indptr.shape[0] - 1)].astype(np.int64)
    terms = np.unique(terms)
    terms = terms[undecoded[terms]]
    return terms.size * 1.5e-4 + int((indptr[terms + 1] - indptr[terms]).sum()) * 1e-7


def search_batch_serial(ix, heads, queries, k, flt, plan, scratch, out) -> int:
    """``search_batch_serial`` of the kernels, same arguments (``heads``, ``plan`` and
    ``scratch`` unused): exact top-``k`` of each query (best first, ties by row, padded with
    -1 / -inf); returns :func:`check_queries`'s code."""
    _, indptr, indices, data, term_max, base_weights = ix
    q_values, q_offsets = queries
    mask, has_mask, cutoff, has_cutoff = flt
    out_rows, out_scores, out_counts = out
    n_docs = scratch[0].shape[0]
    code = check_queries(q_values, q_offsets, term_max.shape[0])
    if code != -1:
        return code
    acc = np.zeros(n_docs, np.float32)
    for qi in range(q_offsets.shape[0] - 1):
        q = q_values[q_offsets[qi] : q_offsets[qi + 1]]
        out_counts[qi] = _search_one(
            indptr,
            indices,
            data,
            term_max,
            base_weights,
            q,
            k,
            mask,
            has_mask,
            cutoff,
            has_cutoff,
            acc,
            out_rows[qi],
            out_scores[qi],
        )
    return -1


def _search_one(
    indptr,
    indices,
    data,
    term_max,
    base_weights,
    q,
    k,
    mask,
    has_mask,
    cutoff,
    has_cutoff,
    acc,
    out_rows,
    out_scores,
) -> int:
    out_rows[:] = -1
    out_scores[:] = -np.inf
    base = 0.0
    for t in q.tolist():  # the kernel's summation order
        base += float(base_weights[t])
    terms, mult = np.unique(q, return_counts=True)
    keep = (term_max[terms] > 0.0) & (indptr[terms + 1] > indptr[terms])
    terms, mult = terms[keep], mult[keep]
    k_eff = min(k, acc.shape[0])
    if terms.size == 0 or k_eff <= 0:
        return 0
    ub = mult * term_max[terms].astype(np.float64)
    order = np.argsort(-ub, kind="stable")  # equal bounds keep term order, as the kernel
    acc[:] = 0.0
    for t, m in zip(terms[order].tolist(), mult[order].tolist(), strict=True):
        s, e = int(indptr[t]), int(indptr[t + 1])
        rows = indices[s:e]
        if m == 1:
            acc[rows] += data[s:e]
        else:  # the kernel's fused multiply-add: one rounding of acc + m * w
            acc[rows] = (acc[rows].astype(np.float64) + m * data[s:e].astype(np.float64)).astype(
                np.float32
            )
    hit = acc > 0.0
    if has_mask:
        hit &= mask
    rows = np.flatnonzero(hit)
    scores = acc[rows] + np.float32(base)
    best = np.argsort(-scores, kind="stable")[:k_eff]  # rows ascending: ties by row
    rows, scores = rows[best], scores[best]
    if has_cutoff:
        n = int(np.count_nonzero(scores.astype(np.float64) >= cutoff))
        rows, scores = rows[:n], scores[:n]
    out_rows[: rows.size] = rows
    out_scores[: rows.size] = scores
    return int(rows.size)


def score_dense(indptr, indices, data, base_weights, q_terms, out) -> None:
    """``score_dense``: dense scores of one query into ``out`` (float32 ``[n_docs]``)."""
    base = 0.0
    for t in q_terms.tolist():
        base += float(base_weights[t])
    out[:] = 0.0
    for t in q_terms.tolist():
        s, e = int(indptr[t]), int(indptr[t + 1])
        out[indices[s:e]] += data[s:e]  # rows are distinct within a term
    b32 = np.float32(base)
    if b32 != 0.0:
        out += b32


# -- packed postings (``fastrag._kernels.bm25.codec``) -----------------------------------------
BLOCK = 128  # postings per block: the codec's ``BLOCK``


def _bits(words: np.ndarray, w0: np.ndarray, i: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The codec's ``_get``: value ``i`` of width ``w`` of the stream starting at word ``w0``
    (arrays, one entry per value; 0 where the width is 0)."""
    pos = i.astype(np.uint64) * w
    k = w0 + (pos >> np.uint64(5)).astype(np.int64)
    k1 = np.minimum(k + 1, words.shape[0] - 1)  # a width-0 block may start at the pad word
    lo = words[k].astype(np.uint64) | (words[k1].astype(np.uint64) << np.uint64(32))
    mask = (np.uint64(1) << w) - np.uint64(1)
    return ((lo >> (pos & np.uint64(31))) & mask).astype(np.int64)


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
) -> tuple[int, int]:
    """``decode_terms`` of the codec: the postings of ``terms`` into ``indices`` / ``data``
    at ``indptr``, the same doc ids and weights bit for bit, and the same ``(term, problem)``
    for the first bad term (``(-1, 0)`` when all are sound)."""
    avg = avgdl if avgdl > 0.0 else 1.0
    top = doc_len.shape[0] - 1
    for t in np.asarray(terms, np.int64).tolist():
        lo, hi = int(indptr[t]), int(indptr[t + 1])
        df = hi - lo
        if df == 0:
            continue
        j0, j1 = int(term_block[t]), int(term_block[t + 1])
        blocks = np.arange(j0, j1, dtype=np.int64)
        n = np.minimum(BLOCK, df - (blocks - j0) * BLOCK)
        first = np.cumsum(n) - n  # each block's first posting
        blk = np.repeat(np.arange(blocks.size), n)  # each posting's block (of this term)
        i = np.arange(df, dtype=np.int64) - first[blk]
        dw = blk_dw[blocks].astype(np.uint64)
        tw = blk_tw[blocks].astype(np.uint64)
        w0 = blk_word[blocks].astype(np.int64)
        t0 = w0 + (n.astype(np.uint64) * dw + np.uint64(31)).astype(np.int64) // 32
        step = _bits(words, w0[blk], i, dw[blk]) + 1
        tf = _bits(words, t0[blk], i, tw[blk]) + 1
        prev = np.empty(blocks.size, np.int64)
        prev[0] = -1
        prev[1:] = blk_last[blocks[:-1]].astype(np.int64)
        run = np.cumsum(step)  # int64 sums wrap as the kernel's do
        docs = (prev - (run[first] - step[first]))[blk] + run
        dl = doc_len[np.clip(docs, 0, top)].astype(np.float64)
        w = (idf[t] * tf_component(method, tf.astype(np.float64), dl, avg, k1, b, delta)) - base[t]
        w = w.astype(np.float32)
        out = docs.astype(np.int32)
        indices[lo:hi] = out
        data[lo:hi] = w
        ends = out[first + n - 1].astype(np.int64)
        if np.any(ends != blk_last[blocks].astype(np.int64)):
            return t, 1
        if int(blk_last[j1 - 1]) >= doc_len.shape[0] or out[0] < 0:
            return t, 2
        bound = term_max[t]
        ok = np.isfinite(w) & (w <= bound) & ((w >= 0) | (bound <= 0))
        if not ok.all():
            return t, 3
    return -1, 0
