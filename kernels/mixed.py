"""Script-aware token spans for the default ``bm25`` analyzer, as one numba pass.

Each code point has a class (``cls``, uint8): Han characters jieba segments (U+4E00..U+9FD5)
are cut with jieba's algorithm (:func:`fastrag._kernels.jieba.cut_block`), unless the run
they are in holds a ``MIX_SEG`` character (kana, Thai, Lao, Khmer, Myanmar): such a run of
``MIX_HAN``/``MIX_SEG`` characters is one span, segmented by the caller; other CJK
characters (Hangul, rarer ideographs) give unigrams plus overlapping bigrams; a run of
other word characters (Latin, Cyrillic, Greek, digits, ``_``) is one word, with a ``.``
between two ASCII digits kept inside it (``3.14``, ``v1.2``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .jieba import cut_block, cut_scratch

MIX_OTHER = 0
MIX_WORD = 1
MIX_CJK = 2
MIX_HAN = 3
MIX_SEG = 4


@njit(cache=True, inline="always")
def _digit(c):
    return 48 <= c <= 57


@njit(cache=True)
def mixed_spans(cps, doc_off, cls, keys, vals, freq, logp, start_p, trans_p, emit_p, hmm):
    """Token spans of each text ``cps[doc_off[d]:doc_off[d + 1]]`` by script.

    Returns ``(starts int64, lens int32, tok_off int64[n_docs + 1])``, in text order.
    """
    n_docs = doc_off.shape[0] - 1
    n = doc_off[n_docs] - doc_off[0]
    starts = np.empty(2 * n + 1, dtype=np.int64)
    lens = np.empty(2 * n + 1, dtype=np.int32)
    tok_off = np.zeros(n_docs + 1, dtype=np.int64)
    route_p, route_x, hmm_tables = cut_scratch(
        cps, doc_off[0], doc_off[n_docs], cls, MIX_HAN, start_p, trans_p, emit_p
    )
    t = np.int64(0)
    for d in range(n_docs):
        i = doc_off[d]
        end = doc_off[d + 1]
        while i < end:
            c = cls[cps[i]]
            if c == MIX_OTHER:
                i += 1
            elif c == MIX_WORD:
                j = i + 1
                while j < end:
                    if cls[cps[j]] == MIX_WORD:
                        j += 1
                    elif cps[j] == 46 and j + 1 < end and _digit(cps[j - 1]) and _digit(cps[j + 1]):
                        j += 2
                    else:
                        break
                starts[t] = i
                lens[t] = j - i
                t += 1
                i = j
            elif c == MIX_HAN or c == MIX_SEG:
                j = i + 1
                seg = c == MIX_SEG
                while j < end:
                    cj = cls[cps[j]]
                    if cj == MIX_SEG:
                        seg = True
                    elif cj != MIX_HAN:
                        break
                    j += 1
                if seg:
                    starts[t] = i
                    lens[t] = j - i
                    t += 1
                    i = j
                    continue
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
            else:
                starts[t] = i
                lens[t] = 1
                t += 1
                if i + 1 < end and cls[cps[i + 1]] == MIX_CJK:
                    starts[t] = i
                    lens[t] = 2
                    t += 1
                i += 1
        tok_off[d + 1] = t
    return starts[:t], lens[:t], tok_off


@njit(cache=True)
def traditional_han(cps, doc_off, cls, votes, lo, kana):
    """Positions (int64, ascending) of the ``MIX_HAN`` characters outside runs holding a
    ``MIX_SEG`` character, in each text that reads as Traditional Chinese: the sum of
    ``votes[c - lo]`` over its Han characters (+1 Traditional-only, -1 Simplified-only) is
    positive and it holds no code point of the ``kana`` ranges (int64, k x 2, inclusive)."""
    n_docs = doc_off.shape[0] - 1
    out = np.empty(doc_off[n_docs] - doc_off[0], dtype=np.int64)
    t = 0
    for d in range(n_docs):
        score = 0
        has_kana = False
        for i in range(doc_off[d], doc_off[d + 1]):
            c = cps[i]
            k = cls[c]
            if k == MIX_HAN:
                score += votes[c - lo]
            elif k == MIX_SEG:
                for r in range(kana.shape[0]):
                    if kana[r, 0] <= c <= kana[r, 1]:
                        has_kana = True
                if has_kana:
                    break
        if score <= 0 or has_kana:
            continue
        i = doc_off[d]
        end = doc_off[d + 1]
        while i < end:
            k = cls[cps[i]]
            if k != MIX_HAN and k != MIX_SEG:
                i += 1
                continue
            j = i
            seg = False
            while j < end and (cls[cps[j]] == MIX_HAN or cls[cps[j]] == MIX_SEG):
                seg = seg or cls[cps[j]] == MIX_SEG
                j += 1
            if not seg:
                for p in range(i, j):
                    out[t] = p
                    t += 1
            i = j
    return out[:t]
