"""Saving and restoring a :class:`~fastrag.indexes.bm25.BM25Index`: its arrays unpacked
(``fastrag.bm25/1``: an int32 doc id and a float32 weight per posting) or packed
(``fastrag.bm25/2``, :mod:`fastrag.indexes.bm25.packed`), and its meta."""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from fastrag._checks import readonly
from fastrag._lazy import kernels
from fastrag.errors import ConfigError
from fastrag.indexes.bm25.args import check_method, check_params
from fastrag.indexes.bm25.packed import PackedPostings, Weighing, raise_problem, remap
from fastrag.indexes.bm25.stats import BM25Stats, check_stats
from fastrag.indexes.bm25.stored import FORMAT, FORMAT_PACKED, PACKED_NAMES, checked_arrays
from fastrag.indexes.bm25.weights import METHOD_CODES

bm25_codec = kernels("bm25.codec")  # on first use: loading a small index needs no numba


class BM25Persistence:
    """The persistence methods of :class:`~fastrag.indexes.bm25.BM25Index` (a mixin: it
    relies on the index's attributes)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    term_max: np.ndarray
    stats: BM25Stats
    _packed: PackedPostings | None
    _unchecked: np.ndarray | None
    _writable: tuple[np.ndarray, np.ndarray] | None
    _doc_len: np.ndarray | None
    _external_stats: bool
    _decode_lock: Any
    _lz: tuple
    _unverified: np.ndarray | None
    _idf: np.ndarray
    _base: np.ndarray

    def to_arrays(self, packed: bool = False) -> dict[str, np.ndarray]:
        """The arrays that define the index (save them with ``np.save``; load with
        :meth:`from_arrays`, memory-mapped read-only is fine). ``stats_df`` is present only
        when the index was built with external statistics; otherwise ``df`` is
        ``np.diff(indptr)``.

        ``packed``: the postings in the block codec of ``fastrag._kernels.bm25.codec`` (doc-id
        gaps and term-frequency codes bit-packed per block of 128, with each document's
        length) instead of an int32 doc id and a float32 weight each: about 1.3-1.8 bytes per
        posting instead of 8, and the same scores bit for bit (a loaded index recomputes
        each weight exactly as the build did, decoding the blocks its searches reach).
        Needs the document lengths: an index built by :meth:`build`, or loaded
        packed."""
        if packed:
            out = self._pack().to_arrays()
        else:
            if self._unchecked is not None and self._writable is not None:
                self.check_postings()  # a packed index: every posting decoded first
            out = {
                "indptr": self.indptr,
                "indices": self.indices,
                "data": self.data,
                "term_max": self.term_max,
            }
        if self._external_stats:
            out["stats_df"] = self.stats.df
        return out

    def _pack(self) -> PackedPostings:
        """The packed postings (see :meth:`to_arrays`), encoded on first request."""
        if self._packed is None:
            if self._doc_len is None:
                raise ConfigError(
                    "this BM25 index has no document lengths (it was loaded from unpacked "
                    f"{FORMAT!r} arrays), so its weights cannot be packed; rebuild it with "
                    "BM25Index.build"
                )
            with self._decode_lock:
                if self._packed is None:
                    self._packed = PackedPostings.pack(
                        self.indptr,
                        self.indices,
                        self.data,
                        self.term_max,
                        self._doc_len,
                        self._weighing(),
                    )
        return self._packed

    def _weighing(self) -> Weighing:
        return Weighing(
            self._idf,
            self._base,
            METHOD_CODES[self.method],
            float(self.stats.avgdl),
            self.params["k1"],
            self.params["b"],
            self.params["delta"],
        )

    def packed_nbytes(self) -> int:
        """Bytes of :meth:`to_arrays` with ``packed=True`` (packs the index if needed)."""
        return int(sum(v.nbytes for v in self.to_arrays(packed=True).values()))

    def meta(self, packed: bool = False) -> dict:
        """JSON-serializable scalars that, with :meth:`to_arrays` (the same ``packed``),
        restore the index."""
        return {
            "format": FORMAT_PACKED if packed else FORMAT,
            "method": self.method,
            **self.params,
            "n_docs": self.n_docs,
            "n_vocab": self.n_vocab,
            "n_tokens": self.n_tokens,
            "nnz": int(self.indptr[-1]),
            "external_stats": self._external_stats,
            "stats_n_docs": self.stats.n_docs,
            "stats_n_tokens": self.stats.n_tokens,
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict):
        """Restore an index from :meth:`to_arrays` + :meth:`meta` (arrays may be read-only or
        memory-mapped; nothing is copied). A packed index opens without reading its
        postings: searches decode (into memory mapped on first write) and check the blocks
        they reach."""
        a = checked_arrays(arrays, meta)
        packed = meta["format"] == FORMAT_PACKED
        if packed:
            nnz = int(meta["nnz"])
            writable = decode_target(nnz)
            a["indices"], a["data"] = writable
        method = meta["method"]
        if meta.get("external_stats"):
            stats = BM25Stats(int(meta["stats_n_docs"]), int(meta["stats_n_tokens"]), a["stats_df"])
        else:
            stats = BM25Stats(
                int(meta["n_docs"]), int(meta["n_tokens"]), np.diff(a["indptr"]).astype(np.int64)
            )
        index = cls(
            indptr=a["indptr"],
            indices=a["indices"],
            data=a["data"],
            term_max=a["term_max"],
            stats=stats,
            n_docs=int(meta["n_docs"]),
            n_tokens=int(meta["n_tokens"]),
            method=method,
            k1=meta["k1"],
            b=meta["b"],
            delta=meta["delta"],
            external_stats=bool(meta.get("external_stats")),
            doc_len=a["doc_len"] if packed else None,
        )
        index._unchecked = np.ones(index.n_vocab, dtype=bool)
        if packed:
            index._decode_lazily(writable, {n: a[n] for n in (*PACKED_NAMES, "term_block")})
        return index

    @classmethod
    def from_postings(
        cls,
        postings: dict[str, np.ndarray],
        to_global: np.ndarray,
        n_vocab: int,
        stats: BM25Stats,
        *,
        method: str = "lucene",
        k1: float = 1.5,
        b: float = 0.75,
        delta: float = 0.5,
    ):
        """The index of a shard from its packed postings in its own term ids
        (``bm25_packed.encode_corpus``), moved to the global ids ``to_global[local id]`` and
        weighed with the global ``stats`` (which must cover it): the same scores as
        :meth:`build` with ``stats`` on the shard's global token ids, without re-reading its
        tokens. Searches decode the blocks they reach; the bounds are computed (every
        block decoded and checked) now: StoreError naming a damaged term by its local id."""
        method = check_method(method)
        k1, b, delta = check_params(k1, b, delta)
        to_global = np.asarray(to_global)
        n_local = np.asarray(postings["indptr"]).shape[0] - 1
        if (
            to_global.shape != (n_local,)
            or to_global.dtype.kind not in "iu"
            or (n_local and (to_global.min() < 0 or to_global.max() >= n_vocab))
            or np.unique(to_global).shape[0] != n_local
        ):
            raise ConfigError(
                f"to_global must map each of the postings' {n_local} terms to a distinct "
                f"integer id in [0, n_vocab={n_vocab}); got shape {to_global.shape}, dtype "
                f"{to_global.dtype}"
            )
        g = remap(postings, to_global, n_vocab)
        nnz = int(g["indptr"][-1])
        doc_len = np.asarray(g["doc_len"])
        n_tokens = int(doc_len.sum(dtype=np.int64))
        stats = check_stats(
            stats, np.diff(np.asarray(g["indptr"], np.int64)), len(doc_len), n_tokens
        )
        writable = decode_target(nnz)
        index = cls(
            indptr=g["indptr"],
            indices=writable[0],
            data=writable[1],
            term_max=np.zeros(n_vocab, np.float32),
            stats=stats,
            n_docs=len(doc_len),
            n_tokens=n_tokens,
            method=method,
            k1=k1,
            b=b,
            delta=delta,
            external_stats=True,
            doc_len=doc_len,
        )
        weighing = index._weighing()
        names = ("blk_last", "blk_word", "blk_dw", "blk_tw", "words")
        bound, bad, problem = bm25_codec.term_bounds(
            g["term_block"], *(g[n] for n in names), g["indptr"], doc_len, *weighing
        )
        if bad != -1:
            raise_problem(int(to_global_inv(to_global, bad)), problem, len(doc_len))
        index.term_max = readonly(bound)
        index._unchecked = np.ones(n_vocab, dtype=bool)
        index._decode_lazily(writable, {**g, "term_max": index.term_max})
        return index

    def _decode_lazily(
        self, writable: tuple[np.ndarray, np.ndarray], arrays: dict[str, np.ndarray]
    ) -> None:
        """Serve the postings from the packed ``arrays``, each term decoded into ``writable``
        (this index's ``indices`` and ``data``) on first use."""
        self._writable = writable
        self._packed = PackedPostings(arrays, self._weighing())
        self._lz = self._packed.lazy(writable, self.term_max)
        self._unverified = np.ones(self.n_vocab, dtype=bool)


def decode_target(nnz: int) -> tuple[np.ndarray, np.ndarray]:
    """Zeroed ``indices`` (int32) and ``data`` (float32) of ``nnz`` postings for a packed index
    to decode into: anonymous memory mapped page by page on first write, without huge pages
    (a 2 MiB page per scattered block would map most of the arrays)."""
    out = []
    for dtype in (np.int32, np.float32):
        size = max(nnz, 1) * 4
        buf = mmap.mmap(-1, size)
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            buf.madvise(mmap.MADV_NOHUGEPAGE)
        out.append(np.frombuffer(buf, dtype, count=nnz))
    return out[0], out[1]


def to_global_inv(to_global: np.ndarray, g: int) -> int:
    """The local id of global term ``g``."""
    return int(np.flatnonzero(np.asarray(to_global) == g)[0])
