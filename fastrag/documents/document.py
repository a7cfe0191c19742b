"""Document: sources -> root group -> registered node groups (lazy, cached, persisted).

A Document is safe to share between threads: each group is built once under its own lock,
tables are replaced, never changed in place, and a change of the sources (``add``, ``delete``,
re-reading files) is planned, committed (to the store, when there is one) and only then
published, so a failed write leaves the Document as it was.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastrag._checks import check_choice, check_int, check_str
from fastrag.documents import lineage
from fastrag.documents.base import BaseDocument
from fastrag.documents.building import STORED_ONLY, GroupDef, resolve_transform, stored_def
from fastrag.documents.derivedkeys import KeyLocks
from fastrag.documents.embedding import embed_query_vectors, normalize_embed
from fastrag.documents.group import NodeGroup
from fastrag.documents.incremental import build_group
from fastrag.documents.indexes import DerivedData
from fastrag.documents.paths import (
    check_path_arg,
    input_keys,
    lazyllm_path,
    looks_like_path,
    names_a_path,
)
from fastrag.documents.readers.walk import relative_key, resolved_roots
from fastrag.documents.relink import (
    SourceChanges,
    kept_message,
    other_corpus_message,
    source_keys,
    source_status,
    status_message,
)
from fastrag.documents.sources import Planner, SourceView, check_texts
from fastrag.documents.state import Committer, SourceState
from fastrag.documents.store import Store
from fastrag.documents.transaction import check_tag
from fastrag.embeddings.named import recorded_embedders
from fastrag.errors import ConfigError, StoreWarning
from fastrag.schema import ROOT_GROUP, DocNode, NodeWithScore
from fastrag.settings import DEFAULT_TOPK
from fastrag.transforms.base import NodeTransform
from fastrag.transforms.sentence import SentenceSplitter

__all__ = [
    "Document",
]


class Document(BaseDocument):
    """A collection of source documents and the node groups built from them.

    ``Document(path | [paths], store=None, embed=None, readers=None, global_metadata=None)``
    reads files (directories recursively); ``Document.from_texts(texts)`` takes strings. Node
    groups are registered with :meth:`create_node_group` and built lazily on first use. With
    ``store=`` every built group and derived index is persisted and re-opened without running
    any transform; ``mode="r"`` opens a store read-only (what is missing is built in memory),
    ``lock_timeout`` bounds the wait for another writer, ``verify=True`` checks every file's
    checksum when it is read. ``Document(store=PATH)`` re-opens a store with its sources and
    groups, reading no source file and writing nothing (files that are gone or changed on disk
    are reported with a :class:`~fastrag.errors.StoreWarning` and served as stored). Without
    ``embed=``, a store whose vectors record the embedder that made them (``fastrag ingest
    --embed NAME``, or an embedder from :func:`~fastrag.embeddings.named.embedder_by_name`)
    embeds with it again, loaded on first use.
    ``Document(PATHS, store=PATH)`` brings the store up to date with ``PATHS``: new and changed
    files are read, files found at a new place re-linked, and the store's other sources kept
    unless ``remove_missing=True`` (drop those not found) or ``replace=True`` (``PATHS`` become
    the only sources); a store of other paths is an error (add files with :meth:`add`).
    Reading files (as LlamaIndex's ``SimpleDirectoryReader``): ``readers`` (``{".ext": fn}``),
    ``on_error`` ("raise", or "skip" to warn and leave a file out), ``json_text_field``,
    ``metadata_fields``, ``required_exts``, ``exclude``, ``recursive``, ``exclude_hidden``,
    ``show_progress``. LazyLLM's spelling works too: ``dataset_path=`` is ``path``, and
    ``manager=False`` is accepted (fastrag has no document-manager service; True fails).
    """

    CoarseChunk = "CoarseChunk"
    MediumChunk = "MediumChunk"
    FineChunk = "FineChunk"
    _BUILTIN = {CoarseChunk: (1024, 100), MediumChunk: (256, 25), FineChunk: (128, 12)}
    #: the names of the built-in groups every Document has (built on first use)
    BUILTIN_GROUPS: tuple[str, ...] = tuple(_BUILTIN)

    def __init__(
        self,
        path: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
        *,
        store: str | os.PathLike | None = None,
        mode: str = "a",
        lock_timeout: float = 30.0,
        verify: bool = False,
        embed: Any = None,
        readers: Mapping[str, Callable] | None = None,
        global_metadata: Mapping[str, Any] | None = None,
        on_error: str = "raise",
        json_text_field: str = "text",
        metadata_fields: Sequence[str] | None = None,
        required_exts: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
        recursive: bool = True,
        exclude_hidden: bool = True,
        replace: bool = False,
        remove_missing: bool = False,
        show_progress: bool = False,
        dataset_path: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
        manager: bool | None = False,
        _texts: tuple[list[str], list[dict] | None, list[str] | None] | None = None,
    ) -> None:
        path = lazyllm_path(path, dataset_path, manager)
        check_path_arg(path)
        check_choice(
            "on_error",
            on_error,
            ("raise", "skip"),
            note="'skip' warns and leaves out a file that cannot be read",
        )
        if global_metadata is not None and not isinstance(global_metadata, Mapping):
            raise ConfigError("global_metadata must be a dict of metadata for every node")
        if readers is not None and not isinstance(readers, Mapping):
            raise ConfigError('readers must be a dict like {".ext": fn}')
        if path is None and _texts is None and store is None:
            raise ConfigError(
                "Document needs a path (file, directory or list of them), texts "
                "(Document.from_texts) or an existing store="
            )
        self.embed = normalize_embed(embed)
        self._global_metadata = dict(global_metadata or {})
        self._defs: dict[str, GroupDef] = {}
        for name in self._BUILTIN:
            # the splitter is created on first build
            self._defs[name] = GroupDef(name, ROOT_GROUP, None, False, 0, "", None)
        self._groups: dict[str, NodeGroup] = {}
        self._lock = threading.RLock()
        self._locks = KeyLocks()
        self._store = (
            Store(store, mode, lock_timeout=lock_timeout, verify=verify)
            if store is not None
            else None
        )
        self._planner = Planner(
            readers=dict(readers) if readers else None,
            on_error=on_error,
            json_text_field=json_text_field,
            global_metadata=self._global_metadata,
            hash_files=self._store is not None,
            metadata_fields=metadata_fields,
            required_exts=required_exts,
            exclude=exclude,
            recursive=recursive,
            exclude_hidden=exclude_hidden,
            show_progress=bool(show_progress),
        )
        self.show_progress = bool(show_progress)
        self.derived = DerivedData(self)
        self._commits = Committer(self, self._store, self._lock)
        self._changes = SourceChanges()
        self._inputs: list[str] | None = None  # the paths this Document read (no store)
        if self._store is not None:
            self._commits.load()
            self._register_stored_groups()
            if not self.embed:  # the embedders the stored vectors record (fastrag ingest --embed)
                self.embed = dict(recorded_embedders(self._store.manifest))
        if _texts is not None:
            texts, metadatas, ids = _texts
            self._commits.change(
                lambda src, root, nid: self._planner.plan_texts(texts, metadatas, ids, src),
                persist_ro=False,
            )
        elif path is not None:
            self._read_paths(path, bool(replace), bool(remove_missing))
        elif self._store is not None:
            self._report_sources()

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
        **store_options: Any,
    ) -> Document:
        """One root node per text (ids default to a hash of position and text).
        ``store_options``: ``mode``, ``lock_timeout``, ``verify`` (see :class:`Document`)."""
        unknown = set(store_options) - {"mode", "lock_timeout", "verify"}
        if unknown:
            raise ConfigError(
                f"unknown arguments {sorted(unknown)} for from_texts; known: "
                "metadatas, ids, embed, store, global_metadata, mode, "
                "lock_timeout, verify"
            )
        texts, metadatas, ids = check_texts(texts, metadatas, ids)
        return cls(
            None,
            store=store,
            embed=embed,
            global_metadata=global_metadata,
            _texts=(texts, metadatas, ids),
            **store_options,
        )

    # -- committed state ---------------------------------------------------------------------
    @property
    def _state(self) -> SourceState:
        return self._commits.state

    def refresh(self, *, reread: bool = False, remove_missing: bool = False) -> Document:
        """Pick up what other processes committed to the store since this Document read it.

        ``reread=True`` also re-reads the source files that changed on disk since they were
        read; ``remove_missing=True`` also removes the sources whose file is gone (only this
        removes them: opening a store never does). What they did: :attr:`source_changes`."""
        if self._store is not None:
            self._commits.reload()
        if reread or remove_missing:
            change = self._commits.change(
                lambda src, root, nid: self._planner.plan_reread(
                    src, remove_missing=bool(remove_missing), roots=self._input_paths()
                ),
                persist_ro=False,
                full=True,
            )
            self._changes = change.stats
        return self

    def _register_stored_groups(self) -> None:
        """Register the groups the store holds: rebuilt from their recorded spec where fastrag
        can, else usable as stored (until their documents change)."""
        entries = {k: v for k, v in self._store.manifest["groups"].items() if k != ROOT_GROUP}
        pending = [k for k in entries if k not in self._defs]
        while pending:
            ready = [k for k in pending if entries[k].get("parent") in self.group_names]
            if not ready:
                warnings.warn(
                    f"store groups {pending} have parents the store does not hold; "
                    "they are not registered",
                    StoreWarning,
                    stacklevel=3,
                )
                return
            for name in ready:
                self._defs[name] = stored_def(name, entries[name])
                pending.remove(name)

    def _read_paths(self, path: Any, replace: bool, remove_missing: bool) -> None:
        """Bring the sources up to date with ``path``: read what is new or changed, re-link
        what moved, keep (and report) the store's other sources unless asked to remove them."""
        want = input_keys(path)
        store = self._store

        def plan(src, root, nid):
            have = store.manifest.get("inputs") if store is not None else None

            def check(matched: int, known: int) -> None:
                # a store made from other paths is not silently mixed with them: its own
                # sources at a new place (a moved or copied folder) are most of what is found
                if (
                    have is not None
                    and have != want
                    and not replace
                    and root.num_rows
                    and not (known and 2 * matched >= known)
                ):
                    raise ConfigError(
                        other_corpus_message(str(store.path), have, want, matched, known)
                    )

            change = self._planner.plan_paths(
                path,
                src,
                root,
                old_inputs=have,
                replace=replace,
                remove_missing=remove_missing,
                check=check,
            )
            change.inputs = want  # recorded when there is something to commit
            return change

        self._inputs = want

        change = self._commits.change(plan, persist_ro=False, full=True)
        self._changes = change.stats if change is not None else SourceChanges()
        if store is not None and (self._changes.missing or self._changes.outside):
            warnings.warn(
                kept_message(str(store.path), self._changes, want), StoreWarning, stacklevel=3
            )

    def _report_sources(self) -> None:
        """Warn about sources whose files are gone or changed (a moved store, or files edited
        since they were ingested); nothing is read or written."""
        missing, changed = source_status(self._state.sources)
        if missing or changed:
            warnings.warn(
                status_message(
                    str(self._store.path),
                    missing,
                    changed,
                    self._store.manifest.get("inputs") or [],
                ),
                StoreWarning,
                stacklevel=3,
            )

    def _input_paths(self) -> list[str]:
        """The paths this Document (or its store) was made from."""
        inputs = self._inputs
        if inputs is None:
            inputs = self._store.manifest.get("inputs") if self._store is not None else None
        return list(inputs or [])

    def source_path(self, file_path: str) -> str:
        """How a source is shown: ``file_path`` relative to the folder it was read from, with
        ``/`` separators (``en/cors.md``, not ``cors.md`` twice for two languages); a file
        read on its own, or under no folder of this Document, is its file name. A relative
        ``file_path`` (what metadata holds since issue 42) is already that path."""
        if isinstance(file_path, os.PathLike):
            file_path = os.fspath(file_path)
        check_str("file_path", file_path, note="a node's metadata['file_path']")
        if not os.path.isabs(file_path):
            return Path(file_path).as_posix()
        return relative_key(str(file_path), resolved_roots(self._input_paths()))

    @property
    def source_changes(self) -> SourceChanges:
        """What the last read of the sources did (files read, re-read, re-linked, unchanged,
        removed, kept): ``doc.source_changes.summary()``."""
        return self._changes

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
        check_int("num_workers", num_workers, min=0, note="0 runs the transform here")
        fn, identity, spans = resolve_transform(name, transform, kwargs)
        if trans_node is None:
            trans_node = bool(getattr(fn, "trans_node", False))
        if trans_node:
            spans = None
        identity = f"{identity}|trans_node={trans_node}"
        spec = fn.spec() if isinstance(fn, NodeTransform) else None
        with self._lock:
            if name == ROOT_GROUP or (name in self._defs and not self._defs[name].from_store):
                raise ConfigError(f"node group {name!r} already exists; choose another name")
            if parent == name:
                raise ConfigError(f"node group {name!r} cannot be its own parent (a cycle)")
            if parent != ROOT_GROUP and parent not in self._defs:
                raise ConfigError(
                    f"parent group {parent!r} of {name!r} is not registered; known groups: "
                    f"{self.group_names}; register the parent first"
                )
            self._defs[name] = GroupDef(
                name, parent, fn, bool(trans_node), num_workers, identity, spans, spec=spec
            )
            self._groups.pop(name, None)
        return self

    @property
    def group_names(self) -> list[str]:
        return [ROOT_GROUP, *self._defs]

    def child_group_names(self, name: str) -> list[str]:
        return [d.name for d in self._defs.values() if d.parent == name]

    def parent_of(self, name: str) -> str | None:
        """The parent group's name (None for the root)."""
        self.check_group(name)
        return None if name == ROOT_GROUP else self._defs[name].parent

    def check_group(self, name: str) -> None:
        """Raise ConfigError naming the known groups when ``name`` is not registered."""
        if name != ROOT_GROUP and name not in self._defs:
            raise ConfigError(
                f"unknown node group {name!r}; known groups: {self.group_names}; "
                "register it with doc.create_node_group(name, transform=...)"
            )

    def is_stored_only(self, name: str) -> bool:
        """Whether group ``name`` came from the store without a transform this process can run
        (a Python transform the store cannot record): it is served as stored, and cannot be
        rebuilt until registered again with :meth:`create_node_group`."""
        self.check_group(name)
        return name != ROOT_GROUP and self._defs[name].fn is STORED_ONLY

    def is_built(self, name: str) -> bool:
        """Whether group ``name`` is built for the current documents (``group(name)`` would
        build nothing), in this process or in the store."""
        self.check_group(name)
        if name == ROOT_GROUP:
            return True
        g = self._groups.get(name)
        if g is not None and g.built_gen == self._state.gen:
            return True
        entry = None if self._store is None else self._store.manifest["groups"].get(name)
        return entry is not None and entry.get("root_gen") == self._state.gen

    # -- building ----------------------------------------------------------------------------
    def group(self, name: str) -> NodeGroup:
        """The built group ``name`` (building it and its ancestors on first use)."""
        if name == ROOT_GROUP:
            return self._state.root
        self.check_group(name)
        g = self._groups.get(name)
        if g is not None and g.built_gen == self._state.gen:
            return g
        with self._locks(("group", name)):
            d = self._defs[name]
            parent = self.group(d.parent)
            g = self._groups.get(name)
            if g is not None and g.built_gen >= parent.built_gen:
                return g
            if d.fn is None:
                self._resolve_builtin(d)
            g = build_group(
                self, d, parent, g, self._state, self._store, show_progress=self.show_progress
            )
            self._groups[name] = g
            return g

    def _resolve_builtin(self, d: GroupDef) -> None:
        size, overlap = self._BUILTIN[d.name]
        splitter = SentenceSplitter(chunk_size=size, chunk_overlap=overlap)
        d.fn, d.identity, d.spans = splitter, splitter.identity(), splitter.batch_spans

    # -- embeddings --------------------------------------------------------------------------
    def embedder(self, key: str) -> Any:
        """The embedder registered under ``key``."""
        if key not in self.embed:
            raise ConfigError(
                f"unknown embed key {key!r}; the Document has {sorted(self.embed)} "
                "(pass embed=Embedder or embed={key: Embedder})"
            )
        return self.embed[key]

    def embeddings(self, group_name: str, key: str = "default") -> np.ndarray:
        """The ``(n, dim)`` float32 vectors of a group for one embed key.

        Computed on first use in batches (only for nodes whose vectors are not known yet),
        kept as a ``fixed_size_list<float32>`` column ``_emb_<key>`` of the group's table and
        persisted in the store beside it.
        """
        return self.derived.vectors(self.group(group_name), key)

    def embed_queries(self, queries: list[str], key: str = "default") -> np.ndarray:
        """Query vectors for one embed key (``embed_query`` is used where the model has it)."""
        return embed_query_vectors(self.embedder(key), queries, key)

    def embed_sparse_queries(self, queries: list[str], key: str = "default") -> list[dict]:
        """Sparse query vectors (``{token: weight}`` dicts) of a sparse embed key."""
        emb = self.embedder(key)
        fn = getattr(emb, "embed_query", None) or getattr(emb, "embed", None) or emb
        return list(fn(list(queries)))

    # -- lineage -----------------------------------------------------------------------------
    def find(self, target: str) -> Callable[[Iterable[DocNode | NodeWithScore]], list[DocNode]]:
        """``doc.find(group)(nodes)``: the ancestors or descendants of ``nodes`` in ``group``,
        de-duplicated, in the order of the input nodes."""
        return lineage.finder(self, target)

    find_parent = find
    find_children = find

    # -- updates -----------------------------------------------------------------------------
    def add(
        self,
        items: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
        metadatas: Sequence[Mapping[str, Any]] | None = None,
        *,
        texts: Sequence[str] | None = None,
        tag: str | None = None,
    ) -> list[str]:
        """Add files or folders (``items``), or texts (``texts=[...]``); returns the new root
        ids. A string in ``items`` that looks like a path but names nothing is an error (a
        text that merely looks like a path goes in ``texts=``). ``tag``: a name recorded in
        the store with this commit, so a process that died can learn whether the change
        landed (:meth:`committed`)."""
        tag = check_tag(tag)
        if texts is not None:
            if items is not None:
                raise ConfigError("pass either paths (items) or texts=, not both")
            texts, metadatas, _ = check_texts(texts, metadatas, None)
            return self._commits.change(
                lambda src, root, nid: self._planner.add_texts(texts, metadatas, nid), tag=tag
            )
        if items is None:
            raise ConfigError("add() needs paths, or texts=[...] for texts")
        if isinstance(items, (str, os.PathLike)):
            items = [items]
        items = list(items)
        if not items:
            return []
        files = [Path(x) for x in items if isinstance(x, os.PathLike) or names_a_path(x)]
        missing = [
            x for x in items if isinstance(x, str) and Path(x) not in files and looks_like_path(x)
        ]
        if missing:
            raise ConfigError(
                f"no such file or folder: {missing[0]!r}"
                f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''};"
                " to add text rather than a file, use doc.add(texts=[...])"
            )
        texts = [x for x in items if isinstance(x, str) and Path(x) not in files]
        if files and texts:
            raise ConfigError("add() takes either paths or texts in one call, not both")
        if texts:
            return self.add(texts=texts, metadatas=metadatas, tag=tag)
        return self._commits.change(
            lambda src, root, nid: self._planner.add_files(files, src, self._input_paths()),
            tag=tag,
        )

    def delete(self, doc_ids: str | Sequence[str], *, tag: str | None = None) -> int:
        """Remove root documents (by root id, or a source file path) and all their nodes;
        returns how many. ``tag``: as for :meth:`add`."""
        tag = check_tag(tag)
        if isinstance(doc_ids, (str, os.PathLike)):
            doc_ids = [doc_ids]
        doc_ids = [os.fspath(d) if isinstance(d, os.PathLike) else d for d in doc_ids]
        # a root id, else a source file (as a path, or as metadata's file_path names it)
        rows = self._state.root.rows_of([str(d) for d in doc_ids])
        keys = source_keys(
            self._state.sources,
            [d for d, r in zip(doc_ids, rows, strict=True) if r < 0],
            self._input_paths(),
        )
        found = iter(keys)
        doc_ids = [d if r >= 0 else (next(found) or d) for d, r in zip(doc_ids, rows, strict=True)]

        def present(root: pa.Table) -> Callable[[set], set]:
            def ids(wanted: set) -> set:
                if not wanted or root.num_rows == 0:
                    return set()
                col = root.column("id")
                hit = pc.is_in(col, value_set=pa.array(sorted(wanted), pa.string()))
                return set(pc.filter(col, hit).to_pylist())

            return ids

        return self._commits.change(
            lambda src, root, nid: self._planner.delete(doc_ids, src, present(root)), tag=tag
        )

    def committed(self, tag: str) -> dict[str, Any] | None:
        """The commit recorded under ``tag`` by ``add``/``delete`` (``{"tag", "generation",
        "result"}``: the new root ids, or the number deleted), re-reading the store; None when
        no such commit landed. The store keeps the last 64 tags."""
        tag = check_tag(tag)
        if self._store is None:
            return None
        return self._store.committed(tag)

    # -- one-line RAG --------------------------------------------------------------------------
    @property
    def global_metadata(self) -> dict[str, Any]:
        """The metadata every node of this Document carries (``global_metadata=``)."""
        return dict(self._global_metadata)

    def as_query_engine(
        self,
        group_name: str = "root",
        similarity: str = "bm25",
        topk: int = DEFAULT_TOPK,
        response_mode: str = "compact",
        llm: Any = None,
        response_synthesizer: Any = None,
        **kw: Any,
    ) -> Any:
        """A :class:`~fastrag.RAGPipeline` over one retriever and one synthesizer
        (LlamaIndex's ``index.as_query_engine()``): ``qe.query(question) -> Response``.
        The same as :meth:`RAGPipeline.from_document(doc, ...)
        <fastrag.rag.RAGPipeline.from_document>`, which lists the keyword arguments;
        ``node_postprocessors=`` (LlamaIndex's name) is ``postprocessors=``."""
        from fastrag.rag import RAGPipeline  # upward: LlamaIndex-shaped entry point

        if "node_postprocessors" in kw:
            if "postprocessors" in kw:
                raise ConfigError(
                    "as_query_engine got both node_postprocessors= (LlamaIndex's name) and "
                    "postprocessors=; pass the list once, under either name"
                )
            kw["postprocessors"] = kw.pop("node_postprocessors")

        return RAGPipeline.from_document(
            self, group_name, similarity, topk, response_mode, llm, response_synthesizer, **kw
        )

    def as_chat_engine(self, **kw: Any) -> Any:
        """A :class:`~fastrag.chat.ChatEngine` over ``self.as_query_engine(...)``: ``memory``,
        ``condense``, ``system_prompt``, ``chat_mode`` go to the engine, the rest (``llm`` too)
        to :meth:`as_query_engine` (see :meth:`ChatEngine.from_document
        <fastrag.chat.ChatEngine.from_document>`)."""
        from fastrag.chat.engine import ChatEngine  # upward: LlamaIndex-shaped entry point

        return ChatEngine.from_document(self, **kw)

    # -- info --------------------------------------------------------------------------------
    def source_text(self, path: str | os.PathLike, sep: str = "\n") -> str:
        """The whole text of one source file: its root documents (a PDF's pages, a JSONL's
        records) joined in order by ``sep``."""
        key = source_keys(self._state.sources, [path], self._input_paths())[0] or str(
            Path(path).expanduser().resolve()
        )
        rows = SourceView(self._state.sources).with_keys({key})
        if key not in rows:
            raise ConfigError(
                f"{str(path)!r} is not a source of this Document; sources are "
                "listed in doc.group('root') metadata['file_path']"
            )
        root = self._state.root
        return sep.join(root.node_by_id(r).text for r in rows[key]["roots"])

    @property
    def read_report(self) -> Any:
        """What the last read of files did: a :class:`~fastrag.documents.readers.ReadReport`
        (files read / skipped / failed per extension, with reasons)."""
        return self._planner.report

    @property
    def store(self) -> Store | None:
        return self._store

    def __repr__(self) -> str:
        return f"Document(roots={len(self._state.root)}, groups={self.group_names})"
