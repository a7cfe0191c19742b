"""The committed state of a Document: its sources and root group, changed as one step.

A change of the sources is planned against the newest committed state, committed (in a store
transaction, when there is a store) and only then published, so a failed write leaves the
Document as it was and readers never see half a change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fastrag.documents.group import NodeGroup
from fastrag.documents.relink import user_paths
from fastrag.documents.sources import SOURCE_SCHEMA, Change, apply_sources, drop_mask
from fastrag.documents.store import MissingFile, Store
from fastrag.documents.transaction import Transaction
from fastrag.schema import GROUP_SCHEMA, ROOT_GROUP

Plan = Callable[[pa.Table, pa.Table, int], Change]
"""Plans a change from ``(sources, root table, next id)``."""


@dataclass(frozen=True)
class SourceState:
    """The committed sources and root group, published as one object."""

    gen: int  # root generation: +1 on every change of the sources
    removed_gen: int  # last generation that removed root nodes
    next_id: int  # counter for ids of added texts (never reused)
    sources: pa.Table
    root: NodeGroup


class Committer:
    """Commits planned changes of one Document's sources and publishes the result as
    :attr:`state`; ``lock`` serializes the changes made through this Document."""

    def __init__(self, doc: Any, store: Store | None, lock: threading.RLock) -> None:
        self.doc = doc
        self.store = store
        self.lock = lock
        empty = NodeGroup(doc, ROOT_GROUP, None, GROUP_SCHEMA.empty_table(), built_gen=0)
        self.state = SourceState(0, 0, 0, SOURCE_SCHEMA.empty_table(), empty)

    def load(self) -> None:
        """Publish the store's committed sources and root group (re-reading the manifest when
        a writer collected the files it named meanwhile)."""
        for attempt in range(3):
            try:
                return self._load_manifest_state()
            except MissingFile:
                if attempt == 2:
                    raise
                self.store.reload()

    def reload(self) -> None:
        """Re-read the store's manifest and publish what it commits."""
        with self.lock:
            self.store.reload()
            self.load()

    def _load_manifest_state(self) -> None:
        store = self.store
        m = store.manifest
        sources = store.read_segments(m["sources"], SOURCE_SCHEMA)
        entry = m["groups"].get(ROOT_GROUP)
        root = (
            store.read_segments(entry["segments"], GROUP_SCHEMA)
            if entry
            else GROUP_SCHEMA.empty_table()
        )
        root = user_paths(root, sources, m.get("inputs") or [])  # older stores: in memory
        self.publish(
            m["root_gen"],
            m.get("removed_gen", 0),
            m["next_id"],
            sources,
            root,
            entry["segments"] if entry else [],
        )

    def publish(
        self,
        gen: int,
        removed_gen: int,
        next_id: int,
        sources: pa.Table,
        root: pa.Table,
        segments: list[dict] | None = None,
    ) -> None:
        """Make ``sources`` and the ``root`` table the Document's state."""
        group = NodeGroup(self.doc, ROOT_GROUP, None, root, built_gen=gen, segments=segments)
        self.state = SourceState(gen, removed_gen, next_id, sources, group)

    def change(
        self,
        plan: Plan,
        *,
        persist_ro: bool = True,
        tag: str | None = None,
        full: bool = False,
    ) -> Any:
        """Plan a change of the sources against the newest committed state, commit it, then
        publish it; returns its result (``full``: the Change). ``persist_ro=False``: on a
        read-only store, apply it in memory only. ``tag``: recorded with the commit and its
        result (see :meth:`Document.committed`)."""
        with self.lock:
            store = self.store
            if store is None or (not store.writable and not persist_ro):
                st = self.state
                change = plan(st.sources, st.root.table, st.next_id)
                if change:
                    self._apply_in_memory(st, change)
                return change if full else change.result
            if not store.writable:
                store.check_writable()
            planned = None
            if not persist_ro:  # reading sources: take the lock only when there is a change
                st = self.state
                planned = (
                    store.manifest["generation"],
                    plan(st.sources, st.root.table, st.next_id),
                )
                if not planned[1]:
                    return planned[1] if full else planned[1].result
            with store.transaction() as txn:
                change = self._apply_in_store(txn, plan, planned)
                if tag is not None:
                    txn.record_tag(tag, change.result)
            self.load()
            return change if full else change.result

    def _apply_in_memory(self, st: SourceState, change: Change) -> None:
        gen = st.gen + 1
        root = st.root.table
        if change.drop_roots and root.num_rows:
            root = root.filter(
                pc.invert(
                    pc.is_in(
                        root.column("id"),
                        value_set=pa.array(sorted(change.drop_roots), pa.string()),
                    )
                )
            )
        if change.roots:
            root = pa.concat_tables([root, change.root_table()])
        self.publish(
            gen,
            gen if change.drop_roots else st.removed_gen,
            st.next_id if change.next_id is None else change.next_id,
            apply_sources(st.sources, change, gen),
            root,
        )

    def _apply_in_store(
        self, txn: Transaction, plan: Plan, planned: tuple[int, Change] | None = None
    ) -> Change:
        """Apply ``plan`` to the newest committed state; ``planned`` is (generation, change)
        planned before taking the lock, reused when nothing was committed since."""
        store, m = self.store, txn.manifest
        entry = m["groups"].get(ROOT_GROUP)
        root_segs = entry["segments"] if entry else []
        if planned is not None and planned[0] == m["generation"]:
            change = planned[1]
        else:
            sources = store.read_segments(m["sources"], SOURCE_SCHEMA)
            root = store.read_segments(root_segs, GROUP_SCHEMA)
            change = plan(sources, root, m["next_id"])
        if not change:
            return change
        gen = m["root_gen"] + 1
        segs = txn.filter(m["sources"], "sources", drop_mask("key", change.drop_keys))
        txn.set("sources", txn.append(segs, "sources", change.source_table(gen)))
        segs = txn.filter(root_segs, "root", drop_mask("id", change.drop_roots))
        segs = txn.append(segs, "root", change.root_table())
        m["groups"][ROOT_GROUP] = {
            "segments": segs,
            "parent": None,
            "identity": "root",
            "nodes": sum(s["rows"] for s in segs),
            "root_gen": gen,
        }
        m["root_gen"] = gen
        if change.drop_roots:
            m["removed_gen"] = gen
        if change.next_id is not None:
            m["next_id"] = change.next_id
        if change.inputs is not None:
            m["inputs"] = change.inputs
        drop_stale_indexes(m, ROOT_GROUP)
        return change


def touched_docs(sources: pa.Table, since_gen: int) -> list[str]:
    """Root ids of the sources whose rows changed after generation ``since_gen`` (with the
    ids deleted from them, whose nodes must go)."""
    if sources.num_rows == 0:
        return []
    changed = sources.filter(pc.greater(sources.column("changed_gen"), since_gen))
    if not changed.num_rows:
        return []
    return (
        pc.list_flatten(changed.column("roots")).to_pylist()
        + pc.list_flatten(changed.column("deleted")).to_pylist()
    )


def drop_stale_indexes(m: dict, group: str, fingerprint: str | None = None) -> None:
    """Drop BM25 entries of ``group`` not built from ``fingerprint`` (they cannot be updated;
    rebuilt on next use). HNSW indexes and vectors stay: they are updated by node id."""
    for key in [
        k
        for k, v in m["indexes"].items()
        if v["meta"].get("group") == group
        and v["meta"].get("kind") == "bm25"
        and v["meta"].get("fingerprint") != fingerprint
    ]:
        del m["indexes"][key]
