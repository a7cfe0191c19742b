"""The ``touched`` and ``maxscore`` strategies of BM25 search (see :mod:`.search`): the
query's terms in decreasing order of their upper bound, each added to the accumulator by the
step that suits it (admitting new rows, or adding to the candidates by scan, galloping search
or rank directory), with the current top rows completed early to raise the bar. On a large
corpus ``maxscore`` runs over one window of rows at a time, each window starting with the bar
of the earlier ones.

Hot loops stay free of data-dependent branches and calls where they can (a new row is appended
by bumping a counter; rows above the heap's bar are queued and offered in bursts), live in small
functions of their own (inside one large function they lose registers), prefetch the
accumulator rows they will touch, and index with unsigned integers (numba then skips its
negative-index fix-up): mispredicted branches and instruction count, then cache misses of the
searches, were their main costs.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._config import FASTMATH
from ..intrinsics import prefetch
from .heads import head_admit, plan_head, rank_term
from .lazy import ensure_at, ensure_range, find, plain_term, plain_terms
from .primitives import (
    BOUND_SLACK,
    cmov,
    final_bar,
    heapsort,
    offer_bar,
    raise_row,
    sort_rows,
)

# Prefetch distance (postings / rows ahead) of the streaming loops, and (candidates ahead) of
# the galloping search; rows above the heap bar are offered to it in bursts of ``_QUEUE``.
_PF = 32
_PF_GALLOP = 4
_QUEUE = 64
# Complete the current top rows early (a true k-th score to prune with) when k is at most this.
_SEED_MAX_K = 100
# ``maxscore``'s automatic window: this many rows (4 MiB of accumulator), on corpora of at least
# two of them.
_WINDOW = 1 << 20
# Finish a remaining posting list by galloping search when candidates * this < its length.
_GALLOP_FACTOR = 12
# ... or, for a term with a rank directory, by rank lookups when candidates * this < its
# length.
_RANK_FACTOR = 4


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _seed_heap_rows(postings, query, done, acc, base32, heap_d, n_heap, seeds, n_seed, k_eff, win):
    """:func:`_seed_body`, without decoding when the remaining terms are all decoded."""
    args = (query, done, acc, base32, heap_d, n_heap, seeds, n_seed, k_eff, win)
    if plain_terms(postings[0], query[0], done, query[3]):
        return _seed_body((None, postings[1], postings[2], postings[3]), *args)
    return _seed_body(postings, *args)


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _seed_body(postings, query, done, acc, base32, heap_d, n_heap, seeds, n_seed, k_eff, win):
    """Complete the full score of the rows now in the heap that are not seeds yet and lie in
    the window ``win = (w0, w1)`` (rows of earlier windows are complete already): their
    partial sum over the first ``done`` terms (``acc``) plus the remaining terms, found by
    galloping from an interpolated guess in each posting list (all guesses prefetched first).
    Return ``(n_seed, theta_seed)``: ``theta_seed`` is the k-th best full score among the seeds
    (-inf with fewer than k)."""
    lz, indptr, indices, data = postings
    o_terms, o_mult, _, m = query
    seed_rows, seed_full = seeds
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
                prefetch(indices, g)
                prefetch(data, g)
                prefetch(indices, max(g - 16, lo))
                prefetch(indices, min(g + 16, hi - 1))
    w0, w1 = win
    for h in range(n_heap):
        if n_seed == cap:
            break
        d = heap_d[h]
        if d < w0 or d >= w1:
            continue
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
            lo = find(lz, indptr, indices, tj, lo, hi, d, lo + int(d * ((hi - lo) / n_docs)))
            if lo < hi and indices[lo] == d:
                full += o_mult[j] * data[lo]
        seed_rows[n_seed] = d
        seed_full[n_seed] = full + base32
        n_seed += 1
    if n_seed < k_eff:
        return n_seed, -np.inf
    srt = seed_full[:n_seed].copy()
    heapsort(srt)
    return n_seed, srt[n_seed - k_eff]


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _admit_term(
    postings,
    start,
    end,
    w_mult,
    mask,
    has_mask,
    scratch,
    nt,
    heap,
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
    indices, data = postings[2], postings[3]
    acc, pos, touched = scratch
    heap_s, heap_d = heap
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
            prefetch(acc, np.uint32(indices[min(q + pf, last)]))
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
                n_heap = raise_row(a, base32, np.int64(d), heap_s, heap_d, pos, n_heap, k_eff)
                bar = offer_bar(heap_s, n_heap, k_eff, base)
        p = stop
    return np.int64(ntu), n_heap, bar


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _scan_term(
    postings, start, end, w_mult, acc, live, pos, heap, n_heap, k_eff, bar, base, base32
):
    """Add the postings ``[start, end)`` to the live candidates (the rows set in the bitmap
    ``live``), offering rows above ``bar`` to the heap. Returns ``(n_heap, bar)``.

    A first pass queues the postings of live rows (a test of one bit, in L1, per posting: no
    read of ``acc`` for the many rows that are not candidates); a second adds them."""
    indices, data = postings[2], postings[3]
    heap_s, heap_d = heap
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
                n_heap = raise_row(a, base32, np.int64(d), heap_s, heap_d, pos, n_heap, k_eff)
                bar = offer_bar(heap_s, n_heap, k_eff, base)
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
    # alive <=> (a + r) * BOUND_SLACK >= theta, tested on the bits of ``a`` against a bar
    # rounded down (a row kept too many is safe): ``a`` sums weights of terms with a positive
    # bound, never negative (an index built here has none; loaded postings are checked), and
    # non-negative floats order like their bits. The store is branch-free: whether a row
    # survives is unpredictable, and a branch on it (what LLVM makes of ``a if alive else 0``)
    # is mispredicted often.
    x = theta / BOUND_SLACK - r
    thr = np.zeros(1, np.float32)
    thr[0] = max(x - (abs(x) * 1e-6 + 1e-30), 0.0)
    tk = thr.view(np.uint32)[0]
    bits = acc.view(np.uint32)
    keep = np.uint64(0)
    last = np.uint64(nt - 1)
    pf = np.uint64(_PF)
    for js in range(nt):
        j = np.uint64(js)
        prefetch(acc, np.uint32(touched[min(j + pf, last)]))
        d = np.uint32(touched[j])
        v = bits[d]
        alive = v >= tk
        touched[keep] = d
        keep += np.uint64(alive)
        bits[d] = cmov(alive, v, np.uint32(0))
        if has_live:
            w = np.uint64(d >> np.uint32(6))
            live[w] &= ~(np.uint64(not alive) << np.uint64(d & np.uint32(63)))
    return np.int64(keep)


@njit(cache=True, fastmath=FASTMATH, nogil=True, _nrt=False)
def _gallop_term(
    postings, t, start, end, w_mult, scratch, nt, heap, n_heap, k_eff, bar, base, base32, span
):
    """:func:`_gallop_body`, without decoding when term ``t`` is all decoded."""
    args = (t, start, end, w_mult, scratch, nt, heap, n_heap, k_eff, bar, base, base32, span)
    if plain_term(postings[0], t):
        return _gallop_body((None, postings[1], postings[2], postings[3]), *args)
    return _gallop_body(postings, *args)


@njit(cache=True, fastmath=FASTMATH, nogil=True, _nrt=False)
def _gallop_body(
    postings, t, start, end, w_mult, scratch, nt, heap, n_heap, k_eff, bar, base, base32, span
):
    """Add the postings ``[start, end)`` of the rows ``touched[:nt]`` (ascending), found by
    interpolated galloping search (the postings span ``span`` rows). Returns
    ``(n_heap, bar)``."""
    lz, indptr, indices, data = postings
    acc, pos, touched = scratch
    heap_s, heap_d = heap
    p = start
    dens = (end - start) / span  # postings per row
    last = np.uint64(nt - 1)
    pf = np.uint64(_PF_GALLOP)
    if start < end:
        ensure_at(lz, indptr, t, start)
    for js in range(nt):
        j = np.uint64(js)
        d = np.int64(touched[j])
        if p < end:
            # Prefetch where a later candidate should lie: its search then finds its
            # posting in cache.
            dn = np.int64(touched[min(j + pf, last)])
            at = np.int64(indices[np.uint64(p)])
            g = np.uint64(min(p + int((dn - at) * dens), end - 1))
            prefetch(indices, g)
            prefetch(data, g)
            p = find(lz, indptr, indices, t, p, end, d, p + int((d - at) * dens))
        if p == end:
            break
        pu = np.uint64(p)
        if indices[pu] == d:
            du = np.uint32(d)
            a = acc[du] + w_mult * data[pu]
            acc[du] = a
            if a > bar:
                n_heap = raise_row(a, base32, d, heap_s, heap_d, pos, n_heap, k_eff)
                bar = offer_bar(heap_s, n_heap, k_eff, base)
    return n_heap, bar


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _candidates_term(
    postings,
    t,
    start,
    end,
    w_mult,
    scratch,
    nt,
    is_sorted,
    live,
    has_live,
    has_rank,
    heads,
    heap,
    n_heap,
    k_eff,
    bar,
    base,
    base32,
    win,
):
    """Add term ``t``'s postings ``[start, end)`` (those of the rows of the window
    ``win = (w0, w1)``) to the ``nt > 0`` candidates ``touched[:nt]``. A long list is scanned
    (against the bitmap ``live``, built on first need); when candidates are few, they are
    looked up in it by rank directory or galloping search (rows sorted once, by radix sort).
    Returns ``(n_heap, bar, is_sorted, has_live, live)``."""
    acc, pos, touched = scratch
    n_docs = acc.shape[0]
    w0, w1 = win
    slot = heads[0][t] if has_rank else -1
    if slot >= 0 and nt * _RANK_FACTOR < end - start:
        n_heap, bar = rank_term(
            postings,
            t,
            postings[1][t],  # the directory counts from the term's first posting
            w_mult,
            scratch,
            nt,
            heads[1][slot],
            heap,
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
            postings,
            t,
            start,
            end,
            w_mult,
            scratch,
            nt,
            heap,
            n_heap,
            k_eff,
            bar,
            base,
            base32,
            max(w1 - w0, 1),
        )
    else:
        if not has_live:
            # One bitmap per search; a build clears the words of its window only.
            if live.shape[0] == 0:
                live = np.zeros((n_docs + 63) >> 6, np.uint64)
            else:
                live[w0 >> 6 : (w1 + 63) >> 6] = 0
            for j in range(nt):
                d = touched[j]
                live[d >> 6] |= np.uint64(1) << np.uint64(d & 63)
            has_live = True
        ensure_range(postings[0], postings[1], t, start, end)
        n_heap, bar = _scan_term(
            postings, start, end, w_mult, acc, live, pos, heap, n_heap, k_eff, bar, base, base32
        )
    return n_heap, bar, is_sorted, has_live, live


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def search_pruned(
    postings,
    query,
    maxscore,
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
):
    """The ``touched`` strategy, or ``maxscore`` when ``maxscore`` is True, over the ``m``
    query terms ``o_terms`` (decreasing upper bound, with multiplicities ``o_mult``;
    ``rest[i]``: the sum of the bounds of terms ``i..``) into the empty heap
    ``heap_s``/``heap_d``. Returns the heap size; ``acc`` is all zero again. The tuples are
    those of :mod:`.search` (``query = (o_terms, o_mult, rest, m)``).

    ``maxscore`` searches ``window`` rows at a time (0: ``_WINDOW`` rows on a corpus of at
    least two such windows, else all rows at once), the heap and the bars carried from one
    window to the next: each window's rows are complete when it ends, so a later window starts
    with the bar of all the earlier ones (fewer of its terms are admitted), and its
    accumulator rows stay in cache."""
    indptr = postings[1]
    o_terms, _, rest, m = query
    n_docs = scratch[0].shape[0]
    heap_s = heap[0]
    seeding = maxscore and k_eff <= _SEED_MAX_K
    n_seed_cap = 4 * k_eff if seeding else 1
    seeds = (np.empty(n_seed_cap, np.int64), np.empty(n_seed_cap, np.float64))
    top_s = np.empty(k_eff if seeding else 1, np.float64)
    if window <= 0:
        window = _WINDOW if n_docs >= 2 * _WINDOW else n_docs
    if not maxscore:
        window = n_docs
    starts = np.empty(m, np.int64)
    ends = np.empty(m, np.int64)
    for oi in range(m):
        starts[oi] = indptr[o_terms[oi]]
    state = (np.int64(0), np.int64(0), -np.inf, -np.inf)
    live = np.zeros(0, np.uint64)
    for w0 in range(0, n_docs, window):
        w1 = min(w0 + window, n_docs)
        if w0 > 0:
            n_heap, _, theta_seed, theta_head = state
            theta = final_bar(theta_floor, max(theta_seed, theta_head), heap_s, n_heap, k_eff)
            if (rest[0] + base) * BOUND_SLACK < theta:
                break  # no row of a later window can reach the top-k
        _window_ends(postings, o_terms, m, starts, ends, w0, w1, n_docs)
        state, live = _search_window(
            postings,
            query,
            (starts, ends),
            (w0, w1),
            maxscore,
            mask,
            has_mask,
            theta_floor,
            scratch,
            heap,
            k_eff,
            base,
            has_rank,
            heads,
            (seeds, top_s, live),
            state,
        )
        for oi in range(m):
            starts[oi] = ends[oi]
    return state[0]


@njit(cache=True, nogil=True, _nrt=False)
def _window_ends(postings, o_terms, m, starts, ends, w0, w1, n_docs):
    """``ends[i]``: the first posting of term ``o_terms[i]`` from ``starts[i]`` on whose row is
    ``>= w1`` (the window ``[w0, w1)`` starts at ``starts[i]``)."""
    lz, indptr, indices = postings[0], postings[1], postings[2]
    for oi in range(m):
        t = o_terms[oi]
        hi = indptr[t + 1]
        if w1 == n_docs:
            ends[oi] = hi
        else:
            lo = starts[oi]
            g = lo + int((w1 - w0) * ((hi - indptr[t]) / n_docs))
            ends[oi] = find(lz, indptr, indices, t, lo, hi, w1, g)


@njit(cache=True, fastmath=FASTMATH, nogil=True)
def _search_window(
    postings,
    query,
    ranges,
    win,
    maxscore,
    mask,
    has_mask,
    theta_floor,
    scratch,
    heap,
    k_eff,
    base,
    has_rank,
    heads,
    bufs,
    state,
):
    """:func:`search_pruned` over the rows ``win = (w0, w1)``, whose postings of term
    ``o_terms[i]`` are ``[starts[i], ends[i])`` (``ranges``). ``state = (n_heap, n_seed,
    theta_seed, theta_head)`` comes from the earlier windows and is returned with the bitmap
    ``live``; the window's ``acc`` rows are all zero again."""
    indptr = postings[1]
    o_terms, o_mult, rest, m = query
    starts, ends = ranges
    acc, pos, touched = scratch
    heap_s, heap_d = heap
    rank_slot, rank_dir, head_ptr, head_doc, head_w = heads
    seeds, top_s, live = bufs
    n_heap, n_seed, theta_seed, theta_head = state
    base32 = np.float32(base)
    seeding = maxscore and k_eff <= _SEED_MAX_K
    n_seed_cap = seeds[0].shape[0]
    has_heads = seeding and has_rank and head_ptr.shape[0] > 0 and head_w.shape[0] > 0
    j0 = 0
    j1 = 0
    rest_b = 0.0
    nt = np.int64(0)
    bar = offer_bar(heap_s, n_heap, k_eff, base)
    stopped = np.bool_(False)
    is_sorted = np.bool_(False)
    has_live = np.bool_(False)
    for oi in range(m):
        t = o_terms[oi]
        w_mult = o_mult[oi]
        start = starts[oi]
        end = ends[oi]
        theta = final_bar(theta_floor, max(theta_seed, theta_head), heap_s, n_heap, k_eff)
        if maxscore and not stopped and (rest[oi] + base) * BOUND_SLACK < theta:
            # No untouched row can reach the top-k any more: from here on, only the
            # candidates whose bound still can get the remaining terms.
            stopped = True
        use_head = False
        if has_heads and not stopped and rank_slot[t] >= 0:
            use_head, stopped, j0, j1, rest_b, theta, theta_head = plan_head(
                postings,
                query,
                oi,
                base,
                heads,
                mask,
                has_mask,
                top_s,
                (theta, theta_floor, theta_seed, theta_head),
                heap_s,
                n_heap,
                k_eff,
                acc.shape[0],
            )
        if stopped or use_head:
            # Candidates first: drop the rows that can no longer make it, then add this term
            # to the others; a head then admits new rows.
            nt = _prune(acc, touched, nt, rest[oi] + base, theta, live, has_live)
            if nt == 0 and stopped:
                break
            if nt > 0:
                n_heap, bar, is_sorted, has_live, live = _candidates_term(
                    postings,
                    t,
                    start,
                    end,
                    w_mult,
                    scratch,
                    nt,
                    is_sorted,
                    live,
                    has_live,
                    has_rank,
                    heads,
                    heap,
                    n_heap,
                    k_eff,
                    bar,
                    base,
                    base32,
                    win,
                )
            if use_head:
                theta = final_bar(theta_floor, max(theta_seed, theta_head), heap_s, n_heap, k_eff)
                nt_new, n_heap, bar = head_admit(
                    (head_doc, head_w, j0, j1),
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
                )
                if nt_new > nt:
                    is_sorted = False
                nt = nt_new
        else:
            ensure_range(postings[0], indptr, t, start, end)
            nt, n_heap, bar = _admit_term(
                postings,
                start,
                end,
                w_mult,
                mask,
                has_mask,
                scratch,
                nt,
                heap,
                n_heap,
                k_eff,
                bar,
                base,
                base32,
            )
            is_sorted = False
            has_live = False
        if seeding and not stopped and oi + 1 < m and n_heap == k_eff and n_seed < n_seed_cap:
            # Complete the current top rows over all terms: k true scores give a far higher
            # bar than partial sums, so fewer long lists get scanned.
            n_seed, theta_seed = _seed_heap_rows(
                postings,
                query,
                oi + 1,
                acc,
                base32,
                heap_d,
                n_heap,
                seeds,
                n_seed,
                k_eff,
                win,
            )
    for j in range(nt):
        acc[touched[j]] = 0.0
    return (n_heap, n_seed, theta_seed, theta_head), live
