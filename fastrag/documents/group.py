"""NodeGroup: one built node group, an Arrow table plus lazily built lookups."""

from __future__ import annotations

import decimal
import functools
import hashlib
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastrag._checks import check_int
from fastrag.errors import StoreError
from fastrag.schema import GROUP_SCHEMA, DocNode, dump_metadata

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.documents.document import Document


class NodeGroup:
    """The nodes of one group: ``table`` (Arrow) and light :class:`DocNode` views of its rows."""

    def __init__(
        self,
        document: Document,
        name: str,
        parent_name: str | None,
        table: pa.Table,
        *,
        built_gen: int = 0,
        segments: list[dict] | None = None,
    ) -> None:
        self.document = document
        self.name = name
        self.parent_name = parent_name
        self._lock = threading.Lock()
        self.table = table  # replaced (copy-on-write) when a vector column is attached
        self.built_gen = built_gen  # the root generation this group reflects
        self.segments = segments  # the store segments it was read from or written to

    @classmethod
    def read_back(
        cls,
        document: Document,
        name: str,
        parent_name: str | None,
        readers: list[Callable[[], pa.Table]],
        rows: int,
        fingerprint: str,
        *,
        built_gen: int = 0,
        piece_rows: Sequence[int] | None = None,
        segments: list[dict] | None = None,
    ) -> NodeGroup:
        """A group whose table is not in memory: ``readers`` read it back a piece each, in
        order (``Store.segment_readers``), when it is used; ``rows`` and ``fingerprint``
        (:func:`ids_fingerprint` of its ids) are known without it. With ``piece_rows`` (each
        piece's rows), a node's columns are read from its piece alone (:meth:`row_table`)."""
        group = cls(document, name, parent_name, GROUP_SCHEMA.empty_table(), built_gen=built_gen)
        with group._lock:
            group._table, group._rows, group._readers = None, rows, list(readers)
            if piece_rows is not None:
                if len(piece_rows) != len(group._readers) or sum(piece_rows) != rows:
                    raise ValueError(f"piece_rows {list(piece_rows)} do not match {rows} rows")
                group._starts = np.cumsum([0, *piece_rows], dtype=np.int64)
        group.__dict__["fingerprint"] = fingerprint
        group.segments = segments
        return group

    @property
    def table(self) -> pa.Table:
        """The nodes as an Arrow table (read back from the store after :meth:`release_table`)."""
        table = self._table
        if table is None:
            with self._lock:
                table = self._table
                if table is None:
                    pieces = self._pieces
                    readers = enumerate(self._readers or ())
                    table = _concat([pieces[i] if i in pieces else read() for i, read in readers])
                    self._table, self._pieces = table, {}
        return table

    @table.setter
    def table(self, table: pa.Table) -> None:
        with self._lock:
            self._table, self._rows = table, table.num_rows
            self._readers = self._stored = self._starts = None
            self._pieces = {}

    def row_table(self, row: int) -> tuple[pa.Table, int]:
        """(table, row in it) holding node ``row``: the group's table when it is in memory,
        else the one stored piece that holds the row, read alone (and kept)."""
        if not 0 <= row < self._rows:
            raise IndexError(f"row {row} out of range for group {self.name!r} of {len(self)} nodes")
        table, starts = self._table, self._starts
        if table is not None or starts is None:
            return self.table, row
        piece = int(np.searchsorted(starts, row, side="right")) - 1
        found = self._pieces.get(piece)
        if found is None:
            with self._lock:
                if self._table is not None:
                    return self._table, row
                found = self._pieces.get(piece)
                if found is None:
                    found = self._pieces[piece] = self._readers[piece]()
        return found, row - int(starts[piece])

    def hold_stored(self, segments: list[dict]) -> None:
        """Record that the store's ``segments`` (just written) hold this very table, so
        :meth:`release_table` may drop it."""
        with self._lock:
            self._stored = list(segments)

    def release_table(self) -> bool:
        """Drop the table (and the lookups made from it) of a group this process wrote to the
        store as it is: its segment files are mapped now, so :attr:`table` reads these bytes
        back when next used (:meth:`text_parts` a segment at a time) even after a writer has
        replaced them. False, nothing dropped, where there is no such copy (or it cannot be
        mapped)."""
        store = self.document.store
        with self._lock:
            if not self._stored or store is None:
                return False
            try:
                readers = store.segment_readers(self._stored, GROUP_SCHEMA)
            except StoreError:  # collected by another writer already: keep the table
                return False
            self._table, self._readers, self._starts, self._pieces = None, readers, None, {}
            for name in ("ids", "_row_by_id", "_texts"):
                self.__dict__.pop(name, None)
            return True

    def text_parts(self, rows: int | None = None) -> Iterator[pa.ChunkedArray]:
        """The ``text`` column in pieces of at most ``rows`` texts (None: whole). After
        :meth:`release_table` the pieces are read a store segment at a time, and the store's
        mapped pages are dropped as each piece is done with, so the texts are never all in
        memory."""
        check_int("rows", rows, min=1, none=True)
        table, readers = self._table, self._readers
        store = self.document.store
        if table is not None or not readers:
            readers, store = [lambda: self.table], None
        for read in readers:
            column = read().column("text")
            step = rows or max(len(column), 1)
            for lo in range(0, len(column), step):
                if store is not None:
                    store.release_pages()  # the pieces before: decoded, or read and done with
                yield column.slice(lo, step)
            del column
        if store is not None:
            store.release_pages()

    def __len__(self) -> int:
        return self._rows

    def __iter__(self) -> Iterator[DocNode]:
        return (DocNode.from_row(self, i) for i in range(len(self)))

    def __getitem__(self, row: int) -> DocNode:
        n = len(self)
        if not -n <= row < n:
            raise IndexError(f"row {row} out of range for group {self.name!r} of {n} nodes")
        return DocNode.from_row(self, row % n)

    def __repr__(self) -> str:
        return f"NodeGroup({self.name!r}, parent={self.parent_name!r}, nodes={len(self)})"

    def nodes(self, rows: Sequence[int] | np.ndarray) -> list[DocNode]:
        return [DocNode.from_row(self, int(r)) for r in rows]

    # -- lookups -----------------------------------------------------------------------------
    @functools.cached_property
    def ids(self) -> list[str]:
        return self.table.column("id").to_pylist()

    @functools.cached_property
    def _row_by_id(self) -> dict[str, int]:
        return {nid: i for i, nid in enumerate(self.ids)}

    def texts(self) -> list[str]:
        return self._texts

    @functools.cached_property
    def _texts(self) -> list[str]:
        return self.table.column("text").to_pylist()

    def node_by_id(self, nid: str) -> DocNode:
        try:
            return DocNode.from_row(self, self._row_by_id[nid])
        except KeyError:
            raise KeyError(f"no node with id {nid!r} in group {self.name!r}") from None

    def rows_of(self, ids: Sequence[str]) -> np.ndarray:
        """Row of each id (int64), -1 where the id is not in this group."""
        if len(ids) == 0:
            return np.zeros(0, dtype=np.int64)
        pos = pc.index_in(pa.array(list(ids), pa.string()), value_set=self.table.column("id"))
        return np.asarray(pos.fill_null(-1), dtype=np.int64)

    def child_rows(self, parent_ids: Sequence[str]) -> np.ndarray:
        """Rows whose parent is in ``parent_ids``: grouped by the parents' order, then row order."""
        if len(parent_ids) == 0 or self.parent_name is None:
            return np.zeros(0, dtype=np.int64)
        pos = pc.index_in(self.table.column("parent_id"), value_set=pa.array(list(parent_ids)))
        pos = np.asarray(pos.fill_null(-1), dtype=np.int64)
        rows = np.flatnonzero(pos >= 0)
        return rows[np.argsort(pos[rows], kind="stable")]

    def nodes_with_parents(self, parent_ids: Sequence[str]) -> list[DocNode]:
        return self.nodes(self.child_rows(parent_ids))

    @functools.cached_property
    def fingerprint(self) -> str:
        """Changes whenever any node id changes (ids hash the text and lineage)."""
        return ids_fingerprint(self.table.column("id"))

    # -- metadata ----------------------------------------------------------------------------
    def doc_metadata(self, doc_id: str) -> dict:
        """Root groups: a fresh dict of document ``doc_id``'s metadata ({} when unknown)."""
        row = self._row_by_id.get(doc_id)
        if row is None:
            return {}
        return json.loads(self.table.column("metadata")[row].as_py())

    def full_metadata_json(self) -> list[str]:
        """Each node's complete metadata (its document's updated by its own), as JSON."""
        if self.parent_name is None:
            return self.table.column("metadata").to_pylist()
        return full_metadata_json(self.table, self.document.group("root"))

    @functools.cached_property
    def _metadata_table(self) -> pa.Table:
        if self.parent_name is not None:
            root = self.document.group("root")
            own = self.table.column("metadata")
            if pc.all(pc.equal(own, "{}")).as_py() is not False:  # all inherited: gather rows
                rows = root.rows_of(self.table.column("doc_id").to_pylist())
                base = root.metadata_table()
                if base.num_columns == 0:
                    return base
                return base.take(pa.array(rows, mask=rows < 0))
        dicts = [json.loads(m) for m in self.full_metadata_json()]
        keys: dict[str, None] = {}
        for d in dicts:
            keys.update(dict.fromkeys(d))
        return pa.table({key: _metadata_column([d.get(key) for d in dicts]) for key in keys})

    def metadata_table(self) -> pa.Table:
        """One column per metadata key (nulls where a node lacks it), one row per node."""
        return self._metadata_table


