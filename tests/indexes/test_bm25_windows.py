"""BM25 ``maxscore`` searched a window of rows at a time (the heap and the bars carried from one
window to the next).

Facts checked: for windows from 64 rows (hundreds of windows) to one window, top-k rows and
scores are bit-identical to the dense accumulation, on plain indexes with rank directories and
impact heads and on packed ones (blocks decoded as reached), with masks, cut-offs, k from 1 to
past the seeding limit, 1 and 2 threads, and windows that are not multiples of 64; the window
reaches the kernels (a packed term's blocks at the window boundaries get decoded); bad windows
are refused by name."""

from __future__ import annotations

import numpy as np
import pytest

import fastrag.indexes.bm25.index as bm25_mod
from fastrag.errors import ConfigError
from fastrag.indexes.bm25.index import BM25Index

N_DOCS = 20_000
N_VOCAB = 4_000


@pytest.fixture(autouse=True)
def _kernels_now():
    """These tests exercise the numba path, never the NumPy one of a cold process."""
    from fastrag import _coldstart

    _coldstart.use_kernels()


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    lens = rng.integers(3, 60, N_DOCS)
    offsets = np.zeros(N_DOCS + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    values = ((rng.zipf(1.15, int(offsets[-1])) - 1) % N_VOCAB).astype(np.int32)
    queries = []
    for i, d in enumerate(rng.integers(0, N_DOCS, 300)):
        doc = values[offsets[d] : offsets[d + 1]]
        q = rng.choice(doc, min(len(doc), int(rng.integers(1, 7))), replace=True)
        if i % 3 == 0:  # common terms too: heads, rank directories, long scans
            q = np.append(q, rng.integers(0, 8, 2))
        queries.append(q.astype(np.int32))
    q_off = np.zeros(len(queries) + 1, np.int64)
    np.cumsum([len(q) for q in queries], out=q_off[1:])
    old = bm25_mod.RANK_MIN_DOCS
    bm25_mod.RANK_MIN_DOCS = 1_000
    try:
        index = BM25Index.build(values, offsets, N_VOCAB)
    finally:
        bm25_mod.RANK_MIN_DOCS = old
    index.build_rank_directories()
    assert index.head_nbytes > 0
    return index, np.concatenate(queries), q_off


def _packed(index: BM25Index) -> BM25Index:
    arrays = {k: np.array(v) for k, v in index.to_arrays(packed=True).items()}
    for v in arrays.values():
        v.flags.writeable = False  # as memory-mapped files are
    return BM25Index.from_arrays(arrays, index.meta(packed=True))


def assert_same(a, b):
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1].view(np.int32), b[1].view(np.int32))  # bit-identical
    np.testing.assert_array_equal(a[2], b[2])


@pytest.mark.parametrize("threads", [1, 2])
def test_windows_give_the_dense_results(data, threads):
    index, qv, qo = data
    packed = _packed(index)
    mask = np.random.default_rng(3).random(N_DOCS) < 0.7
    for k in (1, 10, 150):
        for kw in ({}, {"mask": mask}, {"cutoff": 2.0}, {"mask": mask, "cutoff": 1.0}):
            want = index.search_csr(qv, qo, k, strategy="dense", **kw)
            for window in (64, 777, 4096, N_DOCS, None):
                for ix in (index, packed):
                    got = ix.search_csr(
                        qv, qo, k, strategy="maxscore", window=window, num_threads=threads, **kw
                    )
                    assert_same(got, want)


def test_the_window_reaches_the_kernels(data):
    """Each window ends where a term's postings reach its last row: in a packed index the block
    holding that boundary is decoded, so a common term next to a rare one gets blocks decoded
    all along its list with small windows, and a few without."""
    index, _, _ = data
    df = np.diff(index.indptr)
    common = int(np.argmax(df))
    rare = int(np.flatnonzero(df > 0)[np.argmin(df[df > 0])])
    q = np.array([rare, common], np.int32)
    decoded = {}
    for window in (None, 256):
        packed = _packed(index)
        packed.search_csr(q, np.array([0, 2]), 10, strategy="maxscore", window=window)
        tb = packed._packed.arrays["term_block"]
        decoded[window] = int(packed._packed.ready[tb[common] : tb[common + 1]].sum())
    assert decoded[None] <= 2 * int(df[rare]) + 2  # the blocks of the rare term's rows
    assert decoded[256] >= N_DOCS // 256 // 2


@pytest.mark.parametrize("window", [0, -5, 2.5, True, "64"])
def test_bad_windows_are_refused(data, window):
    index, qv, qo = data
    with pytest.raises(ConfigError, match="window must be a positive number of rows"):
        index.search_csr(qv, qo, 10, window=window)
