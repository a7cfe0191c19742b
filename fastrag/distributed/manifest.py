"""A sharded index on disk: the ``shards.json`` commit point, the writers' lock, and the removal
of what the manifest no longer names.

Layout::

    shards.json        the commit point: the group, similarity and parameters, and the
                       segments in global node order (each a fastrag store directory)
    seg-000001/ ...    one fastrag store per segment
    .lock              the writers' OS file lock
    .tmp-*             segments being built (renamed into place, or removed)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from fastrag.documents.storeio import atomic_write_bytes
from fastrag.errors import StoreError, StoreLockTimeout

FORMAT = "fastrag.shards/1"
MANIFEST = "shards.json"
LOCK = ".lock"
TMP_PREFIX = ".tmp-"


def is_sharded(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a sharded index directory (it holds ``shards.json``)."""
    return (Path(path) / MANIFEST).is_file()


def read_manifest(root: Path) -> dict[str, Any]:
    """The committed manifest of the sharded index at ``root``; StoreError when it cannot be
    read or has another format."""
    try:
        m = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read {root / MANIFEST}: {exc}") from exc
    if m.get("format") != FORMAT:
        raise StoreError(
            f"{root / MANIFEST} has format {m.get('format')!r}, this fastrag reads {FORMAT!r}"
        )
    return m


def write_manifest(root: Path, manifest: dict[str, Any]) -> None:
    """Commit ``manifest`` (an atomic replace of ``shards.json``); call with the lock held."""
    data = json.dumps(manifest, ensure_ascii=False, indent=1).encode()
    atomic_write_bytes(root / MANIFEST, lambda f: f.write(data))


def new_segment_name(manifest: dict[str, Any]) -> str:
    """The next segment directory name (``seg-000001``, ...); advances ``next_segment``."""
    name = f"seg-{manifest['next_segment']:06d}"
    manifest["next_segment"] += 1
    return name


@contextlib.contextmanager
def locked(root: Path, timeout: float = -1) -> Iterator[None]:
    """Hold the writers' lock of ``root``; StoreLockTimeout after ``timeout`` seconds
    (-1: wait as long as it takes)."""
    lock = FileLock(str(root / LOCK), timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise StoreLockTimeout(
            f"another writer holds {root / LOCK} for more than lock_timeout={timeout} s"
        ) from None
    try:
        yield
    finally:
        lock.release()


def collect_garbage(root: Path, manifest: dict[str, Any]) -> list[str]:
    """Remove segment folders (and temp folders) the manifest does not name; call with the
    lock held. Open readers keep their memory-mapped files (POSIX)."""
    named = {e["dir"] for e in manifest["segments"]}
    removed = []
    for entry in root.iterdir():
        if entry.name in (MANIFEST, LOCK) or entry.name in named:
            continue
        if entry.is_dir() and (entry.name.startswith("seg-") or entry.name.startswith(TMP_PREFIX)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
        elif entry.name.startswith(TMP_PREFIX):
            with contextlib.suppress(OSError):
                entry.unlink()
            removed.append(entry.name)
    return removed
