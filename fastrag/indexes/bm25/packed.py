"""Packed BM25 postings: the block codec of ``fastrag._kernels.bm25.codec`` (doc-id gaps and
term-frequency codes bit-packed per block of 128 postings, a skip entry per block) plus each
document's length, from which every weight is recomputed bit for bit.

A :class:`~fastrag.indexes.bm25.BM25Index` saved packed (``to_arrays(packed=True)``) takes
about 1.3-1.8 bytes per posting instead of 8; loaded, its searches decode the blocks they reach
into the uncompressed layout (``fastrag._kernels.bm25.lazy``), so opening reads no postings and
memory grows with the blocks queries touch.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from fastrag._checks import readonly
from fastrag._lazy import kernels
from fastrag.errors import ConfigError, StoreError
from fastrag.indexes.bm25 import numpy_path
from fastrag.indexes.bm25.args import check_corpus, raise_bad_token
from fastrag.indexes.bm25.stored import FORMAT_PACKED, checked_arrays

kb = kernels("bm25.build")  # on first use: an unpacked index loads no numba
bm25_codec = kernels("bm25.codec")

_PROBLEMS = {  # the problem codes of ``bm25_codec.decode_terms``
    1: "do not decode to their skip entries",
    2: "hold doc ids outside [0, {n_docs})",
    3: "hold weights NaN, infinite, above their term's bound or negative under a positive one",
}


def raise_problem(term: int, problem: int, n_docs: int) -> None:
    """StoreError for a problem code of ``bm25_codec.decode_terms`` / ``term_bounds``."""
    what = _PROBLEMS[int(problem)].format(n_docs=n_docs)
    raise StoreError(
        f"BM25 index arrays are inconsistent (the packed postings of term {int(term)} {what}); "
        "the index files are corrupt: rebuild the index"
    )


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


def encode_corpus(values: np.ndarray, offsets: np.ndarray, n_vocab: int) -> dict[str, np.ndarray]:
    """The packed postings of a token-id corpus (checked as :meth:`BM25Index.build` checks it)
    without weights: ``indptr``, ``doc_len`` and the block arrays, which any corpus
    statistics weigh later (:func:`remap`, ``BM25Index.from_postings``)."""
    values, offsets, n_vocab = check_corpus(values, offsets, n_vocab)
    df, bad = kb.count_document_frequencies(values, offsets, n_vocab)
    raise_bad_token(bad, values, n_vocab)
    indptr, indices, tf = kb.build_postings(values, offsets, n_vocab, df)
    _, last, word, dw, tw, words = bm25_codec.encode_postings(indptr, indices, tf)
    return {
        "indptr": indptr,
        "doc_len": np.diff(offsets).astype(np.uint32),
        "blk_last": last,
        "blk_word": word,
        "blk_dw": dw,
        "blk_tw": tw,
        "words": words,
    }


POSTINGS = ("indptr", "doc_len", "blk_last", "blk_word", "blk_dw", "blk_tw", "words")


def postings_meta(postings: dict[str, np.ndarray]) -> dict[str, Any]:
    """The meta that :func:`checked_postings` checks :func:`encode_corpus`'s arrays against
    (a packed index's meta with the corpus's own statistics; the weighing parameters are
    placeholders: the postings hold no weights)."""
    doc_len = postings["doc_len"]
    return {
        "format": FORMAT_PACKED,
        "method": "lucene",
        "k1": 1.5,
        "b": 0.75,
        "delta": 0.5,
        "n_docs": int(doc_len.shape[0]),
        "n_vocab": int(postings["indptr"].shape[0] - 1),
        "n_tokens": int(doc_len.sum(dtype=np.int64)),
        "nnz": int(postings["indptr"][-1]),
        "external_stats": False,
    }


def checked_postings(arrays: dict[str, np.ndarray], meta: dict) -> dict[str, np.ndarray]:
    """Stored :func:`encode_corpus` arrays (shapes, dtypes, block sizes and offsets checked
    against ``meta``, see :func:`postings_meta`; StoreError when they disagree). Every block
    is decoded and checked when ``BM25Index.from_postings`` weighs them."""
    if not isinstance(meta, dict) or not isinstance(meta.get("n_vocab"), int):
        raise StoreError(f"packed postings meta is invalid: {meta!r}")
    bound = np.zeros(meta["n_vocab"], np.float32)  # no weights: a placeholder bound
    checked = checked_arrays({**{n: arrays[n] for n in POSTINGS}, "term_max": bound}, meta)
    return {n: checked[n] for n in POSTINGS}


def remap(local: dict[str, np.ndarray], to_global: np.ndarray, n_vocab: int) -> dict:
    """Packed postings in local term ids (:func:`encode_corpus`) moved to the term ids
    ``to_global[local id]`` of an ``n_vocab``-term vocabulary: a new ``indptr`` and the per-block
    arrays reordered term by term (the words stay where they are: a block points at its own),
    with ``term_block``. ``to_global`` must be one-to-one."""
    block = bm25_codec.BLOCK
    df_l = np.diff(np.asarray(local["indptr"], np.int64))
    nb_l = (df_l + block - 1) // block
    tb_l = np.concatenate([[0], np.cumsum(nb_l)])
    to_global = np.asarray(to_global, np.int64)
    df_g = np.zeros(n_vocab, np.int64)
    df_g[to_global] = df_l
    order = np.argsort(to_global, kind="stable")  # local terms in global order
    lens = nb_l[order]
    perm = np.repeat(tb_l[order] - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
    indptr = np.concatenate([[0], np.cumsum(df_g)])
    out = {n: np.asarray(local[n])[perm] for n in ("blk_last", "blk_dw", "blk_tw")}
    out["blk_word"] = np.append(np.asarray(local["blk_word"])[perm], local["blk_word"][-1])
    out["words"], out["doc_len"] = local["words"], local["doc_len"]
    out["indptr"] = indptr.astype(np.int32) if indptr[-1] < 2**31 else indptr
    out["term_block"] = np.concatenate([[0], np.cumsum((df_g + block - 1) // block)])
    return out


class PackedPostings:
    """The packed arrays of one index (``indptr``, ``term_max``, ``doc_len``, ``blk_last``,
    ``blk_word``, ``blk_dw``, ``blk_tw``, ``words``) and the derived ``term_block``."""

    def __init__(self, arrays: dict[str, np.ndarray], weighing: Weighing) -> None:
        self.arrays = {n: readonly(a) for n, a in arrays.items()}
        self.weighing = weighing
        self.ready: np.ndarray | None = None  # per block: decoded (set by :meth:`lazy`)
        self.term_ready: np.ndarray | None = None  # per term: every block decoded
        self.bad = np.zeros(2, np.int64)  # a damaged block the kernels met: (term, problem)

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

    def lazy(
        self,
        writable: tuple[np.ndarray, np.ndarray],
        term_max: np.ndarray,
    ) -> tuple:
        """The ``lz`` tuple of ``fastrag._kernels.bm25.lazy`` that has the search kernels decode
        these postings block by block into ``writable`` (``indices``, ``data``)."""
        a, w = self.arrays, self.weighing
        self.ready = np.zeros(int(a["term_block"][-1]), np.uint8)
        self.term_ready = np.zeros(a["indptr"].shape[0] - 1, np.uint8)
        self.touched = np.zeros(a["indptr"].shape[0] - 1, bool)  # held by a search call
        return (
            self.ready,
            a["term_block"],
            a["blk_last"],
            a["blk_word"],
            a["blk_dw"],
            a["blk_tw"],
            a["words"],
            a["doc_len"],
            readonly(np.asarray(w.idf, np.float64)),
            readonly(np.asarray(w.base, np.float64)),
            readonly(np.asarray(term_max, np.float32)),
            writable[0],
            writable[1],
            readonly(np.array([w.avgdl, w.k1, w.b, w.delta], np.float64)),
            readonly(np.array([w.method], np.int64)),
            self.bad,
            self.term_ready,
        )

    def decoded_postings(self) -> int:
        """Postings in the blocks decoded so far (see :meth:`lazy`)."""
        if self.ready is None:
            return 0
        a = self.arrays
        done = np.flatnonzero(self.ready)
        term = np.searchsorted(a["term_block"], done, side="right") - 1
        df = np.asarray(a["indptr"][term + 1], np.int64) - a["indptr"][term]
        ends = (done - a["term_block"][term] + 1) * numpy_path.BLOCK  # a full block's end
        return int(np.minimum(ends, df).sum() - (ends - numpy_path.BLOCK).sum())

    def verify(self, terms: np.ndarray, byte_checks: dict[str, tuple[Any, int]]) -> None:
        """Verify the bytes the decoder reads for ``terms`` (int64) with ``byte_checks`` (see
        :meth:`decode`)."""
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
        for name, (checker, offset) in byte_checks.items():
            if name in spans:
                lo, hi = spans[name]
                size = a[name].itemsize
                checker.ensure(offset + lo * size, offset + hi * size)

    def decode_term(
        self, t: int, byte_checks: dict[str, tuple[Any, int]] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The postings of term ``t``, decoded and checked into new arrays: ``(doc ids int32,
        weights float32)``. StoreError when they are damaged."""
        a = self.arrays
        indptr = a["indptr"]
        df = int(indptr[t + 1] - indptr[t])
        docs, w = np.empty(df, np.int32), np.empty(df, np.float32)
        if df:
            self.verify(np.array([t], np.int64), byte_checks or {})
            wg = self.weighing
            problem = bm25_codec.decode_term_checked(
                a["term_block"],
                a["blk_last"],
                a["blk_word"],
                a["blk_dw"],
                a["blk_tw"],
                a["words"],
                np.int64(t),
                np.int64(df),
                a["doc_len"],
                wg.idf[t],
                wg.base[t],
                wg.method,
                wg.avgdl,
                wg.k1,
                wg.b,
                wg.delta,
                a["term_max"][t],
                docs,
                w,
            )
            if problem:
                raise_problem(t, problem, a["doc_len"].shape[0])
        return docs, w

    def decode(
        self,
        terms: np.ndarray,
        indices: np.ndarray,
        data: np.ndarray,
        byte_checks: dict[str, tuple[Any, int]] | None = None,
        *,
        twin: bool = False,
    ) -> None:
        """Decode the postings of ``terms`` (int64, in the vocabulary) into their places in
        the writable uncompressed ``indices`` / ``data``, checked as the kernels need them
        (and marked decoded for :meth:`lazy`'s kernels). ``byte_checks`` maps array names to
        ``(checker, offset)`` (a store's chunk checksums, see
        ``BM25Index.verify_postings_with``): the bytes the decoder reads are verified first.
        StoreError naming the first bad term and what is wrong with it. ``twin``: decode with
        the NumPy twin (the same postings; no numba)."""
        a = self.arrays
        tb = a["term_block"]
        self.verify(terms, byte_checks or {})
        decode_terms = numpy_path.decode_terms if twin else bm25_codec.decode_terms
        bad, problem = decode_terms(
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
            raise_problem(bad, problem, a["doc_len"].shape[0])
        if self.ready is not None and terms.size:
            n = tb[terms + 1] - tb[terms]
            self.ready[np.repeat(tb[terms] - np.cumsum(n) + n, n) + np.arange(int(n.sum()))] = 1
            self.term_ready[terms] = 1


def no_lazy() -> tuple:
    """The ``lz`` tuple of an index that is not packed (its kernels' helpers return at once):
    the same types as :meth:`PackedPostings.lazy`'s, so both share one compiled kernel."""
    i8, u4, u1, f8 = np.int64, np.uint32, np.uint8, np.float64
    return (
        np.zeros(0, u1),
        *(readonly(np.zeros(0, d)) for d in (i8, u4, i8, u1, u1, u4, u4, f8, f8, np.float32)),
        np.zeros(0, np.int32),
        np.zeros(0, np.float32),
        readonly(np.zeros(4, f8)),
        readonly(np.zeros(1, i8)),
        np.zeros(2, i8),
        np.zeros(0, u1),
    )
