"""One locked change of a store (:class:`Transaction`) and how it lays tables out in segment
files: which are compressed, cut into pieces, compacted."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyarrow import ipc

from fastrag.documents.chunksums import file_digests
from fastrag.documents.storeio import atomic_write_bytes, fsync_dir
from fastrag.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.documents.store import Store

DATA, INDEXES = "data", "indexes"
# codec of segments holding text (ids, texts, metadata) below COMPRESS_BELOW bytes: those are
# read whole for their checksum on every open anyway; larger ones, vector segments and the
# tables every open reads (PLAIN_TABLES) are written plain, so they stay memory-mapped
# (zero-copy, shared between processes)
COMPRESSION: str | None = "zstd"
COMPRESS_BELOW = 64 << 20
# a text table from COMPRESS_BELOW up to this size is written as compressed pieces of under
# COMPRESS_BELOW / 2 bytes each (at most 8 segments, so compaction does not merge them back)
SPLIT_BELOW = 256 << 20
PLAIN_TABLES = ("root", "sources")
# a segmented table is compacted when it has more segments than this
MAX_SEGMENTS = 16


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:48] or "_"


MAX_TAGS = 64  # commit tags a store remembers (add/delete tag=)


def check_tag(tag: Any) -> str | None:
    """``tag`` when it is None or a usable commit tag; ConfigError otherwise."""
    if tag is not None and (not isinstance(tag, str) or not tag or len(tag) > 200):
        raise ConfigError(
            f"tag must be None or a non-empty str of at most 200 characters, got {tag!r}"
        )
    return tag


class Transaction:
    """One locked change of a store: new files under fresh names, then one manifest commit."""

    def __init__(self, store: Store, manifest: dict[str, Any]) -> None:
        self.store = store
        self.base = copy.deepcopy(manifest)
        self.manifest = manifest
        self.gen = int(manifest["generation"]) + 1
        self.created: list[Path] = []
        self._n = 0
        self.changed = False

    def _fresh(self, folder: str, name: str, suffix: str = "") -> str:
        if not self._n:
            self.store.claim()
        (self.store.path / folder).mkdir(exist_ok=True)
        self._n += 1
        self.changed = True
        return f"{folder}/{_safe(name)}.{self.gen}.{self._n}{suffix}"

    def write_segment(self, name: str, table: pa.Table) -> dict[str, Any]:
        """Write ``table`` as one new segment file; returns its manifest entry."""
        rel = self._fresh(DATA, name, ".arrow")
        path = self.store.path / rel
        self.created.append(path)
        return {"file": rel, **write_table_file(path, name, table)}

    def adopt(self, pieces: list[dict], name: str) -> list[dict]:
        """Segments of group ``name`` made of files written before this transaction (in
        ``Store.building()``'s folder, entries as :func:`write_table_file` gives them with
        ``file`` relative to the store): each is moved in under a fresh name."""
        out = []
        for piece in pieces:
            rel = self._fresh(DATA, name, ".arrow")
            path = self.store.path / rel
            os.replace(self.store.path / piece["file"], path)
            self.created.append(path)
            out.append({**piece, "file": rel})
        fsync_dir(self.store.path / DATA)
        return self.compact(out, name)

    def write_index(self, key: str, write: Callable[[Path], None], meta: dict) -> None:
        """Persist one derived index: ``write(folder)`` fills a new folder; its files' sizes and
        checksums are recorded with ``meta`` under ``key``."""
        rel = self._fresh(INDEXES, key)
        folder = self.store.path / rel
        self.created.append(folder)
        folder.mkdir()
        write(folder)
        files = {}
        for f in sorted(folder.iterdir()):
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
            whole, chunks = file_digests(f)  # a large file's reader checks the chunks it uses
            files[f.name] = {"size": f.stat().st_size, "checksum": whole, "chunks": chunks}
        fsync_dir(folder)
        fsync_dir(folder.parent)
        self.manifest["indexes"][key] = {"dir": rel, "files": files, "meta": meta}

    def write_arrays(self, key: str, arrays: dict[str, np.ndarray], meta: dict) -> None:
        def write(folder: Path) -> None:
            for name, arr in arrays.items():
                np.save(folder / f"{name}.npy", np.ascontiguousarray(arr), allow_pickle=False)

        self.write_index(key, write, meta)

    def record_tag(self, tag: str, result: Any) -> None:
        """Commit ``tag`` and the change's ``result`` with this transaction (the last
        :data:`MAX_TAGS` are kept; :meth:`Store.committed` finds them)."""
        tags = [t for t in self.manifest.get("tags", []) if t.get("tag") != tag]
        tags.append({"tag": tag, "generation": self.gen, "result": result})
        self.set("tags", tags[-MAX_TAGS:])

    def drop_index(self, key: str) -> None:
        if self.manifest["indexes"].pop(key, None) is not None:
            self.changed = True

    def set(self, key: str, value: Any) -> None:
        self.manifest[key] = value
        self.changed = True

    def append(self, segments: list[dict], name: str, table: pa.Table) -> list[dict]:
        """``segments`` plus those holding ``table`` (one, or a few compressed pieces: see
        :func:`_pieces`), compacted when there are too many."""
        out = list(segments)
        if table.num_rows:
            out.extend(self.write_segment(name, piece) for piece in _pieces(name, table))
        return self.compact(out, name)

    def compact(self, segments: list[dict], name: str) -> list[dict]:
        """Merge the adjacent pair of segments with the fewest rows until few are left."""
        segs = list(segments)
        while len(segs) > MAX_SEGMENTS:
            i = min(range(len(segs) - 1), key=lambda j: segs[j]["rows"] + segs[j + 1]["rows"])
            merged = self.store.read_segments(segs[i : i + 2])
            segs[i : i + 2] = [self.write_segment(name, merged)]
        return segs

    def filter(
        self, segments: list[dict], name: str, drop: Callable[[pa.Table], np.ndarray | None]
    ) -> list[dict]:
        """Rewrite only the segments where ``drop(table)`` (a bool mask, or None for none)
        marks rows to remove."""
        out = []
        for seg in segments:
            table = self.store.read_segments([seg])
            mask = drop(table)
            if mask is None or not mask.any():
                out.append(seg)
            elif not mask.all():
                out.append(self.write_segment(name, table.filter(pa.array(~mask))))
            else:
                self.changed = True
        return out


def write_table_file(
    path: Path, name: str, table: pa.Table, *, combine: bool = True
) -> dict[str, Any]:
    """Write ``table`` of group ``name`` atomically as the segment file ``path``: compressed
    when it holds text, is under ``COMPRESS_BELOW`` bytes and is not one of ``PLAIN_TABLES``;
    returns its ``rows``, ``size`` and ``checksum``. ``combine=False`` writes the table's
    chunks as its record batches (for chunks of thousands of rows: no copy of the table)."""
    # text tables compress 2-4x (hex ids, repeated doc ids, prose); vectors do not
    packed = _textual(table.schema) and table.nbytes < COMPRESS_BELOW and name not in PLAIN_TABLES
    if combine and table.nbytes < COMPRESS_BELOW:  # a record batch per 64k rows, not per append
        table = table.combine_chunks()
    options = ipc.IpcWriteOptions(compression=COMPRESSION if packed else None)

    def write(f):
        with ipc.new_file(f, table.schema, options=options) as writer:
            writer.write_table(table, max_chunksize=65536)

    return {"rows": table.num_rows, **atomic_write_bytes(path, write)}


def split_into_pieces(name: str, nbytes: int, textual: bool = True) -> bool:
    """Whether a table of group ``name`` of ``nbytes`` Arrow bytes is stored as compressed
    pieces: it holds text, is not one of ``PLAIN_TABLES`` and is from ``COMPRESS_BELOW`` up to
    ``SPLIT_BELOW`` (a chunk group of a 50 MB log: 72 MB plain, 16 MB as zstd pieces); a
    larger table stays one plain, memory-mapped segment."""
    return textual and name not in PLAIN_TABLES and COMPRESS_BELOW <= nbytes < SPLIT_BELOW


def halves(table: pa.Table, below: int) -> list[pa.Table]:
    """``table`` cut in halves, in order, until each piece is under ``below`` bytes (or one
    row)."""
    out: list[pa.Table] = []
    todo = [table]
    while todo:
        t = todo.pop()
        if t.nbytes < below or t.num_rows < 2:
            out.append(t)
        else:
            half = t.num_rows // 2
            todo += [t.slice(half), t.slice(0, half)]
    return out


def _pieces(name: str, table: pa.Table) -> list[pa.Table]:
    """``table`` as the segments :func:`split_into_pieces` asks for: pieces under
    ``COMPRESS_BELOW / 2`` bytes, each written compressed, or ``[table]``."""
    if not split_into_pieces(name, table.nbytes, _textual(table.schema)):
        return [table]
    return halves(table, COMPRESS_BELOW // 2)


def _textual(schema: pa.Schema) -> bool:
    return any(pa.types.is_string(t) or pa.types.is_large_string(t) for t in schema.types)
