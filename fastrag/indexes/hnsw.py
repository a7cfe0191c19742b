"""``HNSWIndex``: approximate dense top-k through hnswlib (the ``[hnsw]`` extra).

A thin adapter: rows are hnswlib labels, vectors are normalised here for ``cosine`` (hnswlib
runs its ``ip`` space, so zero vectors stay zero and score 0, as in :class:`FlatIndex`), and
hnswlib's distances (``1 - inner product``) become scores (higher is better) before leaving.
Results are best first, ties by the lower row, padded with row -1 and score -inf.

Masks: a selective mask (few allowed rows) is answered by *exact* search over the allowed rows;
a broad one by hnswlib's filter callback (see ``EXACT_MAX_FRACTION``). The saved file is
hnswlib's own format (loadable by raw hnswlib); deleted rows are read back from it on load.
hnswlib trusts the files it loads, so :func:`check_index_file` checks a file completely (header,
every link, vector and label; ``fastrag._kernels.store_check``) before hnswlib sees it.
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import struct
from typing import Any, NamedTuple

import numpy as np

from fastrag._checks import check_int
from fastrag._kernels import dense as _dense
from fastrag._kernels import store_check as _check
from fastrag.errors import ConfigError, StoreError, StoreIOError, missing_extra
from fastrag.indexes.base import Hits, check_mask, check_num_threads, search_threads
from fastrag.indexes.dense_base import (
    DenseIndex,
    as_matrix,
    check_dim,
    padded_result,
    prepare_vectors,
    rows_of,
)
from fastrag.indexes.exact import exact_search

# A mask allowing at most max(EXACT_MAX_ROWS, fraction * live rows) rows is searched exactly
# over those rows (exact, and faster than a filtered graph walk, whose Python callback runs per
# visited node and whose walk widens as the mask narrows); wider masks use hnswlib's filter.
# The fraction is EXACT_MAX_FRACTION for up to EXACT_BATCH_MIN_QUERIES - 1 queries and
# EXACT_MAX_FRACTION_BATCH for larger batches (exact batches run on sgemm). Measured on 100k x
# 384, M=16, ef=64 (bench/results/hnsw.md, "mask crossover"): one query breaks even near 5%
# of rows, a 50-query batch between 10% and 30%.
EXACT_MAX_FRACTION = 0.05
EXACT_MAX_FRACTION_BATCH = 0.15
EXACT_BATCH_MIN_QUERIES = 16
EXACT_MAX_ROWS = 4096

# hnswlib file header: 6 size_t, int, uint32, 3 size_t, double, size_t (hnswalg.h saveIndex).
_HEADER = struct.Struct("<6QiI3QdQ")
_MAX_M = 10_000  # hnswlib caps M here


def _import_hnswlib() -> Any:
    try:
        import hnswlib
    except ImportError:
        raise missing_extra("hnswlib", "hnsw", "index='hnsw'") from None
    return hnswlib


def _check_positive_int(name: str, value: Any) -> int:
    return check_int(name, value, min=1)


def _check_rows(rows: Any, m: int, what: str = "rows", unique: bool = True) -> np.ndarray:
    arr = np.asarray(rows)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ConfigError(
            f"{what} must be a 1-D integer array, got dtype {arr.dtype} and shape {arr.shape}"
        )
    arr = arr.astype(np.int64, copy=False)
    if m >= 0 and arr.shape[0] != m:
        raise ConfigError(
            f"{what} has {arr.shape[0]} entries for {m} vectors; pass one row id per vector"
        )
    if arr.size and arr.min() < 0:
        raise ConfigError(f"{what} contains negative row {int(arr.min())}; rows are >= 0")
    if unique and np.unique(arr).shape[0] != arr.shape[0]:
        raise ConfigError(f"{what} contains duplicate row ids; each row may appear once")
    return arr


class HNSWIndex(DenseIndex):
    """Approximate nearest-neighbour index over hnswlib with row ids as labels.

    ``M`` (graph degree), ``ef_construction`` (build beam) and ``ef`` (search beam, raised to
    ``k`` when smaller) trade recall for speed; ``seed`` fixes the level draw;
    ``max_elements`` is the initial capacity (grown by doubling).
    """

    def __init__(
        self,
        dim: int,
        metric: str = "cosine",
        M: int = 16,
        ef_construction: int = 200,
        ef: int = 64,
        max_elements: int | None = None,
        seed: int = 100,
        num_threads: int | None = None,
    ) -> None:
        hnswlib = _import_hnswlib()
        super().__init__(dim, metric)
        self.M = _check_positive_int("M", M)
        self.ef_construction = _check_positive_int("ef_construction", ef_construction)
        self.num_threads = check_num_threads(num_threads)
        self.seed = int(seed)
        cap = 1024 if max_elements is None else _check_positive_int("max_elements", max_elements)
        self._index = hnswlib.Index(space="ip", dim=self.dim)
        self._index.init_index(
            max_elements=cap, M=self.M, ef_construction=self.ef_construction, random_seed=self.seed
        )
        self.ef = ef
        self._alive = np.zeros(0, np.bool_)  # by row: has a vector and is not deleted
        self._n_live = 0

    # ------------------------------------------------------------------------- properties
    @property
    def ef(self) -> int:
        """Search beam width (hnswlib uses ``max(ef, k)``)."""
        return self._ef

    @ef.setter
    def ef(self, value: int) -> None:
        self._ef = _check_positive_int("ef", value)
        self._index.set_ef(self._ef)

    @property
    def n(self) -> int:
        """Number of live (added and not deleted) rows."""
        return self._n_live

    @property
    def n_rows(self) -> int:
        """One more than the highest row ever added (the length a mask must cover)."""
        return self._alive.shape[0]

    @property
    def alive(self) -> np.ndarray:
        """Read-only bool array over rows ``0 .. n_rows - 1``: added and not deleted."""
        view = self._alive.view()
        view.flags.writeable = False
        return view

    def _threads(self, num_threads: int | None) -> int:
        n = check_num_threads(num_threads)
        return search_threads(self.num_threads if n is None else n)

    # ------------------------------------------------------------------------------ writes
    def add(self, vectors: Any, rows: Any = None) -> None:
        """Insert ``vectors`` (n, dim) under ``rows`` (default: the next free rows).

        Adding an existing row replaces its vector and revives it if it was deleted.
        """
        vectors = self.check_vectors(vectors)
        m = vectors.shape[0]
        if rows is None:
            rows = np.arange(self.n_rows, self.n_rows + m, dtype=np.int64)
        else:
            rows = _check_rows(rows, m)
        if m == 0:
            return
        need = self._index.element_count + m
        if need > self._index.max_elements:
            self._index.resize_index(max(need, 2 * self._index.max_elements))
        self._index.add_items(vectors, rows, num_threads=self._threads(None))
        top = int(rows.max()) + 1
        if top > self._alive.shape[0]:
            self._alive = np.concatenate([self._alive, np.zeros(top - self.n_rows, np.bool_)])
        self._alive[rows] = True
        self._n_live = int(np.count_nonzero(self._alive))

    def mark_deleted(self, rows: Any) -> None:
        """Exclude ``rows`` from every later search (hnswlib keeps them as graph hops)."""
        rows = np.unique(_check_rows(rows, -1, unique=False))
        live = np.zeros(rows.shape[0], np.bool_)
        inside = rows < self.n_rows
        live[inside] = self._alive[rows[inside]]
        bad = rows[~live]
        if bad.size:
            raise ConfigError(
                f"cannot delete row {int(bad[0])}: it is not a live row of the index "
                f"({self.n} live rows); delete only rows that were added and not yet deleted"
            )
        for r in rows.tolist():
            self._index.mark_deleted(r)
        self._alive[rows] = False
        self._n_live -= rows.shape[0]

    # ------------------------------------------------------------------------------ search
    def search(
        self,
        queries: Any,
        k: int,
        *,
        mask: Any = None,
        cutoff: float | None = None,
        exact_fallback_vectors: Any = None,
        num_threads: int | None = None,
    ) -> Hits:
        """Top-``k`` rows per query: ``(rows int64, scores float32, counts int32)``.

        ``mask`` (bool, at least ``n_rows`` long) keeps only the allowed rows: a selective
        mask runs exact search over the allowed rows, taking their vectors from
        ``exact_fallback_vectors`` (the corpus by row, e.g. the Arrow column) when given, else
        from hnswlib; a broad mask uses hnswlib's filter callback. ``cutoff`` drops hits
        scoring below it.
        """
        q, k, cut = self.check_search(queries, k, cutoff)
        threads = self._threads(num_threads)
        allowed = self._alive
        n_live = n_allowed = self._n_live
        if mask is not None:
            allowed = check_mask(mask, self.n_rows, longer_ok=True) & self._alive
            n_allowed = int(np.count_nonzero(allowed))
        if n_allowed == 0:
            return padded_result(q.shape[0], k)
        fraction = (
            EXACT_MAX_FRACTION_BATCH
            if q.shape[0] >= EXACT_BATCH_MIN_QUERIES
            else EXACT_MAX_FRACTION
        )
        if mask is not None and n_allowed <= max(EXACT_MAX_ROWS, fraction * n_live):
            return self._exact(q, k, allowed, cut, exact_fallback_vectors, num_threads)
        kk = min(k, n_allowed)
        filt = None
        if mask is not None and n_allowed < n_live:
            filt = allowed.tolist().__getitem__  # C-level call per visited node
            threads = 1  # the callback holds the GIL: more threads only contend
        try:
            labels, dist = self._index.knn_query(q, k=kk, num_threads=threads, filter=filt)
        except RuntimeError:
            # hnswlib found fewer than kk reachable rows (tiny or heavily deleted graph)
            return self._exact(q, k, allowed, cut, exact_fallback_vectors, num_threads)
        out_rows = np.empty((q.shape[0], k), np.int64)
        out_scores = np.empty((q.shape[0], k), np.float32)
        counts = np.empty(q.shape[0], np.int32)
        _dense.hnsw_results(labels, dist, float(np.float32(cut)), out_rows, out_scores, counts)
        return out_rows, out_scores, counts

    def _exact(
        self,
        q: np.ndarray,
        k: int,
        allowed: np.ndarray,
        cut: float,
        fallback: Any,
        num_threads: int | None,
    ) -> Hits:
        rows = np.flatnonzero(allowed).astype(np.int64)
        if fallback is not None:
            source = as_matrix(fallback, self.dim, "exact_fallback_vectors")
            if source.shape[0] < self.n_rows:
                raise ConfigError(
                    f"exact_fallback_vectors has {source.shape[0]} rows but the index has rows "
                    f"up to {self.n_rows - 1}; pass the vectors of every row, by row"
                )
            sub = prepare_vectors(np.take(source, rows, axis=0), self.metric)
        else:
            sub = np.ascontiguousarray(self._index.get_items(rows), dtype=np.float32)
        hit, scores, counts = exact_search(
            sub, q, k, cutoff=cut, num_threads=check_num_threads(num_threads)
        )
        return rows_of(hit, rows), scores, counts

    # ------------------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index to ``path`` in hnswlib's format (one file; raw hnswlib loads it),
        then check what was written (hnswlib does not report a failed write, e.g. a full
        disk): a StoreError when the file is incomplete."""
        self._index.save_index(os.fspath(path))
        try:
            check_index_file(path, self.dim)
        except StoreError as exc:
            if shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free > (1 << 20):
                raise
            err = StoreIOError(
                f"hnswlib wrote an incomplete index to {os.fspath(path)!r}: no "
                f"space left on device (ENOSPC) ({exc}); free some space and "
                "try again"
            )
            err.errno, err.filename = errno.ENOSPC, os.fspath(path)
            raise err from exc

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        dim: int,
        metric: str = "cosine",
        ef: int = 64,
        max_elements: int | None = None,
        num_threads: int | None = None,
        max_rows: int | None = None,
    ) -> HNSWIndex:
        """Read an index written by :meth:`save`; ``M`` and ``ef_construction`` come from
        the file, ``dim`` and ``metric`` must be those it was built with. The file is checked
        first (:func:`check_index_file`; ``max_rows`` bounds its row ids): a damaged or foreign
        file is a StoreError, never a crash."""
        hnswlib = _import_hnswlib()
        path = os.fspath(path)
        self = cls.__new__(cls)
        DenseIndex.__init__(self, dim, metric)
        self.num_threads = check_num_threads(num_threads)
        cap = 0 if max_elements is None else _check_positive_int("max_elements", max_elements)
        info = check_index_file(path, self.dim, max_rows=max_rows)
        self._index = hnswlib.Index(space="ip", dim=self.dim)
        try:
            # capacity from the checked count, never from the file's max_elements_
            self._index.load_index(path, max_elements=max(cap, info.count))
        except (RuntimeError, MemoryError) as exc:
            raise StoreError(f"cannot load HNSW index {path}: {exc}; rebuild the index") from exc
        if self._index.element_count != info.count:
            raise StoreError(
                f"HNSW index {path} loaded {self._index.element_count} elements, "
                f"its header records {info.count}; rebuild the index"
            )
        self.M = int(self._index.M)
        self.ef_construction = int(self._index.ef_construction)
        self.seed = 100
        self.ef = ef
        top = int(info.labels.max()) + 1 if info.count else 0
        try:
            self._alive = np.zeros(top, np.bool_)
        except MemoryError as exc:
            raise StoreError(
                f"HNSW index {path} holds row {top - 1}, too large to index in "
                "memory; load it with max_rows=, or rebuild the index"
            ) from exc
        self._alive[info.labels[~info.deleted]] = True
        self._n_live = int(np.count_nonzero(self._alive))
        return self

    def __repr__(self) -> str:
        return (
            f"HNSWIndex(dim={self.dim}, metric={self.metric!r}, n={self.n}, M={self.M}, "
            f"ef_construction={self.ef_construction}, ef={self.ef})"
        )


