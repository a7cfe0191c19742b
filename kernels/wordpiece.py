"""BERT's WordPiece for printable-ASCII words as a numba kernel over their bytes.

A word is lowercased, cut into runs of letters and digits and single other characters (BERT's
pre-tokenizer: every other printable ASCII character is punctuation), and each part becomes
its longest-match-first pieces: the longest vocabulary entry it starts with, then the longest
continuation entry (``##...``) at the rest, and so on; a part longer than ``max_chars`` or
with a rest no continuation starts is the unknown token alone. Two code-point tries
(:mod:`.trie`) hold the entries: ``head`` the plain ones, ``tail`` the continuations without
their prefix.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .trie import child

__all__ = ["encode_ascii_words"]


@njit(cache=True, inline="always")
def _alnum(c) -> bool:
    return (48 <= c <= 57) or (97 <= c <= 122)


@njit(cache=True)
def _longest(text, s, e, keys, vals, piece) -> tuple[int, int]:
    """The longest entry of a trie that ``text[s:e]`` starts with: ``(end, id)``, or
    ``(s, -1)`` for none."""
    node = np.int64(0)
    end = s
    pid = -1
    for j in range(s, e):
        node = np.int64(child(keys, vals, node, text[j]))
        if node < 0:
            break
        if piece[node] >= 0:
            end = j + 1
            pid = piece[node]
    return end, pid


@njit(cache=True)
def encode_ascii_words(
    chars: np.ndarray,
    offsets: np.ndarray,
    head_keys: np.ndarray,
    head_vals: np.ndarray,
    head_piece: np.ndarray,
    tail_keys: np.ndarray,
    tail_vals: np.ndarray,
    tail_piece: np.ndarray,
    unk: int,
    max_chars: int,
    out_ids: np.ndarray,
    out_counts: np.ndarray,
) -> int:
    """Ids of each printable-ASCII word ``chars[offsets[i]:offsets[i + 1]]`` (uint8) into
    ``out_ids`` (room for ``len(chars)`` ids), their number per word into ``out_counts``;
    returns the ids written."""
    longest = 0
    for i in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[i + 1] - offsets[i])
    text = np.empty(longest, np.int64)
    n_out = np.int64(0)
    for w in range(offsets.shape[0] - 1):
        a = offsets[w]
        m = offsets[w + 1] - a
        for j in range(m):
            c = np.int64(chars[a + j])
            text[j] = c + 32 if 65 <= c <= 90 else c
        first = n_out
        s = np.int64(0)
        while s < m:
            e = s + 1
            if _alnum(text[s]):
                while e < m and _alnum(text[e]):
                    e += 1
            if e - s > max_chars:
                out_ids[n_out] = unk
                n_out += 1
                s = e
                continue
            part = n_out
            p, pid = _longest(text, s, e, head_keys, head_vals, head_piece)
            while pid >= 0:
                out_ids[n_out] = pid
                n_out += 1
                if p == e:
                    break
                p, pid = _longest(text, p, e, tail_keys, tail_vals, tail_piece)
            if pid < 0:
                n_out = part
                out_ids[n_out] = unk
                n_out += 1
            s = e
        out_counts[w] = n_out - first
    return n_out
