"""BM25 index build from token ids: document frequencies, postings, weights.

Index layout (term-major CSC, as bm25s): for term ``t`` its postings are
``indices[indptr[t]:indptr[t+1]]`` (document rows, ascending) and ``data[...]`` (the float32
BM25 weight of that term in that document, precomputed). ``term_max[t]`` is the largest weight
of term ``t``: an upper bound that lets scoring skip work that cannot change the top-k.

For ``bm25l`` and ``bm25+`` a term also adds ``base_weights[t]`` (its weight at tf = 0, the same
for every document) to *all* documents; postings store the weight minus that constant, exactly
as bm25s does, and scoring adds the query's constant back.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def count_document_frequencies(values, offsets, n_vocab):
    """Per-term document frequency ``df`` (int64 ``[n_vocab]``) of a ragged token-id corpus.

    Returns ``(df, bad)``: ``bad`` is the position in ``values`` of the first token id outside
    ``[0, n_vocab)``, or -1 when all are valid (``df`` is then complete)."""
    n_docs = offsets.shape[0] - 1
    df = np.zeros(n_vocab, np.int64)
    last = np.full(n_vocab, -1, np.int64)
    for d in range(n_docs):
        for j in range(offsets[d], offsets[d + 1]):
            t = values[j]
            if t < 0 or t >= n_vocab:
                return df, j
            if last[t] != d:
                last[t] = d
                df[t] += 1
    return df, -1


@njit(cache=True, nogil=True)
def build_postings(values, offsets, n_vocab, local_df):
    """Counting sort of the corpus into term-major postings.

    Returns ``indptr`` (int64 ``[n_vocab+1]``), ``indices`` (int32 rows, ascending within a
    term) and ``tf`` (float32 term frequency of each posting). ``local_df`` comes from
    :func:`count_document_frequencies` on the same corpus."""
    n_docs = offsets.shape[0] - 1
    indptr = np.zeros(n_vocab + 1, np.int64)
    for t in range(n_vocab):
        indptr[t + 1] = indptr[t] + local_df[t]
    nnz = indptr[n_vocab]
    indices = np.empty(nnz, np.int32)
    tf = np.empty(nnz, np.float32)
    head = indptr[:-1].copy()
    last = np.full(n_vocab, -1, np.int64)
    slot = np.empty(n_vocab, np.int64)
    for d in range(n_docs):
        for j in range(offsets[d], offsets[d + 1]):
            t = values[j]
            if last[t] != d:
                last[t] = d
                s = head[t]
                head[t] = s + 1
                slot[t] = s
                indices[s] = d
                tf[s] = 1.0
            else:
                tf[slot[t]] += 1.0
    return indptr, indices, tf


@njit(cache=True, inline="always")
def tf_component(method, tf, dl, avgdl, k1, b, delta):
    """Term-frequency component of the five BM25 variants (Kamphuis et al., ECIR 2020)."""
    norm = 1.0 - b + b * dl / avgdl
    if method == 0 or method == 1:  # lucene, robertson
        return tf / (k1 * norm + tf)
    if method == 2:  # atire
        return tf * (k1 + 1.0) / (tf + k1 * norm)
    if method == 3:  # bm25l
        c = tf / norm
        return (k1 + 1.0) * (c + delta) / (k1 + c + delta)
    # bm25+
    return (k1 + 1.0) * tf / (k1 * norm + tf) + delta


@njit(cache=True, nogil=True)
def weigh_postings(indptr, indices, tf, offsets, idf, base_weights, method, k1, b, delta, avgdl):
    """Turn term frequencies into BM25 weights in place (float64 math, one float32 rounding).

    ``tf`` becomes ``idf[t] * tfc(tf, len(d)) - base_weights[t]``; returns ``term_max``
    (float32 ``[n_vocab]``, the largest weight per term, 0 for a term without postings)."""
    n_vocab = indptr.shape[0] - 1
    term_max = np.zeros(n_vocab, np.float32)
    avg = avgdl if avgdl > 0.0 else 1.0
    for t in range(n_vocab):
        w_idf = idf[t]
        w_base = base_weights[t]
        mx = np.float32(0.0)
        for p in range(indptr[t], indptr[t + 1]):
            d = indices[p]
            dl = float(offsets[d + 1] - offsets[d])
            w = np.float32(
                w_idf * tf_component(method, float(tf[p]), dl, avg, k1, b, delta) - w_base
            )
            tf[p] = w
            mx = max(mx, w)
        term_max[t] = mx
    return term_max
