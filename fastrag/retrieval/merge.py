"""Top-k merging: several top-k lists of one batch of queries into one top-k list per query.

A list is the ``(rows, scores, counts)`` triple every search path returns: ``rows [n_q, w]``
int64 (-1 padded), ``scores [n_q, w]`` and ``counts [n_q]`` (the valid hits at the front of
each row). :class:`~fastrag.Retriever` merges the lists of several embed keys of one group;
a sharded index merges its segments' lists (each segment's rows shifted by its offset).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fastrag._checks import check_int
from fastrag.indexes.base import Hits

__all__ = ["merge_hits"]


_NO_ROW = np.iinfo(np.int64).max  # sorts after every real row


def merge_hits(results: Sequence[Hits], k: int, *, offsets: Sequence[int] | None = None) -> Hits:
    """One top-``k`` list per query from several ``(rows, scores, counts)`` lists.

    ``offsets``: added to each list's rows (a segment's first global row), default 0. A row
    found in several lists keeps its best score. Returns ``(rows [n_q, k], scores [n_q, k],
    counts [n_q])``: best score first, equal scores by row (lowest first); after ``counts``
    rows are -1 and scores 0. Scores are compared as given and returned as float32.

    >>> rows, scores, counts = merge_hits(
    ...     [(np.array([[0, 2]]), np.array([[0.75, 0.25]]), np.array([2])),
    ...      (np.array([[1, 2]]), np.array([[0.5, 0.5]]), np.array([2]))],
    ...     k=4,
    ... )
    >>> rows.tolist(), scores.tolist(), counts.tolist()
    ([[0, 1, 2, -1]], [[0.75, 0.5, 0.5, 0.0]], [3])
    """
    k = check_int("k", k, min=1, note="the hits to keep per query")
    if offsets is None:
        offsets = [0] * len(results)
    if len(offsets) != len(results):
        raise ValueError(f"{len(offsets)} offsets for {len(results)} lists of hits")
    n_q = int(np.shape(results[0][0])[0]) if results else 0
    sizes = [int(np.shape(r[0])[0]) for r in results]
    if any(n != n_q for n in sizes):
        raise ValueError(
            f"lists of hits for different numbers of queries: {sizes}; merge one batch"
        )
    cand_rows = [np.full((n_q, 0), _NO_ROW, np.int64)]
    cand_scores = [np.full((n_q, 0), -np.inf)]
    for (rows, scores, counts), off in zip(results, offsets, strict=True):
        rows = np.asarray(rows, np.int64)
        valid = np.arange(rows.shape[1])[None, :] < np.asarray(counts)[:, None]
        cand_rows.append(np.where(valid, rows + int(off), _NO_ROW))
        cand_scores.append(np.where(valid, np.asarray(scores, np.float64), -np.inf))
    rows = np.concatenate(cand_rows, axis=1)
    scores = np.concatenate(cand_scores, axis=1)
    if len(results) > 1 and _repeats(rows):  # a row in several lists: keep its best score
        order = np.lexsort((-scores, rows), axis=1)
        rows = np.take_along_axis(rows, order, axis=1)
        scores = np.take_along_axis(scores, order, axis=1)
        again = np.zeros(rows.shape, dtype=bool)
        again[:, 1:] = rows[:, 1:] == rows[:, :-1]
        rows[again] = _NO_ROW
        scores[again] = -np.inf
    order = np.lexsort((rows, -scores), axis=1)[:, :k]
    top_rows = np.full((n_q, k), -1, np.int64)
    top_scores = np.zeros((n_q, k), np.float32)
    counts = np.minimum(np.sum(rows != _NO_ROW, axis=1), k).astype(np.int32)
    keep = np.arange(order.shape[1])[None, :] < counts[:, None]
    width = order.shape[1]
    top_rows[:, :width] = np.where(keep, np.take_along_axis(rows, order, axis=1), -1)
    top_scores[:, :width] = np.where(keep, np.take_along_axis(scores, order, axis=1), 0.0)
    return top_rows, top_scores, counts


def _repeats(rows: np.ndarray) -> bool:
    """Whether a query's candidate rows name one row twice."""
    srt = np.sort(rows, axis=1)
    return bool(np.any((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] != _NO_ROW)))
