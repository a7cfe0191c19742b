"""jieba's segmentation (``jieba.cut``, accurate mode) as numba kernels over code points.

Same algorithm and the same float operations, in the same order, as jieba 0.42:

* the text is split into blocks of ``[\\u4E00-\\u9FD5a-zA-Z0-9+#&._%-]`` (``cls == 1``);
  every other character is its own token, except ``"\\r\\n"`` which is one token;
* in a block: the DAG of dictionary words starting at each position (a trie walk), the
  max-probability route by dynamic programming from the right (``log(freq or 1) - log(total)``
  precomputed per trie node in Python, exactly as jieba computes it; ties go to the longer
  word, as Python's ``max`` over ``(prob, x)`` tuples does);
* with HMM, runs of single characters not forming a dictionary word go to jieba.finalseg:
  Han runs through the BMES Viterbi (ties to the larger state letter, as ``max`` over
  ``(prob, state)``), other runs split like ``re.split("([a-zA-Z0-9]+(?:\\.\\d+)?%?)")``;
  without HMM, runs of single ASCII letters/digits are joined.

The dictionary is a code-point trie (:mod:`.trie`). Tokens come out as spans into ``cps``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .trie import CP_LIMIT as CP_LIMIT  # re-exported for fastrag.analysis.segment
from .trie import build_edge_table as build_edge_table
from .trie import child

HAN_LO = 0x4E00  # jieba.finalseg's Han range: U+4E00..U+9FD5
HAN_HI = 0x9FD5
MIN_FLOAT = -3.14e100
# States in jieba's order B, M, E, S; PREV[y] lists PrevStatus[y] (as in jieba).
ST_B, ST_M, ST_E, ST_S = 0, 1, 2, 3
# State letters' order for tie-breaks ('B' < 'E' < 'M' < 'S').
STATE_RANK = np.array([0, 2, 1, 3], dtype=np.int64)
PREV = np.array([[ST_E, ST_S], [ST_M, ST_B], [ST_B, ST_M], [ST_S, ST_E]], dtype=np.int64)


@njit(cache=True)
def _lookup_freq(cps, s, e, keys, vals, freq):
    """jieba's ``FREQ.get(word)`` for ``cps[s:e]`` (0 when absent)."""
    node = np.int64(0)
    for i in range(s, e):
        node = child(keys, vals, node, cps[i])
        if node < 0:
            return 0
    return freq[node]


@njit(cache=True)
def _emit(starts, lens, t, s, e):
    starts[t] = s
    lens[t] = e - s
    return t + 1


@njit(cache=True)
def _finalseg_other(cps, s, e, starts, lens, t):
    """``re.split("([a-zA-Z0-9]+(?:\\.\\d+)?%?)", blk)``, keeping non-empty pieces."""
    pending = s
    p = s
    while p < e:
        c = cps[p]
        if _is_ascii_alnum(c):
            q = p + 1
            while q < e and _is_ascii_alnum(cps[q]):
                q += 1
            if q + 1 < e and cps[q] == 46 and _is_ascii_digit(cps[q + 1]):  # '.' digit
                q += 2
                while q < e and _is_ascii_digit(cps[q]):
                    q += 1
            if q < e and cps[q] == 37:  # '%'
                q += 1
            if pending < p:
                t = _emit(starts, lens, t, pending, p)
            t = _emit(starts, lens, t, p, q)
            pending = q
            p = q
        else:
            p += 1
    if pending < e:
        t = _emit(starts, lens, t, pending, e)
    return t


@njit(cache=True, inline="always")
def _is_ascii_alnum(c):
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122)


@njit(cache=True, inline="always")
def _is_ascii_digit(c):
    return 48 <= c <= 57


