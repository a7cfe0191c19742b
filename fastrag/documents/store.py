"""A store directory: one Arrow IPC file per node group, index files, and ``manifest.json``.

Writes are atomic at the level of the whole store. Every data file gets a fresh name (a
generation number), is written to a temporary file, fsynced and renamed; the manifest, which
names the files, is replaced last. A crash at any point leaves the previous manifest pointing at
the previous, intact files. Files no manifest names are removed after a successful commit.
Readers memory-map the files, so many processes can open one store read-only at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyarrow import ipc

from fastrag.errors import StoreError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: Path, write) -> None:
    """Write ``path`` atomically: ``write(fileobj)`` into a temp file, fsync, rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64]


class Store:
    """The on-disk side of a :class:`~fastrag.Document`; see the module docstring."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise StoreError(f"store path {str(self.path)!r} exists and is not a directory")
        self.path.mkdir(parents=True, exist_ok=True)
        self.manifest = self._read_manifest()

    # -- manifest ----------------------------------------------------------------------------
    def _read_manifest(self) -> dict[str, Any]:
        mpath = self.path / MANIFEST
        if not mpath.exists():
            return {"format_version": FORMAT_VERSION, "generation": 0, "sources": {},
                    "groups": {}, "indexes": {}, "deleted": []}
        try:
            manifest = json.loads(mpath.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read {mpath}: {exc}; the store is damaged") from exc
        version = manifest.get("format_version") if isinstance(manifest, dict) else None
        if version != FORMAT_VERSION:
            raise StoreError(
                f"store {str(self.path)!r} has format version {version!r}, but this fastrag "
                f"reads version {FORMAT_VERSION}; open it with the fastrag version that wrote it "
                "or point store= at a new directory (nothing was changed)"
            )
        for key in ("sources", "groups", "indexes"):
            manifest.setdefault(key, {})
        manifest.setdefault("deleted", [])
        return manifest

    def commit(self) -> None:
        """Replace the manifest (the commit point), then remove files it no longer names."""
        data = json.dumps(self.manifest, ensure_ascii=False, indent=1, sort_keys=True).encode()
        atomic_write_bytes(self.path / MANIFEST, lambda f: f.write(data))
        self._collect_garbage()

    def _referenced(self) -> set[str]:
        refs = {MANIFEST}
        for g in self.manifest["groups"].values():
            refs.add(g["file"])
        for idx in self.manifest["indexes"].values():
            refs.add(idx["dir"])
        return refs

    def _collect_garbage(self) -> None:
        refs = self._referenced()
        for sub in ("groups", "indexes"):
            folder = self.path / sub
            if not folder.is_dir():
                continue
            for entry in folder.iterdir():
                rel = f"{sub}/{entry.name}"
                if rel in refs or entry.name.startswith("."):
                    continue
                with contextlib.suppress(OSError):
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()

    @contextlib.contextmanager
    def transaction(self):
        """Group writes: on an exception, files written inside are removed and the manifest in
        memory goes back to the committed one, so nothing half-written stays behind."""
        before = set(self._files())
        try:
            yield self
        except BaseException:
            for rel in set(self._files()) - before:
                path = self.path / rel
                with contextlib.suppress(OSError):
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
            self.manifest = self._read_manifest()
            raise

    def _files(self) -> list[str]:
        out = []
        for sub in ("groups", "indexes"):
            folder = self.path / sub
            if folder.is_dir():
                out += [f"{sub}/{e.name}" for e in folder.iterdir()]
        return out

    def _next_generation(self) -> int:
        self.manifest["generation"] = int(self.manifest.get("generation", 0)) + 1
        return self.manifest["generation"]

    # -- tables ------------------------------------------------------------------------------
    def write_table(self, name: str, table: pa.Table) -> str:
        """Write a group table under a new file name; returns its store-relative path."""
        folder = self.path / "groups"
        folder.mkdir(exist_ok=True)
        rel = f"groups/{_safe(name)}.{self._next_generation()}.arrow"

        def write(f):
            with ipc.new_file(f, table.schema) as writer:
                writer.write_table(table, max_chunksize=65536)

        atomic_write_bytes(self.path / rel, write)
        return rel

    def read_table(self, rel: str) -> pa.Table:
        """Memory-map a table file written by :meth:`write_table`."""
        path = self.path / rel
        try:
            source = pa.memory_map(str(path), "r")
            return ipc.open_file(source).read_all()
        except (OSError, pa.ArrowInvalid) as exc:
            raise StoreError(f"cannot read {path}: {exc}; the store is damaged") from exc

    # -- index files (numpy arrays + JSON meta) ----------------------------------------------
    def write_arrays(self, key: str, arrays: dict[str, np.ndarray], meta: dict) -> None:
        """Persist one derived index as a folder of ``.npy`` files (memory-mappable)."""

        def write(folder: Path) -> None:
            for name, arr in arrays.items():
                np.save(folder / f"{name}.npy", np.ascontiguousarray(arr), allow_pickle=False)

        self.write_files(key, write, meta, arrays=sorted(arrays))

    def write_files(self, key: str, write, meta: dict, arrays: list[str] | None = None) -> None:
        """Persist an index that writes its own files: ``write(folder)`` fills a temp folder
        that is renamed into place, then recorded in the manifest."""
        folder = self.path / "indexes"
        folder.mkdir(exist_ok=True)
        rel = f"indexes/{_safe(key)}.{self._next_generation()}"
        tmp = Path(tempfile.mkdtemp(prefix=".idx.", dir=folder))
        try:
            write(tmp)
            for f in tmp.iterdir():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
            os.replace(tmp, self.path / rel)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _fsync_dir(folder)
        self.manifest["indexes"][key] = {"dir": rel, "arrays": arrays or [], "meta": meta}
        self.commit()

    def read_files(self, key: str) -> tuple[Path, dict] | None:
        entry = self.manifest["indexes"].get(key)
        return None if entry is None else (self.path / entry["dir"], entry["meta"])

    def read_arrays(self, key: str) -> tuple[dict[str, np.ndarray], dict] | None:
        """Memory-mapped arrays and meta of an index, or None when the store has none."""
        entry = self.manifest["indexes"].get(key)
        if entry is None:
            return None
        folder = self.path / entry["dir"]
        try:
            arrays = {n: np.load(folder / f"{n}.npy", mmap_mode="r") for n in entry["arrays"]}
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read index {key!r} in {folder}: {exc}") from exc
        return arrays, entry["meta"]

    def drop_indexes(self, prefix: str) -> None:
        for key in [k for k in self.manifest["indexes"] if k.startswith(prefix)]:
            del self.manifest["indexes"][key]

    def nbytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())
