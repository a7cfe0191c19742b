"""One segment of a sharded index: a fastrag store of some of the corpus's documents, built
(its documents, its group, and its token ids or vectors) and opened for search.

A BM25 segment keeps its token ids and its postings, packed (block codec, term frequencies and
document lengths: no weights, so no corpus statistics) in its store; :class:`Segment` reports
its vocabulary and document frequencies, and is then weighed with the whole corpus's
statistics, so its scores are those of one index over the whole corpus: its packed postings
are moved to the global term ids and decoded block by block as searches reach them (segments
stored before packed postings build their index from the token ids). Segments run in this
process or as Ray actors.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from fastrag.analysis import TokenizedCorpus
from fastrag.documents.building import transform_from_spec
from fastrag.documents.derivedkeys import params_key
from fastrag.documents.document import Document
from fastrag.errors import FastragError, StoreError, StoreWarning
from fastrag.indexes.base import Hits
from fastrag.indexes.bm25.index import BM25Index
from fastrag.indexes.bm25.packed import POSTINGS, checked_postings, encode_corpus, postings_meta
from fastrag.indexes.bm25.stats import BM25Stats
from fastrag.indexes.vocab import decode_vocab, encode_vocab
from fastrag.retrieval.paths.bm25 import BM25_PARAMS
from fastrag.retrieval.retriever import Retriever
from fastrag.retrieval.similarity import get_similarity


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


def shard_mode(similarity: str) -> str | None:
    """How a sharded index searches ``similarity`` (its path's ``shard``: "bm25", "vectors",
    "local"; None when it cannot be sharded)."""
    return get_similarity(similarity).path.shard


def empty_hits(n_q: int, k: int) -> Hits:
    """``(rows, scores, counts)`` of ``n_q`` queries with no hit: rows -1, scores -inf."""
    return (
        np.full((n_q, k), -1, np.int64),
        np.full((n_q, k), -np.inf, np.float32),
        np.zeros(n_q, np.int32),
    )


def open_segment(
    path: Path, spec: IndexSpec, transform: Any, embed: Any, mode: str
) -> tuple[Document, Retriever]:
    """(Document, Retriever) of one segment store."""
    doc = Document(store=path, mode=mode, embed=embed)
    _register_group(doc, spec, transform)
    sim = get_similarity(spec.similarity)
    kw: dict[str, Any] = {"stemmer": spec.stemmer} if sim.path.analyzed else {}
    if sim.embedded:
        kw["embed_keys"] = [spec.embed_key]
    ret = Retriever(doc, spec.group_name, spec.similarity, topk=1, **kw, **dict(spec.params or {}))
    return doc, ret


def _register_group(doc: Document, spec: IndexSpec, transform: Any) -> None:
    if transform is None and spec.transform:
        transform = transform_from_spec(dict(spec.transform))
    if transform is not None:
        doc.create_node_group(spec.group_name, transform=transform, parent=spec.parent)


def build_segment(
    dest: str, table: pa.Table, spec: IndexSpec, transform: Any = None, embed: Any = None
) -> dict[str, Any]:
    """Build one segment store at ``dest`` from root rows ``(id, text, metadata)``: its
    documents, its group, and its tokens (BM25) or vectors (dense). Returns its manifest entry.
    Runs in a Ray task or in this process; ``dest`` must not exist."""
    texts = table.column("text").to_pylist()
    ids = table.column("id").to_pylist()
    metas = [json.loads(m) for m in table.column("metadata").to_pylist()]
    return build_rows(dest, texts, metas, ids, spec, transform, embed)


def build_rows(
    dest: str,
    texts: list,
    metas: list | None,
    ids: list,
    spec: IndexSpec,
    transform: Any,
    embed: Any,
) -> dict[str, Any]:
    """:func:`build_segment` from the rows' texts, metadata and ids."""
    Document.from_texts(texts, metas, ids, store=dest)
    doc, ret = open_segment(Path(dest), spec, transform, embed, "a")
    group = doc.group(spec.group_name)
    mode = ret.sim.path.shard
    if mode == "bm25":
        segment_tokens(doc, group, ret.bm25_analyzer())
    elif mode == "vectors":
        doc.derived.vectors(group, spec.embed_key)
    else:  # "local": what its path searches, built now and kept when the path stores it
        ret.prepare()
    return {"dir": Path(dest).name, "docs": len(texts), "nodes": len(group)}


