"""Edit-distance kernels: "is the Levenshtein distance of two code-point strings <= k?".

The question a similarity threshold asks (``1 - lev / max(len) > t``) is a bounded one, so
the kernels answer it, not the distance itself, and stop as soon as the answer is known:

* the length difference is a lower bound: ``|la - lb| > k`` means no;
* :func:`bag_distance` (the characters of the longer string left unmatched by the multiset
  intersection, from both strings' *sorted* code points) is a cheaper lower bound that rules
  out almost every unrelated pair;
* :func:`within_distance` then runs Myers' bit-parallel algorithm in Hyyrö's block form (64
  rows of the DP matrix per machine word, the shorter string as the pattern) and exits when
  the remaining columns cannot bring the distance down to ``k``.

Strings arrive as ragged arrays: ``values`` (int32 code points of all texts) and ``offsets``
(int64, n_texts + 1), plus ``sorted_values`` (each text's code points sorted, same offsets);
pairs as ``left``/``right`` text indices with a per-pair bound ``kmax`` (int64; a negative
bound answers False). Integer arithmetic only: the fastmath policy of ``_config.py`` has
nothing to relax here. ``pairs_within_parallel`` is the ``prange`` form; the caller picks it
above a batch-size threshold. The plain-Python twin is ``tests/reference.py``
(``levenshtein_reference``, ``bag_distance_reference``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["bag_distance", "pairs_within_parallel", "pairs_within_serial", "within_distance"]

_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_TOP = np.uint64(63)


@njit(cache=True, nogil=True)
def bag_distance(sa, sb):
    """A lower bound of the edit distance from the sorted code points of both strings: the
    characters of the longer string left unmatched by the multiset intersection."""
    i = 0
    j = 0
    common = 0
    while i < sa.shape[0] and j < sb.shape[0]:
        if sa[i] == sb[j]:
            common += 1
            i += 1
            j += 1
        elif sa[i] < sb[j]:
            i += 1
        else:
            j += 1
    return max(sa.shape[0], sb.shape[0]) - common


@njit(cache=True, nogil=True)
def within_distance(a, b, kmax):
    """True when the Levenshtein distance of code-point arrays ``a`` and ``b`` is <= ``kmax``.

    Myers' bit-parallel algorithm in Hyyrö's block form (64 rows of the DP matrix per word,
    the shorter string as the pattern), after the length bound and an equality shortcut; it
    stops as soon as the remaining columns cannot bring the distance down to ``kmax``.
    """
    if kmax < 0:
        return False
    la, lb = a.shape[0], b.shape[0]
    if abs(la - lb) > kmax:
        return False
    if la == lb:
        same = True
        for i in range(la):
            if a[i] != b[i]:
                same = False
                break
        if same:
            return True
    if la > lb:
        a, b = b, a
        la, lb = lb, la
    if la == 0:
        return lb <= kmax
    words = (la + 63) >> 6
    alphabet = np.unique(a)
    peq = np.zeros((alphabet.shape[0], words), dtype=np.uint64)
    for i in range(la):
        c = np.searchsorted(alphabet, a[i])
        peq[c, i >> 6] |= _ONE << np.uint64(i & 63)
    vp = np.full(words, _ALL, dtype=np.uint64)
    vn = np.zeros(words, dtype=np.uint64)
    last_bit = np.uint64((la - 1) & 63)
    score = la
    n_alpha = alphabet.shape[0]
    for j in range(lb):
        c = np.searchsorted(alphabet, b[j])
        present = c < n_alpha and alphabet[min(c, n_alpha - 1)] == b[j]
        hin = 1
        for w in range(words):
            eq = peq[c, w] if present else np.uint64(0)
            pv = vp[w]
            mv = vn[w]
            xv = eq | mv
            if hin < 0:
                eq |= _ONE
            xh = (((eq & pv) + pv) ^ pv) | eq
            ph = mv | (~(xh | pv))
            mh = pv & xh
            bit = _TOP if w < words - 1 else last_bit
            hout = np.int64((ph >> bit) & _ONE) - np.int64((mh >> bit) & _ONE)
            ph = ph << _ONE
            mh = mh << _ONE
            if hin < 0:
                mh |= _ONE
            elif hin > 0:
                ph |= _ONE
            vp[w] = mh | (~(xv | ph))
            vn[w] = ph & xv
            hin = hout
        score += hin
        if score - (lb - 1 - j) > kmax:
            return False
    return score <= kmax


@njit(cache=True, nogil=True)
def _pair_within(values, sorted_values, offsets, i, j, kmax):
    lo_i, hi_i, lo_j, hi_j = offsets[i], offsets[i + 1], offsets[j], offsets[j + 1]
    if kmax < 0 or abs((hi_i - lo_i) - (hi_j - lo_j)) > kmax:
        return False
    # the bag distance rules out almost every unrelated pair at a fraction of the DP's cost
    if bag_distance(sorted_values[lo_i:hi_i], sorted_values[lo_j:hi_j]) > kmax:
        return False
    return within_distance(values[lo_i:hi_i], values[lo_j:hi_j], kmax)


@njit(cache=True, nogil=True)
def pairs_within_serial(values, sorted_values, offsets, left, right, kmax, out):
    """``out[p] = lev(text left[p], text right[p]) <= kmax[p]`` for every pair ``p``, where
    text ``t`` is ``values[offsets[t]:offsets[t + 1]]`` (and its code points sorted, in
    ``sorted_values`` at the same offsets)."""
    for p in range(left.shape[0]):
        out[p] = _pair_within(values, sorted_values, offsets, left[p], right[p], kmax[p])


@njit(cache=True, nogil=True, parallel=True)
def pairs_within_parallel(values, sorted_values, offsets, left, right, kmax, out):
    """:func:`pairs_within_serial` with the pairs spread over threads (``prange``)."""
    for p in prange(left.shape[0]):
        out[p] = _pair_within(values, sorted_values, offsets, left[p], right[p], kmax[p])
