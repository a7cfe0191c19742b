"""Rank directories and impact heads: what the BM25 index precomputes for terms in many
documents, and the search steps that use them.

A term in many documents may have a *rank directory* (a bitmap of its documents with a running
count per 64 of them, :func:`build_rank_rows`): a candidate's posting is then found with one
cache line and a ``popcount``, prefetched exactly, instead of a search. Such a term also has an
*impact head* (its heaviest postings, heaviest first, :func:`build_head_rows`): when the bar and
the later terms' bounds leave only postings heavier than the head's last one able to lift a new
row into the top-k, new rows come from the head alone (:func:`plan_head`, :func:`head_admit`),
and the rest of the list is never read (see :mod:`.search` for the whole search).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._config import FASTMATH
from ..intrinsics import prefetch
from .lazy import ensure_at, find, plain_term, plain_terms, ready_ranked
from .primitives import (
    BOUND_SLACK,
    final_bar,
    offer_bar,
    popcount,
    raise_row,
)

# Rank lookups run _PF_RANK candidates ahead of their prefetches.
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
            c += popcount(row[2 * w])
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


# --------------------------------------------------------------------------------------------
# Search
# --------------------------------------------------------------------------------------------


@njit(cache=True, fastmath=FASTMATH, nogil=True, _nrt=False)
def rank_term(
    postings, t, start, w_mult, scratch, nt, rdir, heap, n_heap, k_eff, bar, base, base32
):
    """:func:`_rank_body` on decoded postings: when term ``t`` is not all decoded, the blocks
    of the candidates' postings are decoded first, in a loop of their own (a decoding call
    inside the lookup loop would slow it down several times)."""
    if not plain_term(postings[0], t):
        ready_ranked(postings[0], postings[1], t, scratch[2], nt, rdir)
    return _rank_body(
        postings[3], start, w_mult, scratch, nt, rdir, heap, n_heap, k_eff, bar, base, base32
    )


@njit(cache=True, fastmath=FASTMATH, nogil=True, _nrt=False)
def _rank_body(data, start, w_mult, scratch, nt, rdir, heap, n_heap, k_eff, bar, base, base32):
    """Add the postings from ``start`` of the rows ``touched[:nt]`` (any order), found through
    the term's rank directory ``rdir`` (see :func:`build_rank_rows`). Returns ``(n_heap, bar)``.

    Two prefetch stages: the directory word of the row ``2 * _PF_RANK`` candidates ahead, then
    the posting and accumulator entry of the row ``_PF_RANK`` ahead (its word now in cache)."""
    acc, pos, touched = scratch
    heap_s, heap_d = heap
    last = np.uint64(nt - 1)
    pf = np.uint64(_PF_RANK)
    one = np.uint64(1)
    six = np.uint64(6)
    m63 = np.uint64(63)
    st = np.uint64(start)
    for js in range(nt):
        j = np.uint64(js)
        d2 = np.uint64(touched[min(j + pf + pf, last)])
        prefetch(rdir, (d2 >> six) << one)
        d1 = np.uint64(touched[min(j + pf, last)])
        w1 = (d1 >> six) << one
        b1 = rdir[w1]
        prefetch(data, st + rdir[w1 + one] + popcount(b1 & ((one << (d1 & m63)) - one)))
        prefetch(acc, d1)
        d = np.uint64(touched[j])
        w = (d >> six) << one
        b = rdir[w]
        sh = d & m63
        if (b >> sh) & one:
            p = st + rdir[w + one] + popcount(b & ((one << sh) - one))
            a = acc[d] + w_mult * data[p]
            acc[d] = a
            if a > bar:
                n_heap = raise_row(a, base32, np.int64(d), heap_s, heap_d, pos, n_heap, k_eff)
                bar = offer_bar(heap_s, n_heap, k_eff, base)
    return n_heap, bar


@njit(cache=True, nogil=True, inline="always")
def _posting(lz, indptr, indices, t, d, rank_slot, rank_dir, n_docs):
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
            p = lo + np.int64(
                rank_dir[s, w + np.uint64(1)]
                + popcount(bits & ((np.uint64(1) << sh) - np.uint64(1)))
            )
            ensure_at(lz, indptr, t, p)
            return p
        return -1
    p = find(lz, indptr, indices, t, lo, hi, d, lo + int(d * ((hi - lo) / n_docs)))
    if p < hi and indices[np.uint64(p)] == d:
        return p
    return -1


@njit(cache=True, fastmath=FASTMATH, nogil=True, _nrt=False)
def _head_seed(postings, query, oi, head, mask, has_mask, heads, top_s, n_top, k_eff, base, n_docs):
    """:func:`_head_seed_body`, without decoding when the query's terms are all decoded."""
    args = (query, oi, head, mask, has_mask, heads, top_s, n_top, k_eff, base, n_docs)
    if plain_terms(postings[0], query[0], np.int64(0), query[3]):
        return _head_seed_body((None, postings[1], postings[2], postings[3]), *args)
    return _head_seed_body(postings, *args)


