"""The one owner of a Document's derived data: vectors per (group, embed key), BM25 indexes
(with their vocabulary), flat and HNSW indexes, and key maps.

Retrievers ask for an artifact; this module builds it, caches it by the group's fingerprint,
persists it in the store (when the store is writable) and reloads it. Each artifact is built
once per key under a per-key lock, so N threads asking at once cause one build. A damaged
derived file is dropped and rebuilt with a :class:`~fastrag.errors.StoreWarning`.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import threading
import warnings
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from fastrag._heap import trim_heap
from fastrag.analysis import TokenizedCorpus, tokenize_corpus
from fastrag.documents.embedding import check_vectors, embedder_name, to_numpy, vector_schema
from fastrag.documents.labels import LabelledIndex, hnsw_label_problem, label_rows
from fastrag.documents.tokenparts import STREAM_ROWS, TokenStream, tokenize_column
from fastrag.embeddings.named import embedder_record
from fastrag.errors import ConfigError, EmbeddingError, StoreError, StoreWarning
from fastrag.indexes.bm25.index import BM25Index
from fastrag.indexes.bm25.stored import PACKED_NAMES
from fastrag.indexes.bm25.stream import count_postings, pack_token_parts, pack_tokens
from fastrag.indexes.sparse import SparseIndex, sparse_column
from fastrag.indexes.vocab import decode_vocab, encode_vocab
from fastrag.schema import EMBEDDING_PREFIX

#: A BM25 index with fewer postings is stored unpacked (8 bytes a posting: 2 MiB at most): a
#: query on it then reads no packed block, and a process that searches a small store once
#: needs no kernel (numba's start-up, 0.4 s, is most of such a search)
PACK_MIN_POSTINGS = 1 << 18

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.documents.document import Document
    from fastrag.documents.group import NodeGroup
    from fastrag.documents.transaction import Transaction


class KeyLocks:
    """One lock per key, created on first use."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Hashable, threading.RLock] = {}

    def __call__(self, key: Hashable) -> threading.RLock:
        with self._guard:
            return self._locks.setdefault(key, threading.RLock())


def params_key(*parts: Any) -> str:
    return hashlib.blake2b(
        json.dumps(parts, sort_keys=True, default=str).encode(), digest_size=8
    ).hexdigest()


# who hears of embedding progress in this context (see DerivedData.reporting)
_PROGRESS: contextvars.ContextVar[Callable[[str, int, int], Any] | None] = contextvars.ContextVar(
    "fastrag_embed_progress", default=None
)


def vectors_key(group: str, key: str) -> str:
    return json.dumps([group, key])