class HNSWFileInfo(NamedTuple):
    """What :func:`check_index_file` read from a valid hnswlib file."""

    count: int  # elements (deleted ones included)
    dim: int
    M: int
    ef_construction: int
    max_level: int
    labels: np.ndarray  # int64 label (row id) of each element, by internal id
    deleted: np.ndarray  # bool, by internal id
    levels: np.ndarray  # int32 top level of each element, by internal id


_GRAPH_ERRORS = {
    _check.E_TRUNCATED: "is truncated: the upper-level links of element {i} run past its end",
    _check.E_TRAILING: "has {v} bytes after the last element's links",
    _check.E_LIST_SIZE: "element {i} has upper-level links of {v} bytes, not a whole number of "
    "levels",
    _check.E_LEVEL: "element {i} has level {v}, above the index's top level {maxlevel}",
    _check.E_COUNT0: "element {i} has {v} level-0 links, more than maxM0={max_m0}",
    _check.E_FLAGS0: "element {i} has unknown flags {v:#x} in its level-0 header",
    _check.E_LINK0: "element {i} links to element {v} on level 0, but there are only {n}",
    _check.E_COUNT: "element {i} has a level-{lvl} link header {v:#x} (count above maxM={max_m} "
    "or unknown bits)",
    _check.E_LINK: "element {i} links to element {v} on level {lvl}, but there are only {n}",
    _check.E_LINK_LEVEL: "element {i} links to element {v} on level {lvl}, which is not on "
    "that level",
    _check.E_VECTOR: "element {i} has a NaN or infinite vector component {v}",
    _check.E_LABEL: "element {i} has row id {v}, outside [0, {limit})",
    _check.E_DUPLICATE: "elements share row id {v} (element {i} repeats it)",
}


