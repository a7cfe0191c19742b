"""Which code runs BM25: the numba kernels (:data:`KERNELS`) or their NumPy twins
(:data:`NUMPY`, while the kernels compile in the background, :mod:`fastrag._coldstart`).

Both are a :class:`Backend` (``KERNELS`` made on first use, so that a process on the NumPy
path imports no numba) with the same functions, signatures and results (bit for bit,
``tests/test_coldstart.py``); :func:`backend` makes the choice, once per call of a build,
a search or a scoring, so no other code asks which one runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from fastrag._coldstart import kernels_for
from fastrag._lazy import kernels
from fastrag.indexes.bm25 import numpy_path

__all__ = ["KERNELS", "NUMPY", "Backend", "backend"]

# imported with the first kernel call: the NumPy path alone loads no numba
bm25_build = kernels("bm25.build")
bm25_search = kernels("bm25.search")


class Backend(NamedTuple):
    """The BM25 functions of one implementation (the kernels' signatures)."""

    name: str
    #: ``(values, offsets, n_vocab) -> (df, bad, (indptr, indices, tf))``: document
    #: frequencies and term-major postings; ``bad`` is the position of the first token id
    #: outside the vocabulary (-1: none; the postings are then empty)
    postings: Callable
    #: ``(values, offsets, n_vocab) -> (df, bad)``: the document frequencies alone
    document_frequencies: Callable
    #: ``(indptr, indices, tf, offsets, idf, base_weights, method, k1, b, delta, avgdl)``:
    #: ``tf`` becomes BM25 weights in place; returns ``term_max``
    weigh_postings: Callable
    #: ``(ix, heads, queries, k, flt, strategy, scratch, out) -> code``: one query after another
    search_batch_serial: Callable
    #: ``(indptr, indices, data, base_weights, q_terms, out)``: dense scores of one query
    score_dense: Callable


def _kernel_postings(
    values: np.ndarray, offsets: np.ndarray, n_vocab: int
) -> tuple[np.ndarray, int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    df, bad = bm25_build.count_document_frequencies(values, offsets, n_vocab)
    if bad != -1:
        empty = (np.zeros(n_vocab + 1, np.int64), np.empty(0, np.int32), np.empty(0, np.float32))
        return df, int(bad), empty
    return df, -1, bm25_build.build_postings(values, offsets, n_vocab, df)


def _numpy_document_frequencies(
    values: np.ndarray, offsets: np.ndarray, n_vocab: int
) -> tuple[np.ndarray, int]:
    df, bad, _ = numpy_path.postings(values, offsets, n_vocab)
    return df, bad


@functools.cache
def _kernels() -> Backend:
    return Backend(
        "numba",
        _kernel_postings,
        bm25_build.count_document_frequencies,
        bm25_build.weigh_postings,
        bm25_search.search_batch_serial,
        bm25_search.score_dense,
    )


KERNELS: Backend  # the kernels' Backend: made by __getattr__ on first read


def __getattr__(name: str) -> Any:
    if name == "KERNELS":  # made on first use: it holds the kernels themselves
        return _kernels()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


NUMPY = Backend(
    "numpy",
    numpy_path.postings,
    _numpy_document_frequencies,
    numpy_path.weigh_postings,
    numpy_path.search_batch_serial,
    numpy_path.score_dense,
)


def backend(estimate: Callable[[], float] | None = None) -> Backend:
    """:data:`KERNELS` or :data:`NUMPY`, as :func:`fastrag._coldstart.kernels_for` chooses;
    ``estimate``: the work's seconds on NumPy (small work stays on NumPy before numba has
    started; a batch slower on NumPy than the background compile has left waits for it)."""
    return _kernels() if kernels_for(estimate) else NUMPY
