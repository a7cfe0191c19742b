"""A store directory: Arrow IPC segments, index folders and one small ``manifest.json``.

Layout::

    manifest.json            the commit point: format version, counters, and for every table
                             (sources, groups, vectors) its segment files, for every index its
                             folder; every file with its size and xxh3 checksum
    data/<name>.<gen>.arrow  table segments (a table is the concatenation of its segments)
    indexes/<key>.<gen>/     one folder per derived index (``.npy`` arrays or library files)
    .lock                    the writers' OS file lock

**Writes.** Every write happens inside :meth:`Store.transaction`, which holds a per-path thread
lock and the OS file lock, re-reads the manifest, lets the caller apply its change to the newest
committed state, writes new files under fresh names (temp file, fsync, rename), replaces the
manifest last (the commit point) and then removes every file the manifest does not name. Since
no other writer can be inside a transaction at that moment, anything unnamed is garbage: a
superseded file, or a leftover of a crashed writer. The first transaction creates the store
folder and commits an empty manifest before its first file, so files without a manifest mean
damage (never another writer's first commit); if it fails, it removes the folder again unless
another writer committed or is building there meanwhile.

**Reads.** Opening never writes, locks or creates anything, in either mode; ``mode="a"`` on a
folder this process cannot write opens read-only with a StoreWarning. Files are memory-mapped; sizes
are checked on every read, checksums on files under :data:`VERIFY_BELOW` bytes always and on all
files with ``verify=True`` (or :meth:`Store.verify`). A reader whose file was collected between
reading the manifest and opening the file re-reads the manifest (POSIX keeps mapped files
alive after unlink).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash
from pyarrow import ipc

from fastrag._checks import check_choice, check_number
from fastrag._checksum import checksum_file
from fastrag.documents.chunksums import ChunkCheck
from fastrag.documents.storecheck import check_json_objects, check_offsets, manifest_problems
from fastrag.documents.storeio import (
    TMP_PREFIX,
    FileMaps,
    atomic_write_bytes,
    os_errors,
    remove_new_store,
    why_read_only,
)
from fastrag.documents.storelock import HOLDER, LOCK, building, is_building, writer_lock
from fastrag.documents.transaction import DATA, INDEXES, Transaction
from fastrag.errors import StoreError, StoreWarning

FORMAT_VERSION = 3
# v2 stored every node's complete metadata; v3 stores a node's own metadata only (what it adds
# to its document's) and compresses text tables. v3 reads v2 rows unchanged (a complete
# metadata object updates its document's to itself), so v2 stores open and upgrade on commit.
READABLE_VERSIONS = (2, 3)
MANIFEST = "manifest.json"
# files below this size are checksummed on every read; larger ones with verify=True only
VERIFY_BELOW = 64 << 20


class MissingFile(StoreError):
    """A file the manifest names is gone (collected after a newer commit, or deleted)."""


def _manifest_checksum(body: dict) -> str:
    return xxhash.xxh3_64(json.dumps(body, sort_keys=True).encode()).hexdigest()


def empty_manifest() -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "generation": 0,
        "root_gen": 0,
        "next_id": 0,
        "sources": [],
        "groups": {},
        "vectors": {},
        "indexes": {},
    }


class Store:
    """The on-disk side of a :class:`~fastrag.Document`; see the module docstring.

    ``mode="a"`` (default) opens or creates a store for reading and writing; ``mode="r"``
    opens an existing store read-only (nothing on disk is ever changed). A writer waits up to
    ``lock_timeout`` seconds for another writer. ``verify=True`` checks every file's checksum
    when it is read (otherwise only files under 64 MiB and index files that are read whole).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        mode: str = "a",
        *,
        lock_timeout: float = 30.0,
        verify: bool = False,
    ) -> None:
        check_choice("mode", mode, ("r", "a"), note="'r' reads only, 'a' reads and writes")
        lock_timeout = check_number("lock_timeout", lock_timeout, min=0, note="seconds")
        self.path = Path(path).absolute()
        self.mode = mode
        self.lock_timeout = float(lock_timeout)
        self.verify_all = bool(verify)
        self.read_only_reason: str | None = None  # why a mode="a" open reads only
        if self.path.exists() and not self.path.is_dir():
            raise StoreError(f"store path {str(self.path)!r} exists and is not a directory")
        if mode == "r":
            if not (self.path / MANIFEST).is_file():
                raise StoreError(
                    f"{str(self.path)!r} is not a fastrag store (no {MANIFEST}); "
                    "mode='r' opens existing stores only: use mode='a' to create one"
                )
        elif self.path.is_dir() and not os.access(self.path, os.W_OK):
            self.mode = "r"
            self.read_only_reason = why_read_only(self.path)
            warnings.warn(
                f"store {str(self.path)!r} is {self.read_only_reason}: opened "
                "read-only (mode='r'); what it lacks is built in memory",
                StoreWarning,
                stacklevel=3,
            )
        self._verified: set[tuple[str, str]] = set()
        self._maps = FileMaps()
        self._check_not_headless()
        self.manifest = self._read_manifest()

    @property
    def writable(self) -> bool:
        return self.mode == "a"

    # -- manifest ----------------------------------------------------------------------------
    def _read_manifest(self) -> dict[str, Any]:
        mpath = self.path / MANIFEST
        try:
            raw = mpath.read_bytes()
        except FileNotFoundError:
            return empty_manifest()
        except OSError as exc:
            raise StoreError(f"cannot read {mpath}: {exc}") from exc
        try:
            manifest = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise StoreError(
                f"cannot read {mpath}: {exc}; the store is damaged: restore it "
                "from a backup or rebuild it from its sources into a new "
                "directory"
            ) from exc
        version = manifest.get("format_version") if isinstance(manifest, dict) else None
        if version not in READABLE_VERSIONS:
            raise StoreError(
                f"{str(mpath)!r} has format version {version!r}, but this fastrag reads "
                f"versions {list(READABLE_VERSIONS)}; open it with the fastrag version that wrote "
                "it, or rebuild it from its sources into a new directory (e.g. `fastrag ingest "
                "SOURCES --store NEW_DIR`, or fastrag.Document(SOURCES, store=NEW_DIR)); nothing "
                "was changed"
            )
        body = {k: v for k, v in manifest.items() if k != "checksum"}
        if manifest.get("checksum") != _manifest_checksum(body):
            raise StoreError(
                f"{mpath} fails its checksum; the store is damaged: restore it "
                "from a backup or rebuild it from its sources into a new directory"
            )
        problems = manifest_problems(body)
        if problems:  # checksums catch accidents; a foreign writer's manifest is checked too
            raise StoreError(
                f"{mpath} is not a manifest fastrag can read: "
                f"{'; '.join(problems[:3])}; the store is damaged: restore it from "
                "a backup or rebuild it from its sources into a new directory"
            )
        return body

    def reload(self) -> dict[str, Any]:
        """Re-read the committed manifest (another process may have committed)."""
        self.manifest = self._read_manifest()
        return self.manifest

    def referenced(self, manifest: dict | None = None) -> set[str]:
        """Store-relative paths of every file the manifest names (the manifest included)."""
        m = self.manifest if manifest is None else manifest
        refs = {MANIFEST}
        for seg in _segments_of(m):
            refs.add(seg["file"])
        for idx in m["indexes"].values():
            refs.update(f"{idx['dir']}/{name}" for name in idx["files"])
        return refs

    # -- writing -----------------------------------------------------------------------------
    def check_writable(self) -> None:
        """Raise StoreError when this Store cannot be changed (opened or found read-only)."""
        if self.mode != "a":
            if self.read_only_reason is not None:
                raise StoreError(
                    f"store {str(self.path)!r} is {self.read_only_reason}, so it "
                    "was opened read-only and cannot be changed; copy it to a "
                    "writable place (or remount it read-write) to change it"
                )
            raise StoreError(
                f"store {str(self.path)!r} is open read-only (mode='r'); open it "
                "with mode='a' to change it"
            )

    def _locked(self, timeout: float | None = None) -> contextlib.AbstractContextManager[None]:
        return writer_lock(self.path, self.lock_timeout if timeout is None else timeout)

    def building(self) -> contextlib.AbstractContextManager[Path]:
        """A private folder under the store for work done before a transaction, outside the
        writers' lock (a large index): no writer's garbage collection removes it while this
        process lives; it is removed on exit. Move its files in with the transaction."""
        self.check_writable()
        self.path.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self.claim()
        return building(self.path, INDEXES, self.lock_timeout)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Lock, re-read the manifest, let the caller change it, commit, collect garbage.

        On an exception nothing is committed and the files written inside are removed; an
        operating-system error (a full disk, a read-only file system) is a StoreError naming
        it and the file. A store folder created here is removed again when nothing was
        committed to it."""
        self.check_writable()
        created = not self.path.exists()
        try:
            with os_errors(self.path), self._transaction() as txn:
                yield txn
        except BaseException:
            if created:
                self._remove_if_unused()
            raise

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Transaction]:
        self.path.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self.manifest = self._read_manifest()
            self._check_not_headless()  # collecting would remove every file
            self._collect_garbage()  # a crashed writer's files may carry the names we pick
            txn = Transaction(self, copy.deepcopy(self.manifest))
            try:
                yield txn
                if txn.changed:
                    txn.manifest["generation"] = txn.gen
                    txn.manifest["format_version"] = FORMAT_VERSION
                    self._write_manifest(txn.manifest)
                else:
                    self.manifest = txn.base
            except BaseException:
                for path in txn.created:
                    with contextlib.suppress(OSError):
                        shutil.rmtree(path) if path.is_dir() else path.unlink()
                raise
            self._collect_garbage()

    def _write_manifest(self, body: dict[str, Any]) -> None:
        data = json.dumps(
            {**body, "checksum": _manifest_checksum(body)}, ensure_ascii=False, indent=1
        ).encode()
        atomic_write_bytes(self.path / MANIFEST, lambda f: f.write(data))
        self.manifest = body

    def claim(self) -> None:
        """Commit an empty manifest to a store that has none yet, before its first file is
        written: an opener never sees store files without a manifest, except where the store
        is damaged. Only call with the lock held."""
        if (self.path / MANIFEST).exists():
            return
        self._check_not_headless()
        self._write_manifest(empty_manifest())

    def _check_not_headless(self) -> None:
        if not (self.path / MANIFEST).exists() and self._holds_files():
            raise StoreError(
                f"{str(self.path / MANIFEST)!r} is missing but {str(self.path)!r} holds store "
                "files: the store is damaged; restore manifest.json from a backup or rebuild the "
                "store into a new directory (nothing was changed or removed)"
            )

    def _remove_if_unused(self) -> None:
        """Remove a store folder this process created for a transaction that failed, unless
        another writer committed to it or is building in it meanwhile."""
        try:
            with self._locked(timeout=0):  # a writer holding it is using the store
                if (self.path / MANIFEST).exists():
                    if self._read_manifest()["generation"] != 0:
                        return
                    if any(is_building(e) for e in self._entries(INDEXES)):
                        return
                elif self._holds_files():
                    return
                for sub in (DATA, INDEXES):  # files before the manifest: never one without other
                    if (self.path / sub).is_dir():
                        shutil.rmtree(self.path / sub)
                (self.path / MANIFEST).unlink(missing_ok=True)
                # the lock file goes while it is held: a writer that locks the unlinked file
                # after this sees so and takes a new one (filelock >= 3.21)
                remove_new_store(self.path, LOCK, HOLDER)
        except (OSError, StoreError):
            return
        with contextlib.suppress(OSError):
            self.path.rmdir()  # unless another writer has arrived meanwhile

    def _entries(self, sub: str) -> list[Path]:
        folder = self.path / sub
        return list(folder.iterdir()) if folder.is_dir() else []

    def _holds_files(self) -> bool:
        return any(self._entries(DATA)) or any(self._entries(INDEXES))

    def _collect_garbage(self) -> list[str]:
        """Remove what the manifest does not name. Only call with the lock held."""
        refs = self.referenced()
        dirs = {idx["dir"] for idx in self.manifest["indexes"].values()}
        removed = []
        for entry in self.path.iterdir():
            rel = entry.name
            if rel in (MANIFEST, LOCK, HOLDER):
                continue
            if entry.is_dir() and not entry.is_symlink() and rel in (DATA, INDEXES):
                for sub in entry.iterdir():
                    srel = f"{rel}/{sub.name}"
                    if sub.is_dir() and not sub.is_symlink():
                        if srel in dirs:  # a named folder: only what it should not hold goes
                            removed += [
                                f"{srel}/{f.name}"
                                for f in sub.iterdir()
                                if f"{srel}/{f.name}" not in refs
                            ]
                            continue
                    elif srel in refs:
                        continue
                    if is_building(sub):  # a live writer's work before its transaction
                        continue
                    removed.append(srel)
            elif rel.startswith(TMP_PREFIX):
                removed.append(rel)
        for rel in removed:
            path = self.path / rel
            with contextlib.suppress(OSError):
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        return removed

    # -- reading -----------------------------------------------------------------------------
    def check_file(self, rel: str, entry: dict, *, full: bool | None = None) -> Path:
        """The path of a named file after checking its size (and checksum when asked, when the
        file is small, or with verify=True); StoreError naming the file otherwise."""
        path = self.path / rel
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise MissingFile(
                f"store file {str(path)!r} is missing ({exc}); if another process "
                "is writing the store, call doc.refresh()"
            ) from exc
        if size != entry["size"]:
            raise StoreError(
                f"store file {str(path)!r} has {size} bytes, the manifest records "
                f"{entry['size']}: it is damaged"
            )
        if full is None:
            full = self.verify_all or size < VERIFY_BELOW
        key = (rel, entry["checksum"])
        if full and key not in self._verified:
            try:
                got = checksum_file(path)
            except FileNotFoundError as exc:  # collected by a writer after the stat
                raise MissingFile(
                    f"store file {str(path)!r} is missing ({exc}); if another "
                    "process is writing the store, call doc.refresh()"
                ) from exc
            if got != entry["checksum"]:
                raise StoreError(
                    f"store file {str(path)!r} fails its checksum ({got} != "
                    f"{entry['checksum']}): it is damaged"
                )
            self._verified.add(key)
        return path

    def read_segments(self, segments: list[dict], schema: pa.Schema | None = None) -> pa.Table:
        """The table made of ``segments`` (memory-mapped, checked)."""
        tables = [self._read_segment(seg, schema) for seg in segments]
        if not tables:
            if schema is None:
                raise StoreError("a table with no segments and no schema")
            return schema.empty_table()
        if len(tables) == 1:
            return tables[0]
        try:
            return pa.concat_tables(tables)
        except pa.ArrowInvalid as exc:
            raise StoreError(
                f"segments {[s['file'] for s in segments]} of {self.path} do not "
                f"share a schema: {exc}; the store is damaged"
            ) from exc

    def segment_readers(
        self, segments: list[dict], schema: pa.Schema | None = None
    ) -> list[Callable[[], pa.Table]]:
        """A reader of each segment's table that maps its file now: it reads these bytes even
        after a writer has replaced the segments and collected their files."""
        maps = [self._maps.open(self.check_file(seg["file"], seg, full=False)) for seg in segments]
        return [
            functools.partial(self._read_segment, seg, schema, buf)
            for seg, buf in zip(segments, maps, strict=True)
        ]

    def open_segments(
        self, segments: list[dict], schema: pa.Schema, key: str
    ) -> tuple[list[Callable[[], pa.Table]], pa.ChunkedArray, list[int]]:
        """(readers, keys, rows): a reader of each record batch of the segments, in order, as a
        table; their column ``key`` (e.g. the ids), read now without decoding the other
        columns; each batch's rows. Sizes and checksums are checked now, as
        :meth:`read_segments` does; a batch's structure when its reader first reads it. The
        files are mapped now, so the readers read these bytes even after a writer has replaced
        the segments and collected their files."""
        readers: list[Callable[[], pa.Table]] = []
        keys: list[pa.Array] = []
        for seg in segments:
            path = self.check_file(seg["file"], seg)
            try:
                buf = self._maps.open(path)
            except FileNotFoundError as exc:  # collected by a writer after the check
                raise MissingFile(
                    f"store file {str(path)!r} is missing ({exc}); if another process "
                    "is writing the store, call doc.refresh()"
                ) from exc
            column = self._read_column(seg, schema, key, buf)
            for i, part in enumerate(column):
                readers.append(
                    functools.partial(self._read_segment, seg, schema, buf, (i, len(part)))
                )
            keys.extend(column)
        return readers, pa.chunked_array(keys, schema.field(key).type), [len(k) for k in keys]

    def _read_column(
        self, seg: dict, schema: pa.Schema, name: str, mapped: pa.Buffer
    ) -> list[pa.Array]:
        """Column ``name`` of a segment alone, a piece per record batch, checked in full."""
        path = self.path / seg["file"]
        field = schema.field(name)
        try:
            options = ipc.IpcReadOptions(included_fields=[schema.get_field_index(name)])
            reader = ipc.open_file(pa.BufferReader(mapped), options=options)
            if not reader.schema.equals(pa.schema([field])):
                raise ValueError(f"column {name!r} is {reader.schema}, expected {field}")
            parts = [reader.get_batch(i).column(0) for i in range(reader.num_record_batches)]
            for part in parts:
                part.validate(full=True)
                if not field.nullable and part.null_count:
                    raise ValueError(f"column {name!r} holds {part.null_count} nulls")
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise StoreError(f"cannot read {path}: {exc}; the store is damaged") from exc
        rows = sum(len(p) for p in parts)
        if rows != seg["rows"]:
            raise StoreError(
                f"{path} has {rows} rows, the manifest records {seg['rows']}: it is damaged"
            )
        return parts

    def _read_segment(
        self,
        seg: dict,
        schema: pa.Schema | None = None,
        mapped: pa.Buffer | None = None,
        batch: tuple[int, int] | None = None,
    ) -> pa.Table:
        """A segment's table, checked; ``batch`` = (index, rows): that record batch alone."""
        path = self.check_file(seg["file"], seg) if mapped is None else self.path / seg["file"]
        rows = seg["rows"] if batch is None else batch[1]
        try:
            if mapped is None:
                mapped = self._maps.open(path)
            reader = ipc.open_file(pa.BufferReader(mapped))
            if batch is None:
                table = reader.read_all()
            else:
                table = pa.Table.from_batches([reader.get_batch(batch[0])])
            if schema is not None and not table.schema.equals(schema):
                raise ValueError(f"schema {table.schema} is not the expected {schema}")
            table.validate()  # buffer sizes agree with lengths and types (cheap)
            # Checksums catch accidents, not a buggy or foreign writer: every column is
            # validated in full (offsets, UTF-8), except the texts of a file too large to be
            # read whole for its checksum (it stays memory-mapped; verify=True checks them):
            # their offsets only.
            whole = (seg["file"], seg["checksum"]) in self._verified
            part = "" if batch is None else f"#{batch[0]}"
            checked = (f"{seg['file']}#structure{int(whole)}{part}", seg["checksum"])  # once
            if checked not in self._verified:
                for field, col in zip(table.schema, table.columns, strict=True):
                    if whole or field.name != "text":
                        try:
                            col.validate(full=True)
                        except pa.ArrowException as exc:
                            raise ValueError(f"column {field.name!r}: {exc}") from exc
                    else:
                        check_offsets(table.select([field.name]))
                    if not field.nullable and col.null_count:
                        raise ValueError(
                            f"column {field.name!r} holds {col.null_count} nulls but allows none"
                        )
                    if field.name == "metadata" and pa.types.is_string(field.type):
                        bad = check_json_objects(col)
                        if bad >= 0:
                            raise ValueError(f"row {bad} of column 'metadata' is not a JSON object")
                self._verified.add(checked)
        except FileNotFoundError as exc:  # collected by a writer after the size check
            raise MissingFile(
                f"store file {str(path)!r} is missing ({exc}); if another process "
                "is writing the store, call doc.refresh()"
            ) from exc
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise StoreError(f"cannot read {path}: {exc}; the store is damaged") from exc
        if table.num_rows != rows:
            where = "the manifest records" if batch is None else f"batch {batch[0]}'s ids hold"
            raise StoreError(f"{path} has {table.num_rows} rows, {where} {rows}: it is damaged")
        return table

    def release_pages(self) -> int:
        """Drop this process's resident pages of the segments it has memory-mapped (they are
        read-only: nothing is lost, a later read maps them again); returns the bytes mapped."""
        return self._maps.release()

    def index_folder(self, key: str, *, full: bool | None = None) -> tuple[Path, dict] | None:
        """(folder, meta) of a derived index after checking its files, or None."""
        entry = self.manifest["indexes"].get(key)
        if entry is None:
            return None
        for name, f in entry["files"].items():
            self.check_file(f"{entry['dir']}/{name}", f, full=full)
        return self.path / entry["dir"], entry["meta"]

    def chunk_check(self, key: str, name: str) -> ChunkCheck | None:
        """Lazy per-chunk verification of index file ``name`` when it is too large to be
        checksummed whole on open (None when it was, or the store predates chunk digests)."""
        entry = self.manifest["indexes"][key]
        f = entry["files"][name]
        if "chunks" not in f or self.verify_all or f["size"] < VERIFY_BELOW:
            return None
        return ChunkCheck(self.path / entry["dir"] / name, f["chunks"], f["size"])

    def read_arrays(self, key: str) -> tuple[dict[str, np.ndarray], dict] | None:
        """Memory-mapped ``.npy`` arrays and meta of an index, or None when there is none."""
        found = self.index_folder(key)
        if found is None:
            return None
        folder, meta = found
        arrays = {}
        for name in self.manifest["indexes"][key]["files"]:
            try:
                arrays[name[:-4]] = np.load(folder / name, mmap_mode="r", allow_pickle=False)
            except FileNotFoundError as exc:
                raise MissingFile(
                    f"store file {str(folder / name)!r} is missing ({exc}); if "
                    "another process is writing the store, call doc.refresh()"
                ) from exc
            except Exception as exc:  # a damaged header fails in many ways (even tokenize)
                raise StoreError(f"cannot read {folder / name}: {exc}; it is damaged") from exc
        return arrays, meta

    def committed(self, tag: str) -> dict[str, Any] | None:
        """The newest commit recorded under ``tag`` (re-reading the manifest), or None."""
        m = self.reload()
        return next((dict(t) for t in reversed(m.get("tags", [])) if t.get("tag") == tag), None)

    def nbytes(self) -> int:
        """Bytes of the files the manifest names."""
        total = 0
        for rel in self.referenced():
            with contextlib.suppress(OSError):
                total += (self.path / rel).stat().st_size
        return total

    def verify(self) -> list[str]:
        """Check every named file's size and checksum; returns the problems found (empty when
        the store is intact)."""
        problems = []
        m = self.manifest
        entries = [(seg["file"], seg) for seg in _segments_of(m)]
        entries += [
            (f"{idx['dir']}/{n}", f)
            for idx in m["indexes"].values()
            for n, f in idx["files"].items()
        ]
        for rel, entry in entries:
            try:
                self.check_file(rel, entry, full=True)
            except StoreError as exc:
                problems.append(str(exc))
        return problems


def _segments_of(m: dict) -> Iterator[dict]:
    yield from m["sources"]
    for g in m["groups"].values():
        yield from g["segments"]
    for v in m["vectors"].values():
        yield from v["segments"]
