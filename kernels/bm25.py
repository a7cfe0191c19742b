"""BM25 kernels: index build from token ids and exact top-k scoring.

Index layout (term-major CSC, as bm25s): for term ``t`` its postings are
``indices[indptr[t]:indptr[t+1]]`` (document rows, ascending) and ``data[...]`` (the float32
BM25 weight of that term in that document, precomputed). ``term_max[t]`` is the largest weight
of term ``t``: an upper bound that lets scoring skip work that cannot change the top-k.

For ``bm25l`` and ``bm25+`` a term also adds ``base_weights[t]`` (its weight at tf = 0, the same
for every document) to *all* documents; postings store the weight minus that constant, exactly
as bm25s does, and scoring adds the query's constant back.

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
  count per 64 of them, :func:`build_rank_rows`): a candidate's posting is then found with one
  cache line and a ``popcount``, prefetched exactly, instead of a search. Such a term also has
  an *impact head* (its heaviest postings, heaviest first, :func:`build_head_rows`). Before
  admitting it, when the bar and the later terms' bounds leave only postings heavier than
  the head's last one able to lift a new row into the top-k, the candidates look the term up
  and new rows come from the head alone, its heaviest first until they are too light: the
  rest of the list is never read. The head's best documents, completed over all terms, raise
  the bar first (threshold-algorithm style). Queries of common terms, whose lists span most
  documents, then touch a few hundred postings instead of millions.
* ``auto`` (default): ``dense`` on small corpora (accumulator in cache, see
  ``_DENSE_MAX_DOCS``) when the query touches many rows, else ``maxscore``.

Hot loops stay free of data-dependent branches and calls where they can (a new row is appended
by bumping a counter; rows above the heap's bar are queued and offered in bursts), live in small
functions of their own (inside one large function they lose registers), prefetch the
accumulator rows they will touch, and index with unsigned integers (numba then skips its
negative-index fix-up): mispredicted branches and instruction count, then cache misses of the
searches, were their main costs.

Every document's score is summed in the same term order, so equal documents get bit-equal
scores and ties fall back to row order.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir as _ir
from numba import njit, prange
from numba.core import cgutils as _cgutils
from numba.core import types as _nbtypes
from numba.extending import intrinsic

from ._config import FASTMATH, PARALLEL_MIN_QUERIES
from .topk import heap_drain_sorted, heap_offer, heap_sift_down


@intrinsic
def _prefetch(typingctx, arr, idx):
    """Hint the CPU to load ``arr[idx]`` into cache (no bounds check; never faults)."""
    sig = _nbtypes.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = _cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p = _ir.IntType(8).as_pointer()
        i32 = _ir.IntType(32)
        fnty = _ir.FunctionType(_ir.VoidType(), [i8p, i32, i32, i32])
        fn = _cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _fetch_add(typingctx, arr, idx, val):
    """Atomically add ``val`` to ``arr[idx]`` (an int64 array) and return the old value: the
    work counter that lets parallel slots take queries dynamically."""
    sig = _nbtypes.int64(arr, idx, val)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = _cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        v = context.cast(builder, args[2], signature.args[2], _nbtypes.int64)
        return builder.atomic_rmw("add", ptr, v, "monotonic")

    return sig, codegen


@intrinsic
def _popcount(typingctx, x):
    """Set bits of a uint64 (one ``popcnt``)."""
    sig = _nbtypes.uint64(_nbtypes.uint64)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen


# Prefetch distance (postings / rows ahead) of the streaming loops, and (candidates ahead) of
# the galloping search; rows above the heap bar are offered to it in bursts of ``_QUEUE``.
_PF = 16
_PF_GALLOP = 4
_QUEUE = 64
# Batch work sharing: queries per grab from the counter, at most, and grabs per slot, at least.
_MAX_RUN = 8
_RUNS_PER_SLOT = 64

METHOD_CODES = {"lucene": 0, "robertson": 1, "atire": 2, "bm25l": 3, "bm25+": 4}
STRATEGY_DENSE = 0
STRATEGY_TOUCHED = 1
STRATEGY_MAXSCORE = 2
STRATEGY_AUTO = 3

# Relative slack on upper bounds so that float32 rounding can never prune a document that
# would have made the top-k (a pruned bound is always a true bound).
_BOUND_SLACK = 1.0 + 2e-5
# Complete the current top rows early (a true k-th score to prune with) when k is at most this.
_SEED_MAX_K = 100
# ``auto`` scores densely up to this many documents (accumulator <= 64 KiB) when the query's
# postings are at least 1/16 of the documents.
_DENSE_MAX_DOCS = 16384
# Finish a remaining posting list by galloping search when candidates * this < its length.
_GALLOP_FACTOR = 12
# ... or, for a term with a rank directory, by rank lookups when candidates * this < its
# length; rank lookups run _PF_RANK candidates ahead of their prefetches.
_RANK_FACTOR = 4
_PF_RANK = 8
# Impact heads: completing a head's best documents to raise the bar starts with
# _HEAD_SEED0 * k of them and grows by _HEAD_SEED_GROW up to _HEAD_SEED_MAX * k (more costs
# more than the admissions it saves on real text); _PF_HEAD: prefetch distance (entries ahead)
# of the head walks.
_HEAD_SEED0 = 8
_HEAD_SEED_GROW = 4
_HEAD_SEED_MAX = 32
_PF_HEAD = 8


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------


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


@njit(cache=True, nogil=True)
def build_rank_rows(indptr, indices, n_docs, terms, slots, rank_dir):
    """Fill row ``slots[i]`` of ``rank_dir`` with the rank directory of term ``terms[i]``: for
    each 64-document word ``w``, ``[2w]`` = bitmap of the documents in the term's postings,
    ``[2w + 1]`` = its postings before that word. The posting of document ``d`` (if its bit is
    set) is then ``indptr[t] + [2w + 1] + popcount([2w] & ((1 << (d & 63)) - 1))``: one
    cache line, no search. Returns -1, or the index into ``terms`` of a term whose postings
    hold a document outside ``[0, n_docs)`` (its row is left zero: unusable but harmless)."""
    n_words = (n_docs + 63) >> 6
    for i in range(terms.shape[0]):
        t = terms[i]
        row = rank_dir[slots[i]]
        row[:] = 0
        for p in range(indptr[t], indptr[t + 1]):
            d = np.int64(indices[p])
            if d < 0 or d >= n_docs:
                row[:] = 0
                return i
            du = np.uint64(d)
            row[2 * (du >> np.uint64(6))] |= np.uint64(1) << (du & np.uint64(63))
        c = np.uint64(0)
        for w in range(n_words):
            row[2 * w + 1] = c
            c += _popcount(row[2 * w])
    return -1


@njit(cache=True, nogil=True)
def build_head_rows(indptr, indices, data, terms, slots, head_ptr, head_doc, head_w):
    """Fill the impact head of each term ``terms[i]``: ``head_doc``/``head_w`` entries
    ``[head_ptr[s], head_ptr[s + 1])`` (``s = slots[i]``) get the documents and weights of its
    heaviest postings, heaviest first (ties by document), so that every posting left out
    weighs at most the last entry's weight. Postings must be bounds-checked already; weights
    are compared by their float32 bits, which order them for weights >= 0 (a term with
    negative weights is never searched). Radix select and sort: linear, quick to compile."""
    cnt = np.zeros(1 << 16, np.int64)
    m16 = np.uint32(0xFFFF)
    for i in range(terms.shape[0]):
        t = terms[i]
        lo = indptr[t]
        n = indptr[t + 1] - lo
        s = slots[i]
        h0 = head_ptr[s]
        h = min(head_ptr[s + 1] - h0, n)
        if h <= 0:
            continue
        bits = data[lo : lo + n].view(np.uint32)
        # cut = the bits of the h-th heaviest weight: high 16 bits, then low 16 bits
        cnt[:] = 0
        for p in range(n):
            cnt[bits[p] >> np.uint32(16)] += 1
        need = h
        top = (1 << 16) - 1
        while cnt[top] < need:
            need -= cnt[top]
            top -= 1
        cnt[:] = 0
        for p in range(n):
            if bits[p] >> np.uint32(16) == top:
                cnt[bits[p] & m16] += 1
        low = (1 << 16) - 1
        while cnt[low] < need:
            need -= cnt[low]
            low -= 1
        cut = np.uint32((top << 16) | low)
        # the postings above the cut and the first `need` at it, in document order
        pick = np.empty(h, np.int64)
        c = 0
        for p in range(n):
            b = bits[p]
            if b > cut or (b == cut and need > 0):
                if b == cut:
                    need -= 1
                pick[c] = p
                c += 1
        # stable LSD radix sort by descending weight: ties keep document order
        order = np.arange(h)
        tmp = np.empty(h, np.int64)
        for shift in (0, 16):
            cnt[:] = 0
            for j in range(h):
                cnt[((~bits[pick[order[j]]]) >> np.uint32(shift)) & m16] += 1
            total = 0
            for b in range(1 << 16):
                c = cnt[b]
                cnt[b] = total
                total += c
            for j in range(h):
                o = order[j]
                dg = ((~bits[pick[o]]) >> np.uint32(shift)) & m16
                tmp[cnt[dg]] = o
                cnt[dg] += 1
            order, tmp = tmp, order
        for j in range(h):
            p = pick[order[j]]
            head_doc[h0 + j] = indices[lo + p]
            head_w[h0 + j] = data[lo + p]


@njit(cache=True, inline="always")
def _tfc(method, tf, dl, avgdl, k1, b, delta):
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
            w = np.float32(w_idf * _tfc(method, float(tf[p]), dl, avg, k1, b, delta) - w_base)
            tf[p] = w
            mx = max(mx, w)
        term_max[t] = mx
    return term_max


# --------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------


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


@njit(cache=True, fastmath=FASTMATH, nogil=True, inline="always")
def _raise(a, base32, d, heap_s, heap_d, pos, n_heap, k_eff):
    """Offer row ``d`` with new partial sum ``a`` to the heap (raising it in place when it is
    already there); return the heap size."""
    f = a + base32
    pd = pos[d]
    if pd >= 0:
        heap_s[pd] = f
        heap_sift_down(heap_s, heap_d, pos, True, n_heap, pd)
        return n_heap
    return heap_offer(heap_s, heap_d, pos, True, n_heap, k_eff, f, d)


@njit(cache=True, fastmath=FASTMATH, nogil=True, inline="always")
def _bar(heap_s, n_heap, k_eff, base):
    """The partial sum a row must exceed to be offered to the heap: 0 (only positive sums are
    hits) until the heap is full, then just below its worst score minus the base weight (the
    heap itself settles exact ties by row). One compare against it keeps hot loops simple."""
    if n_heap < k_eff:
        return np.float32(0.0)
    b = (float(heap_s[0]) - base) * (1.0 - 1e-6)
    return np.float32(b) if b > 0.0 else np.float32(0.0)


@njit(cache=True, nogil=True, inline="always")
def _find(indices, lo, hi, d, g):
    """First position in ``[lo, hi)`` whose row is >= ``d`` (``hi`` if none); rows ascend.
    The search starts at the guess ``g`` and gallops outward from it: with an interpolated
    guess (rows of a posting list spread evenly over the documents) the answer is a few
    postings away, in the same cache lines, where a plain binary search misses cache at
    nearly every step."""
    if lo >= hi:
        return lo
    g = min(max(g, lo), hi - 1)
    if indices[np.uint64(g)] < d:
        # indices[a] < d; find b > a with indices[b] >= d (or b = hi).
        a = g
        step = 1
        b = g + 1
        while b < hi and indices[np.uint64(b)] < d:
            a = b
            step <<= 1
            b = a + step
        b = min(b, hi)
    else:
        # indices[b] >= d; find a < b with indices[a] < d (or a = lo - 1).
        b = g
        step = 1
        a = g - 1
        while a >= lo and indices[np.uint64(a)] >= d:
            b = a
            step <<= 1
            a = b - step
        a = max(a, lo - 1)
    while b - a > 1:
        mid = (a + b) >> 1
        if indices[np.uint64(mid)] < d:
            a = mid
        else:
            b = mid
    return b


@njit(cache=True, nogil=True)
def sort_rows(rows, n, n_docs):
    """Sort ``rows[:n]`` (ints in ``[0, n_docs)``) ascending in place: LSD radix sort with
    11-bit digits (linear time; no n log n over thousands of candidates)."""
    if n < 64:
        for i in range(1, n):
            v = rows[i]
            j = i - 1
            while j >= 0 and rows[j] > v:
                rows[j + 1] = rows[j]
                j -= 1
            rows[j + 1] = v
        return
    tmp = np.empty(n, rows.dtype)
    counts = np.empty(2048, np.int64)
    src = rows
    dst = tmp
    shift = 0
    swapped = False
    while (n_docs - 1) >> shift > 0 or shift == 0:
        counts[:] = 0
        for i in range(n):
            counts[(src[i] >> shift) & 2047] += 1
        total = 0
        for b in range(2048):
            c = counts[b]
            counts[b] = total
            total += c
        for i in range(n):
            b = (src[i] >> shift) & 2047
            dst[counts[b]] = src[i]
            counts[b] += 1
        src, dst = dst, src
        swapped = not swapped
        shift += 11
    if swapped:
        for i in range(n):
            rows[i] = tmp[i]


@njit(cache=True, nogil=True)
def _sift_down(a, root, end):
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and a[child] < a[child + 1]:
            child += 1
        if a[root] < a[child]:
            a[root], a[child] = a[child], a[root]
            root = child
        else:
            return


@njit(cache=True, nogil=True)
def _heapsort(a):
    """Sort ``a`` ascending in place. For query-sized arrays: no recursion and a fraction of
    the compile time of numba's ``np.sort`` (quicksort plus its helpers, ~8 s cold)."""
    n = a.shape[0]
    for s in range(n // 2 - 1, -1, -1):
        _sift_down(a, s, n)
    for end in range(n - 1, 0, -1):
        a[0], a[end] = a[end], a[0]
        _sift_down(a, 0, end)


@njit(cache=True, nogil=True)
def _later(key, i, j):
    """Whether position ``i`` comes after ``j``: a lower key, or an equal key and a later index
    (descending by key, stable)."""
    return key[i] < key[j] or (key[i] == key[j] and i > j)


@njit(cache=True, nogil=True)
def _order_desc_stable(key, m):
    """Indices of ``key[:m]`` by descending key, equal keys in index order (what
    ``np.argsort(-key[:m], kind="mergesort")`` returns), by heapsort."""
    order = np.arange(m)
    for start in range(m // 2 - 1, -1, -1):
        _sift_order(key, order, start, m)
    for end in range(m - 1, 0, -1):
        order[0], order[end] = order[end], order[0]
        _sift_order(key, order, 0, end)
    return order


@njit(cache=True, nogil=True)
def _sift_order(key, order, root, end):
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and _later(key, order[child + 1], order[child]):
            child += 1
        if _later(key, order[child], order[root]):
            order[root], order[child] = order[child], order[root]
            root = child
        else:
            return


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _seed_heap_rows(
    indptr,
    indices,
    data,
    o_terms,
    o_mult,
    m,
    done,
    acc,
    base32,
    heap_d,
    n_heap,
    seed_rows,
    seed_full,
    n_seed,
    k_eff,
):
    """Complete the full score of the rows now in the heap that are not seeds yet: their
    partial sum over the first ``done`` terms (``acc``) plus the remaining terms, found by
    galloping from an interpolated guess in each posting list (all guesses prefetched first).
    Return ``(n_seed, theta_seed)``: ``theta_seed`` is the k-th best full score among the seeds
    (-inf with fewer than k)."""
    cap = seed_rows.shape[0]
    n_docs = acc.shape[0]
    for h in range(n_heap):  # prefetch the guessed posting of every row in every term
        d = heap_d[h]
        for j in range(done, m):
            tj = o_terms[j]
            lo = indptr[tj]
            hi = indptr[tj + 1]
            if hi > lo:
                g = min(lo + int(d * ((hi - lo) / n_docs)), hi - 1)
                _prefetch(indices, g)
                _prefetch(data, g)
                _prefetch(indices, max(g - 16, lo))
                _prefetch(indices, min(g + 16, hi - 1))
    for h in range(n_heap):
        if n_seed == cap:
            break
        d = heap_d[h]
        known = False
        for s in range(n_seed):
            if seed_rows[s] == d:
                known = True
                break
        if known:
            continue
        full = acc[d]
        for j in range(done, m):
            tj = o_terms[j]
            lo = indptr[tj]
            hi = indptr[tj + 1]
            lo = _find(indices, lo, hi, d, lo + int(d * ((hi - lo) / n_docs)))
            if lo < hi and indices[lo] == d:
                full += o_mult[j] * data[lo]
        seed_rows[n_seed] = d
        seed_full[n_seed] = full + base32
        n_seed += 1
    if n_seed < k_eff:
        return n_seed, -np.inf
    srt = seed_full[:n_seed].copy()
    _heapsort(srt)
    return n_seed, srt[n_seed - k_eff]


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _admit_term(
    indices,
    data,
    start,
    end,
    w_mult,
    mask,
    has_mask,
    acc,
    pos,
    touched,
    nt,
    heap_s,
    heap_d,
    n_heap,
    k_eff,
    bar,
    base,
    base32,
):
    """Add the postings ``[start, end)`` (times ``w_mult``) to ``acc``, appending new rows to
    ``touched`` and offering rows above ``bar`` to the heap. Returns ``(nt, n_heap, bar)``.

    The loop has no calls and no data-dependent branches: rows above ``bar`` are queued and
    offered to the heap in bursts (a call inside the loop costs registers on every posting).
    Indices are unsigned: numba then skips its negative-index fix-up on every access."""
    queue = np.empty(_QUEUE + 1, np.uint32)
    ntu = np.uint64(nt)
    last = np.uint64(end - 1)
    pf = np.uint64(_PF)
    p = start
    while p < end:
        stop = min(p + _QUEUE, end)
        nq = np.uint64(0)
        for qs in range(p, stop):
            q = np.uint64(qs)
            _prefetch(acc, np.uint32(indices[min(q + pf, last)]))
            d = np.uint32(indices[q])
            a = acc[d]
            ok = True
            if has_mask:
                ok = mask[d]
            touched[ntu] = d
            ntu += np.uint64((a == 0.0) & ok)
            a = a + w_mult * data[q] if ok else a
            acc[d] = a
            queue[nq] = d
            nq += np.uint64(a > bar)
        for i in range(nq):
            d = queue[i]
            a = acc[d]
            if a > bar:
                n_heap = _raise(a, base32, np.int64(d), heap_s, heap_d, pos, n_heap, k_eff)
                bar = _bar(heap_s, n_heap, k_eff, base)
        p = stop
    return np.int64(ntu), n_heap, bar


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _scan_term(
    indices,
    data,
    start,
    end,
    w_mult,
    acc,
    live,
    pos,
    heap_s,
    heap_d,
    n_heap,
    k_eff,
    bar,
    base,
    base32,
):
    """Add the postings ``[start, end)`` to the live candidates (the rows set in the bitmap
    ``live``), offering rows above ``bar`` to the heap. Returns ``(n_heap, bar)``.

    A first pass queues the postings of live rows (a test of one bit, in L1, per posting: no
    read of ``acc`` for the many rows that are not candidates); a second adds them."""
    queue = np.empty(_QUEUE + 1, np.uint32)
    p = start
    one = np.uint64(1)
    while p < end:
        stop = min(p + _QUEUE, end)
        nq = np.uint64(0)
        for qs in range(p, stop):
            q = np.uint64(qs)
            d = np.uint32(indices[q])
            bit = (live[np.uint64(d >> np.uint32(6))] >> np.uint64(d & np.uint32(63))) & one
            queue[nq] = np.uint32(qs - p)
            nq += bit
        for i in range(nq):
            q = np.uint64(p + queue[i])
            d = np.uint32(indices[q])
            a = acc[d] + w_mult * data[q]
            acc[d] = a
            if a > bar:
                n_heap = _raise(a, base32, np.int64(d), heap_s, heap_d, pos, n_heap, k_eff)
                bar = _bar(heap_s, n_heap, k_eff, base)
        p = stop
    return n_heap, bar


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _prune(acc, touched, nt, r, theta, live, has_live):
    """Keep the rows of ``touched[:nt]`` that can still reach ``theta`` with at most ``r`` more;
    zero the others' ``acc`` (and clear their bits in ``live`` when ``has_live``). Returns the
    number kept.

    A dropped row may stay in the heap with its partial sum: that sum is below ``theta``, itself
    at most the k-th best final score, so the rows of the true top-k (never dropped, and offered
    to the heap with their final sums) push it out, or the cutoff filters it."""
    keep = np.uint64(0)
    last = np.uint64(nt - 1)
    pf = np.uint64(_PF)
    for js in range(nt):
        j = np.uint64(js)
        _prefetch(acc, np.uint32(touched[min(j + pf, last)]))
        d = np.uint32(touched[j])
        a = acc[d]
        alive = (a + r) * _BOUND_SLACK >= theta
        touched[keep] = d
        keep += np.uint64(alive)
        acc[d] = a if alive else np.float32(0.0)
        if has_live:
            w = np.uint64(d >> np.uint32(6))
            live[w] &= ~(np.uint64(not alive) << np.uint64(d & np.uint32(63)))
    return np.int64(keep)


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _gallop_term(
    indices,
    data,
    start,
    end,
    w_mult,
    acc,
    pos,
    touched,
    nt,
    heap_s,
    heap_d,
    n_heap,
    k_eff,
    bar,
    base,
    base32,
):
    """Add the postings ``[start, end)`` of the rows ``touched[:nt]`` (ascending), found by
    interpolated galloping search. Returns ``(n_heap, bar)``."""
    n_docs = acc.shape[0]
    p = start
    dens = (end - start) / n_docs  # postings per row
    last = np.uint64(nt - 1)
    pf = np.uint64(_PF_GALLOP)
    for js in range(nt):
        j = np.uint64(js)
        d = np.int64(touched[j])
        if p < end:
            # Prefetch where a later candidate should lie: its search then finds its
            # posting in cache.
            dn = np.int64(touched[min(j + pf, last)])
            at = np.int64(indices[np.uint64(p)])
            g = np.uint64(min(p + int((dn - at) * dens), end - 1))
            _prefetch(indices, g)
            _prefetch(data, g)
            p = _find(indices, p, end, d, p + int((d - at) * dens))
        if p == end:
            break
        pu = np.uint64(p)
        if indices[pu] == d:
            du = np.uint32(d)
            a = acc[du] + w_mult * data[pu]
            acc[du] = a
            if a > bar:
                n_heap = _raise(a, base32, d, heap_s, heap_d, pos, n_heap, k_eff)
                bar = _bar(heap_s, n_heap, k_eff, base)
    return n_heap, bar


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _rank_term(
    data,
    start,
    w_mult,
    acc,
    pos,
    touched,
    nt,
    rdir,
    heap_s,
    heap_d,
    n_heap,
    k_eff,
    bar,
    base,
    base32,
):
    """Add the postings from ``start`` of the rows ``touched[:nt]`` (any order), found through
    the term's rank directory ``rdir`` (see :func:`build_rank_rows`). Returns ``(n_heap, bar)``.

    Two prefetch stages: the directory word of the row ``2 * _PF_RANK`` candidates ahead, then
    the posting and accumulator entry of the row ``_PF_RANK`` ahead (its word now in cache)."""
    last = np.uint64(nt - 1)
    pf = np.uint64(_PF_RANK)
    one = np.uint64(1)
    six = np.uint64(6)
    m63 = np.uint64(63)
    st = np.uint64(start)
    for js in range(nt):
        j = np.uint64(js)
        d2 = np.uint64(touched[min(j + pf + pf, last)])
        _prefetch(rdir, (d2 >> six) << one)
        d1 = np.uint64(touched[min(j + pf, last)])
        w1 = (d1 >> six) << one
        b1 = rdir[w1]
        _prefetch(data, st + rdir[w1 + one] + _popcount(b1 & ((one << (d1 & m63)) - one)))
        _prefetch(acc, d1)
        d = np.uint64(touched[j])
        w = (d >> six) << one
        b = rdir[w]
        sh = d & m63
        if (b >> sh) & one:
            p = st + rdir[w + one] + _popcount(b & ((one << sh) - one))
            a = acc[d] + w_mult * data[p]
            acc[d] = a
            if a > bar:
                n_heap = _raise(a, base32, np.int64(d), heap_s, heap_d, pos, n_heap, k_eff)
                bar = _bar(heap_s, n_heap, k_eff, base)
    return n_heap, bar


@njit(cache=True, fastmath=FASTMATH, nogil=True, inline="always")
def _theta(theta_floor, theta_known, heap_s, n_heap, k_eff):
    """The bar a final score must reach: the caller's cutoff, a known k-th best score, or the
    heap's worst once it holds k rows (its sums are lower bounds of final scores)."""
    theta = max(theta_floor, theta_known)
    if n_heap == k_eff and heap_s[0] > theta:
        theta = heap_s[0]
    return theta


@njit(cache=True, nogil=True, inline="always")
def _posting(indptr, indices, t, d, rank_slot, rank_dir, n_docs):
    """Position of document ``d`` in the postings of term ``t`` (rank directory if it has one,
    else interpolated galloping search), or -1 when it has none."""
    lo = indptr[t]
    hi = indptr[t + 1]
    s = rank_slot[t]
    if s >= 0:
        du = np.uint64(d)
        w = (du >> np.uint64(6)) << np.uint64(1)
        bits = rank_dir[s, w]
        sh = du & np.uint64(63)
        if (bits >> sh) & np.uint64(1):
            return lo + np.int64(
                rank_dir[s, w + np.uint64(1)]
                + _popcount(bits & ((np.uint64(1) << sh) - np.uint64(1)))
            )
        return -1
    p = _find(indices, lo, hi, d, lo + int(d * ((hi - lo) / n_docs)))
    if p < hi and indices[np.uint64(p)] == d:
        return p
    return -1


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _head_seed(
    indptr,
    indices,
    data,
    o_terms,
    o_mult,
    m,
    oi,
    head_doc,
    head_w,
    j0,
    j1,
    mask,
    has_mask,
    rank_slot,
    rank_dir,
    top_s,
    n_top,
    k_eff,
    base,
    n_docs,
):
    """Complete over all ``m`` terms the scores of the documents of head entries ``[j0, j1)``
    of term ``o_terms[oi]`` (distinct documents) and keep the ``k_eff`` best in the min-heap
    ``top_s[:n_top]``; returns ``n_top``. With ``k_eff`` of them, ``top_s[0]`` is a true lower
    bound of the k-th best final score."""
    last = j1 - 1
    for j in range(j0, j1):
        dn = np.int64(head_doc[min(j + _PF_HEAD, last)])
        for i in range(m):
            if i != oi:
                ti = o_terms[i]
                s = rank_slot[ti]
                if s >= 0:
                    _prefetch(rank_dir[s], (np.uint64(dn) >> np.uint64(6)) << np.uint64(1))
                else:
                    lo = indptr[ti]
                    hi = indptr[ti + 1]
                    _prefetch(indices, min(lo + int(dn * ((hi - lo) / n_docs)), hi - 1))
        d = np.int64(head_doc[j])
        if has_mask and not mask[d]:
            continue
        full = base
        for i in range(m):
            if i == oi:
                full += o_mult[i] * head_w[j]
            else:
                p = _posting(indptr, indices, o_terms[i], d, rank_slot, rank_dir, n_docs)
                if p >= 0:
                    full += o_mult[i] * data[p]
        if n_top < k_eff:
            top_s[n_top] = full
            c = n_top
            n_top += 1
            while c > 0:
                par = (c - 1) >> 1
                if top_s[par] <= top_s[c]:
                    break
                top_s[par], top_s[c] = top_s[c], top_s[par]
                c = par
        elif full > top_s[0]:
            top_s[0] = full
            c = 0
            while True:
                lc = 2 * c + 1
                if lc >= n_top:
                    break
                if lc + 1 < n_top and top_s[lc + 1] < top_s[lc]:
                    lc += 1
                if top_s[c] <= top_s[lc]:
                    break
                top_s[lc], top_s[c] = top_s[c], top_s[lc]
                c = lc
    return n_top


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _head_admit(
    head_doc,
    head_w,
    j0,
    j1,
    w_mult,
    rest_b,
    theta,
    mask,
    has_mask,
    acc,
    pos,
    touched,
    nt,
    live,
    has_live,
    heap_s,
    heap_d,
    n_heap,
    k_eff,
    bar,
    base,
    base32,
):
    """Admit as new rows the documents of head entries from ``j0`` on (heaviest first) whose
    weight plus ``rest_b`` (the later terms' bounds and the base) can still reach ``theta``;
    rows already touched are skipped (they got this term from their own lookup), and so are
    dropped rows still in the heap. Returns ``(nt, n_heap, bar)``."""
    last = j1 - 1
    j = j0
    while j < j1:
        wv = w_mult * head_w[j]
        if (wv + rest_b) * _BOUND_SLACK < theta:
            break
        dn = np.uint32(head_doc[min(j + _PF_HEAD, last)])
        _prefetch(acc, dn)
        _prefetch(pos, dn)
        d = np.uint32(head_doc[j])
        j += 1
        if has_mask and not mask[d]:
            continue
        if acc[d] != 0.0 or pos[d] >= 0:
            continue
        a = acc[d] + wv
        acc[d] = a
        touched[nt] = d
        nt += 1
        if has_live:
            live[np.uint64(d >> np.uint32(6))] |= np.uint64(1) << np.uint64(d & np.uint32(63))
        if a > bar:
            n_heap = _raise(a, base32, np.int64(d), heap_s, heap_d, pos, n_heap, k_eff)
            bar = _bar(heap_s, n_heap, k_eff, base)
    return nt, n_heap, bar


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def search_one(
    indptr,
    indices,
    data,
    term_max,
    base_weights,
    q_terms,
    k,
    mask,
    has_mask,
    cutoff,
    has_cutoff,
    strategy,
    acc,
    pos,
    touched,
    heap_s,
    heap_d,
    out_rows,
    out_scores,
    rank_slot,
    rank_dir,
    head_ptr,
    head_doc,
    head_w,
):
    """Exact top-``k`` of one query. Returns the number of hits written to ``out_rows`` /
    ``out_scores`` (best first, ties by row; the rest padded with -1 / -inf).

    A hit is a row whose query terms add a positive weight (it contains at least one query
    term with a positive weight), with ``mask[row]`` True when ``has_mask`` and a score
    ``>= cutoff`` when ``has_cutoff``. Query token ids repeat: each occurrence counts, as in
    bm25s. Scratch: ``acc`` float32 ``[n_docs]`` all 0, ``pos`` int32 ``[n_docs]`` all -1,
    ``touched`` int32 ``[n_docs + 1]``, ``heap_s``/``heap_d`` ``[>= min(k, n_docs)]``; ``acc`` and
    ``pos`` are restored before returning. ``rank_slot`` (int32 ``[n_vocab]``, or empty for
    none): the row of ``rank_dir`` holding a term's rank directory, -1 where it has none; slot
    ``s`` also has the impact head ``head_doc``/``head_w[head_ptr[s]:head_ptr[s + 1]]`` (see
    :func:`build_head_rows`; empty arrays for none)."""
    n_docs = acc.shape[0]
    neg_inf = np.float32(-np.inf)
    width = out_rows.shape[0]
    k_eff = min(k, n_docs)
    m_raw = q_terms.shape[0]

    # Query terms: base weight of every occurrence; unique terms with their multiplicity.
    base = 0.0
    for i in range(m_raw):
        base += base_weights[q_terms[i]]
    base32 = np.float32(base)
    qs = q_terms.copy()
    _heapsort(qs)
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

    # (an index allocates rank_dir once, before it sets any slot: with rank_dir in hand, every
    # slot this search may read is a complete row of it)
    has_rank = rank_slot.shape[0] > 0 and rank_dir.shape[0] > 0
    n_heap = 0
    theta_floor = -np.inf
    if has_cutoff:
        theta_floor = cutoff

    if strategy == STRATEGY_AUTO:
        # A small corpus whose accumulator stays in cache: one dense pass is cheapest.
        postings = 0
        for i in range(m):
            postings += indptr[terms[i] + 1] - indptr[terms[i]]
        dense = n_docs <= _DENSE_MAX_DOCS and 16 * postings >= n_docs
        strategy = STRATEGY_DENSE if dense else STRATEGY_MAXSCORE

    if m > 0 and k_eff > 0:
        order = _order_desc_stable(ub, m)  # stable: equal bounds keep term order
        o_terms = np.empty(m, np.int64)
        o_mult = np.empty(m, np.float32)
        for i in range(m):
            o_terms[i] = terms[order[i]]
            o_mult[i] = mult[order[i]]
        rest = np.zeros(m + 1, np.float64)  # rest[i] = sum of bounds of terms i.. (in order)
        for i in range(m - 1, -1, -1):
            rest[i] = rest[i + 1] + ub[order[i]]

        if strategy == STRATEGY_DENSE:
            for oi in range(m):
                t = o_terms[oi]
                w_mult = o_mult[oi]
                for p in range(indptr[t], indptr[t + 1]):
                    acc[indices[p]] += w_mult * data[p]
            bar = np.float32(0.0)
            for d in range(n_docs):
                a = acc[d]
                if a > bar and (not has_mask or mask[d]):
                    n_heap = heap_offer(heap_s, heap_d, pos, True, n_heap, k_eff, a + base32, d)
                    bar = _bar(heap_s, n_heap, k_eff, base)
            acc[:] = 0.0
        else:
            maxscore = strategy == STRATEGY_MAXSCORE
            seeding = maxscore and k_eff <= _SEED_MAX_K
            n_seed_cap = 4 * k_eff if seeding else 1
            seed_rows = np.empty(n_seed_cap, np.int64)
            seed_full = np.empty(n_seed_cap, np.float64)
            n_seed = 0
            theta_seed = -np.inf
            theta_head = -np.inf
            top_s = np.empty(k_eff if seeding else 1, np.float64)
            n_top = 0
            has_heads = seeding and has_rank and head_ptr.shape[0] > 0 and head_w.shape[0] > 0
            j0 = 0
            j1 = 0
            rest_b = 0.0
            nt = 0
            bar = np.float32(0.0)
            stopped = False
            is_sorted = False
            has_live = False
            live = np.zeros(0, np.uint64)
            for oi in range(m):
                t = o_terms[oi]
                w_mult = o_mult[oi]
                start = indptr[t]
                end = indptr[t + 1]
                theta = _theta(theta_floor, max(theta_seed, theta_head), heap_s, n_heap, k_eff)
                if maxscore and not stopped and (rest[oi] + base) * _BOUND_SLACK < theta:
                    # No untouched row can reach the top-k any more: from here on, only the
                    # candidates whose bound still can get the remaining terms.
                    stopped = True
                use_head = False
                if has_heads and not stopped and rank_slot[t] >= 0:
                    # A term with an impact head: if every posting outside the head is too
                    # light to lift a new row to theta, new rows come from the head alone
                    # (raise theta first by completing the head's best documents).
                    slot = rank_slot[t]
                    j0 = head_ptr[slot]
                    j1 = head_ptr[slot + 1]
                    rest_b = rest[oi + 1] + base
                    use_head = (w_mult * head_w[j1 - 1] + rest_b) * _BOUND_SLACK < theta
                    # Only while no completed rows give a bar (the first terms matched fewer
                    # than k rows): after that, a common term's heaviest documents rarely
                    # beat it (real text: their lookups cost more than they save).
                    # Each head's candidates are distinct documents; two heads' are not, so
                    # each head gets a fresh top-k (its own k-th score is a true bar).
                    s_done = 0
                    s_next = min(_HEAD_SEED0 * k_eff, j1 - j0) if theta_seed == -np.inf else 0
                    n_top = 0
                    while not use_head and s_done < s_next:
                        n_top = _head_seed(
                            indptr,
                            indices,
                            data,
                            o_terms,
                            o_mult,
                            m,
                            oi,
                            head_doc,
                            head_w,
                            j0 + s_done,
                            j0 + s_next,
                            mask,
                            has_mask,
                            rank_slot,
                            rank_dir,
                            top_s,
                            n_top,
                            k_eff,
                            base,
                            n_docs,
                        )
                        if n_top == k_eff and top_s[0] > theta_head:
                            theta_head = top_s[0]
                        theta = _theta(
                            theta_floor, max(theta_seed, theta_head), heap_s, n_heap, k_eff
                        )
                        use_head = (w_mult * head_w[j1 - 1] + rest_b) * _BOUND_SLACK < theta
                        s_done = s_next
                        s_next = min(s_next * _HEAD_SEED_GROW, _HEAD_SEED_MAX * k_eff, j1 - j0)
                    if (rest[oi] + base) * _BOUND_SLACK < theta:
                        stopped = True
                        use_head = False
                if stopped or use_head:
                    # Candidates first: drop the rows that can no longer make it, then add
                    # this term to the others. A long list is scanned; when candidates are few,
                    # they are looked up in it by rank directory or galloping search (rows
                    # sorted once, by radix sort).
                    nt = _prune(acc, touched, nt, rest[oi] + base, theta, live, has_live)
                    if nt == 0 and stopped:
                        break
                    slot = rank_slot[t] if has_rank else -1
                    if nt == 0:
                        pass
                    elif slot >= 0 and nt * _RANK_FACTOR < end - start:
                        n_heap, bar = _rank_term(
                            data,
                            start,
                            w_mult,
                            acc,
                            pos,
                            touched,
                            nt,
                            rank_dir[slot],
                            heap_s,
                            heap_d,
                            n_heap,
                            k_eff,
                            bar,
                            base,
                            base32,
                        )
                    elif nt * _GALLOP_FACTOR < end - start:
                        if not is_sorted:
                            sort_rows(touched, nt, n_docs)
                            is_sorted = True
                        n_heap, bar = _gallop_term(
                            indices,
                            data,
                            start,
                            end,
                            w_mult,
                            acc,
                            pos,
                            touched,
                            nt,
                            heap_s,
                            heap_d,
                            n_heap,
                            k_eff,
                            bar,
                            base,
                            base32,
                        )
                    else:
                        if not has_live:
                            live = np.zeros((n_docs + 63) >> 6, np.uint64)
                            for j in range(nt):
                                d = touched[j]
                                live[d >> 6] |= np.uint64(1) << np.uint64(d & 63)
                            has_live = True
                        n_heap, bar = _scan_term(
                            indices,
                            data,
                            start,
                            end,
                            w_mult,
                            acc,
                            live,
                            pos,
                            heap_s,
                            heap_d,
                            n_heap,
                            k_eff,
                            bar,
                            base,
                            base32,
                        )
                    if use_head:
                        theta = _theta(
                            theta_floor, max(theta_seed, theta_head), heap_s, n_heap, k_eff
                        )
                        nt_new, n_heap, bar = _head_admit(
                            head_doc,
                            head_w,
                            j0,
                            j1,
                            w_mult,
                            rest_b,
                            theta,
                            mask,
                            has_mask,
                            acc,
                            pos,
                            touched,
                            nt,
                            live,
                            has_live,
                            heap_s,
                            heap_d,
                            n_heap,
                            k_eff,
                            bar,
                            base,
                            base32,
                        )
                        if nt_new > nt:
                            is_sorted = False
                        nt = nt_new
                else:
                    nt, n_heap, bar = _admit_term(
                        indices,
                        data,
                        start,
                        end,
                        w_mult,
                        mask,
                        has_mask,
                        acc,
                        pos,
                        touched,
                        nt,
                        heap_s,
                        heap_d,
                        n_heap,
                        k_eff,
                        bar,
                        base,
                        base32,
                    )
                    is_sorted = False
                    has_live = False
                if (
                    seeding
                    and not stopped
                    and oi + 1 < m
                    and n_heap == k_eff
                    and n_seed < n_seed_cap
                ):
                    # Complete the current top rows over all terms: k true scores give a far
                    # higher bar than partial sums, so fewer long lists get scanned.
                    n_seed, theta_seed = _seed_heap_rows(
                        indptr,
                        indices,
                        data,
                        o_terms,
                        o_mult,
                        m,
                        oi + 1,
                        acc,
                        base32,
                        heap_d,
                        n_heap,
                        seed_rows,
                        seed_full,
                        n_seed,
                        k_eff,
                    )
            for j in range(nt):
                acc[touched[j]] = 0.0

    heap_drain_sorted(heap_s, heap_d, pos, True, n_heap, out_rows, out_scores)
    count = n_heap
    if has_cutoff:
        count = 0
        while count < n_heap and out_scores[count] >= cutoff:
            count += 1
    for j in range(count, width):
        out_rows[j] = -1
        out_scores[j] = neg_inf
    return count


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
def search_batch_serial(
    indptr,
    indices,
    data,
    term_max,
    base_weights,
    q_values,
    q_offsets,
    k,
    mask,
    has_mask,
    cutoff,
    has_cutoff,
    strategy,
    acc,
    pos,
    touched,
    out_rows,
    out_scores,
    out_counts,
    rank_slot,
    rank_dir,
    head_ptr,
    head_doc,
    head_w,
):
    """:func:`search_one` for each query ``q_values[q_offsets[i]:q_offsets[i+1]]`` in turn,
    reusing the caller's scratch (``acc`` zeros and ``pos`` -1, ``[n_docs]``; ``touched``
    ``[n_docs + 1]``). Returns :func:`check_queries`'s code; nothing is scored unless -1."""
    code = check_queries(q_values, q_offsets, term_max.shape[0])
    if code != -1:
        return code
    kk = max(min(k, acc.shape[0]), 1)
    heap_s = np.empty(kk, np.float32)
    heap_d = np.empty(kk, np.int64)
    for qi in range(q_offsets.shape[0] - 1):
        out_counts[qi] = search_one(
            indptr,
            indices,
            data,
            term_max,
            base_weights,
            q_values[q_offsets[qi] : q_offsets[qi + 1]],
            k,
            mask,
            has_mask,
            cutoff,
            has_cutoff,
            strategy,
            acc,
            pos,
            touched,
            heap_s,
            heap_d,
            out_rows[qi],
            out_scores[qi],
            rank_slot,
            rank_dir,
            head_ptr,
            head_doc,
            head_w,
        )
    return -1


@njit(cache=True, fastmath=FASTMATH, parallel=True)
def search_batch_parallel(
    indptr,
    indices,
    data,
    term_max,
    base_weights,
    q_values,
    q_offsets,
    k,
    mask,
    has_mask,
    cutoff,
    has_cutoff,
    strategy,
    acc2,
    pos2,
    touched2,
    out_rows,
    out_scores,
    out_counts,
    rank_slot,
    rank_dir,
    head_ptr,
    head_doc,
    head_w,
):
    """Batch scoring, ``prange`` over ``n_slots = acc2.shape[0]`` slots that take the queries
    in small runs from a shared atomic counter (a slot whose core is slowed by other work just
    takes fewer); slot ``c`` uses scratch row ``c`` of ``acc2``/``pos2``/``touched2`` and writes
    only the output rows of the queries it took. Returns :func:`check_queries`'s code."""
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
        heap_s = np.empty(kk, np.float32)
        heap_d = np.empty(kk, np.int64)
        acc = acc2[c]
        pos = pos2[c]
        touched = touched2[c]
        while True:
            q0 = _fetch_add(counter, 0, run)
            if q0 >= n_q:
                break
            for qi in range(q0, min(q0 + run, n_q)):
                out_counts[qi] = search_one(
                    indptr,
                    indices,
                    data,
                    term_max,
                    base_weights,
                    q_values[q_offsets[qi] : q_offsets[qi + 1]],
                    k,
                    mask,
                    has_mask,
                    cutoff,
                    has_cutoff,
                    strategy,
                    acc,
                    pos,
                    touched,
                    heap_s,
                    heap_d,
                    out_rows[qi],
                    out_scores[qi],
                    rank_slot,
                    rank_dir,
                    head_ptr,
                    head_doc,
                    head_w,
                )
    return -1


def idf_weights(method: str, df: np.ndarray, n_docs: int) -> np.ndarray:
    """Inverse document frequency (float64 ``[n_vocab]``) of a BM25 variant; 0 where df = 0.

    lucene ``log(1 + (N - df + .5)/(df + .5))``, robertson ``log(max(1, (N - df + .5)/(df +
    .5)))``, atire ``log(N/df)``, bm25l ``log((N + 1)/(df + .5))``, bm25+ ``log((N + 1)/df)``."""
    dff = df.astype(np.float64)
    out = np.zeros(df.shape[0], np.float64)
    nz = df > 0
    d = dff[nz]
    n = float(n_docs)
    if method == "lucene":
        out[nz] = np.log1p((n - d + 0.5) / (d + 0.5))
    elif method == "robertson":
        out[nz] = np.log(np.maximum((n - d + 0.5) / (d + 0.5), 1.0))
    elif method == "atire":
        out[nz] = np.log(n / d)
    elif method == "bm25l":
        out[nz] = np.log((n + 1.0) / (d + 0.5))
    elif method == "bm25+":
        out[nz] = np.log((n + 1.0) / d)
    else:  # pragma: no cover - callers validate
        raise ValueError(method)
    return out


def base_weights_for(method: str, idf: np.ndarray, k1: float, delta: float) -> np.ndarray:
    """Per-term weight at tf = 0 (float64): ``idf * tfc(0)``; nonzero only for bm25l
    (``(k1+1) delta / (k1 + delta)``) and bm25+ (``delta``), independent of document length."""
    if method == "bm25l":
        denom = k1 + delta
        c0 = (k1 + 1.0) * delta / denom if denom > 0 else 0.0
        return idf * c0
    if method == "bm25+":
        return idf * delta
    return np.zeros(idf.shape[0], np.float64)


__all__ = [
    "METHOD_CODES",
    "PARALLEL_MIN_QUERIES",
    "STRATEGY_AUTO",
    "STRATEGY_DENSE",
    "STRATEGY_MAXSCORE",
    "STRATEGY_TOUCHED",
    "base_weights_for",
    "build_postings",
    "build_rank_rows",
    "check_queries",
    "count_document_frequencies",
    "idf_weights",
    "score_dense",
    "search_batch_parallel",
    "search_batch_serial",
    "search_one",
    "weigh_postings",
]
