"""Document: sources -> root group -> registered node groups (lazy, cached, persisted)."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import pickle
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastrag.documents.group import NodeGroup
from fastrag.documents.store import Store
from fastrag.errors import ConfigError
from fastrag.schema import (
    EMBEDDING_PREFIX,
    GROUP_SCHEMA,
    ROOT_GROUP,
    DocNode,
    NodeWithScore,
    dump_metadata,
    node_id,
)
from fastrag.transforms.base import NodeTransform, has_spans


@dataclass
class _GroupDef:
    name: str
    parent: str
    fn: Callable[[Any], Any]
    trans_node: bool
    num_workers: int
    identity: str
    spans: Callable[[list[str]], list[list[tuple[int, int]]]] | None = None


@dataclass
class _Source:
    key: str  # absolute file path, or "text:<root id>"
    kind: str  # "file" | "text"
    hash: str
    size: int = 0
    mtime_ns: int = 0
    roots: list[str] = field(default_factory=list)


def _callable_identity(fn: Any) -> str:
    """A fingerprint of a function's code, so a store notices when a transform changed."""
    target = inspect.unwrap(fn.func if isinstance(fn, functools.partial) else fn)
    name = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', type(target).__qualname__)}"
    code = getattr(target, "__code__", None)
    if code is None:
        try:
            code = type(target).__call__.__code__
        except AttributeError:
            code = None
    h = hashlib.blake2b(digest_size=8)
    if code is not None:
        h.update(code.co_code)
        h.update(repr(code.co_consts).encode())
        h.update(repr(code.co_names).encode())
    if isinstance(fn, functools.partial):
        h.update(repr(sorted(fn.keywords.items())).encode())
    return f"{name}#{h.hexdigest()}"


