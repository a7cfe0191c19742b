"""Unigram (SentencePiece) tokenization of words over code points, equal to ``tokenizers``'.

The vocabulary is a code-point trie (:mod:`.trie`): ``keys`` its hash table of edges and, in
the same slots, ``edges`` int64 ``child | (piece + 1) << 32``: the child node and the id of the
piece that ends there (-1, so 0 stored, for none), read together.

:func:`encode_words` runs ``tokenizers``' ``Unigram.encode_optimized`` on each word with the
metaspace ``"▁"`` prepended (``Metaspace(prepend_scheme="always")`` on a word without
spaces): the best path by summed float64 log-probabilities, a candidate replacing the best
only when strictly better (starts in order, shorter pieces first), a character no piece of
one character covers costing ``min_score - 10`` as unknown, and consecutive unknowns fused
into one unknown id. Matches of a code-point trie end where the byte trie's do, since every
piece is whole characters.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .intrinsics import prefetch
from .trie import edge_slot, hash_slot

__all__ = ["encode_words", "map_code_points"]

# The second edge of the match starting this many characters ahead is prefetched: the first
# (a single character) is mostly cached, the second rarely, and each match's lookups wait on
# each other.
_AHEAD = 8


@njit(cache=True)
def _viterbi(
    text: np.ndarray,
    m: int,
    keys: np.ndarray,
    edges: np.ndarray,
    scores: np.ndarray,
    unk_id: int,
    unk_score: float,
    best: np.ndarray,
    start: np.ndarray,
    tok: np.ndarray,
    path: np.ndarray,
    out: np.ndarray,
    n_out: int,
) -> int:
    """The best path's ids of ``text[:m]`` appended to ``out`` at ``n_out``; the new end."""
    for j in range(m + 1):
        start[j] = -1
    best[0] = 0.0
    for s in range(m):
        if s + _AHEAD + 1 < m:
            first = edge_slot(keys, 0, text[s + _AHEAD])
            if first >= 0:
                slot = hash_slot(keys, edges[first] & 0xFFFFFFFF, text[s + _AHEAD + 1])
                prefetch(keys, slot)
                prefetch(edges, slot)
        here = best[s]
        single = False
        node = np.int64(0)
        e = s
        while e < m:
            slot = edge_slot(keys, node, text[e])
            if slot < 0:
                break
            node = edges[slot] & 0xFFFFFFFF
            pid = (edges[slot] >> 32) - 1
            e += 1
            if pid >= 0:
                cand = scores[pid] + here
                if start[e] < 0 or cand > best[e]:
                    best[e] = cand
                    start[e] = s
                    tok[e] = pid
                if e == s + 1:
                    single = True
        if not single:
            cand = unk_score + here
            if start[s + 1] < 0 or cand > best[s + 1]:
                best[s + 1] = cand
                start[s + 1] = s
                tok[s + 1] = unk_id
    k = 0
    e = m
    while e > 0:
        t = tok[e]
        if not (t == unk_id and k > 0 and path[k - 1] == unk_id):
            path[k] = t
            k += 1
        e = start[e]
    for j in range(k):
        out[n_out + j] = path[k - 1 - j]
    return n_out + k


@njit(cache=True)
def encode_words(
    cps: np.ndarray,
    offsets: np.ndarray,
    keys: np.ndarray,
    edges: np.ndarray,
    scores: np.ndarray,
    unk_id: int,
    unk_score: float,
    space: int,
    out_ids: np.ndarray,
    out_counts: np.ndarray,
) -> int:
    """Ids of each word ``cps[offsets[i]:offsets[i + 1]]`` into ``out_ids`` (room for
    ``len(cps) + n_words`` ids), their number per word into ``out_counts``; returns the ids
    written. As ``Metaspace``: ``space`` is prepended unless the word starts with it, and
    the word is cut before each ``space`` into parts tokenized one by one; an empty word has
    no ids."""
    n_words = offsets.shape[0] - 1
    longest = 0
    for i in range(n_words):
        longest = max(longest, offsets[i + 1] - offsets[i])
    size = longest + 1
    text = np.empty(size, np.int64)
    best = np.empty(size + 1, np.float64)
    start = np.empty(size + 1, np.int64)
    tok = np.empty(size + 1, np.int32)
    path = np.empty(size + 1, np.int32)
    n_out = np.int64(0)
    for w in range(n_words):
        end = offsets[w + 1]
        first = n_out
        j = offsets[w]
        while j < end:  # one part: space, then the characters up to the next space
            text[0] = space
            m = 1
            if cps[j] == space:
                j += 1
            while j < end and cps[j] != space:
                text[m] = cps[j]
                m += 1
                j += 1
            n_out = _viterbi(
                text, m, keys, edges, scores, unk_id, unk_score,
                best, start, tok, path, out_ids, n_out,
            )  # fmt: skip
        out_counts[w] = n_out - first
    return n_out


@njit(cache=True)
def map_code_points(
    cps: np.ndarray, offsets: np.ndarray, start: np.ndarray, count: np.ndarray, flat: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Texts ``cps[offsets[i]:offsets[i + 1]]`` with each code point ``c`` for which
    ``count[c] >= 0`` replaced by ``flat[start[c]:start[c] + count[c]]`` (code points past
    ``count`` and those with -1 kept). Returns the new code points and offsets, and whether
    each text changed."""
    top = count.shape[0]
    n_texts = offsets.shape[0] - 1
    changed = np.zeros(n_texts, np.bool_)
    n = 0
    for i in range(n_texts):
        for j in range(offsets[i], offsets[i + 1]):
            c = cps[j]
            if c < top and count[c] >= 0:
                n += count[c]
                changed[i] = True
            else:
                n += 1
    out = np.empty(n, np.uint32)
    out_offsets = np.empty_like(offsets)
    out_offsets[0] = 0
    k = 0
    for i in range(n_texts):
        for j in range(offsets[i], offsets[i + 1]):
            c = cps[j]
            if c < top and count[c] >= 0:
                for t in range(start[c], start[c] + count[c]):
                    out[k] = flat[t]
                    k += 1
            else:
                out[k] = c
                k += 1
        out_offsets[i + 1] = k
    return out, out_offsets, changed
