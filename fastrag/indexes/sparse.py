"""Sparse vectors: ``SparseIndex`` (exact top-k dot product) and their Arrow column.

A sparse vector is a ``{token: weight}`` dict, as bge-m3's ``lexical_weights`` (after
``convert_id_to_token``, or with the token ids as str keys), SPLADE and LazyLLM's sparse
embedders return. The score of a document for a query is the dot product over shared tokens.

:meth:`SparseIndex.from_dicts` maps tokens to dims (``vocab``: first-occurrence order, after
an optional given prefix), builds a doc-major CSR and turns it into dim-major postings with
the numba kernel ``fastrag._kernels.sparse.build_postings``; :meth:`SparseIndex.search`
encodes the query dicts over the same vocab (unknown tokens are dropped: they match no
document) and runs the exact search kernel (serial below ``PARALLEL_MIN_QUERIES`` queries,
``prange`` over blocks of queries above).

Results follow the other indexes: ``(rows, scores, counts)``, ``rows`` int64 ``[n_q, k]`` best
first, ties broken by the lower row, padded with -1; ``scores`` float32 padded with ``-inf``;
``counts`` int32. A hit is a document with a nonzero score (it shares a token with the query
and the products do not cancel), allowed by ``mask``, with ``score >= cutoff``. Scores are the
float32 rounding of a float64 sum taken in the query's token order, so they are reproducible to
the bit (see the kernel module's docstring).

Weights may be any finite number representable in float32 (bge-m3's are >= 0; negative
weights are allowed). :func:`sparse_column` stores a list of dicts as an Arrow
``map<string, float32>`` column (the form a group's table keeps them in) and
:func:`dicts_from_column` reads it back; :meth:`SparseIndex.from_column` builds an index from
such a column without the round trip through dicts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from fastrag._blas import numba_threads
from fastrag._checks import check_int, check_number, check_str, check_str_list, readonly
from fastrag._lazy import kernels
from fastrag.errors import ConfigError, StoreError
from fastrag.indexes.base import Hits, check_cutoff, check_k, check_mask, check_num_threads

sparse_kernels = kernels("sparse")  # on first use: importing this module loads no numba
FORMAT = "fastrag.sparse/1"

_INT32_MAX = 2**31 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)
# Weight types taken without a per-value check (exact types; anything else is checked one by
# one, so a subclass of float or a Fraction still works).
_FAST_WEIGHT_TYPES = frozenset(
    {
        float,
        int,
        np.float16,
        np.float32,
        np.float64,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
    }
)
_WEIGHT_NOTE = "the token's weight"
_WEIGHT_FIX = "check the embedder's sparse output for that text"


def sparse_type():
    """The Arrow type of a sparse-vector column: ``map<string, float32>``."""
    import pyarrow as pa

    return pa.map_(pa.string(), pa.float32())


# ----------------------------------------------------------------------------- validation
def _as_list(dicts: Any, what: str, single: bool) -> list:
    """``dicts`` as a list; one Mapping is a batch of one when ``single``."""
    if isinstance(dicts, Mapping):
        if single:
            return [dicts]
        raise ConfigError(
            f"{what} must be a list of dicts {{token: weight}}, got one dict; "
            "wrap a single sparse vector in a list: [vector]"
        )
    if isinstance(dicts, (str, bytes)) or not isinstance(dicts, Iterable):
        raise ConfigError(
            f"{what} must be a list of dicts {{token: weight}}, got {type(dicts).__name__}"
        )
    return list(dicts)


def _check_weight(what: str, i: int, token: str, value: Any) -> None:
    try:
        check_number(f"{what}[{i}][{token!r}]", value, note=_WEIGHT_NOTE, fix=_WEIGHT_FIX)
    except OverflowError:  # an int beyond float64: the float32 range check words it
        pass


def _flatten(
    dicts: Any, what: str, single: bool = False
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Check a list of ``{token: weight}`` dicts; return ``(tokens, weights float32, offsets
    int64)`` (dict ``i`` is ``tokens[offsets[i]:offsets[i+1]]``)."""
    items = _as_list(dicts, what, single)
    tokens: list[str] = []
    values: list[Any] = []
    offsets = np.zeros(len(items) + 1, np.int64)
    for i, d in enumerate(items):
        if not isinstance(d, Mapping):
            shown = repr(d)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise ConfigError(
                f"{what}[{i}] must be a dict {{token: weight}}, got "
                f"{type(d).__name__} {shown}; use {{}} for a text without tokens"
            )
        keys = list(d)
        vals = list(d.values())
        if not set(map(type, keys)) <= {str}:
            for key in keys:
                check_str(
                    f"{what}[{i}] key",
                    key,
                    empty=True,
                    fix="sparse vectors map str tokens to weights: convert token ids with str(id)",
                )
        if not set(map(type, vals)) <= _FAST_WEIGHT_TYPES:
            for key, value in zip(keys, vals, strict=True):
                _check_weight(what, i, key, value)
        tokens.extend(keys)
        values.extend(vals)
        offsets[i + 1] = len(tokens)
    try:
        wide = np.array(values, dtype=np.float64)
    except OverflowError:  # a Python int beyond float64: name it
        wide = np.array([v if abs(v) < 2**1024 else math.inf for v in values], np.float64)
    with np.errstate(over="ignore"):  # checked below
        weights = wide.astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(weights))
    if bad.size:
        j = int(bad[0])
        i = int(np.searchsorted(offsets, j, side="right") - 1)
        _check_weight(what, i, tokens[j], values[j])  # NaN, inf: raises
        raise ConfigError(
            f"{what}[{i}][{tokens[j]!r}] must be a finite number within float32 range "
            f"(|weight| <= {_FLOAT32_MAX:.4g}) ({_WEIGHT_NOTE}), got {values[j]!r}; "
            f"{_WEIGHT_FIX}"
        )
    return tokens, weights, offsets


