"""Packed BM25 postings: the block codec of ``fastrag._kernels.bm25_codec`` (doc-id gaps and
term-frequency codes bit-packed per block of 128 postings, a skip entry per block) plus each
document's length, from which every weight is recomputed bit for bit.

A :class:`~fastrag.indexes.bm25.BM25Index` saved packed (``to_arrays(packed=True)``) takes
about 1.3-1.8 bytes per posting instead of 8; loaded, it decodes a term's postings into the
uncompressed layout on the first query that holds the term, so opening reads no postings and
memory grows with the terms queries touch.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from fastrag._checks import readonly
from fastrag._kernels import bm25_codec
from fastrag.errors import ConfigError, StoreError

_PROBLEMS = {  # the problem codes of ``bm25_codec.decode_terms``
    1: "do not decode to their skip entries",
    2: "hold doc ids outside [0, {n_docs})",
    3: "hold weights NaN, infinite, above their term's bound or negative under a positive one",
}


class Weighing(NamedTuple):
    """What turns a term frequency and a document length into a term's stored weight (the
    arguments of ``bm25_build.weigh_postings``)."""

    idf: np.ndarray  # float64 [n_vocab]
    base: np.ndarray  # float64 [n_vocab]
    method: int
    avgdl: float
    k1: float
    b: float
    delta: float


class PackedPostings:
    """The packed arrays of one index (``indptr``, ``term_max``, ``doc_len``, ``blk_last``,
    ``blk_word``, ``blk_dw``, ``blk_tw``, ``words``) and the derived ``term_block``."""

    def __init__(self, arrays: dict[str, np.ndarray], weighing: Weighing) -> None:
        self.arrays = {n: readonly(a) for n, a in arrays.items()}
        self.weighing = weighing

    @classmethod
    def pack(
        cls,
        indptr: np.ndarray,
        indices: np.ndarray,
        data: np.ndarray,
        term_max: np.ndarray,
        doc_len: np.ndarray,
        weighing: Weighing,
    ) -> PackedPostings:
        """Pack uncompressed postings whose weights ``weighing`` gives from ``doc_len``
        (ConfigError naming a posting that no term frequency reproduces)."""
        tf, bad = bm25_codec.tf_codes(indptr, indices, data, doc_len, *weighing)
        if bad != -1:
            raise ConfigError(
                f"posting {int(bad)} of this BM25 index has a weight that no term frequency "
                "gives with its document's length; the index was not built by "
                "BM25Index.build with these parameters, so it cannot be packed"
            )
        term_block, last, word, dw, tw, words = bm25_codec.encode_postings(indptr, indices, tf)
        arrays = {
            "indptr": indptr,
            "term_max": term_max,
            "doc_len": doc_len,
            "blk_last": last,
            "blk_word": word,
            "blk_dw": dw,
            "blk_tw": tw,
            "words": words,
            "term_block": term_block,
        }
        return cls(arrays, weighing)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays to save (``term_block`` is derived at load)."""
        return {n: a for n, a in self.arrays.items() if n != "term_block"}

    def decode(
        self,
        terms: np.ndarray,
        indices: np.ndarray,
        data: np.ndarray,
        byte_checks: dict[str, tuple[Any, int]] | None = None,
    ) -> None:
        """Decode the postings of ``terms`` (int64, in the vocabulary) into their places in
        the writable uncompressed ``indices`` / ``data``, checked as the kernels need them.
        ``byte_checks`` maps array names to ``(checker, offset)`` (a store's chunk checksums,
        see ``BM25Index.verify_postings_with``): the bytes the decoder reads are verified
        first.
        StoreError naming the first bad term and what is wrong with it."""
        a = self.arrays
        tb = a["term_block"]
        first, end = tb[terms], tb[terms + 1]
        spans = {  # what the decoder reads, in items of each array
            "words": (a["blk_word"][first], a["blk_word"][end] + 1),
            "blk_word": (first, end + 1),
            "blk_last": (first, end),
            "blk_dw": (first, end),
            "blk_tw": (first, end),
            "doc_len": (np.zeros(1, np.int64), np.full(1, a["doc_len"].shape[0], np.int64)),
        }
        for name, (checker, offset) in (byte_checks or {}).items():
            if name in spans:
                lo, hi = spans[name]
                size = a[name].itemsize
                checker.ensure(offset + lo * size, offset + hi * size)
        bad, problem = bm25_codec.decode_terms(
            tb,
            a["blk_last"],
            a["blk_word"],
            a["blk_dw"],
            a["blk_tw"],
            a["words"],
            a["indptr"],
            terms,
            a["doc_len"],
            *self.weighing,
            a["term_max"],
            indices,
            data,
        )
        if bad != -1:
            what = _PROBLEMS[int(problem)].format(n_docs=a["doc_len"].shape[0])
            raise StoreError(
                f"BM25 index arrays are inconsistent (the packed postings of term {int(bad)} "
                f"{what}); the index files are corrupt: rebuild the index"
            )
