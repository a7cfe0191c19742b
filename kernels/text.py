"""Text kernels over Unicode code points (uint32 arrays): CJK uni+bigram spans, span interning.

A chunk of texts is one ``cps`` array (the texts' code points, separated by any non-token
character) plus ``doc_off`` (int64, n_docs + 1, code-point offsets). Tokens are spans
``(starts int64, lens int32)`` into ``cps``; ``intern_spans`` gives each distinct span content
a local id in order of first occurrence.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Character classes of the ``cls`` table (uint8, indexed by code point).
CLS_OTHER = 0  # separator: not part of any token
CLS_WORD = 1  # \w but not CJK: runs form one word
CLS_CJK = 2  # CJK: unigrams + overlapping bigrams within a run


@njit(cache=True)
def cjk_spans(cps, doc_off, cls):
    """Spans of the CJK uni+bigram tokenization of each document.

    Returns ``(starts int64, lens int32, tok_off int64[n_docs + 1])``. In a CJK run
    ``c0 c1 .. cn`` the tokens are ``c0, c0c1, c1, c1c2, .., cn``; a run of other word
    characters is one token.
    """
    n_docs = doc_off.shape[0] - 1
    n = doc_off[n_docs] - doc_off[0]
    starts = np.empty(2 * n + 1, dtype=np.int64)
    lens = np.empty(2 * n + 1, dtype=np.int32)
    tok_off = np.zeros(n_docs + 1, dtype=np.int64)
    t = 0
    for d in range(n_docs):
        i = doc_off[d]
        end = doc_off[d + 1]
        while i < end:
            c = cls[cps[i]]
            if c == CLS_OTHER:
                i += 1
            elif c == CLS_WORD:
                j = i + 1
                while j < end and cls[cps[j]] == CLS_WORD:
                    j += 1
                starts[t] = i
                lens[t] = j - i
                t += 1
                i = j
            else:
                starts[t] = i
                lens[t] = 1
                t += 1
                if i + 1 < end and cls[cps[i + 1]] == CLS_CJK:
                    starts[t] = i
                    lens[t] = 2
                    t += 1
                i += 1
        tok_off[d + 1] = t
    return starts[:t], lens[:t], tok_off


@njit(cache=True, inline="always")
def _span_key(cps, s, ln):
    """Tokens of <= 3 code points pack exactly into a non-negative int64 ((cp + 1) per 21
    bits); longer ones get a negative 63-bit FNV-1a hash and are compared by content."""
    if ln <= 3:
        key = np.int64(0)
        for k in range(ln):
            key = (key << 21) | np.int64(cps[s + k] + 1)
        return key
    h = np.uint64(14695981039346656037)
    for k in range(ln):
        h ^= np.uint64(cps[s + k])
        h *= np.uint64(1099511628211)
    return -1 - np.int64(h >> np.uint64(1))


@njit(cache=True, inline="always")
def _slot_of(key, mask):
    return np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(17)) & mask


@njit(cache=True)
def intern_spans(cps, starts, lens):
    """Local ids of the spans' contents, first occurrence first.

    Returns ``(ids int32[n_tokens], first int64[n_unique])``: ``first[u]`` is the token
    index of unique ``u``'s first occurrence. Open addressing on a table that doubles at
    half load; short tokens compare by their packed key only.
    """
    n = starts.shape[0]
    cap = 1024
    while cap < n // 2:
        cap *= 2
    mask = np.int64(cap - 1)
    table = np.full(cap, -1, dtype=np.int32)
    ukeys = np.empty(16, dtype=np.int64)
    first = np.empty(16, dtype=np.int64)
    ids = np.empty(n, dtype=np.int32)
    n_uniq = 0
    for t in range(n):
        s = starts[t]
        ln = lens[t]
        key = _span_key(cps, s, ln)
        slot = _slot_of(key, mask)
        while True:
            u = table[slot]
            if u < 0:
                if n_uniq == ukeys.shape[0]:
                    grown = np.empty(2 * n_uniq, dtype=np.int64)
                    grown[:n_uniq] = ukeys
                    ukeys = grown
                    grown = np.empty(2 * n_uniq, dtype=np.int64)
                    grown[:n_uniq] = first
                    first = grown
                table[slot] = n_uniq
                ukeys[n_uniq] = key
                first[n_uniq] = t
                ids[t] = n_uniq
                n_uniq += 1
                if 2 * n_uniq > cap:  # rehash into a table twice as large
                    cap *= 2
                    mask = np.int64(cap - 1)
                    table = np.full(cap, -1, dtype=np.int32)
                    for v in range(n_uniq):
                        sl = _slot_of(ukeys[v], mask)
                        while table[sl] >= 0:
                            sl = (sl + 1) & mask
                        table[sl] = v
                break
            if ukeys[u] == key:
                if key >= 0:
                    ids[t] = u
                    break
                ft = first[u]
                fs = starts[ft]
                if lens[ft] == ln:
                    same = True
                    for k in range(ln):
                        if cps[fs + k] != cps[s + k]:
                            same = False
                            break
                    if same:
                        ids[t] = u
                        break
            slot = (slot + 1) & mask
    return ids, first[:n_uniq].copy()


@njit(cache=True)
def gather_spans(cps, starts, lens, sep):
    """The spans' code points concatenated, each followed by ``sep`` (to decode at once)."""
    n = starts.shape[0]
    total = 0
    for t in range(n):
        total += lens[t] + 1
    out = np.empty(total, dtype=np.uint32)
    p = 0
    for t in range(n):
        s = starts[t]
        for k in range(lens[t]):
            out[p] = cps[s + k]
            p += 1
        out[p] = sep
        p += 1
    return out
