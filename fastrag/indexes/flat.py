"""``FlatIndex``: exact dense top-k, every query scored against every (allowed) vector.

The search is :func:`fastrag.indexes.exact.exact_search` (blocked sgemm, fused scan, bf16 /
int8 first pass); the quantised copies and the choice between them are in
fastrag.indexes.quantized; the checks and the interface shared with ``HNSWIndex`` are in
fastrag.indexes.dense_base.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from fastrag._blas import check_blas_once
from fastrag.errors import ConfigError
from fastrag.indexes import exact, quantized
from fastrag.indexes.base import Hits, check_mask, check_num_threads
from fastrag.indexes.dense_base import DenseIndex, as_matrix, prepare_vectors
from fastrag.indexes.exact import exact_search
from fastrag.indexes.int8 import Int8Corpus
from fastrag.indexes.quantized import (
    Bf16Corpus,
    check_bf16,
    check_int8,
)

__all__ = ["FlatIndex"]


class FlatIndex(DenseIndex):
    """Exact dense index: every query is scored against every (allowed) vector.

    ``metric="cosine"`` normalises vectors once at insert (zero vectors stay zero and score 0);
    ``"dot"`` keeps them as given. Vectors must be finite. ``search`` returns
    ``(rows int64 (n_q, k), scores float32 (n_q, k), counts int32 (n_q,))``, best first, ties
    by the lower row, padded with row -1 and score -inf.

    ``int8`` / ``bf16``: score batches (more than 16 queries, k <= 256) first with int8 or
    bfloat16 copies of the vectors, then the rows a proven error bound cannot rule out exactly
    in float32 (same results; docs/dense.md). ``int8="auto"`` (default) uses int8 on CPUs with
    AVX512-VNNI where a short probe says it pays, unless the CPU has AMX-BF16 (bf16 is faster
    there) or the corpus has a few dominant dimensions (its quantisation error is then too wide:
    bf16 instead, where that pays); ``True`` forces it (VNNI needed). ``bf16="auto"`` uses bf16
    with torch (the ``[amx]`` extra) on AMX-BF16, or on AVX512_BF16 where a probe says it pays;
    ``True`` forces it. ``False`` turns a pass off. The copy (int8: 1 byte per value, bf16: 2)
    is made on the first such batch and kept.
    """

    def __init__(
        self, dim: int, metric: str = "cosine", bf16: bool | str = "auto", int8: bool | str = "auto"
    ) -> None:
        super().__init__(dim, metric)
        if bf16 is True and int8 is True:  # before either asks for its extra or its CPU
            raise ConfigError("bf16=True and int8=True: choose one first pass (or 'auto')")
        self.bf16 = check_bf16(bf16)
        self.int8 = check_int8(int8)
        self._buf = np.empty((0, self.dim), np.float32)
        self._n = 0
        self._owned = True
        self._approx: dict[str, Bf16Corpus | Int8Corpus] = {}
        self._approx_lock = threading.Lock()

    @classmethod
    def from_vectors(
        cls,
        vectors: Any,
        metric: str = "cosine",
        normalized: bool = False,
        bf16: bool | str = "auto",
        int8: bool | str = "auto",
    ) -> FlatIndex:
        """An index over ``vectors`` (ndarray or Arrow ``fixed_size_list<float32>``).

        Float32 C-contiguous input is used in place (also read-only memory such as an Arrow
        buffer or a memory map) when no normalisation is needed: ``metric="dot"``, already
        unit-norm rows, or ``normalized=True``, which trusts the caller and skips the
        finiteness check and normalisation pass (for vectors this index wrote before).
        """
        vectors = as_matrix(vectors, None)
        index = cls(vectors.shape[1], metric, bf16, int8)
        if not normalized:
            vectors = prepare_vectors(vectors, index.metric)
        index._buf = vectors
        index._n = vectors.shape[0]
        index._owned = False
        return index

    @property
    def n(self) -> int:
        """Number of vectors in the index."""
        return self._n

    @property
    def vectors(self) -> np.ndarray:
        """The stored (normalised, for cosine) vectors, read-only, shape ``(n, dim)``."""
        view = self._buf[: self._n]
        view.flags.writeable = False
        return view

    def add(self, vectors: Any) -> None:
        """Append ``vectors`` (n, dim); their rows are ``self.n .. self.n + len - 1``."""
        vectors = self.check_vectors(vectors)
        m = vectors.shape[0]
        if m == 0:
            return
        need = self._n + m
        if not self._owned or need > self._buf.shape[0]:
            cap = max(need, 2 * self._buf.shape[0] if self._owned else need, 1024)
            buf = np.empty((cap, self.dim), np.float32)
            buf[: self._n] = self._buf[: self._n]
            self._buf, self._owned = buf, True
        self._buf[self._n : need] = vectors
        self._n = need

    def search(
        self,
        queries: Any,
        k: int,
        *,
        mask: Any = None,
        cutoff: float | None = None,
        num_threads: int | None = None,
    ) -> Hits:
        """Exact top-``k`` rows for each query (a (n_q, dim) batch or one (dim,) vector).

        ``mask`` (bool, one per row) keeps only the allowed rows; ``cutoff`` drops hits
        scoring below it; ``num_threads`` caps the threads used (default: all).
        """
        q, k, cut = self.check_search(queries, k, cutoff)
        mask = check_mask(mask, self._n)
        vectors = self._buf[: self._n]
        check_blas_once()
        return exact_search(
            vectors,
            q,
            k,
            mask,
            cut,
            num_threads=check_num_threads(num_threads),
            approx=self._approx_copy(q.shape[0], k),
        )

    def _approx_copy(self, n_queries: int, k: int) -> Bf16Corpus | Int8Corpus | None:
        """The bf16 or int8 copy of the vectors, brought up to date, when this search would
        use a first pass."""
        if n_queries <= exact.FUSED_MAX_QUERIES or k > exact.BF16_MAX_K or self._n == 0:
            return None
        kind = quantized.first_pass(self.bf16, self.int8)
        if kind is None:
            return None
        with self._approx_lock:
            copy = self._updated_copy(kind)
            if kind == "int8" and self.int8 == "auto" and not copy.pays():
                # measured on this corpus: too many rows to rescore for the pass to pay
                if self.bf16 == "auto" and quantized.bf16_fast():
                    return self._updated_copy("bf16")
                return None
            return copy

    def _updated_copy(self, kind: str) -> Bf16Corpus | Int8Corpus:
        if kind not in self._approx:
            self._approx[kind] = (Int8Corpus if kind == "int8" else Bf16Corpus)(self.dim)
        self._approx[kind].update(self._buf[: self._n])
        return self._approx[kind]

    def __repr__(self) -> str:
        return f"FlatIndex(dim={self.dim}, metric={self.metric!r}, n={self._n})"
