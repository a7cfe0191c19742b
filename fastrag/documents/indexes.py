"""The one owner of a Document's derived data: vectors per (group, embed key), BM25 indexes
(with their vocabulary; :mod:`fastrag.documents.bm25data`), flat and HNSW indexes, and key
maps.

Retrievers ask for an artifact; this module builds it, caches it by the group's fingerprint,
persists it in the store (when the store is writable) and reloads it. Each artifact is built
once per key under a per-key lock, so N threads asking at once cause one build. A damaged
derived file is dropped and rebuilt with a :class:`~fastrag.errors.StoreWarning`.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from fastrag.documents.bm25data import BM25Data
from fastrag.documents.derivedkeys import KeyLocks, params_key, vectors_key
from fastrag.documents.embedding import check_vectors, embedder_name, to_numpy, vector_schema
from fastrag.documents.labels import LabelledIndex, hnsw_label_problem, label_rows
from fastrag.embeddings.named import embedder_record
from fastrag.errors import ConfigError, EmbeddingError, StoreError, StoreWarning
from fastrag.indexes.sparse import SparseIndex, sparse_column
from fastrag.schema import EMBEDDING_PREFIX

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.documents.document import Document
    from fastrag.documents.group import NodeGroup
    from fastrag.documents.transaction import Transaction


# who hears of embedding progress in this context (see DerivedData.reporting)
_PROGRESS: contextvars.ContextVar[Callable[[str, int, int], Any] | None] = contextvars.ContextVar(
    "fastrag_embed_progress", default=None
)


class DerivedData(BM25Data):
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


def _files(entry: dict | None) -> list[str] | None:
    return None if entry is None else [seg["file"] for seg in entry["segments"]]