@njit(cache=True)
def _viterbi(cps, s, e, start_p, trans_p, emit_p, v, back, starts, lens, t):
    """jieba.finalseg.__cut on the Han run ``cps[s:e]``."""
    n = e - s
    for y in range(4):
        c = cps[s]
        v[0, y] = start_p[y] + emit_p[c - HAN_LO, y]
    for i in range(1, n):
        c = cps[s + i]
        for y in range(4):
            em = emit_p[c - HAN_LO, y]
            y0 = PREV[y, 0]
            best = v[i - 1, y0] + trans_p[y0, y] + em
            best_s = y0
            y1 = PREV[y, 1]
            p = v[i - 1, y1] + trans_p[y1, y] + em
            if p > best or (p == best and STATE_RANK[y1] > STATE_RANK[best_s]):
                best = p
                best_s = y1
            v[i, y] = best
            back[i, y] = best_s
    # final state: max over (V[-1][y], y) for y in 'ES'; on a tie 'S' wins
    state = ST_E
    if v[n - 1, ST_S] >= v[n - 1, ST_E]:
        state = ST_S
    # backtrack into back[:, 0] reused as the state path (column 0 no longer needed)
    path = np.empty(n, dtype=np.int8)
    path[n - 1] = state
    for i in range(n - 1, 0, -1):
        state = back[i, state]
        path[i - 1] = state
    begin = 0
    nexti = 0
    for i in range(n):
        pos = path[i]
        if pos == ST_B:
            begin = i
        elif pos == ST_E:
            t = _emit(starts, lens, t, s + begin, s + i + 1)
            nexti = i + 1
        elif pos == ST_S:
            t = _emit(starts, lens, t, s + i, s + i + 1)
            nexti = i + 1
    if nexti < n:
        t = _emit(starts, lens, t, s + nexti, e)
    return t


@njit(cache=True)
def _finalseg(cps, s, e, start_p, trans_p, emit_p, v, back, starts, lens, t):
    """jieba.finalseg.cut on ``cps[s:e]``: Han runs by Viterbi, the rest by regex split."""
    p = s
    while p < e:
        is_han = HAN_LO <= cps[p] <= HAN_HI
        q = p + 1
        while q < e and (HAN_LO <= cps[q] <= HAN_HI) == is_han:
            q += 1
        if is_han:
            t = _viterbi(cps, p, q, start_p, trans_p, emit_p, v, back, starts, lens, t)
        else:
            t = _finalseg_other(cps, p, q, starts, lens, t)
        p = q
    return t


@njit(cache=True)
def _flush_buf(cps, bs, be, keys, vals, freq, hmm_tables, starts, lens, t):
    start_p, trans_p, emit_p, v, back = hmm_tables
    if be - bs == 1:
        return _emit(starts, lens, t, bs, be)
    if _lookup_freq(cps, bs, be, keys, vals, freq) == 0:
        return _finalseg(cps, bs, be, start_p, trans_p, emit_p, v, back, starts, lens, t)
    for i in range(bs, be):
        t = _emit(starts, lens, t, i, i + 1)
    return t


@njit(cache=True)
def cut_block(
    cps, s, e, keys, vals, freq, logp, hmm, hmm_tables, route_p, route_x, starts, lens, t
):
    """``__cut_DAG`` (hmm) or ``__cut_DAG_NO_HMM`` on the block ``cps[s:e]``."""
    n = e - s
    route_p[n] = 0.0
    for idx in range(n - 1, -1, -1):
        # DAG[idx] walked in increasing x; max over (prob, x): ties to the larger x
        best = 0.0
        best_x = -1
        node = np.int64(0)
        i = idx
        while i < n:
            node = child(keys, vals, node, cps[s + i])
            if node < 0:
                break
            if freq[node] > 0:
                p = logp[node] + route_p[i + 1]
                if best_x < 0 or p >= best:
                    best = p
                    best_x = i
            i += 1
        if best_x < 0:  # no word: the single character, freq(char) or 1
            node = child(keys, vals, np.int64(0), cps[s + idx])
            a = logp[node] if node >= 0 else logp[0]
            best = a + route_p[idx + 1]
            best_x = idx
        route_p[idx] = best
        route_x[idx] = best_x
    x = 0
    buf_s = -1
    if hmm:
        while x < n:
            y = route_x[x] + 1
            if y - x == 1:
                if buf_s < 0:
                    buf_s = x
            else:
                if buf_s >= 0:
                    t = _flush_buf(
                        cps, s + buf_s, s + x, keys, vals, freq, hmm_tables, starts, lens, t
                    )
                    buf_s = -1
                t = _emit(starts, lens, t, s + x, s + y)
            x = y
        if buf_s >= 0:
            t = _flush_buf(cps, s + buf_s, s + n, keys, vals, freq, hmm_tables, starts, lens, t)
    else:
        while x < n:
            y = route_x[x] + 1
            if y - x == 1 and _is_ascii_alnum(cps[s + x]):
                if buf_s < 0:
                    buf_s = x
            else:
                if buf_s >= 0:
                    t = _emit(starts, lens, t, s + buf_s, s + x)
                    buf_s = -1
                t = _emit(starts, lens, t, s + x, s + y)
            x = y
        if buf_s >= 0:
            t = _emit(starts, lens, t, s + buf_s, s + n)
    return t


