"""Bringing a node group up to its parent's generation.

A group is taken as the store last committed it when its definition is unchanged and its
parent has not changed since; otherwise it is built from scratch, or from its old table with
only the nodes of changed and removed documents recomputed. A writable store persists the
result (appending the new rows to the old segments where it can).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from fastrag.documents.building import (
    STORED_ONLY,
    GroupDef,
    SpanRows,
    run_transform,
    transform_rows,
)
from fastrag.documents.group import NodeGroup, full_metadata_json, ids_fingerprint
from fastrag.documents.groupstream import stream_group, streams
from fastrag.documents.relink import user_paths
from fastrag.documents.sources import drop_mask
from fastrag.documents.state import SourceState, drop_stale_indexes, touched_docs
from fastrag.documents.store import MissingFile, Store
from fastrag.errors import ConfigError, StoreWarning
from fastrag.schema import GROUP_SCHEMA


def build_group(
    doc: Any,
    d: GroupDef,
    parent: NodeGroup,
    old: NodeGroup | None,
    state: SourceState,
    store: Store | None,
    *,
    show_progress: bool = False,
) -> NodeGroup:
    """Group ``d`` of ``doc`` at the parent's generation: as stored, from scratch, or the old
    table with the nodes of changed and removed documents recomputed."""
    if old is None:
        old = stored_group(doc, d, store, state.sources)
        if old is not None and old.built_gen == parent.built_gen:
            return old
        if old is not None and old.built_gen > parent.built_gen:
            old = None  # stored by a process that saw newer sources: rebuild
    if d.fn is STORED_ONLY:
        raise ConfigError(
            f"group {d.name!r} was built by a Python transform the store cannot record, and "
            "its documents changed since (or the store does not hold it any more); register "
            f"it again with doc.create_node_group({d.name!r}, transform=..., "
            f"parent={d.parent!r}) to rebuild it"
        )
    if show_progress:
        with tqdm(total=1, desc=f"building group {d.name!r}", unit="group", leave=False):
            return _build_rows(doc, d, parent, old, state, store)
    return _build_rows(doc, d, parent, old, state, store)


def stored_group(
    doc: Any, d: GroupDef, store: Store | None, sources: pa.Table | None = None
) -> NodeGroup | None:
    """The group as the store last committed it, if its definition is unchanged (nodes of
    version 2 stores carry their document's metadata: with ``sources``, their file paths
    become the paths users see, as the root group's do)."""
    if store is None:
        return None
    entry = store.manifest["groups"].get(d.name)
    if entry is None or entry.get("identity") != d.identity or entry.get("parent") != d.parent:
        return None
    segments = entry["segments"]
    try:
        readers, ids, piece_rows = store.open_segments(segments, GROUP_SCHEMA, "id")
    except MissingFile as exc:  # rewritten by another process since we read the manifest?
        store.reload()
        again = store.manifest["groups"].get(d.name)
        if again is not None and again["segments"] == entry["segments"]:  # no: it is lost
            warnings.warn(
                f"group {d.name!r} in the store is damaged and is rebuilt from its parent: {exc}",
                StoreWarning,
                stacklevel=4,
            )
        return None
    if sources is not None:
        inputs = store.manifest.get("inputs") or []
        readers = [functools.partial(_user_paths, read, sources, inputs) for read in readers]
    return NodeGroup.read_back(
        doc,
        d.name,
        d.parent,
        readers,
        len(ids),
        ids_fingerprint(ids),
        built_gen=entry["root_gen"],
        piece_rows=piece_rows,
        segments=segments,
    )


def _user_paths(read: Callable[[], pa.Table], sources: pa.Table, inputs: list) -> pa.Table:
    return user_paths(read(), sources, inputs)


def _build_rows(
    doc: Any,
    d: GroupDef,
    parent: NodeGroup,
    old: NodeGroup | None,
    st: SourceState,
    store: Store | None,
) -> NodeGroup:
    ptable = parent.table
    if old is None:
        rows = transform_rows(d, ptable, _full_meta(parent, ptable, st), _released(store))
        if isinstance(rows, SpanRows) and streams(store, d, rows):
            group = stream_group(
                doc,
                d,
                parent,
                rows,
                store,
                lambda g, pieces: _persist_group(store, d, g, None, None, None, pieces),
            )
            store.release_pages()
            return group
        table = rows.table() if isinstance(rows, SpanRows) else rows
        del rows
        dropped = None
    else:
        touched = touched_docs(st.sources, old.built_gen)
        dropped = set(touched)
        if st.removed_gen > old.built_gen and old.table.num_rows:
            live = pc.is_in(old.table.column("doc_id"), value_set=ptable.column("doc_id"))
            gone = pc.filter(old.table.column("doc_id"), pc.invert(live))
            dropped.update(gone.unique().to_pylist())
        keep = old.table
        if dropped and keep.num_rows:
            keep = keep.filter(
                pc.invert(
                    pc.is_in(
                        keep.column("doc_id"), value_set=pa.array(sorted(dropped), pa.string())
                    )
                )
            )
        if touched and ptable.num_rows:
            ptable = ptable.filter(
                pc.is_in(ptable.column("doc_id"), value_set=pa.array(sorted(touched), pa.string()))
            )
        else:
            ptable = ptable.slice(0, 0)
        keep = keep.select(GROUP_SCHEMA.names)
        new = run_transform(d, ptable, _full_meta(parent, ptable, st), _released(store))
        table = keep if new.num_rows == 0 else pa.concat_tables([keep, new])
    if store is not None:  # the parent's texts were read whole: their pages may go
        store.release_pages()
    group = NodeGroup(doc, d.name, d.parent, table, built_gen=parent.built_gen)
    if store is not None and store.writable:
        new_rows = table if dropped is None else table.slice(keep.num_rows)
        group.segments = _persist_group(store, d, group, old, dropped, new_rows)
        if group.segments and dropped is None and table.schema.equals(GROUP_SCHEMA):
            group.hold_stored(group.segments)
        store.release_pages()  # and those the writing touched
    return group


def _released(store: Store | None) -> Callable[[], object] | None:
    """What drops the store's mapped pages of the parents' texts once they are read."""
    return None if store is None else store.release_pages


def _full_meta(parent: NodeGroup, ptable: pa.Table, st: SourceState) -> list[str] | None:
    if parent.parent_name is None:
        return None
    return full_metadata_json(ptable, st.root)


def _persist_group(
    store: Store,
    d: GroupDef,
    group: NodeGroup,
    old: NodeGroup | None,
    dropped: set[str] | None,
    new_rows: pa.Table | None,
    pieces: list[dict] | None = None,
) -> list[dict] | None:
    """Commit ``group``: ``new_rows`` appended to the old segments where only they changed,
    else the whole table, or the ``pieces`` already written (``groupstream``); its segments,
    or None when another writer stored it (or a newer one) meanwhile."""
    with store.transaction() as txn:
        m = txn.manifest
        cur = m["groups"].get(d.name)
        if (
            cur is not None
            and cur.get("identity") == d.identity
            and cur["root_gen"] >= group.built_gen
        ):
            return None  # another writer stored it (or a newer one): not our table
        base = [s["file"] for s in old.segments] if old is not None and old.segments else None
        if (
            cur is not None
            and dropped is not None
            and base is not None
            and [s["file"] for s in cur["segments"]] == base
            and cur.get("identity") == d.identity
        ):
            segs = txn.filter(cur["segments"], d.name, drop_mask("doc_id", dropped))
            segs = txn.append(segs, d.name, new_rows)
        elif pieces is not None:
            segs = txn.adopt(pieces, d.name)
        else:
            segs = txn.append([], d.name, group.table.select(GROUP_SCHEMA.names))
        m["groups"][d.name] = {
            "segments": segs,
            "parent": d.parent,
            "identity": d.identity,
            "nodes": len(group),
            "root_gen": group.built_gen,
            "spec": d.spec,
        }
        txn.changed = True
        drop_stale_indexes(m, d.name, group.fingerprint)
        return segs