def _check_vocab(vocab: Any) -> dict[str, int]:
    if vocab is None:
        return {}
    tokens = check_str_list("vocab", vocab)
    ids = {t: i for i, t in enumerate(tokens)}
    if len(ids) != len(tokens):
        seen: set[str] = set()
        dup = next(t for t in tokens if t in seen or seen.add(t))
        raise ConfigError(
            f"vocab must list each token once, got {dup!r} twice; vocab[i] is the token of dim i"
        )
    return ids


def _flat_column(
    column: Any, what: str = "column"
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """``(tokens, weights float32, offsets int64, valid bool)`` of a ``map<string, float>``
    Arrow array or chunked array (offsets rebased to 0; null rows have no entries)."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if not isinstance(column, pa.MapArray):
        got = column.type if isinstance(column, pa.Array) else type(column).__name__
        raise ConfigError(
            f"{what} must be an Arrow map<string, float32> array (made by sparse_column), got {got}"
        )
    if not (
        pa.types.is_string(column.type.key_type) or pa.types.is_large_string(column.type.key_type)
    ):
        raise ConfigError(f"{what} must have str keys (map<string, float32>), got {column.type}")
    if not (
        pa.types.is_floating(column.type.item_type) or pa.types.is_integer(column.type.item_type)
    ):
        raise ConfigError(
            f"{what} must have numeric weights (map<string, float32>), got {column.type}"
        )
    raw = column.offsets.to_numpy().astype(np.int64)
    valid = (
        np.ones(len(column), bool)
        if column.null_count == 0
        else column.is_valid().to_numpy(zero_copy_only=False)
    )
    lengths = np.diff(raw) * valid  # a null row's range may be non-empty: skip it
    offsets = np.zeros(len(column) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    keys = column.keys.slice(int(raw[0]), int(raw[-1] - raw[0]))
    items = column.items.slice(int(raw[0]), int(raw[-1] - raw[0]))
    if not valid.all():
        take = np.repeat(valid, np.diff(raw))
        keys = keys.filter(pa.array(take))
        items = items.filter(pa.array(take))
    if items.null_count:
        raise ConfigError(f"{what} has {items.null_count} null weights; every token needs a weight")
    wide = items.to_numpy(zero_copy_only=False).astype(np.float64)
    with np.errstate(over="ignore"):  # checked below
        weights = wide.astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(weights))
    tokens = keys.to_pylist()
    if bad.size:
        j = int(bad[0])
        i = int(np.searchsorted(offsets, j, side="right") - 1)
        raise ConfigError(
            f"{what}[{i}][{tokens[j]!r}] must be a finite number within float32 "
            f"range ({_WEIGHT_NOTE}), got {wide[j]!r}; {_WEIGHT_FIX}"
        )
    return tokens, weights, offsets, valid


# ----------------------------------------------------------------------------- Arrow column
def sparse_column(dicts: Iterable[Mapping[str, float]]):
    """A ``pyarrow.MapArray`` of type ``map<string, float32>`` holding ``dicts`` (one map per
    dict, keys in the dict's order). Weights are stored as float32: a dict whose weights are
    float32 numbers comes back equal (:func:`dicts_from_column`), keys in the same order."""
    import pyarrow as pa

    tokens, weights, offsets = _flatten(dicts, "dicts")
    if offsets[-1] > _INT32_MAX:
        raise ConfigError(
            f"dicts hold {int(offsets[-1])} tokens in all, over the {_INT32_MAX} "
            "of one Arrow map array; store them in several chunks"
        )
    return pa.MapArray.from_arrays(
        pa.array(offsets.astype(np.int32), pa.int32()),
        pa.array(tokens, pa.string()),
        pa.array(weights, pa.float32()),
    )


def dicts_from_column(column: Any) -> list[dict[str, float] | None]:
    """The dicts of a ``map<string, float32>`` Arrow array or chunked array (Python floats;
    ``None`` for a null row). A key repeated within one map keeps its last weight."""
    tokens, weights, offsets, valid = _flat_column(column)
    values = weights.tolist()
    bounds = offsets.tolist()
    return [
        dict(zip(tokens[a:b], values[a:b], strict=True)) if ok else None
        for a, b, ok in zip(bounds[:-1], bounds[1:], valid.tolist(), strict=True)
    ]


# ----------------------------------------------------------------------------- the index
class SparseIndex:
    """Exact top-k dot-product search over sparse vectors (see the module docstring).

    Build with :meth:`from_dicts`, :meth:`from_column` or :meth:`from_csr`; restore with
    :meth:`from_arrays`. Postings: dim ``t`` lists its documents ``indices[indptr[t]:
    indptr[t+1]]`` (int32, ascending) with weights ``data[...]`` (float32).
    """

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        data: np.ndarray,
        vocab: list[str],
        n_docs: int,
    ) -> None:
        self.indptr = readonly(indptr)
        self.indices = readonly(indices)
        self.data = readonly(data)
        self.vocab = vocab
        self.n_docs = int(n_docs)
        self._ids: dict[str, int] | None = None
        self._no_mask = readonly(np.zeros(0, np.bool_))

    # ---------------------------------------------------------------------------- build
    @classmethod
    def from_dicts(
        cls, dicts: Iterable[Mapping[str, float]], vocab: Sequence[str] | None = None
    ) -> SparseIndex:
        """An index over one ``{token: weight}`` dict per document (row ``i`` is
        ``dicts[i]``; ``{}`` for a document without tokens). ``vocab`` (token of dim ``i`` at
        position ``i``) fixes the first dims, e.g. to keep dims stable across rebuilds; tokens
        not in it get new dims in first-occurrence order (:attr:`vocab` lists them all)."""
        ids = _check_vocab(vocab)
        tokens, weights, offsets = _flatten(dicts, "dicts")
        return cls._build(tokens, weights, offsets, ids)

    @classmethod
    def from_column(cls, column: Any, vocab: Sequence[str] | None = None) -> SparseIndex:
        """:meth:`from_dicts` of a ``map<string, float32>`` Arrow column (:func:`sparse_column`),
        without making dicts. Null rows are refused (store ``{}`` for a text without
        tokens); a key repeated within one map adds its weights up."""
        ids = _check_vocab(vocab)
        tokens, weights, offsets, valid = _flat_column(column)
        if not valid.all():
            raise ConfigError(
                f"column has {int((~valid).sum())} null rows (first: row "
                f"{int(np.flatnonzero(~valid)[0])}); every document needs a "
                "sparse vector: store {} for a text without tokens"
            )
        return cls._build(tokens, weights, offsets, ids)

    @classmethod
    def _build(
        cls, tokens: list[str], weights: np.ndarray, offsets: np.ndarray, ids: dict[str, int]
    ) -> SparseIndex:
        dims = np.fromiter((ids.setdefault(t, len(ids)) for t in tokens), np.int64, len(tokens))
        if len(ids) > _INT32_MAX:
            raise ConfigError(
                f"the vocab has {len(ids)} tokens, over the {_INT32_MAX} an int32 dim can address"
            )
        return cls.from_csr(offsets, dims.astype(np.int32), weights, list(ids))

    @classmethod
    def from_csr(cls, indptr: Any, indices: Any, data: Any, vocab: Sequence[str]) -> SparseIndex:
        """An index over a doc-major CSR matrix: document ``d`` has dims
        ``indices[indptr[d]:indptr[d+1]]`` with weights ``data[...]``; ``vocab[t]`` is the token
        of dim ``t`` (``len(vocab)`` dims). A dim repeated within a document adds up."""
        ids = _check_vocab(vocab)
        n_dims = len(ids)
        indptr = _int_array(indptr, "indptr", np.int64)
        n_docs = indptr.shape[0] - 1
        if n_docs < 0:
            raise ConfigError(
                "indptr must have n_docs + 1 entries, got 0; use [0] for an empty index"
            )
        if n_docs > _INT32_MAX:
            raise ConfigError(
                f"{n_docs} documents exceed the {_INT32_MAX} of one SparseIndex; shard the corpus"
            )
        indices = _int_array(indices, "indices", np.int64)
        data = _float_array(data, "data", indices.shape[0])
        _check_indptr(indptr, indices.shape[0], "indptr", "indices")
        _check_ids(indices[indptr[0] : indptr[-1]], n_dims, "indices", "vocab entries (dims)")
        nnz = int(indptr[-1] - indptr[0])
        out_indptr = np.empty(n_dims + 1, np.int64)
        out_indices = np.empty(nnz, np.int32)
        out_data = np.empty(nnz, np.float32)
        bad = sparse_kernels.build_postings(
            n_dims,
            readonly(indptr),
            readonly(indices.astype(np.int32)),
            readonly(data),
            out_indptr,
            out_indices,
            out_data,
        )
        if bad >= 0:  # pragma: no cover - checked above
            raise ConfigError(f"indices[{bad}] is outside [0, {n_dims})")
        index = cls(out_indptr, out_indices, out_data, list(ids), n_docs)
        index._ids = ids
        return index

    # ---------------------------------------------------------------------------- search
    @property
    def ids(self) -> dict[str, int]:
        """token -> dim (built on first use)."""
        if self._ids is None:
            self._ids = {t: i for i, t in enumerate(self.vocab)}
        return self._ids

    def encode(self, queries: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Query dicts (a list, or one dict) as CSR ``(indptr int64, indices int32, data
        float32)`` over this index's dims; tokens not in :attr:`vocab` are dropped."""
        tokens, weights, offsets = _flatten(queries, "queries", single=True)
        get = self.ids.get
        dims = np.fromiter((get(t, -1) for t in tokens), np.int64, len(tokens))
        keep = dims >= 0
        if keep.all():
            return offsets, dims.astype(np.int32), weights
        kept = np.zeros(len(tokens) + 1, np.int64)
        np.cumsum(keep, out=kept[1:])
        return kept[offsets], dims[keep].astype(np.int32), weights[keep]

    def search(
        self,
        queries: Any,
        k: int,
        *,
        mask: Any = None,
        cutoff: float | None = None,
        num_threads: int | None = None,
    ) -> Hits:
        """Exact top-``k`` documents for each query dict (a list of ``{token: weight}`` dicts,
        or one dict as a batch of one): ``(rows, scores, counts)`` as described in the module
        docstring. ``mask`` (bool, one per document) keeps only the allowed documents;
        ``cutoff`` drops hits scoring below it; ``num_threads`` caps the threads of a batch of
        ``PARALLEL_MIN_QUERIES`` or more queries (default: numba's current setting)."""
        k = check_k(k)
        q_indptr, q_indices, q_data = self.encode(queries)
        return self._search(q_indptr, q_indices, q_data, k, mask, cutoff, num_threads)

    def search_csr(
        self,
        q_indptr: Any,
        q_indices: Any,
        q_data: Any,
        k: int,
        *,
        mask: Any = None,
        cutoff: float | None = None,
        num_threads: int | None = None,
    ) -> Hits:
        """:meth:`search` of queries already encoded as CSR over this index's dims (query
        ``i`` is ``q_indices[q_indptr[i]:q_indptr[i+1]]`` with weights ``q_data[...]``)."""
        k = check_k(k)
        q_indptr = _int_array(q_indptr, "q_indptr", np.int64)
        if q_indptr.shape[0] < 1:
            raise ConfigError(
                "q_indptr must have n_queries + 1 entries, got 0; use [0] for no queries"
            )
        q_indices = _int_array(q_indices, "q_indices", np.int64)
        q_data = _float_array(q_data, "q_data", q_indices.shape[0])
        _check_indptr(q_indptr, q_indices.shape[0], "q_indptr", "q_indices")
        _check_ids(
            q_indices[q_indptr[0] : q_indptr[-1]], len(self.vocab), "q_indices", "dims of the index"
        )
        return self._search(
            q_indptr, q_indices.astype(np.int32), q_data, k, mask, cutoff, num_threads
        )

    def _search(
        self,
        q_indptr: np.ndarray,
        q_indices: np.ndarray,
        q_data: np.ndarray,
        k: int,
        mask: Any,
        cutoff: Any,
        num_threads: Any,
    ) -> Hits:
        mask_arr = self._check_mask(mask)
        cut = check_cutoff(cutoff)
        threads = check_num_threads(num_threads)
        n_q = q_indptr.shape[0] - 1
        rows = np.empty((n_q, k), np.int64)
        scores = np.empty((n_q, k), np.float32)
        counts = np.empty(n_q, np.int32)
        kern = sparse_kernels
        args = (
            self.indptr,
            self.indices,
            self.data,
            self.n_docs,
            readonly(q_indptr),
            readonly(q_indices),
            readonly(q_data),
            k,
            mask_arr,
            mask is not None,
            cut,
        )
        if n_q < kern.PARALLEL_MIN_QUERIES:
            kern.search_serial(*args, rows, scores, counts)
        else:
            with numba_threads(threads) as n_threads:
                kern.search_parallel(*args, max(1, min(n_q, n_threads)), rows, scores, counts)
        return rows, scores, counts

    def _check_mask(self, mask: Any) -> np.ndarray:
        if mask is None:
            return self._no_mask
        return readonly(np.ascontiguousarray(check_mask(mask, self.n_docs)))

    # ---------------------------------------------------------------------------- persistence
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays that define the index, with :meth:`meta` (save them with ``np.save``;
        :meth:`from_arrays` restores the index, memory-mapped read-only arrays are fine)."""
        return {"indptr": self.indptr, "indices": self.indices, "data": self.data}

    def meta(self) -> dict:
        """JSON-serializable values that, with :meth:`to_arrays`, restore the index (the
        vocab is a list of str: the token of each dim)."""
        return {
            "format": FORMAT,
            "n_docs": self.n_docs,
            "n_vocab": len(self.vocab),
            "nnz": self.nnz,
            "vocab": list(self.vocab),
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> SparseIndex:
        """Restore an index from :meth:`to_arrays` + :meth:`meta` (nothing is copied). Damaged
        or mismatched input raises :class:`~fastrag.errors.StoreError`."""
        fix = "the index files are corrupt: rebuild the index"
        if not isinstance(meta, Mapping) or meta.get("format") != FORMAT:
            got = meta.get("format") if isinstance(meta, Mapping) else type(meta).__name__
            raise StoreError(
                f"sparse index meta has format {got!r}, expected {FORMAT!r}; "
                "rebuild the index with this fastrag version"
            )
        try:
            n_docs = check_int("n_docs", meta.get("n_docs"), min=0, max=_INT32_MAX)
            n_vocab = check_int("n_vocab", meta.get("n_vocab"), min=0, max=_INT32_MAX)
            nnz = check_int("nnz", meta.get("nnz"), min=0)
            vocab = check_str_list("vocab", meta.get("vocab"))
        except ConfigError as exc:
            raise StoreError(f"sparse index meta is invalid ({exc}); {fix}") from None
        missing = [n for n in ("indptr", "indices", "data") if n not in arrays]
        if missing:
            raise StoreError(f"sparse index arrays are missing {missing}; rebuild the index")
        indptr, indices, data = (
            np.ascontiguousarray(arrays[n]) for n in ("indptr", "indices", "data")
        )
        if (
            len(vocab) != n_vocab
            or indptr.shape != (n_vocab + 1,)
            or indptr.dtype != np.int64
            or indices.shape != (nnz,)
            or indices.dtype != np.int32
            or data.shape != (nnz,)
            or data.dtype != np.float32
        ):
            raise StoreError(
                f"sparse index arrays do not match their meta (n_vocab={n_vocab}, nnz={nnz}, "
                f"{len(vocab)} vocab tokens; indptr {indptr.shape} {indptr.dtype}, indices "
                f"{indices.shape} {indices.dtype}, data {data.shape} {data.dtype}); {fix}"
            )
        problem = _postings_problem(indptr, indices, data, n_docs)
        if problem:
            raise StoreError(f"sparse index arrays are inconsistent ({problem}); {fix}")
        if len(set(vocab)) != n_vocab:
            raise StoreError(f"sparse index vocab repeats a token; {fix}")
        return cls(indptr, indices, data, vocab, n_docs)

    # ---------------------------------------------------------------------------- sizes
    def __len__(self) -> int:
        return self.n_docs

    @property
    def n_vocab(self) -> int:
        return len(self.vocab)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays that define the index (what :meth:`to_arrays` returns; the vocab
        strings are not counted)."""
        return int(sum(v.nbytes for v in self.to_arrays().values()))

    def __repr__(self) -> str:
        return f"SparseIndex(n_docs={self.n_docs}, n_vocab={self.n_vocab}, nnz={self.nnz})"


# ----------------------------------------------------------------------------- array checks
def _int_array(x: Any, name: str, dtype: type) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ConfigError(f"{name} must be a 1-D integer array, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise ConfigError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise ConfigError(f"{name} holds values beyond int64")
    return np.ascontiguousarray(arr, dtype=dtype)


def _float_array(x: Any, name: str, n: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ConfigError(
            f"{name} must be a 1-D array of {n} weights (one per index), got shape {arr.shape}"
        )
    if arr.size and arr.dtype.kind not in "fiu":
        raise ConfigError(f"{name} must hold numbers (float32), got dtype {arr.dtype}")
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(arr, dtype=np.float32)
    bad = np.flatnonzero(~np.isfinite(out))
    if bad.size:
        j = int(bad[0])
        raise ConfigError(
            f"{name}[{j}] must be a finite number within float32 range, got "
            f"{arr[j].item()!r} ({bad.size} bad weights in all); {_WEIGHT_FIX}"
        )
    return out


def _check_indptr(indptr: np.ndarray, n: int, name: str, of: str) -> None:
    if indptr[0] < 0 or indptr[-1] > n or np.any(np.diff(indptr) < 0):
        raise ConfigError(
            f"{name} must be non-decreasing offsets within [0, {n}] (the length "
            f"of {of}), got {indptr[:8].tolist()}{'...' if indptr.size > 8 else ''}"
        )


def _check_ids(ids: np.ndarray, n: int, name: str, what: str) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        j = int(np.flatnonzero((ids < 0) | (ids >= n))[0])
        raise ConfigError(
            f"{name} must be dims in [0, {n}) (there are {n} {what}), got {int(ids[j])}"
        )


def _postings_problem(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_docs: int
) -> str:
    if indptr.size and (indptr[0] != 0 or indptr[-1] != indices.shape[0]):
        return f"indptr runs from {int(indptr[0])} to {int(indptr[-1])}, not 0 to {indices.size}"
    if np.any(np.diff(indptr) < 0):
        return "indptr decreases"
    if indices.size and (indices.min() < 0 or indices.max() >= n_docs):
        return f"a posting names a document outside [0, {n_docs})"
    if not np.all(np.isfinite(data)):
        return "a weight is NaN or infinite"
    return ""