def _hash_file(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _empty_table() -> pa.Table:
    return GROUP_SCHEMA.empty_table()


# -- running transforms (module level so worker processes can import them) --------------------
def _children_of(
    fn: Callable, trans_node: bool, group: str, parent: tuple[str, str, str, str]
) -> list[tuple]:
    pid, doc_id, text, meta_json = parent
    meta = json.loads(meta_json)
    arg = DocNode(text=text, metadata=meta, id=pid) if trans_node else text
    out = fn(arg)
    if isinstance(out, (str, DocNode)):
        out = [out]
    if out is None or not isinstance(out, Iterable):
        raise ConfigError(
            f"transform of group {group!r} returned {type(out).__name__}; "
            "it must return a list of str (or of DocNode with trans_node=True)"
        )
    rows = []
    for i, item in enumerate(out):
        if isinstance(item, str):
            ctext, cmeta = item, meta_json
        elif isinstance(item, DocNode):
            ctext, cmeta = item.text, dump_metadata({**meta, **item.metadata})
        else:
            raise ConfigError(
                f"transform of group {group!r} returned an item of type {type(item).__name__}; "
                "items must be str or DocNode"
            )
        if ctext.strip():
            rows.append((node_id(group, pid, i, ctext), doc_id, pid, ctext, None, None, cmeta))
    return rows


def _run_chunk(fn, trans_node, group, parents):
    return [_children_of(fn, trans_node, group, p) for p in parents]


class Document:
    """A collection of source documents and the node groups built from them.

    ``Document(path | [paths], store=None, embed=None, readers=None, global_metadata=None)``
    reads files (directories recursively); ``Document.from_texts(texts)`` takes strings. Node
    groups are registered with :meth:`create_node_group` and built lazily on first use. With
    ``store=`` every built group is persisted and re-opened without running any transform.
    """

    CoarseChunk = "CoarseChunk"
    MediumChunk = "MediumChunk"
    FineChunk = "FineChunk"
    _BUILTIN = {CoarseChunk: (1024, 100), MediumChunk: (256, 25), FineChunk: (128, 12)}

    def __init__(
        self,
        path: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
        *,
        store: str | os.PathLike | None = None,
        embed: Any = None,
        readers: Mapping[str, Callable] | None = None,
        global_metadata: Mapping[str, Any] | None = None,
        on_error: str = "raise",
        json_text_field: str = "text",
        _texts: tuple[list[str], list[dict] | None, list[str] | None] | None = None,
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ConfigError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if global_metadata is not None and not isinstance(global_metadata, Mapping):
            raise ConfigError("global_metadata must be a dict of metadata for every node")
        if readers is not None and not isinstance(readers, Mapping):
            raise ConfigError('readers must be a dict like {".ext": fn}')
        self._readers = dict(readers or {})
        self._on_error = on_error
        self._json_text_field = json_text_field
        self._global_metadata = dict(global_metadata or {})
        self.embed = self._normalize_embed(embed)
        self._defs: dict[str, _GroupDef] = {}
        self._groups: dict[str, NodeGroup] = {}
        # doc ids whose nodes must be recomputed in an already-built group (incremental)
        self._pending: dict[str, set[str]] = {}
        # vectors of a group's previous build, reused by node id for unchanged nodes
        self._stale_vectors: dict[tuple[str, str], tuple[list[str], np.ndarray]] = {}
        self._store = Store(store) if store is not None else None
        for name, (size, overlap) in self._BUILTIN.items():
            self._register_builtin(name, size, overlap)
        self._sources: dict[str, _Source] = {}
        if path is None and _texts is None and self._store is None:
            raise ConfigError(
                "Document needs a path (file, directory or list of them), texts "
                "(Document.from_texts) or an existing store="
            )
        self._root = self._load_root(path, _texts)

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_texts(
        cls,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]] | None = None,
        ids: Sequence[str] | None = None,
        *,
        embed: Any = None,
        store: str | os.PathLike | None = None,
        global_metadata: Mapping[str, Any] | None = None,
    ) -> Document:
        """One root node per text (ids default to a hash of position and text)."""
        texts, metadatas, ids = _check_texts(texts, metadatas, ids)
        return cls(None, store=store, embed=embed, global_metadata=global_metadata,
                   _texts=(texts, metadatas, ids))

    @staticmethod
    def _normalize_embed(embed: Any) -> dict[str, Any]:
        if embed is None:
            return {}
        if isinstance(embed, Mapping):
            for key, emb in embed.items():
                if not isinstance(key, str) or not key:
                    raise ConfigError(f"embed keys must be non-empty strings, got {key!r}")
                if not hasattr(emb, "embed") and not callable(emb):
                    raise ConfigError(f"embed[{key!r}] must be an Embedder or a callable")
            return dict(embed)
        if not hasattr(embed, "embed") and not callable(embed):
            raise ConfigError("embed must be an Embedder, a callable, or a dict of them")
        return {"default": embed}

    def _register_builtin(self, name: str, size: int, overlap: int) -> None:
        # the splitter is created on first build, so a Document that never uses it never
        # imports it
        self._defs[name] = _GroupDef(name, ROOT_GROUP, None, False, 0, "", None)

    def _resolve_builtin(self, d: _GroupDef) -> None:
        from fastrag.transforms.sentence import SentenceSplitter

        size, overlap = self._BUILTIN[d.name]
        splitter = SentenceSplitter(chunk_size=size, chunk_overlap=overlap)
        d.fn, d.identity, d.spans = splitter, splitter.identity(), splitter.batch_spans

    def _text_sources(self, texts, metadatas, ids) -> list[tuple[_Source, list[tuple]]]:
        out = []
        for i, text in enumerate(texts):
            rid = ids[i] if ids is not None else node_id("text", i, text)
            meta = {**self._global_metadata, **(metadatas[i] if metadatas is not None else {})}
            h = hashlib.blake2b((text + dump_metadata(meta)).encode(), digest_size=16).hexdigest()
            src = _Source(f"text:{rid}", "text", h, roots=[rid])
            out.append((src, [(rid, rid, None, text, None, None, dump_metadata(meta))]))
        return out

    def _file_rows(self, path: Path, src: _Source) -> list[tuple]:
        from fastrag.documents.readers import read_file

        records = read_file(path, readers=self._readers or None, on_error=self._on_error,
                            json_text_field=self._json_text_field)
        rows = []
        for i, (text, meta) in enumerate(records):
            rid = node_id("file", src.key, i)
            rows.append((rid, rid, None, text, None, None,
                         dump_metadata({**self._global_metadata, **meta})))
        src.roots = [r[0] for r in rows]
        return rows

    def _load_root(self, path, texts) -> pa.Table:
        """Build the root group, reusing a store's rows for sources that did not change."""
        stored = self._store.manifest if self._store is not None else None
        old_sources = {k: _Source(k, **v) for k, v in (stored or {}).get("sources", {}).items()}
        deleted = set((stored or {}).get("deleted", []))
        old_root = None
        if stored and ROOT_GROUP in stored["groups"]:
            old_root = self._store.read_table(stored["groups"][ROOT_GROUP]["file"])

        plan: list[tuple[_Source, list[tuple] | None]] = []  # None rows -> reuse stored rows
        if path is None and texts is None:  # re-open a store as it is
            for src in old_sources.values():
                if src.kind == "file" and Path(src.key).exists():
                    plan.append(self._plan_file(Path(src.key), old_sources))
                elif src.kind == "text":
                    plan.append((src, None))
        elif texts is not None:
            for src, rows in self._text_sources(*texts):
                old = old_sources.get(src.key)
                reuse = old is not None and old.hash == src.hash and old_root is not None
                plan.append((src, None) if reuse else (src, rows))
        else:
            from fastrag.documents.readers import iter_source_files

            for file in iter_source_files(path, readers=self._readers or None):
                plan.append(self._plan_file(file, old_sources if old_root is not None else {}))

        reused_ids: set[str] = set()
        tables = []
        changed: set[str] = set()
        for src, rows in plan:
            self._sources[src.key] = src
            if rows is None:
                src.roots = old_sources[src.key].roots
                reused_ids.update(src.roots)
            else:
                rows = [r for r in rows if r[0] not in deleted]
                tables.append(_rows_to_table(rows))
                changed.update(r[0] for r in rows)
                old = old_sources.get(src.key)
                if old is not None:
                    changed.update(old.roots)
        removed = {r for k, s in old_sources.items() if k not in self._sources for r in s.roots}
        changed |= removed
        if old_root is not None:
            old_root = self._stash_vectors(ROOT_GROUP, old_root)
        if old_root is not None and reused_ids:
            keep = pc.is_in(old_root.column("id"), value_set=pa.array(sorted(reused_ids)))
            tables.insert(0, old_root.filter(keep))
        root = pa.concat_tables(tables) if tables else _empty_table()
        root = self._order_root(root)
        self._groups[ROOT_GROUP] = NodeGroup(self, ROOT_GROUP, None, root)
        if self._store is not None and (changed or old_root is None):
            with self._store.transaction():
                self._persist_sources()
                self._persist_group(ROOT_GROUP, root)
                self._invalidate_stored_groups(changed)
                self._store.commit()
        return root

    def _plan_file(self, file: Path, old_sources: dict[str, _Source]):
        st = file.stat()
        key = str(file.resolve())
        old = old_sources.get(key)
        if old is not None and old.kind == "file" and old.size == st.st_size \
                and old.mtime_ns == st.st_mtime_ns:
            return _Source(key, "file", old.hash, st.st_size, st.st_mtime_ns, old.roots), None
        src = _Source(key, "file", _hash_file(file) if self._store is not None else "",
                      st.st_size, st.st_mtime_ns)
        if old is not None and old.hash == src.hash:  # touched but same bytes
            src.roots = old.roots
            return src, None
        return src, self._file_rows(file, src)

    def _order_root(self, root: pa.Table) -> pa.Table:
        """Root rows in source order (stable ids keep this deterministic)."""
        order = [r for s in self._sources.values() for r in s.roots]
        if root.num_rows == 0 or root.column("id").to_pylist() == order:
            return root
        pos = np.asarray(pc.index_in(root.column("id"), value_set=pa.array(order)), dtype=np.int64)
        return root.take(np.argsort(pos, kind="stable"))

    # -- registry ----------------------------------------------------------------------------
    def create_node_group(
        self,
        name: str,
        transform: Any,
        parent: str = ROOT_GROUP,
        trans_node: bool | None = None,
        num_workers: int = 0,
        **kwargs: Any,
    ) -> Document:
        """Register a node group made by ``transform`` from each node of ``parent``.

        ``transform``: a function ``str -> list[str]``, a function ``DocNode -> list[DocNode|str]``
        (``trans_node=True``), a class with ``__call__``, a :class:`NodeTransform` subclass or
        instance, or a lambda. A class is instantiated with ``**kwargs``. Nothing runs until
        the group is first used.
        """
        if not isinstance(name, str) or not name:
            raise ConfigError(f"group name must be a non-empty string, got {name!r}")
        if name == ROOT_GROUP or name in self._defs:
            raise ConfigError(f"node group {name!r} already exists; choose another name")
        if parent == name:
            raise ConfigError(f"node group {name!r} cannot be its own parent (a cycle)")
        if parent != ROOT_GROUP and parent not in self._defs:
            raise ConfigError(
                f"parent group {parent!r} of {name!r} is not registered; known groups: "
                f"{self.group_names}; register the parent first"
            )
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ConfigError(f"num_workers must be an int >= 0, got {num_workers!r}")
        fn, identity, spans = _resolve_transform(name, transform, kwargs)
        if trans_node is None:
            trans_node = bool(getattr(fn, "trans_node", False))
        if trans_node:
            spans = None
        identity = f"{identity}|trans_node={trans_node}"
        self._defs[name] = _GroupDef(name, parent, fn, bool(trans_node), num_workers, identity, spans)
        return self

    @property
    def group_names(self) -> list[str]:
        return [ROOT_GROUP, *self._defs]

    def child_group_names(self, name: str) -> list[str]:
        return [d.name for d in self._defs.values() if d.parent == name]

    def _parent_of(self, name: str) -> str | None:
        return None if name == ROOT_GROUP else self._defs[name].parent

    def _check_group(self, name: str) -> None:
        if name != ROOT_GROUP and name not in self._defs:
            raise ConfigError(
                f"unknown node group {name!r}; known groups: {self.group_names}; "
                "register it with doc.create_node_group(name, transform=...)"
            )

    # -- building ----------------------------------------------------------------------------
    def group(self, name: str) -> NodeGroup:
        """The built group ``name`` (building it and its ancestors on first use)."""
        self._check_group(name)
        if name in self._groups and name not in self._pending:
            return self._groups[name]
        d = self._defs[name]
        if d.fn is None:
            self._resolve_builtin(d)
        parent = self.group(d.parent)
        table = self._build(d, parent)
        self._groups[name] = NodeGroup(self, name, d.parent, table)
        return self._groups[name]

    def _build(self, d: _GroupDef, parent: NodeGroup) -> pa.Table:
        old, todo_docs = self._reusable(d)
        ptable = parent.table
        if old is not None and todo_docs is not None:
            if not todo_docs:
                self._pending.pop(d.name, None)
                return old
            keep = pc.invert(pc.is_in(old.column("doc_id"), value_set=pa.array(sorted(todo_docs))))
            old = old.filter(keep)
            pmask = pc.is_in(ptable.column("doc_id"), value_set=pa.array(sorted(todo_docs)))
            ptable = ptable.filter(pmask)
        else:
            old = None
        if old is not None:
            old = self._stash_vectors(d.name, old)
        new = self._transform(d, ptable)
        table = new if old is None else pa.concat_tables([old, new])
        table = _order_children(table, parent.table)
        self._pending.pop(d.name, None)
        if self._store is not None:
            with self._store.transaction():
                self._persist_group(d.name, table, d)
                self._store.drop_indexes(f"{d.name}/")
                self._store.commit()
        return table

    def _reusable(self, d: _GroupDef) -> tuple[pa.Table | None, set[str] | None]:
        """A previous table of this group and the docs to recompute, if it can be reused."""
        if d.name in self._groups:
            return self._groups[d.name].table, self._pending.get(d.name, set())
        if self._store is None:
            return None, None
        entry = self._store.manifest["groups"].get(d.name)
        if entry is None or entry.get("identity") != d.identity or entry.get("parent") != d.parent:
            return None, None
        return self._store.read_table(entry["file"]), set(entry.get("pending", []))

    def _transform(self, d: _GroupDef, ptable: pa.Table) -> pa.Table:
        n = ptable.num_rows
        if n == 0:
            return _empty_table()
        ids = ptable.column("id").to_pylist()
        docs = ptable.column("doc_id").to_pylist()
        texts = ptable.column("text").to_pylist()
        metas = ptable.column("metadata").to_pylist()
        if d.spans is not None:
            return self._transform_spans(d, ids, docs, texts, metas)
        parents = list(zip(ids, docs, texts, metas))
        if d.num_workers > 0 and n > 1:
            k = min(n, d.num_workers * 4)
            chunks = [parents[i * n // k:(i + 1) * n // k] for i in range(k)]
            pool_cls = ThreadPoolExecutor
            try:
                pickle.dumps(d.fn)
                pool_cls = ProcessPoolExecutor
            except Exception:
                pass
            with pool_cls(max_workers=d.num_workers) as pool:
                parts = pool.map(_run_chunk, [d.fn] * k, [d.trans_node] * k, [d.name] * k, chunks)
                per_parent = [rows for part in parts for rows in part]
        else:
            per_parent = _run_chunk(d.fn, d.trans_node, d.name, parents)
        return _rows_to_table([r for rows in per_parent for r in rows])

    def _transform_spans(self, d, ids, docs, texts, metas) -> pa.Table:
        all_spans = d.spans(texts)
        name = d.name
        cols: dict[str, list] = {c: [] for c in GROUP_SCHEMA.names}
        for pid, doc_id, text, meta, spans in zip(ids, docs, texts, metas, all_spans):
            kept = [(s, e, c) for s, e in spans if (c := text[s:e]).strip()]
            n = len(kept)
            cols["id"] += [node_id(name, pid, i, c) for i, (_, _, c) in enumerate(kept)]
            cols["text"] += [c for _, _, c in kept]
            cols["start"] += [s for s, _, _ in kept]
            cols["end"] += [e for _, e, _ in kept]
            cols["doc_id"] += [doc_id] * n
            cols["parent_id"] += [pid] * n
            cols["metadata"] += [meta] * n
        return pa.table(cols, schema=GROUP_SCHEMA)

    # -- embeddings --------------------------------------------------------------------------
    def _embedder(self, key: str):
        if key not in self.embed:
            raise ConfigError(f"unknown embed key {key!r}; the Document has {sorted(self.embed)} "
                              "(pass embed=Embedder or embed={key: Embedder})")
        return self.embed[key]

    def _stash_vectors(self, name: str, table: pa.Table) -> pa.Table:
        cols = [c for c in table.column_names if c.startswith(EMBEDDING_PREFIX)]
        if not cols:
            return table
        ids = table.column("id").to_pylist()
        for c in cols:
            self._stale_vectors[(name, c[len(EMBEDDING_PREFIX):])] = (ids, _vectors(table, c))
        return table.drop(cols)

    def embeddings(self, group_name: str, key: str = "default") -> np.ndarray:
        """The ``(n, dim)`` float32 vectors of a group for one embed key.

        Computed on first use in batches (only for nodes whose vectors are not known yet),
        stored as a ``fixed_size_list<float32>`` column ``_emb_<key>`` of the group's table
        and persisted with it.
        """
        emb = self._embedder(key)
        g = self.group(group_name)
        col = EMBEDDING_PREFIX + key
        if col in g.table.column_names:
            return _vectors(g.table, col)
        ids, texts = g.ids, g.texts()
        n = len(ids)
        known: dict[str, np.ndarray] = {}
        prev = self._stale_vectors.pop((group_name, key), None)
        if prev is not None:
            pos = {nid: i for i, nid in enumerate(prev[0])}
            known = {nid: prev[1][pos[nid]] for nid in ids if nid in pos}
        todo = [i for i in range(n) if ids[i] not in known]
        fresh = self._embed_texts(emb, key, [texts[i] for i in todo], [ids[i] for i in todo])
        dim = fresh.shape[1] if len(todo) else next(iter(known.values())).shape[0] if known \
            else int(getattr(emb, "dim", 0) or 0)
        out = np.empty((n, dim), dtype=np.float32)
        if todo:
            out[todo] = fresh
        for i, nid in enumerate(ids):
            if nid in known:
                out[i] = known[nid]
        arr = pa.FixedSizeListArray.from_arrays(pa.array(out.reshape(-1), pa.float32()), dim)
        g.table = g.table.append_column(col, arr)
        if self._store is not None and todo:
            d = self._defs.get(group_name)
            with self._store.transaction():
                self._persist_group(group_name, g.table, d)
                self._store.commit()
        return out

    def _embed_texts(self, emb, key: str, texts: list[str], ids: list[str]) -> np.ndarray:
        from tqdm import tqdm

        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        bs = int(getattr(emb, "batch_size", 64) or 64)
        parts = []
        with tqdm(total=len(texts), desc=f"embed {key}", unit="node",
                  disable=len(texts) < 4 * bs) as bar:
            for i in range(0, len(texts), bs):
                batch = texts[i:i + bs]
                vecs = emb.embed(batch) if hasattr(emb, "embed") else emb(batch)
                parts.append(_check_vectors(vecs, len(batch), ids[i:i + bs], key, emb))
                bar.update(len(batch))
        dims = {p.shape[1] for p in parts}
        if len(dims) > 1:
            raise ConfigError(f"embed key {key!r} returned vectors of different dimensions "
                              f"{sorted(dims)}")
        return np.concatenate(parts)

    def embed_queries(self, queries: list[str], key: str = "default") -> np.ndarray:
        """Query vectors for one embed key (``embed_query`` is used where the model has it)."""
        emb = self._embedder(key)
        if hasattr(emb, "embed_queries"):
            vecs = emb.embed_queries(list(queries))
        elif hasattr(emb, "embed_query"):
            vecs = np.stack([np.asarray(emb.embed_query(q), dtype=np.float32) for q in queries])
        else:
            vecs = emb.embed(list(queries)) if hasattr(emb, "embed") else emb(list(queries))
        return _check_vectors(vecs, len(queries), [f"query {i}" for i in range(len(queries))],
                              key, emb)

    def _hnsw_index(self, group: NodeGroup, key: str, metric: str, params: dict,
                    vecs: np.ndarray, store_key: str):
        """An HNSW index over a group's vectors: loaded from the store, updated incrementally
        (new nodes added, vanished ones marked deleted), or built."""
        from fastrag.indexes.hnsw import HNSWIndex

        ids = group.ids
        dim = vecs.shape[1]
        store = self._store
        base_key = store_key
        loaded = store.read_files(base_key) if store is not None else None
        index = labels = None
        if loaded is not None:
            folder, meta = loaded
            index = HNSWIndex.load(folder / "index.bin", dim=dim, metric=metric,
                                   **{k: v for k, v in params.items() if k == "ef"})
            labels = list(meta["ids"])
            if meta.get("fingerprint") == group.fingerprint:
                return _LabelledIndex(index, np.asarray(meta["rows"], dtype=np.int64))
        if index is None:
            index = HNSWIndex(dim, metric=metric, max_elements=max(len(ids), 1), **params)
            labels = []
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
        row_of = {nid: r for r, nid in enumerate(ids)}
        label_rows = np.asarray([row_of.get(nid, -1) if nid else -1 for nid in labels],
                                dtype=np.int64)
        if store is not None:
            store.write_files(base_key, lambda folder: index.save(folder / "index.bin"),
                              {"fingerprint": group.fingerprint, "ids": labels,
                               "rows": label_rows.tolist()})
        return _LabelledIndex(index, label_rows)

    # -- persistence -------------------------------------------------------------------------
    def _persist_sources(self) -> None:
        m = self._store.manifest
        m["sources"] = {
            k: {"kind": s.kind, "hash": s.hash, "size": s.size, "mtime_ns": s.mtime_ns,
                "roots": s.roots}
            for k, s in self._sources.items()
        }

    def _persist_group(self, name: str, table: pa.Table, d: _GroupDef | None = None) -> None:
        rel = self._store.write_table(name, table)
        self._store.manifest["groups"][name] = {
            "file": rel,
            "parent": d.parent if d else None,
            "identity": d.identity if d else "root",
            "nodes": table.num_rows,
            "bytes": (self._store.path / rel).stat().st_size,
            "pending": [],
        }

    def _invalidate_stored_groups(self, changed: set[str]) -> None:
        """Mark docs to recompute in every stored group (they are rebuilt on next use)."""
        if not changed:
            return
        for name, entry in self._store.manifest["groups"].items():
            if name != ROOT_GROUP:
                entry["pending"] = sorted(set(entry.get("pending", [])) | changed)
        self._store.drop_indexes("")

    # -- lineage -----------------------------------------------------------------------------
    def find(self, target: str) -> Callable[[Iterable[DocNode | NodeWithScore]], list[DocNode]]:
        """``doc.find(group)(nodes)``: the ancestors or descendants of ``nodes`` in ``group``,
        de-duplicated, in the order of the input nodes."""
        self._check_group(target)

        def finder(nodes: Iterable[DocNode | NodeWithScore]) -> list[DocNode]:
            out: list[DocNode] = []
            seen: set[str] = set()
            for src_group, ids in _by_group(nodes):
                rows = self._map_ids(src_group, ids, target)
                tgt = self.group(target)
                for r in rows:
                    nid = tgt.ids[r]
                    if nid not in seen:
                        seen.add(nid)
                        out.append(DocNode._view(tgt, int(r)))
            return out

        return finder

    find_parent = find
    find_children = find

    def _path_to_root(self, name: str) -> list[str]:
        path = [name]
        while path[-1] != ROOT_GROUP:
            path.append(self._parent_of(path[-1]))
        return path

    def _map_ids(self, src: str, ids: list[str], target: str) -> np.ndarray:
        """Rows in ``target`` related to the nodes ``ids`` of group ``src``, input order."""
        up, down = self._path_to_root(src), self._path_to_root(target)
        common = next(g for g in up if g in down)
        # climb from src to the common ancestor: one parent_id lookup per level
        cur = list(ids)
        for name in up[: up.index(common)]:
            g = self.group(name)
            rows = g.rows_of(cur)
            parents = g.table.column("parent_id").take(pa.array(rows[rows >= 0]))
            cur = parents.to_pylist()
        # descend from the common ancestor to target, keeping input order
        for name in reversed(down[: down.index(common)]):
            g = self.group(name)
            rows = g.child_rows(list(dict.fromkeys(cur)))
            cur = [g.ids[r] for r in rows]
        tgt = self.group(target)
        rows = tgt.rows_of(list(dict.fromkeys(cur)))
        return rows[rows >= 0]

    # -- updates -----------------------------------------------------------------------------
    def add(self, items: str | os.PathLike | Sequence[str | os.PathLike],
            metadatas: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
        """Add files (paths that exist) or texts; returns the new root ids."""
        if isinstance(items, (str, os.PathLike)):
            items = [items]
        items = list(items)
        if not items:
            return []
        files = [Path(x) for x in items if isinstance(x, os.PathLike)
                 or (isinstance(x, str) and len(x) < 4096 and "\n" not in x and Path(x).exists())]
        texts = [x for x in items if isinstance(x, str) and Path(x) not in files]
        if files and texts:
            raise ConfigError("add() takes either paths or texts in one call, not both")
        rows: list[tuple] = []
        if texts:
            texts, metadatas, _ = _check_texts(texts, metadatas, None)
            offset = len(self._sources)
            for i, t in enumerate(texts):
                rid = node_id("text", offset + i, t)
                meta = {**self._global_metadata, **(metadatas[i] if metadatas else {})}
                h = hashlib.blake2b((t + dump_metadata(meta)).encode(), digest_size=16).hexdigest()
                self._sources[f"text:{rid}"] = _Source(f"text:{rid}", "text", h, roots=[rid])
                rows.append((rid, rid, None, t, None, None, dump_metadata(meta)))
        else:
            from fastrag.documents.readers import iter_source_files

            for f in iter_source_files(files, readers=self._readers or None):
                key = str(f.resolve())
                src, frows = self._plan_file(f, {})
                old = self._sources.pop(key, None)
                if old is not None:
                    self._drop_roots(old.roots)
                self._sources[key] = src
                rows += frows
        added = [r[0] for r in rows]
        old = self._stash_vectors(ROOT_GROUP, self._groups[ROOT_GROUP].table)
        root = pa.concat_tables([old, _rows_to_table(rows)])
        self._replace_root(self._order_root(root), set(added))
        return added

    def delete(self, doc_ids: str | Sequence[str]) -> int:
        """Remove root documents (by root id, or a source file path) and all their nodes."""
        if isinstance(doc_ids, str):
            doc_ids = [doc_ids]
        wanted = set()
        for d in doc_ids:
            src = self._sources.get(str(Path(d).resolve())) if isinstance(d, str) else None
            wanted.update(src.roots if src else [d])
        root = self._groups[ROOT_GROUP].table
        present = set(pc.filter(root.column("id"), pc.is_in(root.column("id"),
                                value_set=pa.array(sorted(wanted), pa.string()))).to_pylist())
        unknown = wanted - present
        if unknown:
            raise ConfigError(f"unknown doc ids {sorted(unknown)[:5]}; use root node ids "
                              "(doc.group('root').ids) or source file paths")
        self._drop_roots(present)
        for key in [k for k, s in self._sources.items() if not s.roots]:
            del self._sources[key]
        keep = pc.invert(pc.is_in(root.column("id"), value_set=pa.array(sorted(present))))
        self._replace_root(root.filter(keep), present, deleted=present)
        return len(present)

    def _drop_roots(self, roots: Iterable[str]) -> None:
        roots = set(roots)
        for s in self._sources.values():
            s.roots = [r for r in s.roots if r not in roots]

    def _replace_root(self, root: pa.Table, changed: set[str], deleted: set[str] = frozenset()):
        self._groups[ROOT_GROUP] = NodeGroup(self, ROOT_GROUP, None, root)
        for name in self._groups:
            if name != ROOT_GROUP:
                self._pending.setdefault(name, set()).update(changed)
        if self._store is not None:
            with self._store.transaction():
                m = self._store.manifest
                m["deleted"] = sorted(set(m.get("deleted", [])) | set(deleted))
                self._persist_sources()
                self._persist_group(ROOT_GROUP, root)
                self._invalidate_stored_groups(changed)
                self._store.commit()

    # -- info --------------------------------------------------------------------------------
    @property
    def store(self) -> Store | None:
        return self._store

    def __repr__(self) -> str:
        return f"Document(roots={len(self._groups[ROOT_GROUP])}, groups={self.group_names})"


def _vectors(table: pa.Table, col: str) -> np.ndarray:
    arr = table.column(col).combine_chunks()
    dim = arr.type.list_size
    return arr.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim)


def _check_vectors(vecs, n: int, ids: list[str], key: str, emb) -> np.ndarray:
    arr = np.asarray(vecs, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise ConfigError(f"embed key {key!r} returned shape {arr.shape} for {n} texts; "
                          "an embedder must return an (n, dim) array")
    if arr.shape[1] == 0:
        raise ConfigError(f"embed key {key!r} returned an empty vector for node {ids[0]!r}")
    dim = getattr(emb, "dim", None)
    if isinstance(dim, int) and dim > 0 and arr.shape[1] != dim:
        raise ConfigError(f"embed key {key!r} returned dimension {arr.shape[1]} for node "
                          f"{ids[0]!r}, but the embedder's dim is {dim}")
    bad = np.flatnonzero(~np.isfinite(arr).all(axis=1))
    if len(bad):
        raise ConfigError(f"embed key {key!r} returned NaN/inf for node {ids[bad[0]]!r}")
    return arr


class _LabelledIndex:
    """An ANN index whose labels map to group rows (deleted labels map to -1)."""

    def __init__(self, index, label_rows: np.ndarray) -> None:
        self.index = index
        self.label_rows = label_rows

    def search(self, queries, k, *, mask=None, cutoff=None, num_threads=None):
        label_mask = None
        if mask is not None:
            label_mask = np.zeros(len(self.label_rows), dtype=bool)
            live = self.label_rows >= 0
            label_mask[live] = mask[self.label_rows[live]]
        labels, scores, counts = self.index.search(queries, k, mask=label_mask, cutoff=cutoff)
        rows = np.where(labels >= 0, self.label_rows[np.maximum(labels, 0)], -1)
        return rows, scores, counts


def _check_texts(texts, metadatas, ids):
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise ConfigError("texts must be a list of strings")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ConfigError(f"texts[{i}] is {type(t).__name__}, expected str")
    if metadatas is not None:
        metadatas = list(metadatas)
        if len(metadatas) != len(texts):
            raise ConfigError(f"got {len(metadatas)} metadatas for {len(texts)} texts; "
                              "pass one dict per text")
        for i, m in enumerate(metadatas):
            if not isinstance(m, Mapping):
                raise ConfigError(f"metadatas[{i}] is {type(m).__name__}, expected dict")
    if ids is not None:
        ids = [str(x) for x in ids]
        if len(ids) != len(texts):
            raise ConfigError(f"got {len(ids)} ids for {len(texts)} texts; pass one id per text")
        if len(set(ids)) != len(ids):
            raise ConfigError("ids must be unique")
    return texts, metadatas, ids


def _resolve_transform(name: str, transform: Any, kwargs: dict):
    """(callable, identity, batch-spans or None) for every accepted transform form."""
    if isinstance(transform, type):
        try:
            inst = transform(**kwargs)
        except TypeError as exc:
            raise ConfigError(f"cannot create transform {transform.__name__} for group "
                              f"{name!r} with {kwargs}: {exc}") from exc
        if not callable(inst):
            raise ConfigError(f"transform class {transform.__name__} of group {name!r} "
                              "has no __call__")
        transform, kwargs = inst, {}
    if not callable(transform):
        raise ConfigError(
            f"transform of group {name!r} must be callable (a function, lambda, class with "
            f"__call__ or NodeTransform), got {type(transform).__name__}"
        )
    if isinstance(transform, NodeTransform):
        if kwargs:
            raise ConfigError(f"extra arguments {sorted(kwargs)} for group {name!r} are only "
                              "used when transform is a class; configure the instance instead")
        spans = transform.batch_spans if has_spans(transform) else None
        return transform, transform.identity(), spans
    fn = functools.partial(transform, **kwargs) if kwargs else transform
    return fn, _callable_identity(fn), None


def _rows_to_table(rows: list[tuple]) -> pa.Table:
    if not rows:
        return _empty_table()
    cols = list(zip(*rows))
    return pa.table({n: list(c) for n, c in zip(GROUP_SCHEMA.names, cols)}, schema=GROUP_SCHEMA)


def _order_children(table: pa.Table, parent: pa.Table) -> pa.Table:
    """Rows ordered by their parent's row, then by their order within the parent."""
    if table.num_rows == 0:
        return table
    pos = np.asarray(pc.index_in(table.column("parent_id"), value_set=parent.column("id"))
                     .fill_null(-1), dtype=np.int64)
    order = np.argsort(pos, kind="stable")
    if np.all(order == np.arange(len(order))):
        return table
    return table.take(order)


def _by_group(nodes) -> list[tuple[str, list[str]]]:
    """Consecutive runs of input nodes by group, so mapping keeps the input order."""
    runs: list[tuple[str, list[str]]] = []
    for n in nodes:
        node = n.node if isinstance(n, NodeWithScore) else n
        if not isinstance(node, DocNode) or node.group is None:
            raise ConfigError("find() takes nodes of this Document (DocNode or NodeWithScore); "
                              f"got {type(n).__name__} without a group")
        if runs and runs[-1][0] == node.group:
            runs[-1][1].append(node.id)
        else:
            runs.append((node.group, [node.id]))
    return runs