def segment_tokens(doc: Document, group: Any, analyzer: Any) -> TokenizedCorpus:
    """The token ids of a segment's group (a TokenizedCorpus), kept in its store."""
    store = doc.store
    key = f"{group.name}/tokens/{params_key(analyzer.identity())}"
    entry = store.manifest["indexes"].get(key)
    if entry is not None and entry["meta"].get("fingerprint") == group.fingerprint:
        try:
            arrays, _ = store.read_arrays(key)
            for name in ("values.npy", "offsets.npy"):  # read whole below: check them whole
                if (check := store.chunk_check(key, name)) is not None:
                    check.ensure(np.array([0]), np.array([check.size]))
            vocab = decode_vocab(arrays["vocab_bytes"], arrays["vocab_offsets"])
            values = np.asarray(arrays["values"])
            offsets = np.asarray(arrays["offsets"])
            if offsets.shape[0] != len(group) + 1 or (
                values.size and (values.min() < 0 or values.max() >= len(vocab))
            ):
                raise StoreError("token arrays do not match the group")
            return TokenizedCorpus(vocab, values, offsets)
        except (StoreError, KeyError, ValueError) as exc:
            warnings.warn(
                f"tokens {key!r} of {store.path} are damaged and are rebuilt: {exc}",
                StoreWarning,
                stacklevel=2,
            )
    tc = doc.derived.tokens(group, analyzer, 0)
    if store.writable:
        blob, voff = encode_vocab(tc.vocab)
        values, offsets = np.asarray(tc.values, np.int32), np.asarray(tc.offsets, np.int64)
        postings = encode_corpus(values, offsets, len(tc.vocab)) if tc.vocab else {}
        with store.transaction() as txn:
            txn.write_arrays(
                key,
                {
                    "values": values,
                    "offsets": offsets,
                    "vocab_bytes": blob,
                    "vocab_offsets": voff,
                    **postings,
                },
                {
                    "kind": "tokens",
                    "group": group.name,
                    "fingerprint": group.fingerprint,
                    "analyzer": analyzer.identity(),
                    **({"postings": postings_meta(postings)} if postings else {}),
                },
            )
    return tc


def segment_postings(doc: Document, group: Any, analyzer: Any) -> tuple[dict, dict] | None:
    """The packed postings of a segment's group stored with its tokens (checked: shapes,
    block sizes, offsets) and the chunk checks of their files, or None for a segment stored
    before they were."""
    store = doc.store
    key = f"{group.name}/tokens/{params_key(analyzer.identity())}"
    entry = store.manifest["indexes"].get(key)
    if entry is None or "postings" not in entry["meta"]:
        return None
    arrays, meta = store.read_arrays(key)
    checked = checked_postings(arrays, meta["postings"])
    if checked["doc_len"].shape[0] != len(group):
        raise StoreError(f"postings of {checked['doc_len'].shape[0]} nodes, group {len(group)}")
    checks = {
        n: (check, int(getattr(arrays[n], "offset", 0)))
        for n in POSTINGS
        if (check := store.chunk_check(key, f"{n}.npy")) is not None
    }
    return checked, checks


class SegmentNotReady(FastragError, RuntimeError):
    """A segment (a restarted Ray actor) lost the index weighed with the global statistics."""


