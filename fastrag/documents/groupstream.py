"""A large group written to its store piece by piece as its rows are made.

A span transform's rows (``SpanRows``) whose table would be written as compressed pieces
anyway (``COMPRESS_BELOW`` to ``SPLIT_BELOW`` bytes: a chunk group of 45-185 MB of text) are
written to the store's private folder (``Store.building()``) a piece at a time, outside the
writers' lock, and a short transaction moves the pieces in. The group's table is never whole
in memory: the group reads it back from the pieces, mapped as soon as they are written
(``NodeGroup.read_back``). The stored table equals the one made in memory, row for row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from fastrag.documents.building import GroupDef, SpanRows
from fastrag.documents.group import NodeGroup, ids_fingerprint
from fastrag.documents.store import Store
from fastrag.documents.transaction import halves, split_into_pieces, write_table_file
from fastrag.schema import GROUP_SCHEMA

#: Arrow bytes of rows written per piece: at most 16 pieces below SPLIT_BELOW, so a stored
#: group is never compacted back into larger ones
PIECE_BYTES = 16 << 20


def streams(store: Store | None, d: GroupDef, rows: SpanRows) -> bool:
    """Whether group ``d``'s rows go to ``store`` piece by piece."""
    return store is not None and store.writable and split_into_pieces(d.name, rows.nbytes)


def stream_group(
    doc: Any,
    d: GroupDef,
    parent: NodeGroup,
    rows: SpanRows,
    store: Store,
    persist: Callable[[NodeGroup, list[dict]], list[dict] | None],
) -> NodeGroup:
    """Group ``d`` of ``doc`` from ``rows``, written to ``store`` a piece of about
    :data:`PIECE_BYTES` at a time; ``persist(group, pieces)`` commits the pieces (the
    group's segments, or None when another writer stored the group meanwhile: the group then
    reads its own pieces back)."""
    with store.building() as work:
        pieces: list[dict] = []
        ids: list[pa.Array] = []
        held: list[pa.Table] = []
        size = 0

        def flush() -> None:
            whole = pa.concat_tables(held) if len(held) > 1 else held[0]
            held.clear()
            for table in halves(whole, 2 * PIECE_BYTES):  # a batch of very long texts
                path = work / f"{d.name}.{len(pieces)}.arrow"
                # SpanRows.batches() makes chunks of SPAN_BATCH rows: kept, not copied whole
                entry = write_table_file(path, d.name, table, combine=False)
                pieces.append({"file": path.relative_to(store.path).as_posix(), **entry})

        for batch in rows.batches():
            ids.extend(batch.column("id").chunks)
            held.append(batch)
            size += batch.nbytes
            if size >= PIECE_BYTES:
                flush()
                size = 0
        if held:
            flush()
        group = NodeGroup.read_back(
            doc,
            d.name,
            d.parent,
            store.segment_readers(pieces, GROUP_SCHEMA),  # mapped before they move
            sum(p["rows"] for p in pieces),
            ids_fingerprint(pa.chunked_array(ids, pa.string())),
            built_gen=parent.built_gen,
        )
        del ids
        group.segments = persist(group, pieces)
    if group.segments:
        group.hold_stored(group.segments)
    return group
