"""FlatIndex (exact dense top-k) against the brute-force reference in tests/reference.py."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from reference import dense_topk_reference

from fastrag.errors import ConfigError
from fastrag.indexes import exact as dense_exact
from fastrag.indexes.flat import FlatIndex


def int_vectors(rng, n, dim, lo=-3, hi=4):
    """Small integers: every dot product is exact in float32, and ties are plentiful."""
    return rng.integers(lo, hi, (n, dim)).astype(np.float32)


def half_vectors(rng, n, dim, zeros=()):
    """Rows with four entries of +-0.5 (unit norm, exact in float32); cosine scores are exact
    multiples of 0.25, so ties abound. Rows in ``zeros`` are zero vectors."""
    x = np.zeros((n, dim), np.float32)
    for i in range(n):
        cols = rng.choice(dim, 4, replace=False)
        x[i, cols] = rng.choice([-0.5, 0.5], 4)
    x[list(zeros)] = 0.0
    return x


def assert_exact(got, ref):
    rows, scores, counts = got
    r_rows, r_scores, r_counts = ref
    np.testing.assert_array_equal(rows, r_rows)
    np.testing.assert_array_equal(scores, r_scores.astype(np.float32))
    np.testing.assert_array_equal(counts, r_counts)
    assert rows.dtype == np.int64 and scores.dtype == np.float32 and counts.dtype == np.int32


@pytest.fixture
def small_blocks(monkeypatch):
    """Tiny blocks so a few hundred rows span many chunks, query blocks and super-batches,
    and no size threshold keeps a 2-thread search on one thread."""
    monkeypatch.setattr(dense_exact, "FUSED_PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(dense_exact, "BLOCKED_PARALLEL_MIN_MACS", 0)
    monkeypatch.setattr(dense_exact, "CORPUS_CHUNK", 64)
    monkeypatch.setattr(dense_exact, "QUERY_BLOCK", 16)
    monkeypatch.setattr(dense_exact, "QUERY_SUPER_BATCH", 40)


@pytest.mark.parametrize("n_q", [1, 2, 5, 37])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fused_max", [0, 64])  # force the sgemm path, then the fused one
def test_dot_matches_reference_with_ties(n_q, threads, fused_max, small_blocks, monkeypatch):
    monkeypatch.setattr(dense_exact, "FUSED_MAX_QUERIES", fused_max)
    rng = np.random.default_rng(n_q)
    x = int_vectors(rng, 1500, 12)
    q = int_vectors(rng, n_q, 12)
    index = FlatIndex.from_vectors(x, "dot")
    assert_exact(index.search(q, 10, num_threads=threads), dense_topk_reference(x, q, 10, "dot"))


@pytest.mark.parametrize("n_q", [1, 3, 50])
def test_cosine_matches_reference_with_ties_and_zero_vectors(n_q, small_blocks):
    rng = np.random.default_rng(7)
    x = half_vectors(rng, 800, 10, zeros=(0, 5, 400))
    q = half_vectors(rng, n_q, 10)
    index = FlatIndex(10, "cosine")
    index.add(x * 3.0)  # normalised at insert back to the +-0.5 rows
    assert_exact(index.search(q * 2.0, 25), dense_topk_reference(x, q, 25, "cosine"))


def test_cosine_random_vectors_default_blocks():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3000, 48)).astype(np.float32)
    q = rng.standard_normal((20, 48)).astype(np.float32)
    index = FlatIndex.from_vectors(x, "cosine")
    rows, scores, counts = index.search(q, 10)
    r_rows, r_scores, _ = dense_topk_reference(x, q, 10, "cosine")
    np.testing.assert_allclose(scores, r_scores, rtol=0, atol=2e-6)
    np.testing.assert_array_equal(rows, r_rows)  # random scores: no near-ties at this size
    assert (counts == 10).all()
    one_rows, _, _ = index.search(q[3], 10)  # a 1-D query is a batch of one
    np.testing.assert_array_equal(one_rows[0], r_rows[3])


@pytest.mark.parametrize("fraction", [0.03, 0.5])
@pytest.mark.parametrize("n_q", [1, 30])  # fused (mask checked per row) / sgemm (gathered)
def test_mask_selective_and_broad(fraction, n_q, small_blocks):
    rng = np.random.default_rng(3)
    x = int_vectors(rng, 1200, 8)
    q = int_vectors(rng, n_q, 8)
    mask = rng.random(1200) < fraction
    index = FlatIndex.from_vectors(x, "dot")
    assert_exact(
        index.search(q, 15, mask=mask, num_threads=2),
        dense_topk_reference(x, q, 15, "dot", mask=mask),
    )


def test_mask_allowing_fewer_rows_than_k_pads():
    x = int_vectors(np.random.default_rng(4), 100, 6)
    mask = np.zeros(100, bool)
    mask[[7, 60, 99]] = True
    rows, scores, counts = FlatIndex.from_vectors(x, "dot").search(x[:9], 5, mask=mask)
    assert (counts == 3).all()
    assert set(rows[:, :3].ravel()) <= {7, 60, 99}
    assert (rows[:, 3:] == -1).all() and np.isneginf(scores[:, 3:]).all()
    none = FlatIndex.from_vectors(x, "dot").search(x[:2], 5, mask=np.zeros(100, bool))
    assert (none[0] == -1).all() and (none[2] == 0).all()


@pytest.mark.parametrize("n_q", [1, 12])
def test_cutoff_keeps_scores_at_or_above(n_q, small_blocks):
    rng = np.random.default_rng(5)
    x = half_vectors(rng, 500, 8)
    q = half_vectors(rng, n_q, 8)
    got = FlatIndex.from_vectors(x, "cosine").search(q, 20, cutoff=0.5)
    assert_exact(got, dense_topk_reference(x, q, 20, "cosine", cutoff=0.5))
    assert (got[1][got[0] >= 0] >= 0.5).all()


def test_k_larger_than_n():
    x = int_vectors(np.random.default_rng(6), 5, 4)
    rows, scores, counts = FlatIndex.from_vectors(x, "dot").search(x, 8)
    assert_exact((rows, scores, counts), dense_topk_reference(x, x, 8, "dot"))
    assert (counts == 5).all() and (rows[:, 5:] == -1).all()


def test_zero_query_scores_zero_in_row_order():
    x = half_vectors(np.random.default_rng(8), 50, 6)
    rows, scores, _ = FlatIndex.from_vectors(x, "cosine").search(np.zeros(6), 4)
    np.testing.assert_array_equal(rows, [[0, 1, 2, 3]])
    np.testing.assert_array_equal(scores, [[0, 0, 0, 0]])


def test_empty_index_returns_padding():
    rows, scores, counts = FlatIndex(4).search(np.ones((2, 4)), 3)
    assert (rows == -1).all() and np.isneginf(scores).all() and (counts == 0).all()


def test_incremental_add_equals_one_shot(small_blocks):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((700, 16)).astype(np.float32)
    q = rng.standard_normal((9, 16)).astype(np.float32)
    index = FlatIndex(16)
    for part in np.array_split(x, [1, 300, 301]):
        index.add(part)
    assert index.n == 700 and len(index) == 700
    one = FlatIndex.from_vectors(x)
    for a, b in zip(index.search(q, 7), one.search(q, 7), strict=False):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(index.vectors, axis=1), 1.0, atol=1e-6)


def test_from_vectors_does_not_copy_when_it_need_not():
    rng = np.random.default_rng(10)
    raw = rng.standard_normal((200, 8)).astype(np.float32)
    unit = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    unit.flags.writeable = False  # like a view of Arrow memory
    assert np.shares_memory(FlatIndex.from_vectors(unit, "cosine").vectors, unit)
    assert np.shares_memory(FlatIndex.from_vectors(raw, "dot").vectors, raw)
    assert np.shares_memory(FlatIndex.from_vectors(raw, "cosine", normalized=True).vectors, raw)
    normalised = FlatIndex.from_vectors(raw, "cosine")
    assert not np.shares_memory(normalised.vectors, raw)
    np.testing.assert_allclose(normalised.vectors, unit, atol=1e-6)
    normalised.add(raw[:3])  # a borrowed buffer is copied before it grows
    assert normalised.n == 203


def test_read_only_inputs_and_arrow_vectors():
    rng = np.random.default_rng(11)
    x = int_vectors(rng, 300, 6)
    arr = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 6)
    sliced = arr.slice(100, 150)
    index = FlatIndex.from_vectors(pa.chunked_array([sliced]), "dot")
    assert index.n == 150 and not index.vectors.flags.writeable
    np.testing.assert_array_equal(index.vectors, x[100:250])
    q = x[:6].copy()
    q.flags.writeable = False
    mask = np.ones(150, bool)
    mask[::3] = False
    mask.flags.writeable = False
    assert_exact(
        index.search(q, 4, mask=mask), dense_topk_reference(x[100:250], q, 4, "dot", mask=mask)
    )


def test_threads_give_identical_results():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((5000, 24)).astype(np.float32)
    q = rng.standard_normal((64, 24)).astype(np.float32)
    index = FlatIndex.from_vectors(x)
    for a, b in zip(
        index.search(q, 10, num_threads=1), index.search(q, 10, num_threads=2), strict=True
    ):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------- bad input
def test_nan_and_inf_rejected_with_the_row():
    x = np.ones((6, 3), np.float32)
    x[4, 1] = np.nan
    with pytest.raises(ConfigError, match=r"vectors row 4 contains NaN or inf"):
        FlatIndex.from_vectors(x)
    index = FlatIndex(3)
    x[4, 1] = np.inf
    with pytest.raises(ConfigError, match=r"row 4 contains NaN or inf \(1 bad rows"):
        index.add(x)
    assert index.n == 0  # nothing half-added
    with pytest.raises(ConfigError, match=r"queries row 0 contains NaN"):
        FlatIndex.from_vectors(np.ones((2, 3))).search([np.nan, 1, 1], 1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dim": 0}, r"dim must be an int >= 1 \(the embedding size\), got 0"),
        ({"dim": 4, "metric": "l2"}, r"unknown metric 'l2'; use one of \['cosine', 'dot'\]"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        FlatIndex(**kwargs)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda ix: ix.search(np.ones(4), 0), r"k must be an int >= 1 \(the number of hits.*got 0"),
        (lambda ix: ix.search(np.ones(4), True), r"k must be an int >= 1 .*got bool True"),
        (lambda ix: ix.search(np.ones(5), 1), r"queries have dim 5 but the index has dim 4"),
        (lambda ix: ix.search(np.ones((1, 1, 4)), 1), r"queries must be a 2-D array"),
        (lambda ix: ix.search(np.array([["a"] * 4]), 1), r"queries must be numeric"),
        (
            lambda ix: ix.search(np.ones(4), 1, mask=np.ones(3, bool)),
            r"mask has 3 entries but the index has 10 rows",
        ),
        (lambda ix: ix.search(np.ones(4), 1, mask=np.ones(10)), r"mask must be a 1-D boolean"),
        (lambda ix: ix.search(np.ones(4), 1, cutoff=float("nan")), r"cutoff=nan is not a thresh"),
        (lambda ix: ix.search(np.ones(4), 1, cutoff="0.5"), r"cutoff='0.5' must be a number"),
        (
            lambda ix: ix.search(np.ones(4), 1, num_threads=0),
            r"num_threads must be None \(numba's current setting\) or an int >= 1, got 0",
        ),
        (lambda ix: ix.add(np.ones((2, 3))), r"vectors have dim 3 but the index has dim 4"),
        (lambda ix: ix.add(pa.array([[1.0] * 4])), r"must be a fixed_size_list<float32>"),
    ],
)
def test_bad_search_and_add_arguments(call, match):
    index = FlatIndex.from_vectors(np.ones((10, 4), np.float32))
    with pytest.raises(ConfigError, match=match):
        call(index)
