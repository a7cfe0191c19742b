"""A corpus split into segment stores that score as one index.

A sharded index is a directory::

    shards.json        the commit point: the group, similarity and parameters, and the
                       segments in global node order (each a fastrag store directory)
    seg-000001/ ...    one fastrag store per segment (its documents, groups, tokens, vectors)
    .lock              the writers' OS file lock

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
import json
import os
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from fastrag._checks import check_int
from fastrag.errors import ConfigError, StoreError
from fastrag.schema import DocNode, NodeWithScore

FORMAT = "fastrag.shards/1"
MANIFEST = "shards.json"
LOCK = ".lock"
TMP_PREFIX = ".tmp-"

_BM25_PARAMS = ("method", "k1", "b", "delta")
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


def is_sharded(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a sharded index directory (it holds ``shards.json``)."""
    return (Path(path) / MANIFEST).is_file()


# -- corpus input ------------------------------------------------------------------------------
def root_table(source: Any) -> pa.Table:
    """``(id, text, metadata)`` of the root documents of ``source``: a fastrag store directory,
    files or folders (a path or a list of paths), a list of texts, or an Arrow table with a
    ``text`` column (optional ``id``; other columns become metadata)."""
    from fastrag.documents.document import Document

    if isinstance(source, pa.Table):
        if "text" not in source.column_names:
            raise ConfigError(f"the table needs a 'text' column; it has {source.column_names}")
        texts = source.column("text").to_pylist()
        ids = source.column("id").to_pylist() if "id" in source.column_names else None
        other = [c for c in source.column_names if c not in ("text", "id")]
        metas = source.select(other).to_pylist() if other else None
        doc = Document.from_texts(texts, metas, ids)
    elif isinstance(source, (str, os.PathLike)) and (Path(source) / "manifest.json").is_file():
        doc = Document(store=source, mode="r")
    elif isinstance(source, (str, os.PathLike)) or (
        isinstance(source, Sequence) and source and all(isinstance(x, os.PathLike) for x in source)
    ):
        doc = Document(source)
    elif isinstance(source, Sequence) and not isinstance(source, str):
        doc = Document.from_texts(list(source))
    else:
        raise ConfigError(
            "the corpus must be a fastrag store directory, files or folders, a list of texts, "
            f"or an Arrow table with a 'text' column; got {type(source).__name__}"
        )
    return doc.group("root").table.select(["id", "text", "metadata"])


