"""Chunk planning of the sentence and token splitters over code points and BPE token lengths.

Inputs of :func:`plan_chunks`: the text's code points (uint32), a class table indexed by code
point (uint8 bit flags, ``CLS_*`` below), the UTF-8 byte length of each token of the text's
tiktoken encoding (int32, in order), the token budget and overlap, and the mode (sentence or
token windows). Output: per chunk ``start, end`` (code-point offsets, whitespace-trimmed) and
what the caller needs to count each chunk's tokens *exactly* on the chunk text itself:
``q`` / ``r`` (first / last "certain" piece boundary inside the chunk, -1 if none) and
``inner`` (global tokens between them).

A position ``c`` is a *certain* boundary of tiktoken's pre-tokenizer (cl100k-style pattern)
when a letter run or a digit run ends there: the pieces of any substring that contains
``c`` then break at ``c`` too, and the pieces between two such positions are the global ones.
So ``count(text[s:e]) = count(text[s:q]) + inner + count(text[r:e])``, with the two edge
fragments (a few characters) encoded by the caller.
"""

from __future__ import annotations

import numpy as np
from numba import njit

CLS_LETTER = 1  # \p{L}
CLS_DIGIT = 2  # \p{N}
CLS_SPACE = 4  # whitespace, newlines included
CLS_NEWLINE = 8  # line breaks
CLS_SENT_END = 16  # 。！？；.!?… and friends
CLS_NEEDS_SPACE = 32  # ASCII-style punctuation that ends a sentence/clause only before a space
CLS_CLOSER = 64  # closing quotes and brackets that may follow a sentence end
CLS_CLAUSE = 128  # ，、,;:： (clause ends)

LEVEL_SENTENCE = 0
LEVEL_CLAUSE = 1
LEVEL_WORD = 2
LEVEL_TOKEN = 3
LEVEL_NONE = 4

MODE_SENTENCE = 0
MODE_TOKEN = 1


@njit(cache=True, inline="always")
def _utf8_len(cp):
    if cp < 0x80:
        return 1
    if cp < 0x800:
        return 2
    if cp < 0x10000:
        return 3
    return 4


@njit(cache=True, inline="always")
def _q(P, TB, c):
    # tokens that start before char boundary c (tokens overlapping [.., c))
    return P[c] if TB[c] else P[c] + 1


@njit(cache=True, nogil=True)
def plan_chunks(cps, table, tok_lens, chunk_size, overlap, mode, fix_starts, fix_budgets):
    """Plan whitespace-trimmed chunks of at most ``chunk_size`` estimated tokens.

    Returns ``(starts, ends, q, r, inner)``, int64 arrays of one entry per chunk. The
    estimate counts every token that overlaps a chunk (an upper bound in practice); the
    caller verifies exact counts with ``q``/``r``/``inner`` and re-plans where a chunk is
    over, passing a smaller budget for the chunk that starts at each ``fix_starts[i]``
    (sorted int64) in ``fix_budgets[i]``.
    """
    starts, ends, q, r, inner, _s, _p, _stop = plan_window(
        cps, table, tok_lens, chunk_size, overlap, mode, fix_starts, fix_budgets, -1, -1, False, -1
    )
    return starts, ends, q, r, inner