class Segment:
    """One open segment: its document, group and retriever; a BM25 index weighed with the
    global statistics once :meth:`weigh` is called. Runs in this process or as a Ray actor
    (then every method is called remotely, and answers only arrays and plain values)."""

    def __init__(self, path: str, spec: IndexSpec, transform: Any, embed: Any) -> None:
        self.path = Path(path)
        self.doc, self.ret = open_segment(self.path, spec, transform, embed, "r")
        self.group = self.doc.group(spec.group_name)
        self.spec = spec
        self.tokens = None
        self.postings = None
        self.index = None
        if self.ret.sim.path.shard == "bm25":
            analyzer = self.ret.bm25_analyzer()
            self.tokens = segment_tokens(self.doc, self.group, analyzer)
            try:
                self.postings = segment_postings(self.doc, self.group, analyzer)
            except (StoreError, KeyError, ValueError) as exc:
                warnings.warn(
                    f"packed postings of {self.path} are damaged; its index is built from its "
                    f"token ids instead: {exc}",
                    StoreWarning,
                    stacklevel=2,
                )

    def size(self) -> int:
        return len(self.group)

    def stats_part(self) -> tuple[list[str], np.ndarray, int, int]:
        """(terms by local id, document frequencies, nodes, tokens) of this segment."""
        tc = self.tokens
        terms = [""] * len(tc.vocab)
        for term, i in tc.vocab.items():
            terms[i] = term
        st = BM25Stats.from_tokens(
            np.asarray(tc.values, np.int32), np.asarray(tc.offsets, np.int64), len(terms)
        )
        return terms, st.df, st.n_docs, st.n_tokens

    def weigh(self, to_global: np.ndarray, n_vocab: int, stats: BM25Stats) -> np.ndarray:
        """The index in the global id space with the global statistics (from the packed
        postings, decoded as searches reach them; else built from the token ids); returns its
        per-term bound (``term_max``)."""
        params = {p: v for p, v in (self.spec.params or {}).items() if p in BM25_PARAMS}
        index = None
        if self.postings is not None:
            postings, checks = self.postings
            try:
                for check, _ in checks.values():  # every block is decoded below: all bytes
                    check.ensure(np.array([0]), np.array([check.size]))
                index = BM25Index.from_postings(postings, to_global, n_vocab, stats, **params)
            except StoreError as exc:
                warnings.warn(
                    f"packed postings of {self.path} are damaged; its index is built from its "
                    f"token ids instead: {exc}",
                    StoreWarning,
                    stacklevel=2,
                )
        if index is not None:
            self.index = index
        else:
            values = to_global[np.asarray(self.tokens.values, np.int64)].astype(np.int32)
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
        return self.ret.mask(flt)

    def search_bm25(self, q_values, q_offsets, k, flt, cutoff, num_threads) -> Hits:
        if self.index is None:  # a restarted actor: the driver weighs it again
            raise SegmentNotReady(f"segment {self.path.name} has no weighed index")
        mask = self.mask(flt)
        n_q = q_offsets.shape[0] - 1
        k = min(k, self.size())
        if mask is not None and not mask.any():
            return empty_hits(n_q, k)
        return self.index.search_csr(
            q_values, q_offsets, k, mask=mask, cutoff=cutoff, num_threads=num_threads
        )

    def search_dense(self, qv, k, flt, cutoff, num_threads) -> Hits:
        mask = self.mask(flt)
        k = min(k, self.size())
        if mask is not None and not mask.any():
            return empty_hits(qv.shape[0], k)
        index = self.doc.derived.flat(self.group, self.spec.embed_key, self.ret.sim.metric)
        return index.search(qv, k, mask=mask, cutoff=cutoff, num_threads=num_threads)

    def search_local(self, queries, k, flt, cutoff, num_threads) -> Hits:
        """This segment's own path over ``queries`` (a ``"local"`` shard mode: a score
        depends on the query and the node only), hits below ``cutoff`` dropped."""
        mask = self.mask(flt)
        k = min(k, self.size())
        if mask is not None and not mask.any():
            return empty_hits(len(queries), k)
        path = self.ret.path
        rows, scores, counts = path.search(path.prepare(self.doc, self.group), queries, k, mask)
        if cutoff is not None:
            keep = (rows >= 0) & (scores >= cutoff)
            counts = keep.sum(axis=1).astype(np.int32)  # scores are best first
            rows = np.where(keep, rows, -1)
        scores = np.where(rows >= 0, scores, -np.inf).astype(np.float32)
        return rows, scores, counts

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
