"""Fusion of several ranked hit lists: one entry per (list, query, hit) in, the top ``k`` rows
of each query by summed contribution out (``fastrag.retrieval.fusion.fuse_hits``)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def fuse_topk(q, row, contrib, k, out_rows, out_scores, counts):
    """Sum the ``contrib`` of each (query ``q``, ``row``) and write each query's top ``k``,
    best first, ties to the lower row, into ``out_rows``/``out_scores``/``counts`` (one row
    per query). A pair's contributions are added in entry order, as the NumPy twin adds them,
    so the sums are the same floats."""
    nq = counts.shape[0]
    n = q.shape[0]
    start = np.zeros(nq + 1, np.int64)
    for i in range(n):
        start[q[i] + 1] += 1
    for j in range(nq):
        start[j + 1] += start[j]
    fill = start[:nq].copy()
    order = np.empty(n, np.int64)
    for i in range(n):  # stable counting sort by query
        j = q[i]
        order[fill[j]] = i
        fill[j] += 1
    for j in range(nq):
        a = start[j]
        m = start[j + 1] - a
        if m == 0:
            counts[j] = 0
            continue
        rows = np.empty(m, np.int64)
        for t in range(m):
            rows[t] = row[order[a + t]]
        by_row = np.argsort(rows, kind="mergesort")
        uniq = np.empty(m, np.int64)
        sums = np.empty(m, np.float64)
        u = 0
        for t in range(m):
            i = order[a + by_row[t]]
            if u > 0 and uniq[u - 1] == row[i]:
                sums[u - 1] += contrib[i]
            else:
                uniq[u] = row[i]
                sums[u] = contrib[i]
                u += 1
        best = np.argsort(-sums[:u], kind="mergesort")  # stable: equal sums keep row order
        kk = min(k, u)
        for t in range(kk):
            out_rows[j, t] = uniq[best[t]]
            out_scores[j, t] = sums[best[t]]
        counts[j] = kk
