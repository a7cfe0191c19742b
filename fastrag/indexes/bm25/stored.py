"""Checks of a BM25 index restored from its arrays and meta (files that may be damaged): every
offset a kernel relies on is checked at load, every posting before its first search.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from fastrag.errors import ConfigError, StoreError
from fastrag.indexes.bm25.args import BM25_METHODS, check_params
from fastrag.indexes.bm25.numpy_path import BLOCK

FORMAT = "fastrag.bm25/1"
# Postings in the block codec of ``fastrag._kernels.bm25.codec`` (doc-id gaps and tf codes,
# bit-packed per block of BLOCK postings) with per-document lengths: weights are recomputed.
FORMAT_PACKED = "fastrag.bm25/2"
PACKED_NAMES = (
    "indptr",
    "term_max",
    "doc_len",
    "blk_last",
    "blk_word",
    "blk_dw",
    "blk_tw",
    "words",
)


def checked_arrays(arrays: dict[str, np.ndarray], meta: dict) -> dict[str, np.ndarray]:
    """The arrays :meth:`BM25Index.to_arrays` wrote, contiguous (no copy of contiguous ones),
    once ``meta`` and the arrays' shapes, dtypes and offsets agree; StoreError saying what
    does not. The postings are checked term by term later (:func:`check_postings`)."""
    if not isinstance(meta, dict) or meta.get("format") not in (FORMAT, FORMAT_PACKED):
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise StoreError(
            f"BM25 index meta has format {got!r}, expected {FORMAT!r} or {FORMAT_PACKED!r}; "
            "rebuild the index with this fastrag version"
        )
    problem = _meta_problem(meta)
    if problem:
        raise StoreError(
            f"BM25 index meta is invalid ({problem}); the index is damaged: rebuild the index"
        )
    packed = meta["format"] == FORMAT_PACKED
    need = (list(PACKED_NAMES) if packed else ["indptr", "indices", "data", "term_max"]) + (
        ["stats_df"] if meta.get("external_stats") else []
    )
    missing = [n for n in need if n not in arrays]
    if missing:
        raise StoreError(f"BM25 index arrays are missing {missing}; rebuild the index")
    a = {n: np.ascontiguousarray(arrays[n]) for n in need}
    n_vocab = int(meta["n_vocab"])
    nnz = int(meta["nnz"])
    if packed:
        problem = _packed_problem(a, meta)
        if problem:
            raise StoreError(
                f"BM25 index arrays are inconsistent ({problem}); the index files are corrupt: "
                "rebuild the index"
            )
        return a
    if (
        a["indptr"].shape != (n_vocab + 1,)
        or a["term_max"].shape != (n_vocab,)
        or a["indices"].shape != (nnz,)
        or a["data"].shape != (nnz,)
        or a["indptr"].dtype not in (np.int32, np.int64)
        or a["data"].dtype != np.float32
        or a["term_max"].dtype != np.float32
        or a["indices"].dtype != np.int32
        or int(a["indptr"][-1]) != nnz
    ):
        raise StoreError(
            f"BM25 index arrays do not match their meta (n_vocab={n_vocab}, nnz={nnz}; "
            f"indptr {a['indptr'].shape} {a['indptr'].dtype}, indices {a['indices'].shape} "
            f"{a['indices'].dtype}, data {a['data'].shape} {a['data'].dtype}, term_max "
            f"{a['term_max'].shape} {a['term_max'].dtype}); the index files are corrupt: "
            "rebuild the index"
        )
    problem = _bounds_problem(a, int(meta["n_docs"]), n_vocab, bool(meta.get("external_stats")))
    if problem:
        raise StoreError(
            f"BM25 index arrays are inconsistent ({problem}); the index files "
            "are corrupt: rebuild the index"
        )
    return a


def _packed_problem(a: dict[str, np.ndarray], meta: dict) -> str | None:
    """What makes the arrays of a packed index unsafe to decode (shapes, dtypes, offsets, bit
    widths and block sizes; the doc ids themselves are checked as they are decoded), or
    None. Sets ``a["term_block"]``, each term's first block (derived, not stored)."""
    n_vocab, nnz, n_docs = int(meta["n_vocab"]), int(meta["nnz"]), int(meta["n_docs"])
    indptr = a["indptr"]
    want = {
        "indptr": ((n_vocab + 1,), ("int32", "int64")),
        "term_max": ((n_vocab,), ("float32",)),
        "doc_len": ((n_docs,), ("uint32",)),
    }
    for name, (shape, dtypes) in want.items():
        if a[name].shape != shape or a[name].dtype.name not in dtypes:
            return f"{name} is {a[name].shape} {a[name].dtype}, expected {shape} {dtypes}"
    if indptr[0] != 0 or int(indptr[-1]) != nnz or np.any(indptr[1:] < indptr[:-1]):
        return f"indptr does not rise from 0 to nnz={nnz}"
    if int(a["doc_len"].sum(dtype=np.int64)) != int(meta["n_tokens"]):
        return f"document lengths do not add up to n_tokens={meta['n_tokens']}"
    if not (np.isfinite(a["term_max"]).all() and (a["term_max"] >= 0).all()):
        return "term_max holds a negative, NaN or infinite bound"
    df = np.diff(indptr.astype(np.int64))
    per_term = (df + BLOCK - 1) // BLOCK
    term_block = np.zeros(n_vocab + 1, np.int64)
    np.cumsum(per_term, out=term_block[1:])
    n_blocks = int(term_block[-1])
    for name, dtype, size in (
        ("blk_last", "uint32", n_blocks),
        ("blk_word", "int64", n_blocks + 1),
        ("blk_dw", "uint8", n_blocks),
        ("blk_tw", "uint8", n_blocks),
    ):
        if a[name].shape != (size,) or a[name].dtype.name != dtype:
            return f"{name} is {a[name].shape} {a[name].dtype}, expected ({size},) {dtype}"
    words = a["words"]
    if words.ndim != 1 or words.dtype != np.uint32:
        return f"words is {words.shape} {words.dtype}, expected 1-D uint32"
    dw, tw = a["blk_dw"].astype(np.int64), a["blk_tw"].astype(np.int64)
    if n_blocks and (dw.max() > 32 or tw.max() > 32):
        return "a block's bit width is above 32"
    term = np.repeat(np.arange(n_vocab), per_term)
    n = np.minimum(BLOCK, df[term] - (np.arange(n_blocks) - term_block[term]) * BLOCK)
    sizes = (n * dw + 31) // 32 + (n * tw + 31) // 32
    blk_word = a["blk_word"]
    if blk_word[0] != 0 or np.any(np.diff(blk_word) != sizes):
        return "block word offsets do not match the blocks' sizes"
    if words.shape[0] != int(blk_word[-1]) + 1:
        return f"words holds {words.shape[0]} words, the blocks {int(blk_word[-1]) + 1}"
    if meta.get("external_stats") and (
        a["stats_df"].shape != (n_vocab,) or a["stats_df"].dtype.kind not in "iu"
    ):
        return f"stats_df is {a['stats_df'].shape} {a['stats_df'].dtype}, expected integers"
    a["term_block"] = term_block
    return None