class DerivedData:
    """Derived artifacts of one :class:`~fastrag.Document` (``doc.derived``)."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self._locks = KeyLocks()
        self._cache: dict[Hashable, tuple[str, Any]] = {}
        self.builds: dict[str, int] = {}  # artifact kind -> builds in this process
        self._bad_dirs: set[str] = set()  # stored index folders found damaged
        self._missing: dict[tuple[str, str], tuple[Any, int | None]] = {}
        # False: a large group's BM25 tokens go part by part into its packed index (memory
        # bounded, the C heap trimmed after each part; an update then tokenizes the whole group
        # again) rather than staying in memory for updates. For one-shot processes (fastrag
        # ingest).
        self.keep_tokens = True

    def _cached(self, key: tuple, fingerprint: str, build: Callable[[Any], Any]) -> Any:
        hit = self._cache.get(key)
        if hit is not None and hit[0] == fingerprint:
            return hit[1]
        with self._locks(key):
            hit = self._cache.get(key)
            if hit is not None and hit[0] == fingerprint:
                return hit[1]
            value = build(None if hit is None else hit[1])
            self._cache[key] = (fingerprint, value)
            return value

    def _count(self, kind: str) -> None:
        self.builds[kind] = self.builds.get(kind, 0) + 1

    def _persist(self, write: Callable[[Transaction], None]) -> None:
        store = self.doc.store
        if store is not None and store.writable:
            with store.transaction() as txn:
                write(txn)

    @staticmethod
    def _damaged(what: str, exc: Exception) -> None:
        warnings.warn(
            f"{what} in the store is damaged and is rebuilt: {exc}", StoreWarning, stacklevel=4
        )

    # -- vectors -----------------------------------------------------------------------------
    def vectors(self, g: NodeGroup, key: str = "default") -> np.ndarray:
        """The ``(n, dim)`` float32 vectors of group ``g`` for one embed key; computed only
        for nodes whose vectors are not known (in memory or in the store). Every method takes
        the group object, so an artifact always matches the table the caller holds."""
        emb = self.doc.embedder(key)
        group_name = g.name
        _, vecs = self._cached(
            ("vec", group_name, key),
            g.fingerprint,
            lambda prev: (g.table.column("id"), self._build_vectors(g, key, emb, prev)),
        )
        col = EMBEDDING_PREFIX + key
        with self._locks(("vec", group_name, key)):
            if col not in g.table.column_names:  # copy-on-write: readers see old or new
                dim = vecs.shape[1]
                arr = pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), dim)
                g.table = g.table.append_column(col, arr)
        return vecs

    def sparse(self, g: NodeGroup, key: str = "default") -> Any:
        """The :class:`~fastrag.indexes.sparse.SparseIndex` of group ``g`` for a sparse embed
        key (an embedder returning ``{token: weight}`` dicts); the vectors also become the
        group's ``_sparse_<key>`` column (in memory)."""

        emb = self.doc.embedder(key)
        fn = getattr(emb, "embed", None) or emb

        def build(prev: Any) -> Any:
            col = sparse_column(list(fn(g.texts())))
            self._count("sparse")
            return col, SparseIndex.from_column(col)

        col, index = self._cached(("sparse", g.name, key), g.fingerprint, build)
        name = "_sparse_" + key
        with self._locks(("sparse", g.name, key)):
            if name not in g.table.column_names:  # copy-on-write: readers see old or new
                g.table = g.table.append_column(name, col)
        return index

    @staticmethod
    @contextlib.contextmanager
    def reporting(progress: Callable[[str, int, int], Any]) -> Iterator[None]:
        """Within the block, embedding in this thread (context) calls ``progress(what, done,
        total)`` after each batch (e.g. a server's build task showing how far it is); other
        threads embedding meanwhile report nothing."""
        token = _PROGRESS.set(progress)
        try:
            yield
        finally:
            _PROGRESS.reset(token)

    def vectors_missing(self, g: NodeGroup, key: str = "default") -> int | None:
        """How many nodes of group ``g`` have no vector for ``key`` in memory or in the store:
        0 when :meth:`vectors` would embed nothing, None when no vector of the group is known
        (they were never built). Embeds nothing; reads the stored vectors' ids at most once per
        group version."""
        hit = self._cache.get(("vec", g.name, key))
        if hit is not None and hit[0] == g.fingerprint:
            return 0
        store = self.doc.store
        entry = None if store is None else store.manifest["vectors"].get(vectors_key(g.name, key))
        if entry is not None and entry.get("aligned") == g.fingerprint:
            return 0
        if hit is None and entry is None:
            return None
        version = (g.fingerprint, None if hit is None else hit[0], _files(entry))
        seen = self._missing.get((g.name, key))
        if seen is not None and seen[0] == version:
            return seen[1]
        known = [] if hit is None else [hit[1][0]]
        stored = None if entry is None else self._stored_vectors(g, key)
        if stored is not None:
            known.append(stored[0])
        missing = None
        if known:
            have = np.zeros(len(g), dtype=bool)
            for ids in known:
                have |= np.asarray(pc.is_in(g.table.column("id"), value_set=ids))
            missing = int(len(g) - have.sum())
        self._missing[(g.name, key)] = (version, missing)
        return missing

    def sparse_ready(self, g: NodeGroup, key: str = "default") -> bool:
        """Whether the sparse index of group ``g`` for ``key`` is built for its nodes now (it
        lives in memory only)."""
        hit = self._cache.get(("sparse", g.name, key))
        return hit is not None and hit[0] == g.fingerprint

    def _stored_vectors(self, g: NodeGroup, key: str):
        """(ids, vectors, entry) stored for (group, key), or None."""
        store = self.doc.store
        entry = None if store is None else store.manifest["vectors"].get(vectors_key(g.name, key))
        if entry is None:
            return None
        try:
            table = store.read_segments(entry["segments"], vector_schema(entry["dim"]))
            vecs = to_numpy(table.column("vector"), entry["dim"])
            if not np.isfinite(vecs).all():
                raise StoreError("stored vectors hold NaN or inf")
            return table.column("id"), vecs, entry
        except (
            StoreError,
            KeyError,
            ValueError,
            TypeError,
            OverflowError,
            AttributeError,
            pa.ArrowException,
        ) as exc:  # the entry's fields too may be damaged
            self._damaged(f"vectors of group {g.name!r} key {key!r}", exc)
            return None

    def _build_vectors(self, g: NodeGroup, key: str, emb: Any, prev) -> np.ndarray:
        n = len(g)
        ids_col = g.table.column("id")
        stored = self._stored_vectors(g, key)
        record = embedder_record(emb)
        made_by = None if stored is None else stored[2].get("embedder")
        if made_by is not None and record is not None and made_by != record:
            warnings.warn(
                f"the vectors of group {g.name!r} (embed key {key!r}) were embedded by "
                f"{made_by['name']} ({made_by}); the embedder is now {record['name']} "
                f"({record}): embedding the group again",
                StoreWarning,
                stacklevel=4,
            )
            stored = made_by = None
        if stored is not None and made_by != record:
            record = None  # some vectors came from an embedder the store did not record
        if (
            stored is not None
            and stored[2].get("aligned") == g.fingerprint
            and stored[1].shape[0] == n
        ):
            return stored[1]
        have = np.zeros(n, dtype=bool)
        out: np.ndarray | None = None
        aligned_prefix = 0
        for source in (stored[:2] if stored else None, prev):
            if source is None or source[1].shape[0] == 0:
                continue
            src_ids, src_vecs = source
            if out is None:
                out = np.empty((n, src_vecs.shape[1]), dtype=np.float32)
            elif src_vecs.shape[1] != out.shape[1]:
                continue
            pos = np.asarray(pc.index_in(ids_col, value_set=src_ids).fill_null(-1), np.int64)
            hit = (pos >= 0) & ~have
            out[hit] = src_vecs[pos[hit]]
            have |= hit
            if source is not None and stored is not None and source[0] is stored[0]:
                m = len(src_ids)
                if m <= n and np.array_equal(pos[:m], np.arange(m)):
                    aligned_prefix = m
        todo = np.flatnonzero(~have)
        if len(todo):
            texts = g.texts()
            fresh = self._embed(emb, key, [texts[i] for i in todo], [g.ids[i] for i in todo])
            if out is None:
                out = np.empty((n, fresh.shape[1]), dtype=np.float32)
            elif fresh.shape[1] != out.shape[1]:
                raise EmbeddingError(
                    f"embed key {key!r} now returns dimension {fresh.shape[1]}, "
                    f"but stored vectors have {out.shape[1]}; use a new "
                    "embed key for a different model"
                )
            out[todo] = fresh
            self._count("vectors")
        if out is None:
            out = np.zeros((n, int(getattr(emb, "dim", 0) or 0)), dtype=np.float32)
        self._persist_vectors(g, key, out, stored, aligned_prefix, record)
        return out

    def _persist_vectors(
        self,
        g: NodeGroup,
        key: str,
        vecs: np.ndarray,
        stored,
        aligned_prefix: int,
        record: dict | None,
    ) -> None:
        if vecs.shape[1] == 0:
            return
        vkey = vectors_key(g.name, key)
        schema = vector_schema(vecs.shape[1])

        def table(lo: int) -> pa.Table:
            flat = pa.array(vecs[lo:].reshape(-1), pa.float32())
            return pa.table(
                {
                    "id": g.table.column("id").slice(lo),
                    "vector": pa.FixedSizeListArray.from_arrays(flat, vecs.shape[1]),
                },
                schema=schema,
            )

        store = self.doc.store
        seen = store.manifest["vectors"].get(vkey) if store is not None else None

        def write(txn: Transaction) -> None:
            entry = txn.manifest["vectors"].get(vkey)
            if (
                entry is not None
                and entry.get("aligned") == g.fingerprint
                and (stored is not None or _files(entry) != _files(seen))
            ):
                return  # stored already (by another writer), and not the damaged entry
            same_base = (
                stored is not None
                and entry is not None
                and [s["file"] for s in entry["segments"]]
                == [s["file"] for s in stored[2]["segments"]]
                and entry["dim"] == vecs.shape[1]
            )
            if same_base and aligned_prefix:
                segs = txn.append(entry["segments"], f"vec-{g.name}-{key}", table(aligned_prefix))
            else:
                segs = [txn.write_segment(f"vec-{g.name}-{key}", table(0))]
            txn.manifest["vectors"][vkey] = {
                "group": g.name,
                "key": key,
                "dim": vecs.shape[1],
                "aligned": g.fingerprint,
                "segments": segs,
                **({"embedder": record} if record is not None else {}),
            }
            txn.changed = True

        self._persist(write)

    def _stage(self, desc: str, steps: int):
        """A progress bar of ``steps`` for an index build (shown with show_progress=True)."""
        return tqdm(
            total=steps,
            desc=desc,
            unit="step",
            leave=False,
            disable=not getattr(self.doc, "show_progress", False),
        )

    def _embed(self, emb, key: str, texts: list[str], ids: list[str]) -> np.ndarray:
        bs = int(getattr(emb, "texts_per_call", None) or getattr(emb, "batch_size", 64) or 64)
        parts = []
        with tqdm(
            total=len(texts),
            desc=f"embed {key}",
            unit="text",
            smoothing=0.1,
            disable=len(texts) < 2 * bs and not self.doc.show_progress,
        ) as bar:
            for i in range(0, len(texts), bs):
                batch = texts[i : i + bs]
                vecs = emb.embed(batch) if hasattr(emb, "embed") else emb(batch)
                parts.append(check_vectors(vecs, len(batch), ids[i : i + bs], key, emb))
                bar.update(len(batch))
                report = _PROGRESS.get()
                if report is not None:
                    report(f"embed {key}", i + len(batch), len(texts))
        dims = {p.shape[1] for p in parts}
        if len(dims) > 1:
            raise EmbeddingError(
                f"embedder {embedder_name(emb)} (key {key!r}) returned vectors of "
                f"different dimensions {sorted(dims)} across batches"
            )
        return np.concatenate(parts)

    # -- BM25 --------------------------------------------------------------------------------
    def bm25(self, g: NodeGroup, analyzer: Any, params: dict, num_workers: int = 0):
        """(BM25Index, vocab) of group ``g`` for one analyzer and parameter set."""
        key = f"{g.name}/bm25/{params_key(analyzer.identity(), params)}"
        return self._cached(
            ("bm25", key),
            g.fingerprint,
            lambda prev: self._build_bm25(g, key, analyzer, params, num_workers),
        )

    def rebuild_bm25(
        self, g: NodeGroup, analyzer: Any, params: dict, num_workers: int, exc: Exception
    ):
        """Drop a BM25 index that proved damaged while searching (postings are checked on
        first use) and build it again; (BM25Index, vocab)."""
        key = f"{g.name}/bm25/{params_key(analyzer.identity(), params)}"
        self._damaged(f"BM25 index {key!r}", exc)
        with self._locks(("bm25", key)):
            store = self.doc.store
            entry = None if store is None else store.manifest["indexes"].get(key)
            if entry is not None:
                self._bad_dirs.add(entry["dir"])
            self._cache.pop(("bm25", key), None)
        return self.bm25(g, analyzer, params, num_workers)

    def _build_bm25(self, g: NodeGroup, key: str, analyzer, params: dict, num_workers: int):
        store = self.doc.store
        entry = None if store is None else store.manifest["indexes"].get(key)
        if (
            entry is not None
            and entry["meta"].get("fingerprint") == g.fingerprint
            and entry["dir"] not in self._bad_dirs
        ):
            try:
                return self._load_bm25(g, key)
            except (StoreError, KeyError, ValueError, TypeError, AttributeError) as exc:
                self._damaged(f"BM25 index {key!r}", exc)
        with self._stage(f"bm25 index of {g.name!r}", 2) as bar:
            if self.keep_tokens or not _packable(store, params):
                tc = self.tokens(g, analyzer, num_workers)
            else:
                stream = TokenStream(
                    g.text_parts(STREAM_ROWS),
                    analyzer,
                    num_workers,
                    PACK_MIN_POSTINGS,
                    after_part=trim_heap,
                    rows=STREAM_ROWS,
                )
                if stream.large:
                    streamed = self._pack_stream(g, key, analyzer, params, stream, entry)
                    if streamed is not None:
                        return streamed
                    tc = self.tokens(g, analyzer, num_workers)
                else:
                    tc = stream.whole()
            bar.update(1)
            packed = self._pack_in_store(g, key, analyzer, params, tc, entry)
            if packed is not None:
                with contextlib.suppress(StoreError, KeyError, ValueError, TypeError):
                    # the vocabulary in memory is the stored one if this build wrote it
                    return self._load_bm25(g, key, tc.vocab if packed else None)
            index = BM25Index.build(tc.values, tc.offsets, len(tc.vocab), **params)
            bar.update(1)
        self._count("bm25")

        def write(txn: Transaction) -> None:
            if _stored_meanwhile(txn, key, g, entry):
                return
            packed = index.indices.shape[0] >= PACK_MIN_POSTINGS
            arrays = dict(index.to_arrays(packed=packed))
            arrays["vocab_bytes"], arrays["vocab_offsets"] = encode_vocab(tc.vocab)
            txn.write_arrays(
                key,
                arrays,
                {**_bm25_meta(g, analyzer), "index": index.meta(packed=packed)},
            )

        self._persist(write)
        return index, tc.vocab

    def _load_bm25(self, g: NodeGroup, key: str, vocab: dict[str, int] | None = None):
        """(BM25Index, vocab) of ``key`` as stored (memory-mapped), checked against ``g``;
        ``vocab``: the stored vocabulary, already in memory (it is not decoded again)."""
        store = self.doc.store
        arrays, meta = store.read_arrays(key)
        if meta.get("fingerprint") != g.fingerprint:
            raise StoreError(f"the stored index is of another version of group {g.name!r}")
        vocab_arrays = arrays.pop("vocab_bytes"), arrays.pop("vocab_offsets")
        if vocab is None:
            vocab = decode_vocab(*vocab_arrays)
        index = BM25Index.from_arrays(arrays, meta["index"])
        index.verify_postings_with(
            {
                n: (check, int(getattr(arrays[n], "offset", 0)))
                for n in ("indices", "data", *PACKED_NAMES)
                if n in arrays and (check := store.chunk_check(key, f"{n}.npy")) is not None
            }
        )
        if index.n_docs != len(g) or index.n_vocab != len(vocab):
            raise StoreError(
                f"index covers {index.n_docs} nodes and {index.n_vocab} "
                f"terms, the group has {len(g)} and the vocabulary "
                f"{len(vocab)}"
            )
        return index, vocab

    def _pack_stream(self, g, key: str, analyzer, params: dict, stream: TokenStream, entry):
        """(BM25Index, vocab) of a large group tokenized part by part into a packed index
        (``stream.pack_token_parts``); None if it could not be opened after (the caller
        builds it again from the tokens)."""

        def build(work: Path) -> tuple[dict, dict[str, int]]:
            return pack_token_parts(stream, work, **params), stream.vocab

        wrote = self._write_packed(g, key, analyzer, entry, build)
        with contextlib.suppress(StoreError, KeyError, ValueError, TypeError):
            return self._load_bm25(g, key, stream.vocab if wrote else None)
        return None

    def _pack_in_store(self, g, key: str, analyzer, params: dict, tc, entry) -> bool | None:
        """Write a large group's BM25 index into the store in packed form
        (``stream.pack_tokens``: bounded memory, the same arrays as packing a whole build).
        True once written, False when another writer had stored it, None (nothing written)
        where the index would be kept unpacked, the parameters name global statistics, or
        the store is not writable."""
        if (
            not _packable(self.doc.store, params)
            or int(tc.offsets[-1] - tc.offsets[0]) < PACK_MIN_POSTINGS
            or count_postings(tc.values, tc.offsets, len(tc.vocab)) < PACK_MIN_POSTINGS
        ):
            return None

        def build(work: Path) -> tuple[dict, dict[str, int]]:
            return pack_tokens(tc.values, tc.offsets, len(tc.vocab), work, **params), tc.vocab

        return self._write_packed(g, key, analyzer, entry, build)

    def _write_packed(self, g, key: str, analyzer, entry, build) -> bool:
        """Build a packed BM25 index (``build(folder)`` -> (index meta, vocabulary)) in the
        store's private folder, outside the writers' lock, and move it in with a short
        transaction; False when another writer had stored it meanwhile."""
        store = self.doc.store
        wrote = []
        with store.building() as work:
            index_meta, vocab = build(work)
            self._count("bm25")
            vocab_bytes, vocab_offsets = encode_vocab(vocab)
            np.save(work / "vocab_bytes.npy", vocab_bytes, allow_pickle=False)
            np.save(work / "vocab_offsets.npy", vocab_offsets, allow_pickle=False)
            del vocab_bytes, vocab_offsets

            def write(txn: Transaction) -> None:
                if _stored_meanwhile(txn, key, g, entry):
                    return

                def files(folder: Path) -> None:
                    for f in sorted(work.iterdir()):
                        os.replace(f, folder / f.name)

                txn.write_index(key, files, {**_bm25_meta(g, analyzer), "index": index_meta})
                wrote.append(True)

            self._persist(write)
        return bool(wrote)

    def tokens(self, g: NodeGroup, analyzer, num_workers: int = 0):
        """The group's token ids for ``analyzer`` (a TokenizedCorpus, kept in memory only).
        After an update only new nodes are tokenized; the others are gathered by node id from
        the previous corpus (kept in memory per group and analyzer). Terms of removed nodes
        stay in the vocabulary with no postings, so scores and ranks equal a clean build's."""

        tkey = ("tok", g.name, analyzer.identity())
        with self._locks(tkey):
            prev = self._cache.get(tkey)
            ids = g.table.column("id")
            pos = None
            if prev is not None:
                old_ids, old = prev[1]
                pos = np.asarray(pc.index_in(ids, value_set=old_ids).fill_null(-1), np.int64)
            if (
                pos is None
                or np.count_nonzero(pos < 0) > len(pos) // 2
                or len(old.vocab) > 2 * len(old.values) + 1024
            ):
                tc = tokenize_column(g.table.column("text"), analyzer, num_workers)
            else:
                new_rows = np.flatnonzero(pos < 0)
                texts = g.table.column("text").take(pa.array(new_rows)).to_pylist()
                fresh = tokenize_corpus(texts, analyzer, num_workers=num_workers)
                tc = _merge_tokens(old, pos, new_rows, fresh, TokenizedCorpus)
            self._cache[tkey] = (g.fingerprint, (ids, tc))
            return tc

    # -- dense indexes -----------------------------------------------------------------------
    def flat(self, g: NodeGroup, key: str, metric: str):
        """An exact dense index over a group's vectors (memory only: it is the vectors)."""
        from fastrag.indexes.flat import FlatIndex  # lazy: numba

        vecs = self.vectors(g, key)
        return self._cached(
            ("flat", g.name, key, metric),
            g.fingerprint,
            lambda prev: FlatIndex.from_vectors(vecs, metric=metric),
        )

    def hnsw(self, g: NodeGroup, key: str, metric: str, params: dict):
        """An HNSW index over a group's vectors: loaded from the store, updated incrementally
        (new nodes added, vanished ones marked deleted), or built."""
        vecs = self.vectors(g, key)
        skey = f"{g.name}/hnsw/{params_key(key, metric, params)}"
        return self._cached(
            ("hnsw", skey),
            g.fingerprint,
            lambda prev: self._hnsw_with_progress(g, skey, metric, params, vecs, prev),
        )

    def _hnsw_with_progress(self, g, skey, metric, params, vecs, prev):
        with self._stage(f"hnsw index of {g.name!r}", 1) as bar:
            out = self._build_hnsw(g, skey, metric, params, vecs, prev)
            bar.update(1)
        return out

    def _load_hnsw(self, skey: str, dim: int, metric: str, params: dict):
        from fastrag.indexes.hnsw import HNSWIndex  # lazy: numba

        store = self.doc.store
        if store is None or skey not in store.manifest["indexes"]:
            return None
        try:
            entry = store.manifest["indexes"][skey]
            if (
                not isinstance(entry, dict)
                or "index.bin" not in entry.get("files", ())
                or not isinstance(entry.get("meta"), dict)
                or not isinstance(entry["meta"].get("ids"), list)
            ):
                raise StoreError("its manifest entry has no index.bin, meta or node ids")
            folder, meta = store.index_folder(skey, full=True)  # hnswlib trusts its file
            labels = list(meta["ids"])
            if not all(x is None or isinstance(x, str) for x in labels):
                raise StoreError("HNSW labels are not node ids")
            index = HNSWIndex.load(
                folder / "index.bin",
                dim=dim,
                metric=metric,
                max_rows=len(labels),
                **{k: v for k, v in params.items() if k == "ef"},
            )
            problem = hnsw_label_problem(labels, index.alive)
            if problem:
                raise StoreError(f"{folder / 'index.bin'}: {problem}")
            return index, labels, meta
        except (StoreError, KeyError, TypeError, ValueError, AttributeError) as exc:
            self._damaged(f"HNSW index {skey!r}", exc)
            return None

    def _build_hnsw(
        self, g: NodeGroup, skey: str, metric: str, params: dict, vecs: np.ndarray, prev
    ):
        from fastrag.indexes.hnsw import HNSWIndex  # lazy: numba

        ids = g.ids
        dim = vecs.shape[1]
        loaded = self._load_hnsw(skey, dim, metric, params)
        if loaded is not None and loaded[2].get("fingerprint") == g.fingerprint:
            index, labels, _ = loaded
            rows = label_rows(labels, ids)
            if index.n == len(ids) and np.array_equal(
                np.sort(rows[rows >= 0]), np.arange(len(ids))
            ):
                return LabelledIndex(index, rows)
            self._damaged(
                f"HNSW index {skey!r}",
                StoreError(
                    f"its {index.n} live rows do not cover the {len(ids)} nodes of group "
                    f"{g.name!r} it records being built from"
                ),
            )
            loaded = None
        if loaded is not None:
            index, labels, _ = loaded
        else:
            index = HNSWIndex(dim, metric=metric, max_elements=max(len(ids), 1), **params)
            labels = []
        self._count("hnsw")
        pos = {nid: i for i, nid in enumerate(labels)}
        current = set(ids)
        gone = [i for i, nid in enumerate(labels) if nid is not None and nid not in current]
        if gone:
            index.mark_deleted(np.asarray(gone, dtype=np.int64))
            for i in gone:
                labels[i] = None
        new_rows = [r for r, nid in enumerate(ids) if nid not in pos]
        if new_rows:
            new_labels = np.arange(len(labels), len(labels) + len(new_rows), dtype=np.int64)
            index.add(vecs[new_rows], rows=new_labels)
            labels += [ids[r] for r in new_rows]
        self._persist(
            lambda txn: txn.write_index(
                skey,
                lambda folder: index.save(folder / "index.bin"),
                {"kind": "hnsw", "group": g.name, "fingerprint": g.fingerprint, "ids": labels},
            )
        )
        return LabelledIndex(index, label_rows(labels, ids))

    # -- key maps ----------------------------------------------------------------------------
    def key_map(self, g: NodeGroup, map_key: str | None) -> dict[str, list[int]]:
        """Rows of each node text (or ``map_key`` metadata value) of group ``g``."""
        group_name = g.name

        def build(prev) -> dict[str, list[int]]:
            if map_key is None:
                keys = g.texts()
            else:
                meta = g.metadata_table()
                if map_key not in meta.column_names:
                    raise ConfigError(
                        f"map_key {map_key!r} is not a metadata key of group "
                        f"{group_name!r}; known: {meta.column_names}"
                    )
                keys = [None if v is None else str(v) for v in meta.column(map_key).to_pylist()]
            table: dict[str, list[int]] = {}
            for row, k in enumerate(keys):
                if k is not None:
                    table.setdefault(k, []).append(row)
            return table

        return self._cached(("map", group_name, map_key), g.fingerprint, build)


