"""Exact BM25 index over token ids: numba build and top-k scoring.

A :class:`BM25Index` holds precomputed float32 BM25 weights in term-major CSC arrays
(``indptr``, ``indices``, ``data``) plus a per-term upper bound (``term_max``) used to prune
work that cannot change the top-k. Results are exact and identical to a dense evaluation.

Corpus statistics (document frequencies, number of documents, number of tokens) are a separate
:class:`BM25Stats` value: shards of one large corpus can each be built with the merged global
statistics (:meth:`BM25Stats.merge`), so every shard scores exactly as the whole corpus would.

Query semantics (matching bm25s 0.3.16): a query is a sequence of token ids already mapped to
the vocabulary; a token repeated in the query counts once per occurrence (its weight is added
twice for two occurrences). For ``bm25l``/``bm25+`` every document also receives each query
token's tf = 0 weight, exactly as bm25s adds its "non-occurrence" array.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from .._checks import check_int
from .._coldstart import kernels_ready
from ..errors import ConfigError, StoreError
from . import bm25_numpy

BM25_METHODS: tuple[str, ...] = ("lucene", "robertson", "atire", "bm25l", "bm25+")
"""Known BM25 variants (``lucene`` is the default, as in bm25s)."""

SEARCH_STRATEGIES: tuple[str, ...] = ("auto", "maxscore", "touched", "dense")
"""Exact scoring strategies (same results); ``auto`` picks per query, the others are forced
choices for benchmarks (see ``fastrag._kernels.bm25``)."""

FORMAT = "fastrag.bm25/1"

# Rank directories (see ``fastrag._kernels.bm25.build_rank_rows``): for the terms in at least
# 1/RANK_DF_DIVISOR of the documents of an index of at least RANK_MIN_DOCS documents, built on
# the first query that needs one. 16 bytes per 64 documents per term: at most
# RANK_DF_DIVISOR / 32 of the size of the term's own postings (8 bytes each), half at 16.
RANK_MIN_DOCS = 1 << 16
RANK_DF_DIVISOR = 16
# Impact heads (see ``fastrag._kernels.bm25.build_head_rows``): the same terms also keep their
# heaviest max(HEAD_MIN, df // HEAD_DF_DIVISOR) postings, heaviest first (8 bytes each: 1/32 of
# the term's postings), so that a query whose bar already excludes the other postings admits
# new rows from the head alone instead of reading the whole list.
HEAD_DF_DIVISOR = 32
HEAD_MIN = 256


def _head_lengths(df: np.ndarray) -> np.ndarray:
    """Impact head length of terms with document frequencies ``df`` (int64)."""
    df = df.astype(np.int64)
    return np.minimum(df, np.maximum(HEAD_MIN, df // HEAD_DF_DIVISOR))


_INT32_MAX = np.iinfo(np.int32).max
_INT32_MIN = np.iinfo(np.int32).min


def _kernels():
    """The numba kernel modules (imported on first use: nothing compiles at import)."""
    from fastrag._kernels import bm25 as kbm25

    return kbm25


@dataclass(frozen=True, eq=False)
class BM25Stats:
    """Corpus statistics BM25 weights depend on: ``n_docs``, ``n_tokens`` (sum of document
    lengths; ``avgdl = n_tokens / n_docs``) and ``df`` (int64 ``[n_vocab]``, documents that
    contain each term)."""

    n_docs: int
    n_tokens: int
    df: np.ndarray

    @property
    def avgdl(self) -> float:
        """Average document length in tokens."""
        return self.n_tokens / self.n_docs if self.n_docs else 0.0

    @property
    def n_vocab(self) -> int:
        return int(self.df.shape[0])

    @classmethod
    def from_tokens(cls, values: np.ndarray, offsets: np.ndarray, n_vocab: int) -> BM25Stats:
        """Statistics of a ragged token-id corpus (``values`` int32, ``offsets`` int64)."""
        values, offsets, n_vocab = _check_corpus(values, offsets, n_vocab)
        df = _document_frequencies(values, offsets, n_vocab)
        return cls(int(offsets.shape[0] - 1), int(offsets[-1] - offsets[0]), df)

    @classmethod
    def merge(cls, parts: list[BM25Stats]) -> BM25Stats:
        """Statistics of the union of disjoint corpora (e.g. the shards of one corpus)."""
        parts = list(parts)
        if not parts:
            raise ConfigError("BM25Stats.merge needs at least one BM25Stats; got none")
        sizes = {p.n_vocab for p in parts}
        if len(sizes) != 1:
            raise ConfigError(
                f"BM25Stats.merge needs one shared vocabulary; got n_vocab values {sorted(sizes)}"
            )
        df = np.zeros(parts[0].n_vocab, np.int64)
        for p in parts:
            df += p.df
        return cls(sum(p.n_docs for p in parts), sum(p.n_tokens for p in parts), df)


class BM25Index:
    """Exact BM25 top-k over a corpus of token ids. Build with :meth:`build`, query with
    :meth:`search` (a batch; one query is a batch of one) or :meth:`get_scores`."""

    def __init__(
        self,
        *,
        indptr: np.ndarray,
        indices: np.ndarray,
        data: np.ndarray,
        term_max: np.ndarray,
        stats: BM25Stats,
        n_docs: int,
        n_tokens: int,
        method: str,
        k1: float,
        b: float,
        delta: float,
        external_stats: bool,
    ) -> None:
        # Index arrays are immutable: kept (and passed to the kernels) as read-only views, so
        # built and memory-mapped indexes share one compiled kernel signature.
        self.indptr = _readonly(indptr)
        self.indices = _readonly(indices)
        self.data = _readonly(data)
        self.term_max = _readonly(term_max)
        self.stats = stats
        self.n_docs = int(n_docs)
        self.n_vocab = int(indptr.shape[0] - 1)
        self.n_tokens = int(n_tokens)
        self.method = method
        self.params = {"k1": float(k1), "b": float(b), "delta": float(delta)}
        self._external_stats = bool(external_stats)
        # terms whose postings are not yet bounds-checked (an index from untrusted arrays)
        self._unchecked: np.ndarray | None = None
        idf = _kernels().idf_weights(method, stats.df, stats.n_docs)
        self.base_weights = _readonly(
            _kernels().base_weights_for(method, idf, float(k1), float(delta)).astype(np.float32)
        )
        self._pool: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._lock = threading.Lock()
        self._no_mask = _readonly(np.zeros(0, dtype=np.bool_))
        # Rank directories, built term by term on first use (under _rank_lock); a slot is
        # published (rank_slot[t] set) only after its row is complete, and rows never change
        # afterwards, so searches read both without a lock.
        self._rank_lock = threading.Lock()
        self._rank_slot = np.full(0, -1, np.int32)
        self._rank_dir = np.zeros((0, 0), np.uint64)
        self._rank_used = 0
        self._rank_pending: np.ndarray | None = None
        # Impact heads share the rank directories' slots: entries [head_ptr[s], head_ptr[s+1])
        # of head_doc/head_w, written before the slot is published.
        self._head_ptr = np.zeros(0, np.int64)
        self._head_doc = np.zeros(0, np.int32)
        self._head_w = np.zeros(0, np.float32)
        if self.n_docs >= RANK_MIN_DOCS:
            df = np.diff(self.indptr)
            dense = np.flatnonzero(df >= max(self.n_docs // RANK_DF_DIVISOR, 1))
            if dense.size:
                self._rank_pending = np.zeros(self.n_vocab, dtype=bool)
                self._rank_pending[dense] = True
                self._rank_slot = np.full(self.n_vocab, -1, np.int32)
                self._head_ptr = np.zeros(dense.size + 1, np.int64)

    # ---------------------------------------------------------------------------- build
    @classmethod
    def build(
        cls,
        values: np.ndarray,
        offsets: np.ndarray,
        n_vocab: int,
        *,
        method: str = "lucene",
        k1: float = 1.5,
        b: float = 0.75,
        delta: float = 0.5,
        stats: BM25Stats | None = None,
    ) -> BM25Index:
        """Build the index of a ragged token-id corpus.

        ``values``: int token ids in ``[0, n_vocab)``; ``offsets``: int64 ``[n_docs + 1]``,
        non-decreasing (document ``d`` is ``values[offsets[d]:offsets[d+1]]``; Arrow-style
        offsets that do not start at 0 are fine). ``method`` is one of :data:`BM25_METHODS`;
        ``delta`` only matters for ``bm25l``/``bm25+``. ``stats``: global statistics to weigh
        with instead of this corpus's own (sharding); they must cover this corpus."""
        method = _check_method(method)
        k1, b, delta = _check_params(k1, b, delta)
        values, offsets, n_vocab = _check_corpus(values, offsets, n_vocab)
        kb = _kernels()
        cold = not kernels_ready()
        if cold:  # kernels compiling in the background: the same arrays from NumPy
            local_df, bad, built = bm25_numpy.postings(values, offsets, n_vocab)
            _raise_bad_token(bad, values, n_vocab)
        else:
            local_df = _document_frequencies(values, offsets, n_vocab)
        n_docs = int(offsets.shape[0] - 1)
        n_tokens = int(offsets[-1] - offsets[0])
        if stats is None:
            use = BM25Stats(n_docs, n_tokens, local_df)
        else:
            use = _check_stats(stats, local_df, n_docs, n_tokens)
        idf = kb.idf_weights(method, use.df, use.n_docs)
        base = kb.base_weights_for(method, idf, k1, delta)
        if cold:
            indptr, indices, data = built
            weigh = bm25_numpy.weigh_postings
        else:
            indptr, indices, data = kb.build_postings(values, offsets, n_vocab, local_df)
            weigh = kb.weigh_postings
        term_max = weigh(
            indptr,
            indices,
            data,
            offsets,
            idf,
            base,
            kb.METHOD_CODES[method],
            k1,
            b,
            delta,
            use.avgdl,
        )
        if indptr[-1] <= _INT32_MAX:
            indptr = indptr.astype(np.int32)
        return cls(
            indptr=indptr,
            indices=indices,
            data=data,
            term_max=term_max,
            stats=use,
            n_docs=n_docs,
            n_tokens=n_tokens,
            method=method,
            k1=k1,
            b=b,
            delta=delta,
            external_stats=stats is not None,
        )

    # ---------------------------------------------------------------------------- search
    def search(
        self,
        q_values: np.ndarray,
        q_offsets: np.ndarray,
        k: int,
        *,
        mask: np.ndarray | None = None,
        cutoff: float | None = None,
        num_threads: int | None = None,
        strategy: str = "auto",
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Exact top-``k`` of a batch of queries ``q_values[q_offsets[i]:q_offsets[i+1]]``.

        Returns ``(rows, scores, counts)``: ``rows`` int64 ``[n_queries, k]`` (best first, ties
        by row order, padded with -1), ``scores`` float32 ``[n_queries, k]`` (padded with
        ``-inf``), ``counts`` int32 ``[n_queries]`` (hits per query). A hit is a document
        containing at least one query term with a positive weight, ``mask[row]`` True when
        a bool ``mask`` ``[n_docs]`` is given, and a score ``>= cutoff`` when given.
        ``num_threads``: numba threads for this call (default: numba's current setting);
        batches below ``PARALLEL_MIN_QUERIES`` queries run serially. ``strategy``: one of
        :data:`SEARCH_STRATEGIES` (all exact; the default ``auto`` is the fastest)."""
        # Kept lean: one query is a batch of one, and this wrapper is most of its latency.
        # Token-id range and offset order are checked inside the kernel (error code).
        k = _check_k(k)
        qv = _ragged_array(q_values, "q_values", np.int32)
        if self._unchecked is not None:
            self._check_postings(qv)
        qo = _ragged_array(q_offsets, "q_offsets", np.int64)
        if qo.shape[0] < 1:
            raise ConfigError("q_offsets needs at least 1 entry (n + 1 for n queries); got 0")
        cold = not kernels_ready()
        if cold:  # a batch slower on NumPy than the compile has left waits for the compile
            cold = not kernels_ready(
                bm25_numpy.estimate_seconds(self.indptr, self.n_docs, qv, qo.shape[0] - 1)
            )
        if self._rank_pending is not None and qv.shape[0]:
            self._build_rank(qv)
        n_q = qo.shape[0] - 1
        has_mask, mask_arr = self._check_mask(mask)
        has_cutoff, cut = _check_cutoff(cutoff)
        code = _strategy_code(strategy)
        threads = _check_threads(num_threads)
        rows = np.empty((n_q, k), np.int64)
        scores = np.empty((n_q, k), np.float32)
        counts = np.empty(n_q, np.int32)
        kb = _kernels()
        slots = threads if (threads > 1 and n_q >= kb.PARALLEL_MIN_QUERIES) else 1
        scratch = self._acquire(slots)
        ok = False
        try:
            if cold:  # compiling in the background: NumPy, same results
                err = bm25_numpy.search_batch(
                    self.indptr,
                    self.indices,
                    self.data,
                    self.term_max,
                    self.base_weights,
                    self.n_docs,
                    qv,
                    qo,
                    k,
                    mask_arr,
                    has_mask,
                    cut,
                    has_cutoff,
                    rows,
                    scores,
                    counts,
                )
            elif slots == 1:
                err = kb.search_batch_serial(
                    self.indptr,
                    self.indices,
                    self.data,
                    self.term_max,
                    self.base_weights,
                    qv,
                    qo,
                    k,
                    mask_arr,
                    has_mask,
                    cut,
                    has_cutoff,
                    code,
                    scratch[0][0],
                    scratch[1][0],
                    scratch[2][0],
                    rows,
                    scores,
                    counts,
                    self._rank_slot,
                    self._rank_dir,
                    self._head_ptr,
                    self._head_doc,
                    self._head_w,
                )
            else:
                import numba

                before = numba.get_num_threads()
                numba.set_num_threads(threads)
                try:
                    err = kb.search_batch_parallel(
                        self.indptr,
                        self.indices,
                        self.data,
                        self.term_max,
                        self.base_weights,
                        qv,
                        qo,
                        k,
                        mask_arr,
                        has_mask,
                        cut,
                        has_cutoff,
                        code,
                        scratch[0][:slots],
                        scratch[1][:slots],
                        scratch[2][:slots],
                        rows,
                        scores,
                        counts,
                        self._rank_slot,
                        self._rank_dir,
                        self._head_ptr,
                        self._head_doc,
                        self._head_w,
                    )
                finally:
                    numba.set_num_threads(before)
            ok = True
        finally:
            if ok:
                self._release(scratch)
        if err != -1:
            _raise_query_error(int(err), qv, qo, self.n_vocab)
        return rows, scores, counts

    @property
    def rank_nbytes(self) -> int:
        """Bytes of the rank directories built so far (derived from the postings on first
        use, never saved; see ``RANK_DF_DIVISOR``)."""
        return int(self._rank_used * self._rank_dir.shape[1] * 8)

    @property
    def head_nbytes(self) -> int:
        """Bytes of the impact heads built so far (built with the rank directories, never
        saved; see ``HEAD_DF_DIVISOR``)."""
        return int(self._head_ptr[self._rank_used] * 8) if self._head_ptr.shape[0] else 0

    def build_rank_directories(self) -> int:
        """Build now every rank directory and impact head that searches would otherwise build
        on first use (for predictable latency after loading a large index); returns the bytes
        they take, :attr:`rank_nbytes` + :attr:`head_nbytes`."""
        pending = self._rank_pending  # once: a concurrent search may finish it and clear it
        if pending is not None:
            terms = np.flatnonzero(pending).astype(np.int32)
            if self._unchecked is not None:
                self._check_postings(terms)
            self._build_rank(terms, force=True)
        return self.rank_nbytes + self.head_nbytes

    def _build_rank(self, qv: np.ndarray, force: bool = False) -> None:
        """Build the rank directories and impact heads the query terms ``qv`` lack (once per
        term)."""
        pending = self._rank_pending
        if pending is None or not np.take(pending, qv, mode="clip").any():
            return
        if not (force or kernels_ready()):  # the NumPy path does not use them
            return
        with self._rank_lock:
            t = np.unique(qv[(qv >= 0) & (qv < self.n_vocab)])
            t = t[pending[t]].astype(np.int64)
            if not t.size:
                return
            if not self._rank_dir.shape[0]:
                # Zeroed pages are mapped on first write: unused slots cost no memory. The heads
                # are set before rank_dir: a search that reads rank_dir (first) as allocated
                # then reads allocated heads too.
                cap = int(_head_lengths(np.diff(self.indptr)[pending]).sum())
                self._head_doc = np.zeros(cap, np.int32)
                self._head_w = np.zeros(cap, np.float32)
                self._rank_dir = np.zeros(
                    (int(pending.sum()), 2 * ((self.n_docs + 63) >> 6)), np.uint64
                )
            slots = np.arange(self._rank_used, self._rank_used + t.size, dtype=np.int64)
            kb = _kernels()
            bad = kb.build_rank_rows(
                self.indptr, self.indices, self.n_docs, t, slots, self._rank_dir
            )
            if bad != -1:
                raise StoreError(
                    f"BM25 index arrays are inconsistent (doc ids outside [0, {self.n_docs}) in "
                    f"the postings of term {int(t[bad])}); the index files are corrupt: rebuild "
                    "the index"
                )
            ends = self._head_ptr[self._rank_used] + np.cumsum(
                _head_lengths(self.indptr[t + 1] - self.indptr[t])
            )
            self._head_ptr[self._rank_used + 1 : self._rank_used + 1 + t.size] = ends
            kb.build_head_rows(
                self.indptr,
                self.indices,
                self.data,
                t,
                slots,
                self._head_ptr,
                self._head_doc,
                self._head_w,
            )
            self._rank_slot[t] = slots  # publish: the rows and heads are complete
            self._rank_used += t.size
            pending[t] = False
            if not pending.any():
                self._rank_pending = None

    def check_postings(self) -> None:
        """Check every posting now (doc ids in range and strictly increasing per term, weights
        finite and within their term's bound): what searches of an index loaded from arrays
        check lazily, term by term. StoreError when one is not."""
        if self._unchecked is not None:
            self._check_postings(np.arange(self.n_vocab, dtype=np.int64))

    def _check_postings(self, terms: np.ndarray) -> None:
        """Bounds-check the postings of ``terms`` that were not checked yet. An index loaded
        from arrays is checked lazily, term by term, before any kernel reads a posting: a fresh
        process reads only the postings its queries read (memory-mapped pages stay cold)."""
        unchecked = self._unchecked
        if unchecked is None:
            return
        t = np.unique(terms)
        t = t[(t >= 0) & (t < self.n_vocab)]  # other ids are the kernel's error to report
        t = t[unchecked[t]]
        starts = self.indptr[t].astype(np.int64)
        lens = self.indptr[t + 1].astype(np.int64) - starts
        ends = np.cumsum(lens)
        lo = 0
        while lo < len(t):  # chunks of about 4M postings bound the temporary arrays
            hi = max(int(np.searchsorted(ends, ends[lo] - lens[lo] + (1 << 22))), lo + 1)
            n, s = lens[lo:hi], starts[lo:hi]
            total = int(n.sum())
            if total:
                idx = np.repeat(s - (np.cumsum(n) - n), n) + np.arange(total)
                docs = self.indices[idx].view(np.uint32).astype(np.int64)
                weights = self.data[idx]
                first = np.zeros(total, np.bool_)  # the first posting of each term
                first[(np.cumsum(n) - n)[n > 0]] = True
                problem = None
                if int(docs.max()) >= self.n_docs:
                    problem = f"doc ids outside [0, {self.n_docs})"
                elif np.any((docs[1:] <= docs[:-1]) & ~first[1:]):
                    problem = "doc ids not strictly increasing"
                elif not np.isfinite(weights).all() or np.any(
                    weights > np.repeat(self.term_max[t[lo:hi]], n)
                ):
                    problem = "weights NaN, infinite or above their term's bound"
                if problem:
                    raise StoreError(
                        f"BM25 index arrays are inconsistent ({problem} in the postings of "
                        f"terms {t[lo:hi][:5].tolist()}...); the index files are corrupt: "
                        "rebuild the index"
                    )
            unchecked[t[lo:hi]] = False
            lo = hi
        if not unchecked.any():
            self._unchecked = None

    def get_scores(self, q_values: np.ndarray) -> np.ndarray:
        """Dense BM25 scores (float32 ``[n_docs]``) of one query given as token ids."""
        qv, _ = _check_queries(q_values, None, self.n_vocab)
        if self._unchecked is not None:
            self._check_postings(qv)
        out = np.empty(self.n_docs, np.float32)
        score = _kernels().score_dense if kernels_ready() else bm25_numpy.score_dense
        score(self.indptr, self.indices, self.data, self.base_weights, qv, out)
        return out

    # ---------------------------------------------------------------------------- persistence
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays that define the index (save them with ``np.save``; load with
        :meth:`from_arrays`, memory-mapped read-only is fine). ``stats_df`` is present only
        when the index was built with external statistics; otherwise ``df`` is
        ``np.diff(indptr)``."""
        out = {
            "indptr": self.indptr,
            "indices": self.indices,
            "data": self.data,
            "term_max": self.term_max,
        }
        if self._external_stats:
            out["stats_df"] = self.stats.df
        return out

    def meta(self) -> dict:
        """JSON-serializable scalars that, with :meth:`to_arrays`, restore the index."""
        return {
            "format": FORMAT,
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
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict) -> BM25Index:
        """Restore an index from :meth:`to_arrays` + :meth:`meta` (arrays may be read-only or
        memory-mapped; nothing is copied)."""
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
            raise StoreError(
                f"BM25 index meta has format {got!r}, expected {FORMAT!r}; "
                "rebuild the index with this fastrag version"
            )
        problem = _meta_problem(meta)
        if problem:
            raise StoreError(
                f"BM25 index meta is invalid ({problem}); the index is damaged: rebuild the index"
            )
        need = ["indptr", "indices", "data", "term_max"] + (
            ["stats_df"] if meta.get("external_stats") else []
        )
        missing = [n for n in need if n not in arrays]
        if missing:
            raise StoreError(f"BM25 index arrays are missing {missing}; rebuild the index")
        a = {n: np.ascontiguousarray(arrays[n]) for n in need}
        n_vocab = int(meta["n_vocab"])
        nnz = int(meta["nnz"])
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
        n_docs = int(meta["n_docs"])
        problem = _bounds_problem(a, n_docs, n_vocab, bool(meta.get("external_stats")))
        if problem:
            raise StoreError(
                f"BM25 index arrays are inconsistent ({problem}); the index files "
                "are corrupt: rebuild the index"
            )
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
        )
        index._unchecked = np.ones(index.n_vocab, dtype=bool)
        return index

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays that define the index (what :meth:`to_arrays` returns)."""
        return int(sum(v.nbytes for v in self.to_arrays().values()))

    def __repr__(self) -> str:
        return (
            f"BM25Index(method={self.method!r}, n_docs={self.n_docs}, "
            f"n_vocab={self.n_vocab}, nnz={int(self.indptr[-1])}, {self.params})"
        )

    # ---------------------------------------------------------------------------- internals
    def _check_mask(self, mask):
        if mask is None:
            return False, self._no_mask
        if (
            not isinstance(mask, np.ndarray)
            or mask.dtype != np.bool_
            or mask.shape != (self.n_docs,)
        ):
            desc = (
                f"{mask.dtype} array of shape {mask.shape}"
                if isinstance(mask, np.ndarray)
                else type(mask).__name__
            )
            raise ConfigError(
                f"mask must be a bool array of shape ({self.n_docs},) (one entry "
                f"per document); got {desc}"
            )
        return True, _readonly(np.ascontiguousarray(mask))

    def _acquire(self, slots: int):
        """Scratch for ``slots`` concurrent queries: acc zeros and pos -1 ``[slots, n_docs]``,
        touched ``[slots, n_docs + 1]``; kernels hand them back clean, so they are pooled."""
        with self._lock:
            for i, s in enumerate(self._pool):
                if s[0].shape[0] >= slots:
                    return self._pool.pop(i)
        n = max(self.n_docs, 1)
        return (
            np.zeros((slots, n), np.float32),
            np.full((slots, n), -1, np.int32),
            np.empty((slots, n + 1), np.int32),
        )

    def _release(self, scratch) -> None:
        with self._lock:
            if len(self._pool) < 4:
                self._pool.append(scratch)


# -------------------------------------------------------------------------------- validation
def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (no copy)."""
    v = a.view()
    v.flags.writeable = False
    return v


def _check_method(method) -> str:
    if not isinstance(method, str) or method not in BM25_METHODS:
        raise ConfigError(
            f"unknown BM25 method {method!r}; known methods: "
            f"{', '.join(BM25_METHODS)} (pass method= one of them; "
            "'lucene' is the default)"
        )
    return method


def check_bm25_params(
    method: str = "lucene", k1: float = 1.5, b: float = 0.75, delta: float = 0.5
) -> dict:
    """The BM25 parameters as :meth:`BM25Index.build` takes them, validated (ConfigError
    naming the bad value and the fix): lets a caller fail before any index is built."""
    k1, b, delta = _check_params(k1, b, delta)
    return {"method": _check_method(method), "k1": k1, "b": b, "delta": delta}


_STRATEGY_CODES = {"auto": 3, "maxscore": 2, "touched": 1, "dense": 0}  # kernels' STRATEGY_*


def _strategy_code(strategy) -> int:
    code = _STRATEGY_CODES.get(strategy) if isinstance(strategy, str) else None
    if code is None:
        raise ConfigError(
            f"unknown search strategy {strategy!r}; known strategies: "
            f"{', '.join(SEARCH_STRATEGIES)}"
        )
    return code


def _ragged_array(x, name: str, dtype) -> np.ndarray:
    """``x`` as a read-only, contiguous 1-D array of ``dtype`` (fast path: already is)."""
    arr = x if isinstance(x, np.ndarray) else np.asarray(x)
    if arr.ndim != 1:
        raise ConfigError(f"{name} must be a 1-D integer array; got shape {arr.shape}")
    if arr.dtype != dtype:
        if arr.size and arr.dtype.kind not in "iu":
            raise ConfigError(f"{name} must hold integers; got dtype {arr.dtype}")
        if arr.size and dtype == np.int32 and (arr.min() < _INT32_MIN or arr.max() > _INT32_MAX):
            bad = int(arr.min()) if arr.min() < _INT32_MIN else int(arr.max())
            raise ConfigError(
                f"query token id {bad} is outside the vocabulary; drop tokens the "
                "vocabulary does not know before searching"
            )
        arr = arr.astype(dtype)
    elif not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    if arr.flags.writeable:
        arr = _readonly(arr)
    return arr


def _raise_query_error(err: int, qv: np.ndarray, qo: np.ndarray, n_vocab: int) -> None:
    """Turn a :func:`check_queries` code into the error it stands for."""
    if err >= 0:
        raise ConfigError(
            f"query token id {int(qv[err])} is outside the vocabulary "
            f"[0, {n_vocab}); drop tokens the vocabulary does not know before "
            "searching"
        )
    _check_offsets(qo, qv.shape[0], "q_offsets", 1)  # raises with the precise message
    raise ConfigError(f"q_offsets entry {-2 - err} is invalid")  # pragma: no cover


def _check_params(k1, b, delta) -> tuple[float, float, float]:
    for name, v in (("k1", k1), ("b", b), ("delta", delta)):
        if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v):
            raise ConfigError(f"BM25 parameter {name}={v!r} must be a finite number")
    if k1 < 0:
        raise ConfigError(f"BM25 parameter k1={k1!r} must be >= 0 (typical: 1.2 to 2.0)")
    if not 0.0 <= b <= 1.0:
        raise ConfigError(f"BM25 parameter b={b!r} must be within [0, 1] (typical: 0.75)")
    if delta < 0:
        raise ConfigError(f"BM25 parameter delta={delta!r} must be >= 0 (typical: 0.5 to 1)")
    return float(k1), float(b), float(delta)


def _check_k(k) -> int:
    return check_int("k", k, min=1, note="the number of hits per query")


def _as_int_array(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ConfigError(f"{name} must be a 1-D integer array; got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ConfigError(f"{name} must hold integers; got dtype {arr.dtype}")
    return arr


def _check_offsets(offsets, n_values: int, name: str, min_len: int) -> np.ndarray:
    off = _as_int_array(offsets, name).astype(np.int64, copy=False)
    if off.shape[0] < min_len:
        raise ConfigError(
            f"{name} needs at least {min_len} entries (n + 1 for n items); got {off.shape[0]}"
        )
    if off.shape[0] and (off[0] < 0 or off[-1] > n_values):
        raise ConfigError(
            f"{name} spans [{off[0]}, {off[-1]}] but the values array has "
            f"{n_values} entries; offsets must lie within [0, {n_values}]"
        )
    if off.shape[0] > 1 and bool(np.any(off[1:] < off[:-1])):
        i = int(np.argmax(off[1:] < off[:-1]))
        raise ConfigError(
            f"{name} must be non-decreasing; {name}[{i + 1}]={off[i + 1]} < {name}[{i}]={off[i]}"
        )
    return off


def _check_corpus(values, offsets, n_vocab):
    if (
        isinstance(n_vocab, bool)
        or not isinstance(n_vocab, Integral)
        or not (1 <= n_vocab <= _INT32_MAX)
    ):
        raise ConfigError(
            f"n_vocab={n_vocab!r} must be an int in [1, {_INT32_MAX}] (the "
            "vocabulary size, max token id + 1)"
        )
    vals = _as_int_array(values, "values")
    if vals.dtype != np.int32:
        if vals.size and (vals.min() < 0 or vals.max() >= n_vocab):
            bad = int(vals[(vals < 0) | (vals >= n_vocab)][0])
            raise ConfigError(
                f"token id {bad} is outside the vocabulary [0, {n_vocab}); "
                "map tokens to ids below n_vocab"
            )
        vals = vals.astype(np.int32)
    off = _check_offsets(offsets, vals.shape[0], "offsets", 2)
    return (
        _readonly(np.ascontiguousarray(vals)),
        _readonly(np.ascontiguousarray(off)),
        int(n_vocab),
    )


def _document_frequencies(values, offsets, n_vocab) -> np.ndarray:
    if kernels_ready():
        df, bad = _kernels().count_document_frequencies(values, offsets, n_vocab)
    else:
        df, bad, _ = bm25_numpy.postings(values, offsets, n_vocab)
    _raise_bad_token(bad, values, n_vocab)
    return df


def _raise_bad_token(bad: int, values: np.ndarray, n_vocab: int) -> None:
    if bad >= 0:
        raise ConfigError(
            f"token id {int(values[bad])} at values[{bad}] is outside the "
            f"vocabulary [0, {n_vocab}); map tokens to ids below n_vocab"
        )


def _check_stats(stats, local_df, n_docs, n_tokens) -> BM25Stats:
    if not isinstance(stats, BM25Stats):
        raise ConfigError(f"stats must be a BM25Stats; got {type(stats).__name__}")
    if stats.n_vocab != local_df.shape[0]:
        raise ConfigError(
            f"stats cover {stats.n_vocab} terms but n_vocab={local_df.shape[0]}; "
            "use statistics of the same vocabulary"
        )
    if stats.n_docs < n_docs or stats.n_tokens < n_tokens or bool(np.any(stats.df < local_df)):
        raise ConfigError(
            "stats do not cover this corpus (fewer documents, tokens or document "
            "frequencies than it has); merge the statistics of every shard, "
            "this one included, with BM25Stats.merge"
        )
    return BM25Stats(
        int(stats.n_docs), int(stats.n_tokens), np.ascontiguousarray(stats.df, dtype=np.int64)
    )


def _check_queries(q_values, q_offsets, n_vocab):
    qv = _as_int_array(q_values, "q_values")
    if q_offsets is None:
        lo, hi = 0, qv.shape[0]
        qo = None
    else:
        qo = _check_offsets(q_offsets, qv.shape[0], "q_offsets", 1)
        lo, hi = (int(qo[0]), int(qo[-1])) if qo.shape[0] else (0, 0)
    if hi > lo:
        used = qv[lo:hi]
        mn, mx = int(used.min()), int(used.max())
        if mn < 0 or mx >= n_vocab:
            bad = mn if mn < 0 else mx
            raise ConfigError(
                f"query token id {bad} is outside the vocabulary [0, {n_vocab}); "
                "drop tokens the vocabulary does not know before searching"
            )
    return _readonly(np.ascontiguousarray(qv, dtype=np.int32)), (
        None if qo is None else _readonly(np.ascontiguousarray(qo))
    )


def _check_cutoff(cutoff):
    if cutoff is None:
        return False, 0.0
    if isinstance(cutoff, bool) or not isinstance(cutoff, Real) or math.isnan(cutoff):
        raise ConfigError(f"cutoff={cutoff!r} must be a number (minimum score kept) or None")
    return True, float(cutoff)


def _check_threads(num_threads) -> int:
    import numba

    if num_threads is None:
        return int(numba.get_num_threads())
    limit = int(numba.config.NUMBA_NUM_THREADS)
    return check_int(
        "num_threads",
        num_threads,
        min=1,
        max=limit,
        note=f"{limit} is numba's thread pool, NUMBA_NUM_THREADS",
    )


__all__ = ["BM25_METHODS", "SEARCH_STRATEGIES", "BM25Index", "BM25Stats", "check_bm25_params"]


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
        _check_params(meta["k1"], meta["b"], meta["delta"])
    except ConfigError as exc:
        return str(exc)
    return None


def _bounds_problem(
    a: dict[str, np.ndarray], n_docs: int, n_vocab: int, external_stats: bool
) -> str | None:
    """What makes loaded index offsets unsafe for the kernels, or None. Postings (doc ids in
    range and increasing, weights finite and within ``term_max``) are checked per term on first
    use (:meth:`BM25Index._check_postings`); ``term_max`` here, it is small."""
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
