"""Exact BM25 index over token ids: numba build and top-k scoring.

A :class:`BM25Index` holds precomputed float32 BM25 weights in term-major CSC arrays
(``indptr``, ``indices``, ``data``) plus a per-term upper bound (``term_max``) used to prune
work that cannot change the top-k. Results are exact and identical to a dense evaluation.
Saved packed (:meth:`to_arrays` with ``packed=True``, :mod:`fastrag.indexes.bm25.packed`), an
index takes 1.3-1.7 bytes per posting and reopens without reading its postings: the search
kernels decode into these arrays the 128-posting blocks they reach (``fastrag._kernels.
bm25_lazy``), so a term looked up for a few documents costs a few blocks.

Corpus statistics (document frequencies, number of documents, number of tokens) are a separate
:class:`BM25Stats` value: shards of one large corpus can each be built with the merged global
statistics (:meth:`BM25Stats.merge`), so every shard scores exactly as the whole corpus would.

Query semantics (matching bm25s 0.3.16): a query is a sequence of token ids already mapped to
the vocabulary; a token repeated in the query counts once per occurrence (its weight is added
twice for two occurrences). For ``bm25l``/``bm25+`` every document also receives each query
token's tf = 0 weight, exactly as bm25s adds its "non-occurrence" array.

:class:`BM25Stats` lives in :mod:`fastrag.indexes.bm25.stats`, the argument checks in
:mod:`fastrag.indexes.bm25.args`, the checks of a loaded index in
:mod:`fastrag.indexes.bm25.stored`, the NumPy twin of the kernels (used while they compile) in
:mod:`fastrag.indexes.bm25.numpy_path`.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from fastrag._checks import readonly
from fastrag._lazy import LazyModule, kernels
from fastrag.errors import ConfigError, StoreError
from fastrag.indexes.base import (
    Hits,
    check_cutoff,
    check_k,
    check_mask,
    check_num_threads,
    search_threads,
)
from fastrag.indexes.bm25.args import (
    BM25_METHODS,
    INT32_MAX,
    SEARCH_STRATEGIES,
    check_corpus,
    check_method,
    check_params,
    check_queries,
    check_strategy,
    check_window,
    ragged_array,
    raise_bad_token,
    raise_query_error,
    strategy_code,
    token_batch,
)
from fastrag.indexes.bm25.backend import NUMPY, backend
from fastrag.indexes.bm25.numpy_path import build_seconds, decode_seconds, estimate_seconds
from fastrag.indexes.bm25.packed import PackedPostings, no_lazy, raise_problem
from fastrag.indexes.bm25.persist import BM25Persistence
from fastrag.indexes.bm25.stats import BM25Stats, check_stats
from fastrag.indexes.bm25.stored import check_postings
from fastrag.indexes.bm25.weights import METHOD_CODES, base_weights_for, idf_weights

# on first use: a search that runs on the NumPy twin (one query, a small index) loads no numba
numba = LazyModule("numba")
kernel_config = kernels("_config")
bm25_heads = kernels("bm25.heads")
bm25_search = kernels("bm25.search")

# Rank directories (see ``fastrag._kernels.bm25.heads.build_rank_rows``): for the terms in at
# least 1/RANK_DF_DIVISOR of the documents of an index of at least RANK_MIN_DOCS documents,
# built on the first query that needs one. 16 bytes per 64 documents per term: at most
# RANK_DF_DIVISOR / 32 of the size of the term's own postings (8 bytes each), half at 16.
RANK_MIN_DOCS = 1 << 16
RANK_DF_DIVISOR = 16
# Impact heads (see ``fastrag._kernels.bm25.heads.build_head_rows``): the same terms also keep
# their heaviest max(HEAD_MIN, df // HEAD_DF_DIVISOR) postings, heaviest first (8 bytes each:
# 1/32 of the term's postings), so that a query whose bar already excludes the other postings
# admits new rows from the head alone instead of reading the whole list.
HEAD_DF_DIVISOR = 32
HEAD_MIN = 256


# the kernels' ``lz`` of an index that is not packed (shared: the kernels never write it)
NO_LAZY = no_lazy()


def _head_lengths(df: np.ndarray) -> np.ndarray:
    """Impact head length of terms with document frequencies ``df`` (int64)."""
    df = df.astype(np.int64)
    return np.minimum(df, np.maximum(HEAD_MIN, df // HEAD_DF_DIVISOR))


class BM25Index(BM25Persistence):
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
        doc_len: np.ndarray | None = None,
    ) -> None:
        # Index arrays are immutable: kept (and passed to the kernels) as read-only views, so
        # built and memory-mapped indexes share one compiled kernel signature.
        self.indptr = readonly(indptr)
        self.indices = readonly(indices)
        self.data = readonly(data)
        self.term_max = readonly(term_max)
        self.stats = stats
        self.n_docs = int(n_docs)
        self.n_vocab = int(indptr.shape[0] - 1)
        self.n_tokens = int(n_tokens)
        self.method = method
        self.params = {"k1": float(k1), "b": float(b), "delta": float(delta)}
        self._external_stats = bool(external_stats)
        # document lengths (uint32 [n_docs]): what recomputes a weight from a tf code
        self._doc_len = None if doc_len is None else readonly(doc_len)
        # terms whose postings are not yet bounds-checked (an index from untrusted arrays)
        self._unchecked: np.ndarray | None = None
        self._byte_checks: dict[str, tuple[Any, int]] = {}
        # The packed (block codec) arrays: those it was loaded from, whose postings the
        # kernels decode into ``indices``/``data`` block by block (whole terms under
        # _decode_lock for the NumPy path and the checks), or those packed from this index on
        # first request.
        self._packed: PackedPostings | None = None
        self._writable: tuple[np.ndarray, np.ndarray] | None = None  # decoded into
        # what the search kernels decode blocks with (bm25_lazy), and the terms whose packed
        # bytes a store has not verified yet (see verify_postings_with)
        self._lz = NO_LAZY
        self._unverified: np.ndarray | None = None
        self._decode_lock = threading.Lock()
        self._idf = idf_weights(method, stats.df, stats.n_docs)
        self._base = base_weights_for(method, self._idf, float(k1), float(delta))
        self.base_weights = readonly(self._base.astype(np.float32))
        self._pool: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._lock = threading.Lock()
        self._no_mask = readonly(np.zeros(0, dtype=np.bool_))
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
        method = check_method(method)
        k1, b, delta = check_params(k1, b, delta)
        values, offsets, n_vocab = check_corpus(values, offsets, n_vocab)
        n_tokens = int(offsets[-1] - offsets[0])
        # a small build runs on the NumPy twin until numba has started (the same arrays)
        run = backend(lambda: build_seconds(n_tokens, n_vocab))
        local_df, bad, (indptr, indices, data) = run.postings(values, offsets, n_vocab)
        raise_bad_token(bad, values, n_vocab)
        n_docs = int(offsets.shape[0] - 1)
        if stats is None:
            use = BM25Stats(n_docs, n_tokens, local_df)
        else:
            use = check_stats(stats, local_df, n_docs, n_tokens)
        idf = idf_weights(method, use.df, use.n_docs)
        base = base_weights_for(method, idf, k1, delta)
        term_max = run.weigh_postings(
            indptr,
            indices,
            data,
            offsets,
            idf,
            base,
            METHOD_CODES[method],
            k1,
            b,
            delta,
            use.avgdl,
        )
        if indptr[-1] <= INT32_MAX:
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
            doc_len=np.diff(offsets).astype(np.uint32),
        )

    # ---------------------------------------------------------------------------- search
    def search(
        self,
        queries: Any,
        k: int,
        *,
        mask: np.ndarray | None = None,
        cutoff: float | None = None,
        num_threads: int | None = None,
        strategy: str = "auto",
        window: int | None = None,
    ) -> Hits:
        """Exact top-``k`` of each query of a batch of token-id sequences (one sequence of
        token ids is a batch of one): :meth:`search_csr` of the batch laid end to end."""
        if not isinstance(k, int) and isinstance(k, np.ndarray | list | tuple):
            raise ConfigError(
                "BM25Index.search takes (queries, k); for token ids laid end to end with "
                "offsets, call search_csr(q_values, q_offsets, k)"
            )
        q_values, q_offsets = token_batch(queries)
        return self.search_csr(
            q_values,
            q_offsets,
            k,
            mask=mask,
            cutoff=cutoff,
            num_threads=num_threads,
            strategy=strategy,
            window=window,
        )

    def search_csr(
        self,
        q_values: np.ndarray,
        q_offsets: np.ndarray,
        k: int,
        *,
        mask: np.ndarray | None = None,
        cutoff: float | None = None,
        num_threads: int | None = None,
        strategy: str = "auto",
        window: int | None = None,
    ) -> Hits:
        """Exact top-``k`` of a batch of queries ``q_values[q_offsets[i]:q_offsets[i+1]]``.

        Returns ``(rows, scores, counts)``: ``rows`` int64 ``[n_queries, k]`` (best first, ties
        by row order, padded with -1), ``scores`` float32 ``[n_queries, k]`` (padded with
        ``-inf``), ``counts`` int32 ``[n_queries]`` (hits per query). A hit is a document
        containing at least one query term with a positive weight, ``mask[row]`` True when
        a bool ``mask`` ``[n_docs]`` is given, and a score ``>= cutoff`` when given.
        ``num_threads``: numba threads for this call (default: numba's current setting);
        batches below ``PARALLEL_MIN_QUERIES`` queries run serially. ``strategy``: one of
        :data:`SEARCH_STRATEGIES` (all exact; the default ``auto`` is the fastest). ``window``:
        rows per window of ``maxscore``, which searches the rows a window at a time (default:
        windows of 2^20 rows on corpora of at least two; same results for any window)."""
        # Kept lean: one query is a batch of one, and this wrapper is most of its latency.
        # Token-id range and offset order are checked inside the kernel (error code).
        k = check_k(k)
        qv = ragged_array(q_values, "q_values", np.int32)
        qo = ragged_array(q_offsets, "q_offsets", np.int64)
        if qo.shape[0] < 1:
            raise ConfigError("q_offsets needs at least 1 entry (n + 1 for n queries); got 0")
        run = backend(lambda: self._numpy_seconds(qv, qo.shape[0] - 1))
        cold = run is NUMPY
        if self._unchecked is not None:
            if cold or self._lz is NO_LAZY:
                self._check_postings(qv, twin=cold)
            else:  # packed: the kernels decode the blocks they reach
                self._verify(qv)
                self._promote(qv)
        if self._rank_pending is not None and qv.shape[0] and not cold:  # NumPy reads none
            self._build_rank(qv)
        n_q = qo.shape[0] - 1
        mask_arr = check_mask(mask, self.n_docs)
        has_mask = mask_arr is not None
        mask_arr = self._no_mask if mask_arr is None else readonly(np.ascontiguousarray(mask_arr))
        cut = check_cutoff(cutoff)
        has_cutoff = cut != -np.inf
        cut = cut if has_cutoff else 0.0  # the kernels read it only with has_cutoff
        # the NumPy twin reads no plan and runs serially: it needs no numba (its import, 0.2 s,
        # would be most of one query on a small index)
        name, asked = check_strategy(strategy), check_num_threads(num_threads)
        plan = (-1 if cold else strategy_code(name), check_window(window))
        threads = 1 if cold else search_threads(asked)
        rows = np.empty((n_q, k), np.int64)
        scores = np.empty((n_q, k), np.float32)
        counts = np.empty(n_q, np.int32)
        slots = threads if (threads > 1 and n_q >= kernel_config.PARALLEL_MIN_QUERIES) else 1
        scratch = self._acquire(slots)
        ok = False
        ix = (self._lz, self.indptr, self.indices, self.data, self.term_max, self.base_weights)
        heads = (self._rank_slot, self._rank_dir, self._head_ptr, self._head_doc, self._head_w)
        flt = (mask_arr, has_mask, cut, has_cutoff)
        out = (rows, scores, counts)
        try:
            if cold or slots == 1:
                err = run.search_batch_serial(
                    ix, heads, (qv, qo), k, flt, plan, tuple(a[0] for a in scratch), out
                )
            else:
                before = numba.get_num_threads()
                numba.set_num_threads(threads)
                try:
                    err = bm25_search.search_batch_parallel(
                        ix, heads, (qv, qo), k, flt, plan, tuple(a[:slots] for a in scratch), out
                    )
                finally:
                    numba.set_num_threads(before)
            ok = True
        finally:
            if ok:
                self._release(scratch)
        if err != -1:
            raise_query_error(int(err), qv, qo, self.n_vocab)
        if self._packed is not None and self._packed.bad[1]:  # a damaged block: no answer
            raise_problem(self._packed.bad[0], self._packed.bad[1], self.n_docs)
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
        if not force and backend() is NUMPY:  # the NumPy path does not use them
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
            ends = self._head_ptr[self._rank_used] + np.cumsum(
                _head_lengths(self.indptr[t + 1] - self.indptr[t])
            )
            self._head_ptr[self._rank_used + 1 : self._rank_used + 1 + t.size] = ends
            if self._lz is NO_LAZY:
                self._build_rank_rows(self.indptr, self.indices, self.data, t, slots)
            else:  # packed: each term decoded apart, its blocks left to the searches
                for i in range(t.size):
                    docs, w = self._packed.decode_term(int(t[i]), self._byte_checks)
                    one = np.array([0, docs.shape[0]], np.int64)
                    self._build_rank_rows(one, docs, w, np.zeros(1, np.int64), slots[i : i + 1])
            self._rank_slot[t] = slots  # publish: the rows and heads are complete
            self._rank_used += t.size
            pending[t] = False
            if not pending.any():
                self._rank_pending = None

    def _build_rank_rows(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        data: np.ndarray,
        terms: np.ndarray,
        slots: np.ndarray,
    ) -> None:
        """Fill the rank directory and impact head rows ``slots`` of ``terms``."""
        bad = bm25_heads.build_rank_rows(indptr, indices, self.n_docs, terms, slots, self._rank_dir)
        if bad != -1:
            raise StoreError(
                f"BM25 index arrays are inconsistent (doc ids outside [0, {self.n_docs}) in "
                f"the postings of term {int(terms[bad])}); the index files are corrupt: "
                "rebuild the index"
            )
        bm25_heads.build_head_rows(
            indptr, indices, data, terms, slots, self._head_ptr, self._head_doc, self._head_w
        )

    def check_postings(self) -> None:
        """Check every posting now (doc ids in range and strictly increasing per term, weights
        finite and within their term's bound): what searches of an index loaded from arrays
        check lazily, term by term. StoreError when one is not."""
        if self._unchecked is not None:
            self._check_postings(np.arange(self.n_vocab, dtype=np.int64))

    def verify_postings_with(self, checks: dict[str, tuple[Any, int]]) -> None:
        """Have the lazy per-term check of a loaded index also verify the bytes it reads:
        ``checks`` maps ``"indices"`` / ``"data"`` to ``(checker, offset)``, ``checker``
        having ``ensure(lo_bytes, hi_bytes)`` (a store's chunk checksums) and ``offset`` the
        array's first byte in its file."""
        self._byte_checks = dict(checks)

    def _numpy_seconds(self, qv: np.ndarray, n_queries: int) -> float:
        """Rough seconds of these queries on the NumPy path: the search, plus decoding the
        packed postings of their terms not decoded yet."""
        seconds = estimate_seconds(self.indptr, self.n_docs, qv, n_queries)
        unchecked = self._unchecked
        if unchecked is not None and self._writable is not None:
            seconds += decode_seconds(self.indptr, qv, unchecked)
        return seconds

    def _check_postings(self, terms: np.ndarray, *, twin: bool = False) -> None:
        """Bounds-check the postings of ``terms`` that were not checked yet. An index loaded
        from arrays is checked lazily, term by term, before any kernel reads a posting: a fresh
        process reads only the postings its queries read (memory-mapped pages stay cold)."""
        unchecked = self._unchecked
        if unchecked is None:
            return
        if self._writable is not None:
            self._decode(terms, unchecked, twin=twin)
        else:
            check_postings(
                self.indptr,
                self.indices,
                self.data,
                self.term_max,
                self.n_docs,
                terms,
                unchecked,
                self._byte_checks,
            )
        if not unchecked.any():
            self._unchecked = None

    def _decode(self, terms: np.ndarray, unchecked: np.ndarray, *, twin: bool = False) -> None:
        """Decode, then check, the packed postings of ``terms`` not decoded yet (once per term:
        a term's flag clears only after its postings are in place; ``twin``: in NumPy)."""
        t = np.unique(terms)
        t = t[(t >= 0) & (t < self.n_vocab)]
        if not unchecked[t].any():
            return
        with self._decode_lock:
            t = t[unchecked[t]].astype(np.int64)
            if t.size:
                indices, data = self._writable
                self._packed.decode(t, indices, data, self._byte_checks, twin=twin)
                unchecked[t] = False

    def _promote(self, qv: np.ndarray) -> None:
        """Decode whole the terms of ``qv`` that an earlier call already searched in part: the
        first call that holds a term decodes only the blocks it reaches (a cold query stays
        quick, a term queried once costs its blocks), later ones search it decoded, as fast as
        an index built in memory."""
        packed = self._packed
        partial = qv[np.take(packed.term_ready, qv, mode="clip") == 0]
        if not partial.size:
            return
        partial = partial[(partial >= 0) & (partial < self.n_vocab)]  # the kernel names the rest
        seen = packed.touched[partial]
        again = partial[seen]
        packed.touched[partial] = True
        if again.size:
            self._decode(again, self._unchecked)

    def _verify(self, terms: np.ndarray) -> None:
        """Verify with the store's checksums the packed bytes of ``terms`` that the search
        kernels may decode (once per term)."""
        unverified = self._unverified
        if not self._byte_checks or unverified is None:
            return
        t = np.unique(terms)
        t = t[(t >= 0) & (t < self.n_vocab)]
        if not unverified[t].any():
            return
        with self._decode_lock:
            t = t[unverified[t]].astype(np.int64)
            if t.size:
                self._packed.verify(t, self._byte_checks)
                unverified[t] = False

    def get_scores(self, q_values: np.ndarray) -> np.ndarray:
        """Dense BM25 scores (float32 ``[n_docs]``) of one query given as token ids."""
        qv, _ = check_queries(q_values, None, self.n_vocab)
        if self._unchecked is not None:
            self._check_postings(qv)
        out = np.empty(self.n_docs, np.float32)
        backend().score_dense(self.indptr, self.indices, self.data, self.base_weights, qv, out)
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays that define the index unpacked (what :meth:`to_arrays`
        returns; a packed index's decoded postings take memory only once decoded)."""
        arrays = [self.indptr, self.indices, self.data, self.term_max]
        if self._external_stats:
            arrays.append(self.stats.df)
        return int(sum(v.nbytes for v in arrays))

    @property
    def decoded_postings(self) -> int:
        """Postings held uncompressed in memory: all of them for an index built or loaded
        unpacked; for a packed one, those of the blocks its searches have decoded so far."""
        if self._lz is NO_LAZY:
            return int(self.indptr[-1])
        return self._packed.decoded_postings()

    def __repr__(self) -> str:
        return (
            f"BM25Index(method={self.method!r}, n_docs={self.n_docs}, "
            f"n_vocab={self.n_vocab}, nnz={int(self.indptr[-1])}, {self.params})"
        )

    # ---------------------------------------------------------------------------- internals
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


__all__ = [
    "BM25_METHODS",
    "SEARCH_STRATEGIES",
    "BM25Index",
]