def _meta_problem(meta: dict) -> str | None:
    """What makes a stored index's meta unusable (types, ranges), or None."""

    def whole(name: str) -> bool:
        v = meta.get(name)
        return isinstance(v, Integral) and not isinstance(v, bool) and 0 <= v <= 1 << 62

    def real(name: str) -> bool:
        v = meta.get(name)
        return isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v)

    names = ["n_vocab", "nnz", "n_docs", "n_tokens"]
    if not isinstance(meta.get("external_stats", False), bool):
        return f"external_stats={meta.get('external_stats')!r}"
    if meta.get("external_stats"):
        names += ["stats_n_docs", "stats_n_tokens"]
    bad = [n for n in names if not whole(n)] + [n for n in ("k1", "b", "delta") if not real(n)]
    if bad:
        return ", ".join(f"{n}={meta.get(n)!r}" for n in bad)
    if meta.get("method") not in BM25_METHODS:
        return f"method={meta.get('method')!r}"
    try:
        check_params(meta["k1"], meta["b"], meta["delta"])
    except ConfigError as exc:
        return str(exc)
    return None


def _bounds_problem(
    a: dict[str, np.ndarray], n_docs: int, n_vocab: int, external_stats: bool
) -> str | None:
    """What makes loaded index offsets unsafe for the kernels, or None. Postings (doc ids in
    range and increasing, weights finite and within ``term_max``) are checked per term on first
    use (:func:`check_postings`); ``term_max`` here, it is small."""
    indptr = a["indptr"]
    if n_docs < 0 or indptr[0] != 0:
        return f"n_docs={n_docs}, indptr[0]={indptr[0]}"
    if n_vocab and np.any(indptr[1:] < indptr[:-1]):
        return "indptr decreases"
    if not (np.isfinite(a["term_max"]).all() and (a["term_max"] >= 0).all()):
        return "term_max holds a negative, NaN or infinite bound"
    if external_stats and (
        a["stats_df"].shape != (n_vocab,) or a["stats_df"].dtype.kind not in "iu"
    ):
        return (
            f"stats_df has shape {a['stats_df'].shape} and dtype {a['stats_df'].dtype}, "
            f"expected ({n_vocab},) integers"
        )
    return None