def _partition(n: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous ``[lo, hi)`` ranges of ``n`` rows in ``parts`` near-equal pieces."""
    bounds = np.linspace(0, n, parts + 1).round().astype(np.int64)
    return [(int(bounds[i]), int(bounds[i + 1])) for i in range(parts) if bounds[i + 1] > bounds[i]]


# -- one segment -------------------------------------------------------------------------------
@dataclass(frozen=True)
class IndexSpec:
    """What every segment of one sharded index builds: the group and how it is searched."""

    group_name: str = "root"
    similarity: str = "bm25"
    parent: str = "root"
    params: Mapping[str, Any] | None = None  # BM25 parameters (method, k1, b, delta)
    stemmer: str | None = "auto"
    embed_key: str = "default"
    transform: Mapping[str, Any] | None = None  # the group transform's recorded spec, if any

    def to_json(self) -> dict[str, Any]:
        return {
            "group_name": self.group_name,
            "similarity": self.similarity,
            "parent": self.parent,
            "params": dict(self.params or {}),
            "stemmer": self.stemmer,
            "embed_key": self.embed_key,
            "transform": dict(self.transform) if self.transform else None,
        }


def _open_segment(path: Path, spec: IndexSpec, transform: Any, embed: Any, mode: str):
    """(Document, Retriever) of one segment store."""
    from fastrag.documents.document import Document
    from fastrag.retrieval.retriever import Retriever

    doc = Document(store=path, mode=mode, embed=embed)
    _register_group(doc, spec, transform)
    kw = (
        {"stemmer": spec.stemmer}
        if _kind(spec.similarity) == "bm25"
        else {"embed_keys": [spec.embed_key]}
    )
    ret = Retriever(doc, spec.group_name, spec.similarity, topk=1, **kw, **dict(spec.params or {}))
    return doc, ret


def _register_group(doc, spec: IndexSpec, transform: Any) -> None:
    if transform is None and spec.transform:
        from fastrag.documents.building import transform_from_spec

        transform = transform_from_spec(dict(spec.transform))
    if transform is not None:
        doc.create_node_group(spec.group_name, transform=transform, parent=spec.parent)


def _kind(similarity: str) -> str:
    from fastrag.retrieval.similarity import get_similarity

    return get_similarity(similarity).kind


def build_segment(
    dest: str, table: pa.Table, spec: IndexSpec, transform: Any = None, embed: Any = None
) -> dict[str, Any]:
    """Build one segment store at ``dest`` from root rows ``(id, text, metadata)``: its
    documents, its group, and its tokens (BM25) or vectors (dense). Returns its manifest entry.
    Runs in a Ray task or in this process; ``dest`` must not exist."""
    texts = table.column("text").to_pylist()
    ids = table.column("id").to_pylist()
    metas = [json.loads(m) for m in table.column("metadata").to_pylist()]
    return _build_rows(dest, texts, metas, ids, spec, transform, embed)


def _build_rows(
    dest: str,
    texts: list,
    metas: list | None,
    ids: list,
    spec: IndexSpec,
    transform: Any,
    embed: Any,
) -> dict[str, Any]:
    from fastrag.documents.document import Document

    Document.from_texts(texts, metas, ids, store=dest)
    doc, ret = _open_segment(Path(dest), spec, transform, embed, "a")
    group = doc.group(spec.group_name)
    if ret.sim.kind == "bm25":
        segment_tokens(doc, group, ret.bm25_analyzer())
    elif ret.sim.kind == "dense":
        doc.derived.vectors(group, spec.embed_key)
    return {"dir": Path(dest).name, "docs": len(texts), "nodes": len(group)}


def segment_tokens(doc, group, analyzer):
    """The token ids of a segment's group (a TokenizedCorpus), kept in its store."""
    from fastrag.analysis import TokenizedCorpus
    from fastrag.documents.indexes import _decode_vocab, _encode_vocab, params_key

    store = doc.store
    key = f"{group.name}/tokens/{params_key(analyzer.identity())}"
    entry = store.manifest["indexes"].get(key)
    if entry is not None and entry["meta"].get("fingerprint") == group.fingerprint:
        try:
            arrays, _ = store.read_arrays(key)
            vocab = _decode_vocab(arrays["vocab_bytes"], arrays["vocab_offsets"])
            values = np.asarray(arrays["values"])
            offsets = np.asarray(arrays["offsets"])
            if offsets.shape[0] != len(group) + 1 or (
                values.size and (values.min() < 0 or values.max() >= len(vocab))
            ):
                raise StoreError("token arrays do not match the group")
            return TokenizedCorpus(vocab, values, offsets)
        except (StoreError, KeyError, ValueError) as exc:
            import warnings

            from fastrag.errors import StoreWarning

            warnings.warn(
                f"tokens {key!r} of {store.path} are damaged and are rebuilt: {exc}",
                StoreWarning,
                stacklevel=2,
            )
    tc = doc.derived._tokens(group, analyzer, 0)
    if store.writable:
        blob, voff = _encode_vocab(tc.vocab)
        with store.transaction() as txn:
            txn.write_arrays(
                key,
                {
                    "values": np.asarray(tc.values, np.int32),
                    "offsets": np.asarray(tc.offsets, np.int64),
                    "vocab_bytes": blob,
                    "vocab_offsets": voff,
                },
                {
                    "kind": "tokens",
                    "group": group.name,
                    "fingerprint": group.fingerprint,
                    "analyzer": analyzer.identity(),
                },
            )
    return tc


class SegmentNotReady(RuntimeError):
    """A segment (a restarted Ray actor) lost the index weighed with the global statistics."""


class _Segment:
    """One open segment: its document, group and retriever; a BM25 index weighed with the
    global statistics once :meth:`weigh` is called. Runs in this process or as a Ray actor
    (then every method is called remotely, and answers only arrays and plain values)."""

    def __init__(self, path: str, spec: IndexSpec, transform: Any, embed: Any) -> None:
        self.path = Path(path)
        self.doc, self.ret = _open_segment(self.path, spec, transform, embed, "r")
        self.group = self.doc.group(spec.group_name)
        self.spec = spec
        self.tokens = None
        self.index = None
        if self.ret.sim.kind == "bm25":
            self.tokens = segment_tokens(self.doc, self.group, self.ret.bm25_analyzer())

    def size(self) -> int:
        return len(self.group)

    def stats_part(self) -> tuple[list[str], np.ndarray, int, int]:
        """(terms by local id, document frequencies, nodes, tokens) of this segment."""
        from fastrag.indexes.bm25 import BM25Stats

        tc = self.tokens
        terms = [""] * len(tc.vocab)
        for term, i in tc.vocab.items():
            terms[i] = term
        st = BM25Stats.from_tokens(
            np.asarray(tc.values, np.int32), np.asarray(tc.offsets, np.int64), len(terms)
        )
        return terms, st.df, st.n_docs, st.n_tokens

    def weigh(self, to_global: np.ndarray, n_vocab: int, stats) -> np.ndarray:
        """Build the index in the global id space with the global statistics; returns its
        per-term bound (``term_max``)."""
        from fastrag.indexes.bm25 import BM25Index

        values = to_global[np.asarray(self.tokens.values, np.int64)].astype(np.int32)
        params = {p: v for p, v in (self.spec.params or {}).items() if p in _BM25_PARAMS}
        self.index = BM25Index.build(
            values, np.asarray(self.tokens.offsets, np.int64), n_vocab, stats=stats, **params
        )
        return np.asarray(self.index.term_max)

    def set_bound(self, bound: np.ndarray) -> None:
        """Use the whole corpus's per-term bound: the kernel orders a query's terms by it, so
        each score is summed in the same order as in one index (float32 sums are
        order-sensitive); it is still an upper bound."""
        bound = np.array(bound, np.float32)
        bound.setflags(write=False)
        self.index.term_max = bound

    def mask(self, flt: Any) -> np.ndarray | None:
        return self.ret._mask(self.group, flt)

    def search_bm25(self, q_values, q_offsets, k, flt, cutoff, num_threads):
        if self.index is None:  # a restarted actor: the driver weighs it again
            raise SegmentNotReady(f"segment {self.path.name} has no weighed index")
        mask = self.mask(flt)
        n_q = q_offsets.shape[0] - 1
        k = min(k, self.size())
        if mask is not None and not mask.any():
            return _empty(n_q, k)
        return self.index.search(
            q_values, q_offsets, k, mask=mask, cutoff=cutoff, num_threads=num_threads
        )

    def search_dense(self, qv, k, flt, cutoff, num_threads):
        mask = self.mask(flt)
        k = min(k, self.size())
        if mask is not None and not mask.any():
            return _empty(qv.shape[0], k)
        index = self.doc.derived.flat(self.group, self.spec.embed_key, self.ret.sim.metric)
        return index.search(qv, k, mask=mask, cutoff=cutoff, num_threads=num_threads)

    def ids(self, rows: np.ndarray) -> pa.Array:
        return (
            self.group.table.column("id")
            .take(pa.array(np.asarray(rows, np.int64)))
            .combine_chunks()
        )

    def nodes(self, rows: np.ndarray) -> list:
        return self.group.nodes(np.asarray(rows, np.int64))

    def node_data(self, rows: np.ndarray) -> list[tuple[str, str, dict]]:
        """(id, text, metadata) of rows: what crosses a process boundary."""
        return [(n.id, n.text, dict(n.metadata)) for n in self.nodes(rows)]


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
            from fastrag.distributed._ray import init_if_needed, require_ray

            self.ray = require_ray("ShardedRetriever(executor='ray')")
            init_if_needed(self.ray)
            actor = self.ray.remote(_Segment).options(max_restarts=-1, max_task_retries=-1)
            self.items = [
                keep.get(n) or actor.remote(str(root / n), spec, transform, embed) for n in names
            ]
        else:
            self.items = [
                keep.get(n) or _Segment(str(root / n), spec, transform, embed) for n in names
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


def _empty(n_q: int, k: int):
    return (
        np.full((n_q, k), -1, np.int64),
        np.full((n_q, k), -np.inf, np.float32),
        np.zeros(n_q, np.int32),
    )


def merge_stats(parts: Sequence[tuple[list[str], np.ndarray, int, int]]):
    """One reduction over the segments' ``stats_part()``: (global vocab, local->global id
    maps, BM25Stats of the whole corpus)."""
    from fastrag.indexes.bm25 import BM25Stats

    vocab: dict[str, int] = {}
    maps = []
    for terms, _, _, _ in parts:
        m = np.empty(len(terms), np.int64)
        for i, term in enumerate(terms):
            m[i] = vocab.setdefault(term, len(vocab))
        maps.append(m)
    df = np.zeros(len(vocab), np.int64)
    for m, (_, local_df, _, _) in zip(maps, parts, strict=True):
        np.add.at(df, m, local_df)
    stats = BM25Stats(sum(p[2] for p in parts), sum(p[3] for p in parts), df)
    return vocab, maps, stats


def merge_hits(
    results: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], offsets: Sequence[int], k: int
):
    """Per-segment ``(rows, scores, counts)`` -> global top-``k``: best score first, ties by
    global row (segment offset + local row)."""
    n_q = results[0][0].shape[0] if results else 0
    cand_rows = []
    cand_scores = []
    for (rows, scores, counts), off in zip(results, offsets, strict=True):
        valid = np.arange(rows.shape[1])[None, :] < counts[:, None]
        cand_rows.append(np.where(valid, rows + off, np.iinfo(np.int64).max))
        cand_scores.append(np.where(valid, scores.astype(np.float32), -np.inf))
    if not cand_rows:
        return _empty(n_q, 0)
    rows = np.concatenate(cand_rows, axis=1)
    scores = np.concatenate(cand_scores, axis=1)
    order = np.lexsort((rows, -scores.astype(np.float64)), axis=1)[:, :k]
    top_rows = np.take_along_axis(rows, order, axis=1)
    top_scores = np.take_along_axis(scores, order, axis=1)
    counts = np.minimum(
        np.sum(np.concatenate([r[2][:, None] for r in results], axis=1), axis=1), top_rows.shape[1]
    ).astype(np.int32)
    top_rows[np.arange(top_rows.shape[1])[None, :] >= counts[:, None]] = -1
    return top_rows, top_scores, counts


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
        topk: int = 6,
        filter: Any = None,
        similarity_cut_off: float | None = None,
        transform: Any = None,
        embed: Any = None,
        num_threads: int | None = None,
        lock_timeout: float = 60.0,
        executor: str = "local",
    ) -> None:
        from fastrag.retrieval.retriever import _check_topk

        self.path = Path(path)
        if not is_sharded(self.path):
            raise ConfigError(
                f"{str(self.path)!r} is not a sharded index (no {MANIFEST}); "
                "build one with fastrag.ray.build_index(corpus, path, ...)"
            )
        self.topk = _check_topk(topk)
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
    def _read_manifest(self) -> dict[str, Any]:
        try:
            m = json.loads((self.path / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read {self.path / MANIFEST}: {exc}") from exc
        if m.get("format") != FORMAT:
            raise StoreError(
                f"{self.path / MANIFEST} has format {m.get('format')!r}, this "
                f"fastrag reads {FORMAT!r}"
            )
        return m

    def refresh(self) -> ShardedRetriever:
        """Re-open the committed segments (another process may have added or merged) and
        recompute the global statistics (one reduction over the segments)."""
        with self._lock:
            m = self._read_manifest()
            spec = IndexSpec(**m["spec"])
            kind = _kind(spec.similarity)
            if kind not in ("bm25", "dense"):
                raise ConfigError(
                    f"sharded indexes support BM25 and dense similarities, not {spec.similarity!r}"
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
            if kind == "bm25" and names:
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

    def _run(self, queries, filter, topk):
        from fastrag.retrieval.retriever import _check_topk, check_queries

        check_queries(queries)
        k_asked = self.topk if topk is None else _check_topk(topk)
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
                return segs, offsets, _empty(n_q, k)
            args = (k, flt, self.similarity_cut_off, self.num_threads)
            try:
                if _kind(spec.similarity) == "bm25":
                    from fastrag.analysis import encode_queries

                    qv, qo = encode_queries(sub, self._analyzer(), vocab)
                    parts = segs.call("search_bm25", qv, qo, *args)
                else:
                    parts = segs.call("search_dense", self._query_vectors(sub), *args)
                break
            except SegmentNotReady:  # an actor died and Ray restarted it: weigh it again
                if attempt:
                    raise
                self.refresh()
        r, s, c = merge_hits(parts, offsets[:-1], k)
        rows, scores, counts = _empty(n_q, k)
        scores[:] = 0.0
        rows[todo, : r.shape[1]] = r
        scores[todo, : s.shape[1]] = s
        counts[todo] = c
        return segs, offsets, (rows, scores, counts)

    def _analyzer(self):
        from fastrag.analysis import get_analyzer
        from fastrag.retrieval.similarity import get_similarity

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
        from fastrag.documents.document import embed_query_vectors

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
    def _writing(self):
        from filelock import FileLock, Timeout

        from fastrag.errors import StoreLockTimeout

        lock = FileLock(str(self.path / LOCK), timeout=self.lock_timeout)
        try:
            lock.acquire()
        except Timeout:
            raise StoreLockTimeout(
                f"another writer holds {self.path / LOCK} for more than "
                f"lock_timeout={self.lock_timeout} s"
            ) from None
        try:
            yield self._read_manifest()
        finally:
            lock.release()

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
            name = _segment_name(m)
            built = run_builds(
                self.path,
                [(name, table)],
                IndexSpec(**m["spec"]),
                self.transform,
                self.embed,
                executor,
            )
            m["segments"] += built
            m["next_segment"] += 1
            self._commit(m)
        self.refresh()
        return name

    def delete(self, doc_ids: str | Sequence[str]) -> int:
        """Remove root documents (and their nodes) from the segments holding them; returns how
        many were removed."""
        from fastrag.documents.document import Document

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
                    pa.compute.invert(
                        pa.compute.is_in(
                            seg.group("root").table.column("id"), value_set=pa.array(sorted(here))
                        )
                    )
                )
                removed += len(here)
                if left.num_rows:  # rewrite the segment without them (a fresh directory)
                    name = _segment_name(m)
                    m["next_segment"] += 1
                    keep += run_builds(
                        self.path,
                        [(name, left.select(["id", "text", "metadata"]))],
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
            tables = [_segment_roots(self.path / e["dir"]) for e in m["segments"]]
            whole = pa.concat_tables(tables)
            jobs = []
            for lo, hi in _partition(whole.num_rows, max_segments):
                name = _segment_name(m)
                m["next_segment"] += 1
                jobs.append((name, whole.slice(lo, hi - lo)))
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
            for i in _segment_roots(self.path / e["dir"]).column("id").to_pylist()
        ]


def _duplicate_ids(have: list[str], new: list[str]) -> list[str]:
    seen = set(have)
    return [i for i in new if i in seen]


def _segment_roots(path: Path) -> pa.Table:
    from fastrag.documents.document import Document

    return Document(store=path, mode="r").group("root").table.select(["id", "text", "metadata"])


def _segment_name(m: dict) -> str:
    return f"seg-{m['next_segment']:06d}"


def write_manifest(root: Path, manifest: dict[str, Any]) -> None:
    from fastrag.documents.store import atomic_write_bytes

    data = json.dumps(manifest, ensure_ascii=False, indent=1).encode()
    atomic_write_bytes(root / MANIFEST, lambda f: f.write(data))


def collect_garbage(root: Path, manifest: dict[str, Any]) -> list[str]:
    """Remove segment folders (and temp folders) the manifest does not name; call with the
    lock held. Open readers keep their memory-mapped files (POSIX)."""
    named = {e["dir"] for e in manifest["segments"]}
    removed = []
    for entry in root.iterdir():
        if entry.name in (MANIFEST, LOCK) or entry.name in named:
            continue
        if entry.is_dir() and (entry.name.startswith("seg-") or entry.name.startswith(TMP_PREFIX)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
        elif entry.name.startswith(TMP_PREFIX):
            with contextlib.suppress(OSError):
                entry.unlink()
            removed.append(entry.name)
    return removed


def run_builds(
    root: Path,
    jobs: list[tuple[str, pa.Table]],
    spec: IndexSpec,
    transform: Any,
    embed: Any,
    executor: str,
) -> list[dict[str, Any]]:
    """Build segment stores (in Ray tasks when ``executor`` is "ray", or "auto" with Ray
    initialized; else here, one after another) into temp folders, then rename each into place.
    On any failure every folder of this call is removed and the error raised."""
    if executor not in ("auto", "ray", "local"):
        raise ConfigError(f"executor must be 'auto', 'ray' or 'local', got {executor!r}")
    use_ray = executor == "ray"
    if executor == "auto":
        try:
            import ray

            use_ray = ray.is_initialized()
        except ImportError:
            use_ray = False
    tmp = [root / f"{TMP_PREFIX}{name}-{os.getpid()}-{time.monotonic_ns()}" for name, _ in jobs]
    try:
        if use_ray:
            from fastrag.distributed._ray import require_ray

            ray = require_ray("fastrag.ray.build_index")
            task = ray.remote(build_segment).options(max_retries=2)
            refs = [
                task.remote(str(t), table, spec, transform, embed)
                for t, (_, table) in zip(tmp, jobs, strict=True)
            ]
            entries = ray.get(refs)
        else:
            entries = [
                build_segment(str(t), table, spec, transform, embed)
                for t, (_, table) in zip(tmp, jobs, strict=True)
            ]
        out = []
        for t, (name, _), entry in zip(tmp, jobs, entries, strict=True):
            os.rename(t, root / name)
            out.append({**entry, "dir": name})
        return out
    except BaseException:
        for t in tmp:
            shutil.rmtree(t, ignore_errors=True)
        raise


def create(
    path: str | os.PathLike,
    corpus: Any,
    spec: IndexSpec,
    *,
    num_shards: int | None,
    transform: Any = None,
    embed: Any = None,
    executor: str = "auto",
    overwrite: bool = False,
) -> Path:
    """Partition ``corpus`` into ``num_shards`` segments at ``path`` (built in parallel on Ray
    when it is running) and commit the sharded index; returns ``path``."""
    if num_shards is not None:
        num_shards = check_int("num_shards", num_shards, min=1)
    root = Path(path)
    if root.exists() and any(root.iterdir()):
        if not overwrite:
            raise ConfigError(
                f"{str(root)!r} exists and is not empty; choose a new directory "
                "or pass overwrite=True to replace it"
            )
        if not is_sharded(root):
            raise ConfigError(f"{str(root)!r} is not a sharded index; refusing to overwrite it")
    ds = as_dataset(corpus)
    if ds is not None:
        if executor == "local":
            raise ConfigError(
                "a Ray Dataset (or .parquet files / a glob) is built by Ray "
                "workers; use executor='auto' or 'ray'"
            )
        if num_shards is not None:  # an ordered split into num_shards blocks (in the cluster)
            ds = ds.repartition(num_shards)
    else:
        table = root_table(corpus)
        if table.num_rows == 0:
            raise ConfigError("the corpus has no documents")
    root.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(root / LOCK)):
        first = 1
        if is_sharded(root):  # overwrite: new names after the old ones, which go at the commit
            with contextlib.suppress(OSError, ValueError, KeyError):
                first = int(json.loads((root / MANIFEST).read_text())["next_segment"])
        m = {"format": FORMAT, "spec": spec.to_json(), "segments": [], "next_segment": first}
        if ds is not None:
            m["segments"] = build_dataset(root, ds, spec, transform, embed, m)
        else:
            jobs = []
            for lo, hi in _partition(table.num_rows, num_shards or 2):
                jobs.append((_segment_name(m), table.slice(lo, hi - lo)))
                m["next_segment"] += 1
            m["segments"] = run_builds(root, jobs, spec, transform, embed, executor)
        write_manifest(root, m)
        collect_garbage(root, m)
    return root


# -- corpora the cluster reads: Ray Datasets and data files -----------------------------------
_DATA_FILES = (".parquet", ".jsonl", ".json")


def as_dataset(corpus: Any) -> Any:
    """``corpus`` as a ``ray.data.Dataset`` when the cluster should read it (a Dataset; a glob
    pattern or ``.parquet`` files, read by ``ray.data.read_parquet`` / ``read_json``), else
    None (a store, files or folders for fastrag's readers, texts, an Arrow table)."""
    if type(corpus).__module__.startswith("ray.data"):
        return corpus
    items = [corpus] if isinstance(corpus, (str, os.PathLike)) else corpus
    if not (
        isinstance(items, Sequence)
        and items
        and all(isinstance(x, (str, os.PathLike)) for x in items)
    ):
        return None
    names = [os.fspath(x) for x in items]
    globbed = [n for n in names if any(c in n for c in "*?[")]
    if not globbed and not all(n.lower().endswith(".parquet") for n in names):
        return None
    import glob

    paths = []
    for n in names:
        got = sorted(glob.glob(n)) if n in globbed and "://" not in n else [n]
        if not got:
            raise ConfigError(f"no file matches {n!r}")
        paths += got
    kinds = {os.path.splitext(p)[1].lower() for p in paths}
    if not kinds <= set(_DATA_FILES) or len(kinds & {".parquet"}) not in (0, len(kinds)):
        raise ConfigError(
            f"a glob must name .parquet files or .jsonl/.json files (one "
            f"document a row), got {sorted(kinds)}; for one document per line "
            "of text files pass ray.data.read_text(paths), for other files "
            "pass their paths or folder (fastrag's readers)"
        )
    from fastrag.distributed._ray import init_if_needed, require_ray

    ray = require_ray("fastrag.ray.build_index")
    init_if_needed(ray)
    n = len(paths)  # a block (a segment) per file; num_shards= repartitions
    if kinds == {".parquet"}:
        return ray.data.read_parquet(paths, override_num_blocks=n)
    return ray.data.read_json(paths, lines=".jsonl" in kinds, override_num_blocks=n)


def _block_rows(block: pa.Table, first_row: int | None) -> tuple[list, list | None, list]:
    """(texts, metadatas, ids) of a block of corpus rows: ``text``, ``id`` (else the id one
    index gives the text at its global row ``first_row + i``), other columns as metadata."""
    from fastrag.schema import node_id

    if "text" not in block.column_names:
        raise ConfigError(f"the corpus needs a 'text' column; it has {block.column_names}")
    texts = block.column("text").to_pylist()
    if "id" in block.column_names:
        ids = block.column("id").to_pylist()
    else:
        ids = [node_id("text", first_row + i, t) for i, t in enumerate(texts)]
    other = [c for c in block.column_names if c not in ("text", "id")]
    metas = block.select(other).to_pylist() if other else None
    return texts, metas, ids


def _build_block(
    block: pa.Table,
    first_row: int | None,
    root: str,
    token: str,
    spec: IndexSpec,
    transform: Any,
    embed: Any,
) -> dict[str, Any]:
    """Build one segment from a block of corpus rows, in a Ray worker, into a temp folder of
    ``root`` named by ``token``; returns its entry (``dir`` is the temp folder)."""
    import uuid

    if block.num_rows == 0:
        return {"dir": None, "docs": 0, "nodes": 0}
    texts, metas, ids = _block_rows(block, first_row)
    dest = Path(root) / f"{TMP_PREFIX}{token}-{uuid.uuid4().hex}"
    return _build_rows(str(dest), texts, metas, ids, spec, transform, embed)


def _build_batch(
    block: pa.Table, root: str, token: str, spec: IndexSpec, transform: Any, embed: Any
) -> pa.Table:
    """map_batches function: one whole block in, one segment built, its entry out."""
    entry = _build_block(block, None, root, token, spec, transform, embed)
    return pa.table({k: [v] for k, v in entry.items()})


def build_dataset(
    root: Path, ds: Any, spec: IndexSpec, transform: Any, embed: Any, m: dict[str, Any]
) -> list[dict[str, Any]]:
    """One segment per block of ``ds``, built by Ray workers where the block is; the driver
    sees only each segment's entry. With an ``id`` column the blocks stream (read, built,
    dropped); without one, the default ids need every row's global position, so the blocks
    are first materialised in the cluster's object store (not here) and counted. Segments
    keep the Dataset's order; on failure every temp folder of this build is removed."""
    import uuid

    from fastrag.distributed._ray import require_ray

    ray = require_ray("fastrag.ray.build_index")
    token = uuid.uuid4().hex[:12]
    args = (str(root), token, spec, transform, embed)
    try:
        if "id" in ds.schema().names:
            out = ds.map_batches(
                _build_batch, batch_size=None, batch_format="pyarrow", fn_args=args
            )
            out.context.execution_options.preserve_order = True  # segments in corpus order
            entries = out.take_all()
        else:
            opts = ds.context.execution_options
            kept, opts.preserve_order = opts.preserve_order, True  # blocks in corpus order
            try:
                refs = ds.to_arrow_refs()
            finally:
                opts.preserve_order = kept
            count = ray.remote(lambda b: b.num_rows)
            sizes = ray.get([count.remote(r) for r in refs])
            firsts = np.concatenate([[0], np.cumsum(sizes)])[:-1]
            task = ray.remote(_build_block).options(max_retries=2)
            entries = ray.get(
                [task.remote(r, int(f), *args) for r, f in zip(refs, firsts, strict=True)]
            )
        out_entries = []
        for e in entries:
            if not e["docs"]:
                continue
            name = _segment_name(m)
            m["next_segment"] += 1
            os.rename(root / e["dir"], root / name)
            out_entries.append({"dir": name, "docs": int(e["docs"]), "nodes": int(e["nodes"])})
        if not out_entries:
            raise ConfigError("the corpus has no documents")
        return out_entries
    except BaseException:
        for t in root.glob(f"{TMP_PREFIX}{token}-*"):
            shutil.rmtree(t, ignore_errors=True)
        raise


def check_spec(
    group_name: str,
    similarity: str,
    parent: str,
    params: Mapping[str, Any],
    stemmer: str | None,
    embed_key: str,
    transform: Any,
    embed: Any,
) -> IndexSpec:
    """Validate what a sharded index builds, before any work starts."""
    from fastrag.documents.document import Document

    if not isinstance(group_name, str) or not group_name:
        raise ConfigError(f"group_name must be a non-empty string, got {group_name!r}")
    kind = _kind(similarity)
    if kind not in ("bm25", "dense"):
        raise ConfigError(
            f"sharded indexes support BM25 and dense similarities, not "
            f"{similarity!r}; for hybrid search, fuse a BM25 and a dense "
            "sharded index with fastrag.ReciprocalRankFusionJoiner"
        )
    if kind == "bm25":
        unknown = set(params) - set(_BM25_PARAMS)
        if unknown:
            raise ConfigError(
                f"unknown BM25 parameters {sorted(unknown)}; known: {list(_BM25_PARAMS)}"
            )
        from fastrag.indexes.bm25 import check_bm25_params

        check_bm25_params(**params)
    elif kind == "dense":
        if params:
            raise ConfigError(f"parameters {sorted(params)} do not apply to {similarity!r}")
        if embed is None:
            raise ConfigError(f"similarity {similarity!r} needs embed= (an Embedder)")
    if group_name != "root" and group_name not in Document._BUILTIN and transform is None:
        raise ConfigError(
            f"group {group_name!r} is not 'root' or a built-in group "
            f"({sorted(Document._BUILTIN)}); pass transform= to build it (a "
            "store's group made by `fastrag ingest --group` needs none)"
        )
    recorded = None
    if transform is not None and callable(getattr(transform, "spec", None)):
        recorded = transform.spec()
    return IndexSpec(
        group_name,
        similarity,
        parent,
        dict(params),
        stemmer,
        embed_key,
        recorded if isinstance(recorded, dict) else None,
    )


def stored_group(corpus: Any, group_name: str, parent: str, transform: Any) -> tuple[Any, str]:
    """``(transform, parent)`` of ``group_name``: as given, or, when ``corpus`` is a store
    holding the group and no transform is given, rebuilt from the spec the store recorded
    (``fastrag ingest --group`` records one for every group it makes)."""
    from fastrag.documents.building import transform_from_spec
    from fastrag.documents.document import Document

    if transform is not None or group_name == "root" or group_name in Document._BUILTIN:
        return transform, parent
    if not (isinstance(corpus, (str, os.PathLike)) and (Path(corpus) / "manifest.json").is_file()):
        return transform, parent
    entry = Document(store=corpus, mode="r").store.manifest["groups"].get(group_name)
    if entry is None:
        return transform, parent
    rebuilt = transform_from_spec(entry.get("spec"))
    if rebuilt is None:
        raise ConfigError(
            f"group {group_name!r} of store {str(corpus)!r} was made by a "
            "transform the store could not record (a function); pass "
            "transform= (the same transform) to build it"
        )
    stored_parent = entry.get("parent", "root")
    if stored_parent != "root" and stored_parent not in Document._BUILTIN:
        raise ConfigError(
            f"group {group_name!r} of store {str(corpus)!r} is made from group "
            f"{stored_parent!r}, not from 'root'; a sharded index builds groups "
            "of the documents: index that group's parent chain as one group "
            "(e.g. ingest it with --group NAME=SPEC, no @PARENT)"
        )
    return rebuilt, stored_parent
