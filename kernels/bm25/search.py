"""Exact BM25 top-k search over the index of :mod:`.build`: one query
(:func:`search_one`), batches (serial and parallel) and dense scores.

Scoring strategies (``STRATEGY_*``; all exact, same results):

* ``dense``: accumulate every posting into a dense array, then one scan of all rows against a
  heap (what bm25s's numba backend does, minus its allocation per query).
* ``touched``: accumulate, remembering which rows were touched, and keep the heap current during
  accumulation: no scan of untouched rows.
* ``maxscore``: terms in decreasing order of their upper bound. After each term the current top
  rows are completed over all terms (a true k-th score, far above partial sums). Once the bounds
  of the remaining terms cannot lift an untouched row to that bar, no new rows are admitted:
  candidates whose bound falls below the bar are dropped before each remaining term, which is
  then scanned (live candidates marked in a bitmap that stays in L1, so a posting of any other
  row costs one bit test), or, when few candidates are left, searched by galloping over them
  (rows sorted by a radix sort) from an interpolated guess (rows of a list spread evenly over
  the documents), so that each search mostly stays within one prefetched cache line. A term
  in many documents may have a *rank directory* (a bitmap of its documents with a running
  count per 64 of them, :func:`.heads.build_rank_rows`): a candidate's posting is then
  found with one cache line and a ``popcount``, prefetched exactly, instead of a search. Such a
  term also has an *impact head* (its heaviest postings, heaviest first,
  :func:`.heads.build_head_rows`). Before admitting it, when the bar and the later terms'
  bounds leave only postings heavier than the head's last one able to lift a new row into the
  top-k, the candidates look the term up and new rows come from the head alone, its heaviest
  first until they are too light: the rest of the list is never read. The head's best
  documents, completed over all terms, raise the bar first (threshold-algorithm style). Queries
  of common terms, whose lists span most documents, then touch a few hundred postings instead
  of millions. ``touched`` and ``maxscore`` live in :mod:`.maxscore`.
* ``auto`` (default): ``dense`` on small corpora (accumulator in cache, see
  ``_DENSE_MAX_DOCS``) when the query touches many rows, else ``maxscore``.

Every document's score is summed in the same term order, so equal documents get bit-equal
scores and ties fall back to row order.

The kernels take their arrays in tuples, unpacked on their first line:

* ``ix = (lz, indptr, indices, data, term_max, base_weights)``: the index (``lz``: the lazy
  decoding state of a packed index, :mod:`.lazy`); ``postings`` is its first four.
* ``heads = (rank_slot, rank_dir, head_ptr, head_doc, head_w)``: rank directories and impact
  heads (:mod:`.heads`; empty arrays for none).
* ``flt = (mask, has_mask, cutoff, has_cutoff)``: which rows and scores a hit may have.
* ``plan = (strategy, window)``: a ``STRATEGY_*`` code, and the rows per window of ``maxscore``
  (0: chosen by corpus size, see :func:`.maxscore.search_pruned`).
* ``scratch = (acc, pos, touched)``: float32 ``[n_docs]`` all 0, int32 ``[n_docs]`` all -1,
  int32 ``[n_docs + 1]``; a batch kernel's parallel twin takes one row per slot.
* ``heap = (heap_s, heap_d)``: ``[>= min(k, n_docs)]``; ``queries = (q_values, q_offsets)``;
  ``out = (rows, scores, counts)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .._config import FASTMATH
from ..topk import heap_drain_sorted, heap_offer
from .lazy import ensure_range
from .maxscore import search_pruned
from .primitives import fetch_add, heapsort, offer_bar, order_desc_stable

STRATEGY_DENSE = 0
STRATEGY_TOUCHED = 1
STRATEGY_MAXSCORE = 2
STRATEGY_AUTO = 3

# ``auto`` scores densely up to this many documents (accumulator <= 64 KiB) when the query's
# postings are at least 1/16 of the documents.
_DENSE_MAX_DOCS = 16384
# Batch work sharing: queries per grab from the counter, at most, and grabs per slot, at least.
_MAX_RUN = 8
_RUNS_PER_SLOT = 64


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def score_dense(indptr, indices, data, base_weights, q_terms, out):
    """Dense scores of one query (duplicates count once per occurrence) into ``out``
    (float32 ``[n_docs]``, overwritten), base weights of bm25l/bm25+ included."""
    base = 0.0
    for i in range(q_terms.shape[0]):
        base += base_weights[q_terms[i]]
    out[:] = np.float32(0.0)
    for i in range(q_terms.shape[0]):
        t = q_terms[i]
        for p in range(indptr[t], indptr[t + 1]):
            out[indices[p]] += data[p]
    b32 = np.float32(base)
    if b32 != 0.0:
        for d in range(out.shape[0]):
            out[d] += b32


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _query_terms(indptr, term_max, base_weights, q_terms):
    """The query's base weight (every occurrence's tf = 0 weight) and its distinct terms that
    can add a positive weight, ascending, with their multiplicities and upper bounds. Returns
    ``(terms, mult, ub, m, base)``: the first ``m`` entries of the arrays are used."""
    m_raw = q_terms.shape[0]
    base = 0.0
    for i in range(m_raw):
        base += base_weights[q_terms[i]]
    qs = q_terms.copy()
    heapsort(qs)
    terms = np.empty(m_raw, np.int64)
    mult = np.empty(m_raw, np.float32)
    ub = np.empty(m_raw, np.float64)
    m = 0
    i = 0
    while i < m_raw:
        t = qs[i]
        j = i + 1
        while j < m_raw and qs[j] == t:
            j += 1
        if term_max[t] > 0.0 and indptr[t + 1] > indptr[t]:
            terms[m] = t
            mult[m] = np.float32(j - i)
            ub[m] = (j - i) * float(term_max[t])
            m += 1
        i = j
    return terms, mult, ub, m, base


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _auto_strategy(indptr, terms, m, n_docs):
    """``auto``: a small corpus whose accumulator stays in cache is cheapest in one dense
    pass when the query touches many rows; otherwise ``maxscore``."""
    postings = 0
    for i in range(m):
        postings += indptr[terms[i] + 1] - indptr[terms[i]]
    dense = n_docs <= _DENSE_MAX_DOCS and 16 * postings >= n_docs
    return STRATEGY_DENSE if dense else STRATEGY_MAXSCORE


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _order_terms(terms, mult, ub, m):
    """The terms and multiplicities by decreasing upper bound (stable: equal bounds keep term
    order), and ``rest`` (float64 ``[m + 1]``): ``rest[i]`` = the sum of the bounds of terms
    ``i..`` in that order."""
    order = order_desc_stable(ub, m)
    o_terms = np.empty(m, np.int64)
    o_mult = np.empty(m, np.float32)
    for i in range(m):
        o_terms[i] = terms[order[i]]
        o_mult[i] = mult[order[i]]
    rest = np.zeros(m + 1, np.float64)
    for i in range(m - 1, -1, -1):
        rest[i] = rest[i + 1] + ub[order[i]]
    return o_terms, o_mult, rest


@njit(cache=True, fastmath=FASTMATH, nogil=True, _nrt=False)
def _search_dense(postings, o_terms, o_mult, m, mask, has_mask, scratch, heap, k_eff, base):
    """The ``dense`` strategy: every posting of the ``m`` terms into ``acc``, then one scan of
    all rows into the empty heap. Returns the heap size; ``acc`` is all zero again."""
    lz, indptr, indices, data = postings
    acc, pos, _ = scratch
    heap_s, heap_d = heap
    n_docs = acc.shape[0]
    base32 = np.float32(base)
    for oi in range(m):
        t = o_terms[oi]
        w_mult = o_mult[oi]
        ensure_range(lz, indptr, t, indptr[t], indptr[t + 1])
        for p in range(indptr[t], indptr[t + 1]):
            acc[indices[p]] += w_mult * data[p]
    n_heap = np.int64(0)
    bar = np.float32(0.0)
    for d in range(n_docs):
        a = acc[d]
        if a > bar and (not has_mask or mask[d]):
            n_heap = heap_offer(heap_s, heap_d, pos, True, n_heap, k_eff, a + base32, d)
            bar = offer_bar(heap_s, n_heap, k_eff, base)
    acc[:] = 0.0
    return n_heap


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _write_hits(heap_s, heap_d, pos, n_heap, cutoff, has_cutoff, out_rows, out_scores):
    """Drain the heap into ``out_rows``/``out_scores`` (best first), drop scores below
    ``cutoff`` when ``has_cutoff``, pad with -1 / -inf; return the number of hits."""
    heap_drain_sorted(heap_s, heap_d, pos, True, n_heap, out_rows, out_scores)
    count = n_heap
    if has_cutoff:
        count = 0
        while count < n_heap and out_scores[count] >= cutoff:
            count += 1
    neg_inf = np.float32(-np.inf)
    for j in range(count, out_rows.shape[0]):
        out_rows[j] = -1
        out_scores[j] = neg_inf
    return count


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def search_one(ix, heads, q_terms, k, flt, plan, scratch, heap, out_rows, out_scores):
    """Exact top-``k`` of one query. Returns the number of hits written to ``out_rows`` /
    ``out_scores`` (best first, ties by row; the rest padded with -1 / -inf).

    A hit is a row whose query terms add a positive weight (it contains at least one query
    term with a positive weight), with ``mask[row]`` True when ``has_mask`` and a score
    ``>= cutoff`` when ``has_cutoff``. Query token ids repeat: each occurrence counts, as in
    bm25s. The tuples are described in the module docstring; ``acc`` and ``pos`` are restored
    before returning."""
    # Members are taken where they are used: numba increfs and decrefs every array it unpacks
    # from a tuple, per call (the lazy state is 17 arrays; docs/bm25.md, "Kernel arguments").
    indptr, term_max, base_weights = ix[1], ix[4], ix[5]
    rank_slot, rank_dir = heads[0], heads[1]
    mask, has_mask, cutoff, has_cutoff = flt
    strategy, window = plan
    acc, pos = scratch[0], scratch[1]
    heap_s, heap_d = heap
    n_docs = acc.shape[0]
    k_eff = min(k, n_docs)
    terms, mult, ub, m, base = _query_terms(indptr, term_max, base_weights, q_terms)
    # (an index allocates rank_dir once, before it sets any slot: with rank_dir in hand, every
    # slot this search may read is a complete row of it)
    has_rank = rank_slot.shape[0] > 0 and rank_dir.shape[0] > 0
    theta_floor = -np.inf
    if has_cutoff:
        theta_floor = cutoff
    if strategy == STRATEGY_AUTO:
        strategy = _auto_strategy(indptr, terms, m, n_docs)
    n_heap = 0
    if m > 0 and k_eff > 0:
        o_terms, o_mult, rest = _order_terms(terms, mult, ub, m)
        postings = (ix[0], indptr, ix[2], ix[3])
        if strategy == STRATEGY_DENSE:
            n_heap = _search_dense(
                postings, o_terms, o_mult, m, mask, has_mask, scratch, heap, k_eff, base
            )
        else:
            n_heap = search_pruned(
                postings,
                (o_terms, o_mult, rest, m),
                strategy == STRATEGY_MAXSCORE,
                mask,
                has_mask,
                theta_floor,
                scratch,
                heap,
                k_eff,
                base,
                has_rank,
                heads,
                window,
            )
    return _write_hits(heap_s, heap_d, pos, n_heap, cutoff, has_cutoff, out_rows, out_scores)


@njit(cache=True, nogil=True)
def check_queries(q_values, q_offsets, n_vocab):
    """-1 when the ragged queries are valid; ``-2 - i`` when ``q_offsets[i]`` breaks
    ``0 <= q_offsets[0] <= ... <= q_offsets[-1] <= len(q_values)``; otherwise the position in
    ``q_values`` of the first token id outside ``[0, n_vocab)``."""
    n = q_offsets.shape[0]
    if n == 0:
        return -1
    if q_offsets[0] < 0:
        return -2
    for i in range(1, n):
        if q_offsets[i] < q_offsets[i - 1]:
            return -2 - i
    if q_offsets[n - 1] > q_values.shape[0]:
        return -2 - (n - 1)
    for j in range(q_offsets[0], q_offsets[n - 1]):
        t = q_values[j]
        if t < 0 or t >= n_vocab:
            return j
    return -1


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _search_run(ix, heads, queries, k, flt, plan, scratch, heap, q0, q1, out):
    """:func:`search_one` for queries ``q0..q1-1`` of the batch ``queries``, into ``out``: the
    body both batch kernels share."""
    q_values, q_offsets = queries
    out_rows, out_scores, out_counts = out
    for qi in range(q0, q1):
        q = q_values[q_offsets[qi] : q_offsets[qi + 1]]
        out_counts[qi] = search_one(
            ix, heads, q, k, flt, plan, scratch, heap, out_rows[qi], out_scores[qi]
        )


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def search_batch_serial(ix, heads, queries, k, flt, plan, scratch, out):
    """:func:`search_one` for each query ``q_values[q_offsets[i]:q_offsets[i+1]]`` in turn,
    reusing the caller's scratch (``acc`` zeros and ``pos`` -1, ``[n_docs]``; ``touched``
    ``[n_docs + 1]``). Returns :func:`check_queries`'s code; nothing is scored unless -1."""
    q_values, q_offsets = queries
    code = check_queries(q_values, q_offsets, ix[4].shape[0])
    if code != -1:
        return code
    kk = max(min(k, scratch[0].shape[0]), 1)
    heap = (np.empty(kk, np.float32), np.empty(kk, np.int64))
    n_q = q_offsets.shape[0] - 1
    _search_run(ix, heads, queries, k, flt, plan, scratch, heap, np.int64(0), n_q, out)
    return -1


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def search_batch_parallel(ix, heads, queries, k, flt, plan, scratch2, out):
    """Batch scoring, ``prange`` over ``n_slots = acc2.shape[0]`` slots that take the queries
    in small runs from a shared atomic counter (a slot whose core is slowed by other work just
    takes fewer); slot ``c`` uses scratch row ``c`` of ``scratch2 = (acc2, pos2, touched2)``
    and writes only the output rows of the queries it took. Returns :func:`check_queries`'s
    code."""
    # parfors hands the loop body arrays and scalars, not tuples of arrays: the tuples are
    # unpacked here and built again inside the loop (free: no copies)
    lz, indptr, indices, data, term_max, base_weights = ix
    rank_slot, rank_dir, head_ptr, head_doc, head_w = heads
    mask, has_mask, cutoff, has_cutoff = flt
    strategy, window = plan
    q_values, q_offsets = queries
    out_rows, out_scores, out_counts = out
    acc2, pos2, touched2 = scratch2
    code = check_queries(q_values, q_offsets, term_max.shape[0])
    if code != -1:
        return code
    n_q = q_offsets.shape[0] - 1
    n_slots = acc2.shape[0]
    kk = max(min(k, acc2.shape[1]), 1)
    # Runs short enough to balance the end of the batch, long enough that the counter's cache
    # line is not fought over when queries are cheap.
    run = max(1, min(_MAX_RUN, n_q // (_RUNS_PER_SLOT * n_slots)))
    counter = np.zeros(1, np.int64)
    for c in prange(n_slots):
        heap = (np.empty(kk, np.float32), np.empty(kk, np.int64))
        scratch = (acc2[c], pos2[c], touched2[c])
        ix_c = (lz, indptr, indices, data, term_max, base_weights)
        heads_c = (rank_slot, rank_dir, head_ptr, head_doc, head_w)
        flt_c = (mask, has_mask, cutoff, has_cutoff)
        plan_c = (strategy, window)
        queries_c = (q_values, q_offsets)
        out_c = (out_rows, out_scores, out_counts)
        while True:
            q0 = fetch_add(counter, 0, run)
            if q0 >= n_q:
                break
            q1 = min(q0 + run, n_q)
            _search_run(ix_c, heads_c, queries_c, k, flt_c, plan_c, scratch, heap, q0, q1, out_c)
    return -1