def ids_fingerprint(ids: pa.ChunkedArray) -> str:
    """:attr:`NodeGroup.fingerprint` of a group whose ids are ``ids``."""
    h = hashlib.blake2b(digest_size=16)
    ids = ids.combine_chunks()
    for buf in ids.buffers()[1:]:
        if buf is not None:
            h.update(memoryview(buf))
    h.update(str(len(ids)).encode())
    return h.hexdigest()


def _concat(tables: list[pa.Table]) -> pa.Table:
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _metadata_column(values: list) -> pa.Array:
    """One metadata key as an Arrow column. Integers beyond int64 become uint64 when they fit,
    else decimal128(38, 0) (exact up to 38 digits); mixed types compare as text."""
    try:
        return pa.array(values)
    except OverflowError:
        ints = [v for v in values if v is not None]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
            if all(0 <= v < 2**64 for v in ints):
                return pa.array(values, pa.uint64())
            if all(abs(v) < 10**38 for v in ints):
                return pa.array(
                    [None if v is None else decimal.Decimal(v) for v in values],
                    pa.decimal128(38, 0),
                )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    return pa.array([None if v is None else str(v) for v in values])


def full_metadata_json(table: pa.Table, root: NodeGroup) -> list[str]:
    """Each row's complete metadata JSON: its document's (from ``root``) updated by its own."""
    own = table.column("metadata").to_pylist()
    rows = root.rows_of(table.column("doc_id").to_pylist())
    base = root.table.column("metadata").take(pa.array(rows, mask=rows < 0)).to_pylist()
    out = []
    for b, m in zip(base, own, strict=True):
        if m == "{}":
            out.append(b if b is not None else "{}")
        else:
            out.append(dump_metadata({**(json.loads(b) if b else {}), **json.loads(m)}))
    return out