@njit(cache=True)
def cut_scratch(cps, lo, hi, cls, value, start_p, trans_p, emit_p):
    """``(route_p, route_x, hmm_tables)`` for :func:`cut_block`, sized by the longest run of
    code points of class ``value`` in ``cps[lo:hi]``."""
    longest = 1
    run = 0
    for i in range(lo, hi):
        if cls[cps[i]] == value:
            run += 1
            longest = max(longest, run)
        else:
            run = 0
    route_p = np.empty(longest + 1, dtype=np.float64)
    route_x = np.empty(longest + 1, dtype=np.int64)
    v = np.empty((longest, 4), dtype=np.float64)
    back = np.zeros((longest, 4), dtype=np.int64)
    return route_p, route_x, (start_p, trans_p, emit_p, v, back)


@njit(cache=True)
def jieba_spans(cps, doc_off, block_cls, keys, vals, freq, logp, start_p, trans_p, emit_p, hmm):
    """jieba.cut (accurate mode) of each text ``cps[doc_off[d]:doc_off[d + 1] - 1]``.

    Returns ``(starts int64, lens int32, tok_off int64[n_docs + 1])``.
    """
    n_docs = doc_off.shape[0] - 1
    total = doc_off[n_docs] - doc_off[0]
    starts = np.empty(total + 1, dtype=np.int64)
    lens = np.empty(total + 1, dtype=np.int32)
    tok_off = np.zeros(n_docs + 1, dtype=np.int64)
    # the separator after each text is never a block character: runs stop there
    route_p, route_x, hmm_tables = cut_scratch(
        cps, doc_off[0], doc_off[n_docs], block_cls, 1, start_p, trans_p, emit_p
    )
    t = np.int64(0)
    for d in range(n_docs):
        i = doc_off[d]
        end = doc_off[d + 1] - 1
        while i < end:
            if block_cls[cps[i]] == 1:
                j = i + 1
                while j < end and block_cls[cps[j]] == 1:
                    j += 1
                t = cut_block(
                    cps,
                    i,
                    j,
                    keys,
                    vals,
                    freq,
                    logp,
                    hmm,
                    hmm_tables,
                    route_p,
                    route_x,
                    starts,
                    lens,
                    t,
                )
                i = j
            elif cps[i] == 13 and i + 1 < end and cps[i + 1] == 10:  # "\r\n"
                t = _emit(starts, lens, t, i, i + 2)
                i += 2
            else:
                t = _emit(starts, lens, t, i, i + 1)
                i += 1
        tok_off[d + 1] = t
    return starts[:t], lens[:t], tok_off


@njit(cache=True)
def lookup_freqs(cps, starts, lens, keys, vals, freq):
    """jieba's ``FREQ.get(w, 0)`` for each span ``cps[starts[i] : starts[i] + lens[i]]``."""
    n = starts.shape[0]
    out = np.zeros(n, dtype=np.int64)
    for i in range(n):
        out[i] = _lookup_freq(cps, starts[i], starts[i] + lens[i], keys, vals, freq)
    return out
