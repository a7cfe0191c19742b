"""merge_hits: several top-k lists per query -> one top-k list (best score first, ties by row,
a repeated row keeps its best score), as Retriever (embed keys) and sharded indexes use it."""

from __future__ import annotations

import numpy as np
import pytest

from fastrag.retrieval.merge import merge_hits


def hits(rows, scores, counts=None):
    rows = np.array(rows, np.int64)
    scores = np.array(scores, np.float32)
    if counts is None:
        counts = (rows >= 0).sum(axis=1)
    return rows, scores, np.array(counts, np.int32)


def test_best_score_first_ties_by_row():
    a = hits([[4, 1, 7]], [[0.75, 0.5, 0.5]])
    b = hits([[3, 0, 9]], [[0.75, 0.5, 0.25]])
    rows, scores, counts = merge_hits([a, b], 5)
    assert rows.tolist() == [[3, 4, 0, 1, 7]]
    assert scores.tolist() == [[0.75, 0.75, 0.5, 0.5, 0.5]]
    assert counts.tolist() == [5]
    assert rows.dtype == np.int64 and scores.dtype == np.float32 and counts.dtype == np.int32


def test_repeated_row_keeps_its_best_score():
    a = hits([[2, 5, 8]], [[0.75, 0.5, 0.25]])
    b = hits([[8, 2, -1]], [[1.0, 0.125, 0.0]], [2])
    rows, scores, counts = merge_hits([a, b], 4)
    assert rows.tolist() == [[8, 2, 5, -1]]
    assert scores.tolist() == [[1.0, 0.75, 0.5, 0.0]]
    assert counts.tolist() == [3]


def test_top_k_cut_and_padding_per_query():
    a = hits([[0, 1, -1], [-1, -1, -1]], [[3.0, 2.0, 0.0], [0.0, 0.0, 0.0]], [2, 0])
    b = hits([[5, 6, 7], [6, -1, -1]], [[2.5, 2.0, 1.0], [4.0, 0.0, 0.0]], [3, 1])
    rows, scores, counts = merge_hits([a, b], 3)
    assert rows.tolist() == [[0, 5, 1], [6, -1, -1]]
    assert scores.tolist() == [[3.0, 2.5, 2.0], [4.0, 0.0, 0.0]]
    assert counts.tolist() == [3, 1]


def test_offsets_shift_each_list_to_global_rows():
    seg0 = hits([[1, 0]], [[2.0, 1.0]])
    seg1 = hits([[0, 1]], [[2.0, 1.5]])  # rows 10, 11 globally: the tie at 2.0 goes to row 1
    rows, scores, counts = merge_hits([seg0, seg1], 3, offsets=[0, 10])
    assert rows.tolist() == [[1, 10, 11]]
    assert scores.tolist() == [[2.0, 2.0, 1.5]]
    assert counts.tolist() == [3]


def test_entries_past_counts_are_ignored():
    a = hits([[0, 3]], [[1.0, 9.0]], [1])  # row 3 (score 9) lies past the count
    rows, scores, counts = merge_hits([a], 2)
    assert rows.tolist() == [[0, -1]]
    assert scores.tolist() == [[1.0, 0.0]]
    assert counts.tolist() == [1]


def test_empty_inputs():
    rows, scores, counts = merge_hits([], 3)
    assert rows.shape == (0, 3) and scores.shape == (0, 3) and counts.shape == (0,)
    none = hits(np.zeros((2, 0)), np.zeros((2, 0)), [0, 0])
    rows, scores, counts = merge_hits([none, none], 2)
    assert rows.tolist() == [[-1, -1], [-1, -1]]
    assert counts.tolist() == [0, 0]


def test_offsets_must_match_the_lists():
    with pytest.raises(ValueError, match="1 offsets for 2 lists"):
        merge_hits([hits([[0]], [[1.0]]), hits([[0]], [[1.0]])], 1, offsets=[0])


def test_bad_k_and_mismatched_batches_are_refused():
    from fastrag.errors import ConfigError

    with pytest.raises(ConfigError, match="k must be"):
        merge_hits([hits([[0]], [[1.0]])], 0)
    with pytest.raises(ValueError, match=r"different numbers of queries: \[1, 2\]"):
        merge_hits([hits([[0]], [[1.0]]), hits([[0], [1]], [[1.0], [0.5]])], 1)


def test_matches_a_plain_python_merge():
    rng = np.random.default_rng(7)
    for _ in range(50):
        n_q, k, n_lists = 3, int(rng.integers(1, 6)), int(rng.integers(1, 4))
        lists = []
        for _ in range(n_lists):
            rows = np.full((n_q, k), -1, np.int64)
            scores = np.zeros((n_q, k), np.float32)
            counts = rng.integers(0, k + 1, n_q)
            for q in range(n_q):
                rows[q, : counts[q]] = rng.choice(12, counts[q], replace=False)
                scores[q, : counts[q]] = rng.integers(0, 4, counts[q]) / 4
            lists.append((rows, scores, counts.astype(np.int32)))
        rows, scores, counts = merge_hits(lists, k)
        for q in range(n_q):
            best: dict[int, float] = {}
            for r, s, c in lists:
                for row, score in zip(r[q, : c[q]].tolist(), s[q, : c[q]].tolist(), strict=True):
                    best[row] = max(score, best.get(row, -np.inf))
            want = sorted(best.items(), key=lambda x: (-x[1], x[0]))[:k]
            assert counts[q] == len(want)
            assert rows[q, : counts[q]].tolist() == [r for r, _ in want]
            assert scores[q, : counts[q]].tolist() == [s for _, s in want]