@njit(cache=True, fastmath=FASTMATH, nogil=True, _nrt=False)
def _head_seed_body(
    postings, query, oi, head, mask, has_mask, heads, top_s, n_top, k_eff, base, n_docs
):
    """Complete over all ``m`` terms the scores of the documents of head entries ``[j0, j1)``
    of term ``o_terms[oi]`` (distinct documents) and keep the ``k_eff`` best in the min-heap
    ``top_s[:n_top]``; returns ``n_top``. With ``k_eff`` of them, ``top_s[0]`` is a true lower
    bound of the k-th best final score."""
    lz, indptr, indices, data = postings
    o_terms, o_mult, _, m = query
    head_doc, head_w, j0, j1 = head
    rank_slot, rank_dir = heads[0], heads[1]
    last = j1 - 1
    for j in range(j0, j1):
        dn = np.int64(head_doc[min(j + _PF_HEAD, last)])
        for i in range(m):
            if i != oi:
                ti = o_terms[i]
                s = rank_slot[ti]
                if s >= 0:
                    prefetch(rank_dir[s], (np.uint64(dn) >> np.uint64(6)) << np.uint64(1))
                else:
                    lo = indptr[ti]
                    hi = indptr[ti + 1]
                    prefetch(indices, min(lo + int(dn * ((hi - lo) / n_docs)), hi - 1))
        d = np.int64(head_doc[j])
        if has_mask and not mask[d]:
            continue
        full = base
        for i in range(m):
            if i == oi:
                full += o_mult[i] * head_w[j]
            else:
                p = _posting(lz, indptr, indices, o_terms[i], d, rank_slot, rank_dir, n_docs)
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


@njit(cache=True, fastmath=FASTMATH, nogil=True, _nrt=False)
def plan_head(
    postings, query, oi, base, heads, mask, has_mask, top_s, bars, heap_s, n_heap, k_eff, n_docs
):
    """Whether term ``o_terms[oi]`` (it has an impact head) admits new rows from its head
    alone: whether every posting outside the head is too light to lift a new row to the bar
    ``theta``. While no completed rows give a bar (``theta_seed`` is -inf: the first terms
    matched fewer than k rows), the bar is raised first by completing the head's best
    documents over all terms, in growing batches; after that, a common term's heaviest
    documents rarely beat it (real text: their lookups cost more than they save). Each head's
    candidates are distinct documents; two heads' are not, so each head gets a fresh top-k in
    ``top_s`` (its own k-th score is a true bar).

    Returns ``(use_head, stop, j0, j1, rest_b, theta, theta_head)``: the head's entries
    ``[j0, j1)``, the later terms' bounds plus the base, the raised bars, and ``stop`` when no
    untouched row can reach the top-k any more (``use_head`` is then False)."""
    o_terms, o_mult, rest, _ = query
    rank_slot, _, head_ptr, head_doc, head_w = heads
    theta, theta_floor, theta_seed, theta_head = bars
    w_mult = o_mult[oi]
    slot = rank_slot[o_terms[oi]]
    j0 = head_ptr[slot]
    j1 = head_ptr[slot + 1]
    rest_b = rest[oi + 1] + base
    use_head = (w_mult * head_w[j1 - 1] + rest_b) * BOUND_SLACK < theta
    s_done = 0
    s_next = min(_HEAD_SEED0 * k_eff, j1 - j0) if theta_seed == -np.inf else 0
    n_top = np.int64(0)
    while not use_head and s_done < s_next:
        n_top = _head_seed(
            postings,
            query,
            oi,
            (head_doc, head_w, j0 + s_done, j0 + s_next),
            mask,
            has_mask,
            heads,
            top_s,
            n_top,
            k_eff,
            base,
            n_docs,
        )
        if n_top == k_eff and top_s[0] > theta_head:
            theta_head = top_s[0]
        theta = final_bar(theta_floor, max(theta_seed, theta_head), heap_s, n_heap, k_eff)
        use_head = (w_mult * head_w[j1 - 1] + rest_b) * BOUND_SLACK < theta
        s_done = s_next
        s_next = min(s_next * _HEAD_SEED_GROW, _HEAD_SEED_MAX * k_eff, j1 - j0)
    stop = (rest[oi] + base) * BOUND_SLACK < theta
    if stop:
        use_head = False
    return use_head, stop, j0, j1, rest_b, theta, theta_head


@njit(cache=True, fastmath=FASTMATH, nogil=True, _nrt=False)
def head_admit(
    head,
    w_mult,
    rest_b,
    theta,
    mask,
    has_mask,
    scratch,
    nt,
    live,
    has_live,
    heap,
    n_heap,
    k_eff,
    bar,
    base,
    base32,
    win,
):
    """Admit as new rows the documents of head entries from ``j0`` on (heaviest first) in the
    window of rows ``win = (w0, w1)`` whose weight plus ``rest_b`` (the later terms' bounds and
    the base) can still reach ``theta``; rows already touched are skipped (they got this term
    from their own lookup), and so are dropped rows still in the heap. Returns
    ``(nt, n_heap, bar)``."""
    head_doc, head_w, j0, j1 = head
    acc, pos, touched = scratch
    heap_s, heap_d = heap
    w0 = np.uint32(win[0])
    w1 = np.uint32(win[1])
    last = j1 - 1
    j = j0
    while j < j1:
        wv = w_mult * head_w[j]
        if (wv + rest_b) * BOUND_SLACK < theta:
            break
        dn = np.uint32(head_doc[min(j + _PF_HEAD, last)])
        prefetch(acc, dn)
        prefetch(pos, dn)
        d = np.uint32(head_doc[j])
        j += 1
        if d < w0 or d >= w1 or (has_mask and not mask[d]):
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
            n_heap = raise_row(a, base32, np.int64(d), heap_s, heap_d, pos, n_heap, k_eff)
            bar = offer_bar(heap_s, n_heap, k_eff, base)
    return nt, n_heap, bar