def _merge_tokens(old, pos: np.ndarray, new_rows: np.ndarray, fresh, corpus_cls):
    """A corpus whose row ``r`` is ``old``'s row ``pos[r]``, or the next row of ``fresh`` where
    ``pos[r] < 0``; ``fresh``'s terms are added to (a copy of) ``old``'s vocabulary."""
    vocab = dict(old.vocab)
    remap = np.empty(len(fresh.vocab), np.int32)
    for tok, j in fresh.vocab.items():
        remap[j] = vocab.setdefault(tok, len(vocab))
    old_len = np.diff(old.offsets)
    kept = np.flatnonzero(pos >= 0)
    lengths = np.zeros(len(pos), np.int64)
    lengths[kept] = old_len[pos[kept]]
    lengths[new_rows] = np.diff(fresh.offsets)
    offsets = np.zeros(len(pos) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.empty(int(offsets[-1]), np.int32)
    for rows, src_start, src_values in (
        (kept, old.offsets[pos[kept]], old.values),
        (new_rows, fresh.offsets[:-1], remap[fresh.values]),
    ):
        n = lengths[rows]
        within = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        values[np.repeat(offsets[rows], n) + within] = src_values[np.repeat(src_start, n) + within]
    return corpus_cls(vocab=vocab, values=values, offsets=offsets)


def _packable(store, params: dict) -> bool:
    """Whether a large BM25 index with ``params`` is written packed into ``store``."""
    return store is not None and store.writable and set(params) <= {"method", "k1", "b", "delta"}


def _stored_meanwhile(txn: Transaction, key: str, g: NodeGroup, entry: dict | None) -> bool:
    """Whether another writer stored index ``key`` of this version of ``g`` (and it is not
    the damaged ``entry`` this process read)."""
    cur = txn.manifest["indexes"].get(key)
    return (
        cur is not None
        and cur["meta"].get("fingerprint") == g.fingerprint
        and (entry is None or cur["dir"] != entry["dir"])
    )


def _bm25_meta(g: NodeGroup, analyzer: Any) -> dict:
    """The stored meta of a BM25 index of ``g``, but its ``index`` entry."""
    return {
        "kind": "bm25",
        "group": g.name,
        "fingerprint": g.fingerprint,
        "analyzer": analyzer.identity(),
    }


def _files(entry: dict | None) -> list[str] | None:
    return None if entry is None else [seg["file"] for seg in entry["segments"]]
