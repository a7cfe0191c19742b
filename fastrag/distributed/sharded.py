"""A corpus split into segment stores that score as one index: the sharded retriever.

A sharded index is a directory of segment stores and a ``shards.json`` commit point (see
:mod:`fastrag.distributed.manifest`); :mod:`fastrag.distributed.build` builds one.

BM25 weights depend on corpus statistics (document frequencies, the number of nodes, the
average length). Every segment keeps its token ids (persisted in its store); on open the
segments' vocabularies and document frequencies are merged in one reduction into one global
vocabulary and :class:`~fastrag.indexes.bm25.BM25Stats`, and each segment's index is weighed with
them. A query is encoded once against the global vocabulary, searched in every segment, and
the per-segment top-k lists are merged by score, ties broken by global node order (segment
order, then row order): scores and top-k equal one index built over the whole corpus. Dense
segments merge their exact top-k the same way.

New documents become a new segment (:meth:`ShardedRetriever.add`), deletions are applied in the
segments that hold them (:meth:`ShardedRetriever.delete`), and :meth:`ShardedRetriever.merge`
compacts segments; every change commits by replacing ``shards.json`` under the lock, after the
new segment stores are complete, and removes what the manifest no longer names.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastrag._checks import check_int, check_topk
from fastrag.analysis import encode_queries, get_analyzer
from fastrag.analysis.vocabtable import VocabTable
from fastrag.distributed._ray import init_if_needed, require_ray
from fastrag.distributed.build import (
    ROOT_COLUMNS,
    partition,
    root_table,
    run_builds,
    segment_roots,
)
from fastrag.distributed.manifest import (
    MANIFEST,
    collect_garbage,
    is_sharded,
    locked,
    new_segment_name,
    read_manifest,
    write_manifest,
)
from fastrag.distributed.segment import (
    IndexSpec,
    Segment,
    SegmentNotReady,
    empty_hits,
    shard_mode,
)
from fastrag.documents.document import Document
from fastrag.documents.embedding import embed_query_vectors
from fastrag.errors import ConfigError
from fastrag.indexes.base import Hits
from fastrag.indexes.bm25.stats import BM25Stats
from fastrag.retrieval.args import check_queries
from fastrag.retrieval.merge import merge_hits
from fastrag.retrieval.similarity import get_similarity
from fastrag.schema import DocNode, NodeWithScore
from fastrag.settings import DEFAULT_TOPK

__all__ = [
    "RANK_BASE",
    "ShardedRetriever",
    "merge_stats",
    "ranks_of",
]

RANK_BASE = 1  # the best hit's rank, in every table of hits (CLI, Arrow, Ray, server)


def ranks_of(query_idx: np.ndarray) -> np.ndarray:
    """``rank`` of hit rows grouped by query, best first: RANK_BASE, RANK_BASE + 1, ... per
    query (from the rows' positions, whatever base the producer used)."""
    q = np.asarray(query_idx)
    if not q.size:
        return np.zeros(0, np.int32)
    start = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
    lens = np.diff(np.r_[start, q.size])
    return (np.arange(q.size) - np.repeat(start, lens) + RANK_BASE).astype(np.int32)


class _Handles:
    """The open segments, in this process or on Ray actors (one each): ``call(name, *args)``
    runs a method on every segment at once and returns the answers in segment order."""

    def __init__(
        self,
        names: list[str],
        root: Path,
        spec: IndexSpec,
        transform: Any,
        embed: Any,
        executor: str,
        old: _Handles | None,
    ) -> None:
        self.names = names
        self.remote = executor == "ray"
        keep = (
            {}
            if old is None or old.spec != spec or old.remote != self.remote
            else dict(zip(old.names, old.items, strict=True))
        )
        self.spec = spec
        if self.remote:
            self.ray = require_ray("ShardedRetriever(executor='ray')")
            init_if_needed(self.ray)
            actor = self.ray.remote(Segment).options(max_restarts=-1, max_task_retries=-1)
            self.items = [
                keep.get(n) or actor.remote(str(root / n), spec, transform, embed) for n in names
            ]
        else:
            self.items = [
                keep.get(n) or Segment(str(root / n), spec, transform, embed) for n in names
            ]

    def call(self, method: str, *args: Any, each: list[tuple] | None = None) -> list:
        argv = each if each is not None else [args] * len(self.items)
        if self.remote:
            return self.ray.get(
                [getattr(a, method).remote(*x) for a, x in zip(self.items, argv, strict=True)]
            )
        return [getattr(s, method)(*x) for s, x in zip(self.items, argv, strict=True)]

    def one(self, i: int, method: str, *args: Any) -> Any:
        if self.remote:
            return self.ray.get(getattr(self.items[i], method).remote(*args))
        return getattr(self.items[i], method)(*args)


def merge_stats(
    parts: Sequence[tuple[list[str], np.ndarray, int, int]],
) -> tuple[VocabTable, list[np.ndarray], BM25Stats]:
    """One reduction over the segments' ``stats_part()``: (global vocabulary, local->global
    id maps, BM25Stats of the whole corpus). The vocabulary is a read-only
    :class:`~fastrag.analysis.vocabtable.VocabTable` (ids in order of first occurrence, as a
    dict filled term by term would give; ~30 bytes a term where a dict takes ~120)."""
    vocab = VocabTable()
    maps = [vocab.add(terms).astype(np.int64) for terms, _, _, _ in parts]
    vocab.freeze()
    df = np.zeros(len(vocab), np.int64)
    for m, (_, local_df, _, _) in zip(maps, parts, strict=True):
        np.add.at(df, m, local_df)
    stats = BM25Stats(sum(p[2] for p in parts), sum(p[3] for p in parts), df)
    return vocab, maps, stats


# -- the sharded retriever ---------------------------------------------------------------------
class ShardedRetriever:
    """Top-k retrieval over the segments of a sharded index, scoring exactly as one index over
    the whole corpus. The same API as :class:`~fastrag.Retriever`: ``ret(query)``,
    ``ret.batch(queries)``, ``ret.batch_arrow(queries)``; plus :meth:`add`, :meth:`delete`,
    :meth:`merge` and :meth:`refresh`.

    Open one with :func:`fastrag.ray.open_index` (or build one with
    :func:`fastrag.ray.build_index`). ``transform``: the group's transform when the group is
    not ``root`` or a built-in (needed to build new segments); ``embed``: the embedder of a
    dense similarity.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        topk: int = DEFAULT_TOPK,
        filter: Any = None,
        similarity_cut_off: float | None = None,
        transform: Any = None,
        embed: Any = None,
        num_threads: int | None = None,
        lock_timeout: float = 60.0,
        executor: str = "local",
    ) -> None:
        self.path = Path(path)
        if not is_sharded(self.path):
            raise ConfigError(
                f"{str(self.path)!r} is not a sharded index (no {MANIFEST}); "
                "build one with fastrag.ray.build_index(corpus, path, ...)"
            )
        self.topk = check_topk(topk)
        self.filter = filter
        self.similarity_cut_off = similarity_cut_off
        self.transform = transform
        self.embed = embed
        self.num_threads = num_threads
        self.lock_timeout = float(lock_timeout)
        if executor not in ("local", "ray"):
            raise ConfigError(
                f"executor must be 'local' (segments open in this process) or "
                f"'ray' (one Ray actor per segment), got {executor!r}"
            )
        self.executor = executor
        self._lock = threading.RLock()
        self.refresh()

    # -- state -----------------------------------------------------------------------------
    def refresh(self) -> ShardedRetriever:
        """Re-open the committed segments (another process may have added or merged) and
        recompute the global statistics (one reduction over the segments)."""
        with self._lock:
            m = read_manifest(self.path)
            spec = IndexSpec(**m["spec"])
            mode = shard_mode(spec.similarity)
            if mode is None:
                raise ConfigError(
                    f"similarity {spec.similarity!r} cannot be sharded; sharded indexes "
                    "support BM25, dense and custom similarities"
                )
            names = [e["dir"] for e in m["segments"]]
            segs = _Handles(
                names,
                self.path,
                spec,
                self.transform,
                self.embed,
                self.executor,
                getattr(self, "_segs", None),
            )
            sizes = segs.call("size")
            vocab = None
            if mode == "bm25" and names:
                vocab, maps, stats = merge_stats(segs.call("stats_part"))
                bounds = segs.call("weigh", each=[(mp, len(vocab), stats) for mp in maps])
                segs.call("set_bound", np.maximum.reduce(bounds))
                self.stats = stats
            self._manifest, self._spec, self._segs, self._vocab = m, spec, segs, vocab
            self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            return self

    @property
    def spec(self) -> IndexSpec:
        return self._spec

    @property
    def segments(self) -> list[str]:
        """Segment directory names, in global node order."""
        return list(self._segs.names)

    def __len__(self) -> int:
        return int(self._offsets[-1])

    # -- search ----------------------------------------------------------------------------
    def __call__(
        self, query: str, *, filter: Any = None, topk: int | None = None
    ) -> list[NodeWithScore]:
        """The top-k nodes for ``query``, best first."""
        return self.batch([query], filter=filter, topk=topk)[0]

    def batch(
        self, queries: Sequence[str], *, filter: Any = None, topk: int | None = None
    ) -> list[list[NodeWithScore]]:
        """Top-k lists for many queries in one pass."""
        segs, offsets, (rows, scores, counts) = self._run(queries, filter, topk)
        valid = np.arange(rows.shape[1])[None, :] < counts[:, None]
        nodes = self._fetch(segs, offsets, rows[valid], "nodes")
        out, j = [], 0
        for q in range(len(rows)):
            c = int(counts[q])
            out.append(
                [
                    NodeWithScore(n, float(s))
                    for n, s in zip(nodes[j : j + c], scores[q, :c], strict=True)
                ]
            )
            j += c
        return out

    def batch_arrow(
        self, queries: Sequence[str], *, filter: Any = None, topk: int | None = None
    ) -> pa.Table:
        """All hits as one Arrow table ``(query_idx, rank, node_id, score)``, best first;
        ``rank`` starts at 1 (the best hit), as everywhere in fastrag."""
        segs, offsets, (rows, scores, counts) = self._run(queries, filter, topk)
        k = rows.shape[1] if rows.ndim == 2 else 0
        valid = np.arange(k)[None, :] < counts[:, None]
        qidx, rank = np.nonzero(valid)
        ids = self._fetch(segs, offsets, rows[valid], "ids")
        return pa.table(
            {
                "query_idx": pa.array(qidx.astype(np.int32)),
                "rank": pa.array((rank + RANK_BASE).astype(np.int32)),
                "node_id": ids,
                "score": pa.array(scores[valid].astype(np.float32)),
            }
        )

    @staticmethod
    def _fetch(segs: _Handles, offsets: np.ndarray, rows: np.ndarray, what: str):
        """Node ids (an Arrow array) or nodes (a list) of global ``rows``, in that order."""
        seg_of = np.searchsorted(offsets, rows, side="right") - 1
        parts: dict[int, Any] = {}
        method = "node_data" if what == "nodes" and segs.remote else what
        for i in np.unique(seg_of):
            parts[int(i)] = segs.one(int(i), method, rows[seg_of == i] - offsets[i])
            if method == "node_data":  # detached nodes (lineage lookups need the segment)
                parts[int(i)] = [DocNode(text=t, metadata=m, id=n) for n, t, m in parts[int(i)]]
        if what == "ids":
            if not len(rows):
                return pa.array([], pa.string())
            order = np.argsort(np.argsort(seg_of, kind="stable"), kind="stable")
            joined = pa.concat_arrays([parts[i] for i in sorted(parts)])
            return joined.take(pa.array(order))
        out = [None] * len(rows)
        for i, got in parts.items():
            for pos, node in zip(np.flatnonzero(seg_of == i), got, strict=True):
                out[pos] = node
        return out

    def _run(
        self, queries: Sequence[str], filter: Any, topk: int | None
    ) -> tuple[_Handles, np.ndarray, Hits]:
        """(the segments, their global row offsets, the merged hits) of one batch."""
        check_queries(queries)
        k_asked = self.topk if topk is None else check_topk(topk)
        flt = filter if filter is not None else self.filter
        n_q = len(queries)
        empty = np.array([not q.strip() for q in queries], dtype=bool)
        todo = np.flatnonzero(~empty)
        sub = [queries[i] for i in todo]
        for attempt in (0, 1):
            with self._lock:
                segs, offsets, vocab, spec = self._segs, self._offsets, self._vocab, self._spec
            k = min(k_asked, int(offsets[-1]))
            if not segs.names or n_q == 0 or k == 0:
                return segs, offsets, empty_hits(n_q, k)
            args = (k, flt, self.similarity_cut_off, self.num_threads)
            try:
                mode = shard_mode(spec.similarity)
                if mode == "bm25":
                    qv, qo = encode_queries(sub, self._analyzer(), vocab)
                    parts = segs.call("search_bm25", qv, qo, *args)
                elif mode == "vectors":
                    parts = segs.call("search_dense", self._query_vectors(sub), *args)
                else:
                    parts = segs.call("search_local", sub, *args)
                break
            except SegmentNotReady:  # an actor died and Ray restarted it: weigh it again
                if attempt:
                    raise
                self.refresh()
        r, s, c = merge_hits(parts, k, offsets=offsets[:-1])
        rows, scores, counts = empty_hits(n_q, k)
        scores[:] = 0.0
        rows[todo, : r.shape[1]] = r
        scores[todo, : s.shape[1]] = s
        counts[todo] = c
        return segs, offsets, (rows, scores, counts)

    def _analyzer(self) -> Any:
        if getattr(self, "_an", None) is None or self._an[0] != self._spec:
            opts = {"stemmer": self._spec.stemmer} if self._spec.similarity == "bm25" else {}
            stem = opts.get("stemmer")
            if stem == "auto":
                opts = {}
            self._an = (
                self._spec,
                get_analyzer(get_similarity(self._spec.similarity).analyzer, **opts),
            )
        return self._an[1]

    def _query_vectors(self, queries: list[str]) -> np.ndarray:
        key = self._spec.embed_key
        emb = (self.embed or {}).get(key)
        if emb is None:
            raise ConfigError(
                f"this sharded index is dense (embed key {key!r}); open it with "
                "embed= (the Embedder it was built with)"
            )
        return embed_query_vectors(emb, queries, key)

    # -- changes ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _writing(self) -> Iterator[dict[str, Any]]:
        """The committed manifest, with the writers' lock held."""
        with locked(self.path, self.lock_timeout):
            yield read_manifest(self.path)

    def _commit(self, manifest: dict[str, Any]) -> None:
        write_manifest(self.path, manifest)
        collect_garbage(self.path, manifest)

    def add(self, corpus: Any, *, executor: str = "auto") -> str:
        """Add documents as one new segment (weighed with refreshed global statistics); returns
        the segment's name. ``corpus``: as :func:`fastrag.ray.build_index` takes it."""
        table = root_table(corpus)
        if table.num_rows == 0:
            raise ConfigError("nothing to add: the corpus has no documents")
        with self._writing() as m:
            dup = _duplicate_ids(self._all_ids(m), table.column("id").to_pylist())
            if dup:
                raise ConfigError(
                    f"document ids already in the index: {dup[:3]}; delete them "
                    "first or give new ids"
                )
            name = new_segment_name(m)
            built = run_builds(
                self.path,
                [(name, table)],
                IndexSpec(**m["spec"]),
                self.transform,
                self.embed,
                executor,
            )
            m["segments"] += built
            self._commit(m)
        self.refresh()
        return name

    def delete(self, doc_ids: str | Sequence[str]) -> int:
        """Remove root documents (and their nodes) from the segments holding them; returns how
        many were removed."""
        if isinstance(doc_ids, str):
            doc_ids = [doc_ids]
        wanted = set(doc_ids)
        removed = 0
        with self._writing() as m:
            keep = []
            for entry in m["segments"]:
                seg = Document(store=self.path / entry["dir"], mode="r")
                here = wanted & set(seg.group("root").ids)
                if not here:
                    keep.append(entry)
                    continue
                left = seg.group("root").table.filter(
                    pc.invert(
                        pc.is_in(
                            seg.group("root").table.column("id"), value_set=pa.array(sorted(here))
                        )
                    )
                )
                removed += len(here)
                if left.num_rows:  # rewrite the segment without them (a fresh directory)
                    keep += run_builds(
                        self.path,
                        [(new_segment_name(m), left.select(ROOT_COLUMNS))],
                        IndexSpec(**m["spec"]),
                        self.transform,
                        self.embed,
                        "local",
                    )
            m["segments"] = keep
            if removed:
                self._commit(m)
        self.refresh()
        return removed

    def merge(self, max_segments: int = 1, *, executor: str = "auto") -> list[str]:
        """Compact the segments into at most ``max_segments`` (neighbours join, so global node
        order and every result stay the same); returns the new segment names."""
        max_segments = check_int("max_segments", max_segments, min=1)
        with self._writing() as m:
            if len(m["segments"]) <= max_segments:
                return [e["dir"] for e in m["segments"]]
            tables = [segment_roots(self.path / e["dir"]) for e in m["segments"]]
            whole = pa.concat_tables(tables)
            jobs = [
                (new_segment_name(m), whole.slice(lo, hi - lo))
                for lo, hi in partition(whole.num_rows, max_segments)
            ]
            m["segments"] = run_builds(
                self.path, jobs, IndexSpec(**m["spec"]), self.transform, self.embed, executor
            )
            self._commit(m)
        self.refresh()
        return self.segments

    def _all_ids(self, m: dict) -> list[str]:
        return [
            i
            for e in m["segments"]
            for i in segment_roots(self.path / e["dir"]).column("id").to_pylist()
        ]


def _duplicate_ids(have: list[str], new: list[str]) -> list[str]:
    seen = set(have)
    return [i for i in new if i in seen]