@njit(cache=True, nogil=True)
def plan_window(
    cps,
    table,
    tok_lens,
    chunk_size,
    overlap,
    mode,
    fix_starts,
    fix_budgets,
    s_init,
    prev_init,
    had_prev,
    guard,
):
    """:func:`plan_chunks` over one window of a long text, resumable.

    The window must start and end where tiktoken's pre-tokenizer always breaks (after a line
    break, before a non-space), so its tokens, classes and levels are the whole text's.
    ``s_init``/``prev_init``: the next chunk's start and the previous chunk's end (window
    offsets; -1 at the text's start), ``had_prev``: a chunk came before. ``guard`` >= 0:
    stop before a chunk that starts fewer than ``guard`` tokens before the window's end (its
    planning could look past it). Returns the chunks, then ``(s, prev_te, stopped)``: where
    the next window resumes.
    """
    n = cps.shape[0]
    n_tok = tok_lens.shape[0]
    cls = np.empty(n, dtype=np.uint8)
    for i in range(n):
        cls[i] = table[cps[i]]

    # P[c]: tokens ending at or before char boundary c; TB[c]: a token ends exactly at c.
    P = np.empty(n + 1, dtype=np.int32)
    TB = np.zeros(n + 1, dtype=np.bool_)
    t = 0
    tend = np.int64(tok_lens[0]) if n_tok > 0 else np.int64(0)
    ptend = np.int64(0)
    bo = np.int64(0)
    for c in range(n + 1):
        while t < n_tok and tend <= bo:
            t += 1
            ptend = tend
            if t < n_tok:
                tend += tok_lens[t]
        P[c] = t
        TB[c] = bo == ptend
        if c < n:
            bo += _utf8_len(cps[c])

    # Cut levels of each char boundary.
    lvl = np.full(n + 1, LEVEL_NONE, dtype=np.uint8)
    lvl[n] = LEVEL_SENTENCE
    for c in range(1, n):
        a = cls[c - 1]
        b = cls[c]
        if mode == MODE_TOKEN:
            if TB[c]:
                lvl[c] = LEVEL_SENTENCE
            continue
        if a & CLS_NEWLINE:
            lvl[c] = LEVEL_SENTENCE
            continue
        if not (b & (CLS_SENT_END | CLS_CLOSER)):
            # end of a punctuation cluster: sentence end (+ closers)?
            k = c - 1
            while k >= 0 and k > c - 6 and (cls[k] & CLS_CLOSER) and not (cls[k] & CLS_SENT_END):
                k -= 1
            if (
                k >= 0
                and (cls[k] & CLS_SENT_END)
                and (not (cls[k] & CLS_NEEDS_SPACE) or (b & CLS_SPACE))
            ):
                lvl[c] = LEVEL_SENTENCE
                continue
        if (
            (a & CLS_CLAUSE)
            and not (b & CLS_CLAUSE)
            and (not (a & CLS_NEEDS_SPACE) or (b & CLS_SPACE))
        ):
            lvl[c] = LEVEL_CLAUSE
            continue
        if (a & CLS_SPACE) != (b & CLS_SPACE):
            lvl[c] = LEVEL_WORD
            continue
        if TB[c]:
            lvl[c] = LEVEL_TOKEN

    # nxt[c]: first non-space position >= c; prv[c]: c moved back over trailing spaces.
    nxt = np.empty(n + 1, dtype=np.int32)
    nxt[n] = n
    for c in range(n - 1, -1, -1):
        nxt[c] = nxt[c + 1] if (cls[c] & CLS_SPACE) else c
    prv = np.empty(n + 1, dtype=np.int32)
    prv[0] = 0
    for c in range(1, n + 1):
        prv[c] = prv[c - 1] if (cls[c - 1] & CLS_SPACE) else c

    cap = 16 + n_tok // max(1, chunk_size - overlap) * 2
    starts = np.empty(cap, dtype=np.int64)
    ends = np.empty(cap, dtype=np.int64)
    n_out = 0

    end_all = prv[n]
    s = np.int64(nxt[0]) if s_init < 0 else np.int64(s_init)
    if s >= end_all:
        return starts[:0], ends[:0], starts[:0], starts[:0], starts[:0], s, s, False
    prev_te = s if prev_init < 0 else np.int64(prev_init)
    stopped = False
    best = np.empty(4, dtype=np.int64)
    while True:
        if guard >= 0 and P[n] - P[s] < guard:
            stopped = True
            break
        lo = max(s, prev_te)
        base = P[s]
        budget = chunk_size
        if fix_starts.shape[0] > 0:
            k = np.searchsorted(fix_starts, s)
            if k < fix_starts.shape[0] and fix_starts[k] == s:
                budget = fix_budgets[k]
        m = lo
        while m < n and _q(P, TB, m + 1) - base <= budget:
            m += 1
        hi = m
        if hi < n and (cls[hi] & CLS_SPACE):
            hi = nxt[hi]
        best[:] = -1
        for c in range(hi, lo, -1):
            L = lvl[c]
            if L < LEVEL_NONE and best[L] < 0 and prv[c] > lo:
                best[L] = c
                if L == LEVEL_SENTENCE:
                    break
        chosen = -1
        for L in range(4):
            if best[L] >= 0:
                chosen = best[L]
                break
        if chosen < 0:
            no_overlap = nxt[prev_te]
            if (n_out > 0 or had_prev) and s != no_overlap:
                s = no_overlap  # the overlap left no room: retry without it
                continue
            # a single character encodes to more than chunk_size tokens: emit it alone
            chosen = lo + 1
            while chosen < n and not TB[chosen]:
                chosen += 1
        te = prv[chosen]
        if n_out == cap:
            cap *= 2
            ns = np.empty(cap, dtype=np.int64)
            ne = np.empty(cap, dtype=np.int64)
            ns[:n_out] = starts[:n_out]
            ne[:n_out] = ends[:n_out]
            starts = ns
            ends = ne
        starts[n_out] = s
        ends[n_out] = te
        n_out += 1
        if te >= end_all:
            break

        # next start: about `overlap` tokens back, on the best boundary level available
        s_next = nxt[te]
        if overlap > 0:
            qte = _q(P, TB, te)
            best[:] = -1
            for p in range(te - 1, s, -1):
                sp = nxt[p]
                if sp >= te:
                    continue
                if qte - P[sp] > overlap:
                    break
                L = lvl[p]
                if L < LEVEL_NONE:
                    best[L] = p
            lstar = -1
            for L in range(4):
                if best[L] >= 0:
                    lstar = L
                    break
            if lstar >= 0:
                # does the next sentence fit in a whole chunk (without overlap)?
                e_next = -1
                base2 = P[s_next]
                c = te + 1
                while c <= n and _q(P, TB, prv[c]) - base2 <= chunk_size:
                    if lvl[c] == LEVEL_SENTENCE and prv[c] > te:
                        e_next = c
                        break
                    c += 1
                if e_next >= 0:
                    need = _q(P, TB, prv[e_next]) - chunk_size
                    for p in range(best[lstar], te):
                        if lvl[p] <= lstar and nxt[p] < te and P[nxt[p]] >= need:
                            s_next = nxt[p]
                            break
                else:
                    s_next = nxt[best[lstar]]
        prev_te = te
        s = s_next

    starts = starts[:n_out]
    ends = ends[:n_out]
    q = np.full(n_out, -1, dtype=np.int64)
    r = np.full(n_out, -1, dtype=np.int64)
    inner = np.zeros(n_out, dtype=np.int64)
    for i in range(n_out):
        a0 = starts[i]
        b0 = ends[i]
        qq = -1
        for c in range(a0, b0 + 1):
            if _certain(cls, TB, n, c):
                qq = c
                break
        if qq < 0:
            continue
        rr = qq
        for c in range(b0, qq - 1, -1):
            if _certain(cls, TB, n, c):
                rr = c
                break
        q[i] = qq
        r[i] = rr
        inner[i] = P[rr] - P[qq]
    return starts, ends, q, r, inner, s, prev_te, stopped


@njit(cache=True, inline="always")
def _certain(cls, TB, n, c):
    if not TB[c]:
        return False
    if c == 0 or c == n:
        return True
    a = cls[c - 1]
    b = cls[c]
    if (a & CLS_LETTER) and not (b & CLS_LETTER):
        return True
    return bool((a & CLS_DIGIT) and not (b & CLS_DIGIT))