def check_postings(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    term_max: np.ndarray,
    n_docs: int,
    terms: np.ndarray,
    unchecked: np.ndarray,
    byte_checks: dict | None = None,
) -> None:
    """Check the postings of the ``terms`` whose ``unchecked`` flag is set (doc ids in range
    and strictly increasing, weights finite, within their term's bound and not negative where
    that bound is positive: the kernels rely on it), clearing the flags
    of those checked; StoreError at the first bad one. Terms outside the vocabulary are left
    to the kernel to report. ``byte_checks`` (see ``BM25Index.verify_postings_with``): the
    bytes of those postings are verified first."""
    n_vocab = indptr.shape[0] - 1
    t = np.unique(terms)
    t = t[(t >= 0) & (t < n_vocab)]
    t = t[unchecked[t]]
    starts = indptr[t].astype(np.int64)
    lens = indptr[t + 1].astype(np.int64) - starts
    for name, arr in (("indices", indices), ("data", data)):
        if byte_checks and name in byte_checks:
            checker, offset = byte_checks[name]
            checker.ensure(offset + starts * arr.itemsize, offset + (starts + lens) * arr.itemsize)
    ends = np.cumsum(lens)
    lo = 0
    while lo < len(t):  # chunks of about 4M postings bound the temporary arrays
        hi = max(int(np.searchsorted(ends, ends[lo] - lens[lo] + (1 << 22))), lo + 1)
        n, s = lens[lo:hi], starts[lo:hi]
        total = int(n.sum())
        if total:
            idx = np.repeat(s - (np.cumsum(n) - n), n) + np.arange(total)
            docs = indices[idx].view(np.uint32).astype(np.int64)
            weights = data[idx]
            first = np.zeros(total, np.bool_)  # the first posting of each term
            first[(np.cumsum(n) - n)[n > 0]] = True
            problem = None
            if int(docs.max()) >= n_docs:
                problem = f"doc ids outside [0, {n_docs})"
            elif np.any((docs[1:] <= docs[:-1]) & ~first[1:]):
                problem = "doc ids not strictly increasing"
            else:
                bound = np.repeat(term_max[t[lo:hi]], n)
                if not np.isfinite(weights).all() or np.any(
                    (weights > bound) | ((weights < 0) & (bound > 0))
                ):
                    problem = (
                        "weights NaN, infinite, above their term's bound or negative in a "
                        "term with a positive bound"
                    )
            if problem:
                raise StoreError(
                    f"BM25 index arrays are inconsistent ({problem} in the postings of "
                    f"terms {t[lo:hi][:5].tolist()}...); the index files are corrupt: "
                    "rebuild the index"
                )
        unchecked[t[lo:hi]] = False
        lo = hi
