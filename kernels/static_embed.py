"""Static-embedding kernels: a text's vector is the L2-normalized sum of its tokens' table rows.

The table is int8 with one float32 scale per row (``row = scale * int8``), memory-mapped; token
ids come ragged (``ids`` values, ``offsets`` of length ``n_texts + 1``). A sum and a mean give
the same direction, so the kernel sums and normalizes. A text whose tokens all have zero rows
(or no tokens) gets a zero vector. ``prange`` runs over texts; each text's sum is accumulated
in float32 in token order, so a text's vector does not depend on its batch or the threads.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._config import FASTMATH
from .intrinsics import prefetch

__all__ = ["gather_spans", "pool_rows"]

# Rows are read in token order, which is random in a large table: the row this many tokens
# ahead is prefetched.
_AHEAD = 16


@njit(cache=True, parallel=True, fastmath=FASTMATH)
def pool_rows(
    table: np.ndarray, scales: np.ndarray, ids: np.ndarray, offsets: np.ndarray, out: np.ndarray
) -> None:
    """``out[i]``: the normalized sum of ``scales[t] * table[t]`` over the tokens of text i."""
    n = offsets.shape[0] - 1
    d = table.shape[1]
    for i in prange(n):
        acc = np.zeros(d, dtype=np.float32)
        end = offsets[i + 1]
        for j in range(offsets[i], end):
            if j + _AHEAD < end:
                ahead = ids[j + _AHEAD]
                row = table[ahead]
                for k in range(0, d, 64):
                    prefetch(row, k)
                prefetch(scales, ahead)
            t = ids[j]
            s = scales[t]
            for k in range(d):
                acc[k] += s * np.float32(table[t, k])
        norm = np.float32(0.0)
        for k in range(d):
            norm += acc[k] * acc[k]
        if norm > 0:
            inv = np.float32(1.0) / np.sqrt(norm)
            for k in range(d):
                out[i, k] = acc[k] * inv
        else:
            for k in range(d):
                out[i, k] = 0.0


@njit(cache=True)
def gather_spans(
    flat: np.ndarray, starts: np.ndarray, lens: np.ndarray, words: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The spans ``flat[starts[w]:starts[w] + lens[w]]`` of ``words`` one after the other, as
    ``(values int32, offsets int64 (len(words) + 1,))``."""
    n = words.shape[0]
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    for i in range(n):
        offsets[i + 1] = offsets[i] + lens[words[i]]
    out = np.empty(offsets[n], np.int32)
    for i in range(n):
        a = starts[words[i]]
        o = offsets[i]
        for j in range(offsets[i + 1] - o):
            out[o + j] = flat[a + j]
    return out, offsets