def check_index_file(
    path: str | os.PathLike[str], dim: int | None = None, max_rows: int | None = None
) -> HNSWFileInfo:
    """Check an hnswlib (0.8) index file completely before hnswlib reads it: the header
    against ``dim`` (default: the file's own) and the file size, and every element's links,
    vector and label (row id below ``max_rows`` when given, unique). A StoreError naming the
    file says what is wrong."""
    path = os.fspath(path)
    dim = None if dim is None else check_dim(dim)
    limit = (1 << 63) - 1 if max_rows is None else check_int("max_rows", max_rows, min=0)

    def bad(what: str) -> StoreError:
        return StoreError(
            f"HNSW index {path} {what}; the file is damaged or not an hnswlib "
            "index: rebuild the index"
        )

    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(_HEADER.size)
    except OSError as exc:
        raise StoreError(f"cannot read HNSW index {path}: {exc}") from exc
    if len(raw) < _HEADER.size:
        raise StoreError(f"HNSW index {path} is truncated ({size} bytes); rebuild the index")
    (
        off_level0,
        max_elements,
        n,
        per_elem,
        label_off,
        data_off,
        maxlevel,
        enterpoint,
        max_m,
        max_m0,
        m,
        mult,
        ef_construction,
    ) = _HEADER.unpack(raw)
    if dim is None and label_off > data_off and (label_off - data_off) % 4 == 0:
        dim = (label_off - data_off) // 4
    if dim is None or label_off - data_off != 4 * dim:
        raise StoreError(
            f"HNSW index {path} holds vectors of dim {(label_off - data_off) // 4}, not "
            f"dim={dim}; load it with the dim it was built with, or rebuild the index"
        )
    if dim > 1 << 20:
        raise bad(f"has vectors of dim {dim}")
    if not 1 <= m <= _MAX_M or max_m != m or max_m0 != 2 * m:
        raise bad(
            f"has M={m}, maxM={max_m}, maxM0={max_m0} (expected 1 <= M <= {_MAX_M}, "
            "maxM=M, maxM0=2M)"
        )
    links0 = 4 * max_m0 + 4
    if (off_level0, data_off, per_elem) != (0, links0, links0 + 4 * dim + 8):
        raise bad(
            f"has element layout offsetLevel0={off_level0}, offsetData={data_off}, "
            f"size_data_per_element={per_elem} (expected 0, {links0}, "
            f"{links0 + 4 * dim + 8} for M={m}, dim={dim})"
        )
    want_mult = 1 / math.log(m) if m > 1 else math.inf
    if not (mult == want_mult or math.isclose(mult, want_mult, rel_tol=1e-12)):
        raise bad(f"has level multiplier {mult!r}, expected 1/ln(M) = {want_mult!r}")
    if not m <= ef_construction < 1 << 31:
        raise bad(f"has ef_construction={ef_construction} (expected M={m} to 2**31 - 1)")
    if size % 4 or size < _HEADER.size + n * per_elem or max_elements < n:
        raise bad(
            f"has {size} bytes for {n} elements of {per_elem} bytes (capacity "
            f"{max_elements}); it is truncated or its header is damaged"
        )
    if n == 0:
        if (maxlevel, enterpoint, size) != (-1, 0xFFFFFFFF, _HEADER.size):
            raise bad(
                f"has no elements but top level {maxlevel}, entry point {enterpoint} and "
                f"{size} bytes"
            )
        empty = np.zeros(0, np.int64)
        return HNSWFileInfo(
            0, dim, m, ef_construction, -1, empty, empty.astype(np.bool_), empty.astype(np.int32)
        )
    if not 0 <= maxlevel or enterpoint >= n:
        raise bad(f"has top level {maxlevel} and entry point {enterpoint} for {n} elements")
    words = np.memmap(path, dtype="<u4", mode="r")
    levels = np.empty(n, np.int32)
    labels = np.empty(n, np.int64)
    deleted = np.empty(n, np.bool_)
    # duplicate labels: a bitmap when row ids are bounded, else a sort
    seen = np.zeros(limit if limit <= 8 * n + (1 << 20) else 0, np.uint8)
    code, i, v, lvl = _check.check_graph(
        words,
        n,
        per_elem // 4,
        data_off // 4,
        dim,
        label_off // 4,
        max_m0,
        max_m,
        maxlevel,
        limit,
        seen,
        levels,
        labels,
        deleted,
    )
    del words
    if code == _check.OK and not seen.size:
        order = np.sort(labels)
        dup = np.flatnonzero(order[1:] == order[:-1])
        if dup.size:
            code, i, v = (
                _check.E_DUPLICATE,
                int(np.flatnonzero(labels == order[dup[0]])[1]),
                int(order[dup[0]]),
            )
    if code != _check.OK:
        raise bad(
            _GRAPH_ERRORS[code].format(
                i=i, v=v, lvl=lvl, n=n, maxlevel=maxlevel, max_m0=max_m0, max_m=max_m, limit=limit
            )
        )
    top = int(levels.max())
    if top != maxlevel or levels[enterpoint] != maxlevel:
        raise bad(
            f"has top level {maxlevel}, but its highest element is on level {top} and its "
            f"entry point {enterpoint} on level {int(levels[enterpoint])}"
        )
    return HNSWFileInfo(n, dim, m, ef_construction, maxlevel, labels, deleted, levels)
