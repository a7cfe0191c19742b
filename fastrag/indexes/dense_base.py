"""What the dense indexes share: the :class:`DenseIndex` interface (as hnswlib's
``AlgorithmInterface``), argument checks, vector and query preparation, the result type.

Scores are "higher is better": ``dot`` is the inner product; ``cosine`` is the inner product of
vectors normalised once at insert (queries are normalised per call). A zero vector stays zero:
its cosine score with anything is 0 (the convention of faiss ``normalize_L2`` and sklearn).
Results are best first, ties broken by the lower row; missing hits are padded with row -1 and
score -inf, and ``counts[i]`` says how many hits query ``i`` has.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from fastrag._checks import check_int, readonly
from fastrag._kernels import dense as _dense
from fastrag.errors import ConfigError
from fastrag.indexes.base import Hits, check_cutoff, check_k

METRICS = ("cosine", "dot")
# Norm checks and normalisation of fewer elements than this (32 MiB) run on the calling thread:
# a parallel region costs more than it saves below that, and much more on a busy machine.
PARALLEL_MIN_ELEMENTS = 2**23
# |squared norm - 1| below this counts as already normalised (float32 rounding is ~1e-6).
NORM_TOLERANCE = 1e-4


class DenseIndex(abc.ABC):
    """A dense top-k index over float32 vectors of one ``dim`` and ``metric``.

    ``add`` appends vectors (checked, normalised for cosine); ``search`` returns
    ``(rows int64 (n_q, k), scores float32 (n_q, k), counts int32 (n_q,))`` for a batch of
    queries (or one ``(dim,)`` vector), best first, ties by the lower row, padded with row -1
    and score -inf. ``mask`` (bool, by row) keeps only the allowed rows, ``cutoff`` drops hits
    scoring below it, ``num_threads`` caps the threads used.
    """

    def __init__(self, dim: int, metric: str = "cosine") -> None:
        self.dim = check_dim(dim)
        self.metric = check_metric(metric)

    @property
    @abc.abstractmethod
    def n(self) -> int:
        """Number of searchable vectors."""

    def __len__(self) -> int:
        return self.n

    @abc.abstractmethod
    def add(self, vectors: Any) -> None:
        """Append ``vectors`` (n, dim)."""

    @abc.abstractmethod
    def search(
        self,
        queries: Any,
        k: int,
        *,
        mask: Any = None,
        cutoff: float | None = None,
        num_threads: int | None = None,
    ) -> Hits:
        """Top-``k`` rows for each query."""

    def check_vectors(self, vectors: Any) -> np.ndarray:
        """``vectors`` as ``(n, dim)`` float32, finite, normalised for cosine (for ``add``)."""
        return prepare_vectors(as_matrix(vectors, self.dim), self.metric)

    def check_search(self, queries: Any, k: Any, cutoff: Any) -> tuple[np.ndarray, int, float]:
        """The checked arguments of a search: prepared queries, ``k`` and the cutoff."""
        k = check_k(k)
        q = prepare_queries(queries, self.dim, self.metric)
        return q, k, check_cutoff(cutoff)


# ------------------------------------------------------------------------------- arguments
def check_metric(metric: Any) -> str:
    """``metric`` if it is one of :data:`METRICS`."""
    if metric not in METRICS:
        raise ConfigError(f"unknown metric {metric!r}; use one of {list(METRICS)}")
    return metric


def check_dim(dim: Any) -> int:
    """``dim``, the embedding size, as an int >= 1."""
    return check_int("dim", dim, min=1, note="the embedding size")


# ------------------------------------------------------------------------ vectors, queries
def as_matrix(vectors: Any, dim: int | None, what: str = "vectors") -> np.ndarray:
    """A 2-D float32 C-contiguous view (no copy when possible) of ndarray or Arrow vectors.

    Arrow ``fixed_size_list<float32>`` arrays (also chunked, also sliced) become zero-copy,
    read-only numpy views when they have one chunk and no nulls.
    """
    if not isinstance(vectors, np.ndarray):
        vectors = _arrow_to_numpy(vectors, what)
    if vectors.ndim != 2:
        raise ConfigError(
            f"{what} must be a 2-D array (n, dim), got shape {vectors.shape}; "
            "reshape a single vector with v[None, :]"
        )
    if dim is not None and vectors.shape[1] != dim:
        raise ConfigError(
            f"{what} have dim {vectors.shape[1]} but the index has dim {dim}; "
            "use the same embedding model for the corpus and the queries"
        )
    if vectors.dtype.kind not in "fiu":
        raise ConfigError(f"{what} must be numeric (float32), got dtype {vectors.dtype}")
    return np.ascontiguousarray(vectors, dtype=np.float32)


def _arrow_to_numpy(vectors: Any, what: str) -> np.ndarray:
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - pyarrow is a core dependency
        pa = None
    if pa is not None and isinstance(vectors, (pa.Array, pa.ChunkedArray)):
        if isinstance(vectors, pa.ChunkedArray):
            vectors = vectors.combine_chunks() if vectors.num_chunks != 1 else vectors.chunk(0)
        if not pa.types.is_fixed_size_list(vectors.type):
            raise ConfigError(
                f"{what} must be a fixed_size_list<float32> Arrow array, got {vectors.type}"
            )
        if vectors.null_count:
            raise ConfigError(f"{what} contain {vectors.null_count} null vectors; embed them first")
        width = vectors.type.list_size
        flat = vectors.values.slice(vectors.offset * width, len(vectors) * width)
        return flat.to_numpy(zero_copy_only=False).reshape(len(vectors), width)
    try:
        return np.asarray(vectors)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what} must be an array of shape (n, dim): {exc}") from exc


def check_finite(sq_norms: np.ndarray, what: str) -> None:
    """A ConfigError naming the first row whose squared norm is NaN or inf."""
    bad = np.flatnonzero(~np.isfinite(sq_norms))
    if bad.size:
        raise ConfigError(
            f"{what} row {int(bad[0])} contains NaN or inf ({bad.size} bad rows in all); "
            "embeddings must be finite: check the embedder's output for those rows"
        )


def prepare_vectors(
    vectors: np.ndarray, metric: str, what: str = "vectors", copy: bool = False
) -> np.ndarray:
    """Check finiteness and, for cosine, normalise (no copy when already normalised)."""
    small = vectors.size < PARALLEL_MIN_ELEMENTS
    source = readonly(vectors)
    sq = np.empty(vectors.shape[0], np.float64)
    if vectors.shape[0]:
        (_dense.row_sq_norms_serial if small else _dense.row_sq_norms)(source, sq)
    check_finite(sq, what)
    if metric == "cosine" and not np.all((np.abs(sq - 1.0) <= NORM_TOLERANCE) | (sq == 0.0)):
        out = np.empty(vectors.shape, np.float32)
        (_dense.normalize_rows_serial if small else _dense.normalize_rows)(source, sq, out)
        return out
    return vectors.copy() if copy else vectors


def prepare_queries(queries: Any, dim: int, metric: str) -> np.ndarray:
    """Queries as (n_q, dim) float32, finite, normalised for cosine; a 1-D query is one row."""
    if not isinstance(queries, np.ndarray):
        queries = _arrow_to_numpy(queries, "queries")
    if queries.ndim == 1:
        queries = queries[None, :]
    q = as_matrix(queries, dim, "queries")
    out = np.empty(q.shape, np.float32)
    bad = _dense.prepare_queries(readonly(q), metric == "cosine", out)
    if bad >= 0:
        sq = np.zeros(q.shape[0])
        sq[bad] = np.nan
        check_finite(sq, "queries")  # raises, naming the row
    return out


# ---------------------------------------------------------------------------------- results
def padded_result(n_q: int, k: int) -> Hits:
    """The result of ``n_q`` queries without hits: rows -1, scores -inf, counts 0."""
    return (
        np.full((n_q, k), -1, np.int64),
        np.full((n_q, k), -np.inf, np.float32),
        np.zeros(n_q, np.int32),
    )


def rows_of(hit: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions ``hit`` into ``rows`` (-1 for none) as the rows themselves (-1 stays -1): the
    result rows of a search over a subset of the rows."""
    return np.where(hit >= 0, rows[np.maximum(hit, 0)], -1)
