"""Where a store's sources are now: which files are missing or changed on disk, and which files
found under new paths are the store's own sources at a new location (a moved or copied folder).

A store owns what it holds: a file that went away is reported, never dropped, until the user
asks (``remove_missing=True``). Re-ingesting a folder from a new place re-links its sources by
their path relative to the folder and their content hash, so nothing is read twice.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastrag.documents.paths import short_list
from fastrag.documents.readers.walk import relative_key, resolved_roots
from fastrag.schema import dump_metadata


@dataclass
class SourceChanges:
    """What one read of the sources did, counted in files (texts are not counted)."""

    read: int = 0  # new files read
    changed: int = 0  # re-read: their bytes changed since they were ingested
    moved: int = 0  # the same bytes at a new path: re-linked, nothing re-read
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)  # removed on request
    missing: list[str] = field(default_factory=list)  # kept: their file is gone
    outside: list[str] = field(default_factory=list)  # kept: not under the paths read
    unread: list[str] = field(default_factory=list)  # not read: an optional package is missing

    def summary(self) -> str:
        """One line, e.g. ``read 1 file, removed 1, unchanged 1,788``."""
        parts = [f"read {self.read:,} new file{'s' * (self.read != 1)}"] if self.read else []
        for n, what in (
            (self.changed, "re-read {} changed"),
            (self.moved, "re-linked {} moved"),
            (len(self.removed), "removed {}"),
            (self.unchanged, "unchanged {}"),
            (len(self.missing), "kept {} missing on disk"),
            (len(self.outside), "kept {} not under the paths read"),
            (len(self.unread), "{} not read (an optional package is missing)"),
        ):
            if n:
                parts.append(what.format(f"{n:,}"))
        return ", ".join(parts) if parts else "no source files"


def source_status(sources: pa.Table) -> tuple[list[str], list[str]]:
    """``(missing, changed)``: keys of file sources whose file is gone (or not a regular file
    any more), and of those whose size or modification time differ from what was ingested."""
    if sources.num_rows == 0:
        return [], []
    files = sources.filter(pc.equal(sources.column("kind"), "file"))
    cols = files.select(["key", "size", "mtime_ns"]).to_pydict()
    missing, changed = [], []
    for key, size, mtime in zip(cols["key"], cols["size"], cols["mtime_ns"], strict=True):
        try:
            st = os.stat(key)
        except (OSError, ValueError):
            missing.append(key)
            continue
        if not stat.S_ISREG(st.st_mode):
            missing.append(key)
        elif st.st_size != size or st.st_mtime_ns != mtime:
            changed.append(key)
    return missing, changed


def match_moved(
    new: list[tuple[Path, str]],
    candidates: dict[str, dict],
    old_roots: Sequence[str],
    new_roots: Sequence[str],
    hash_of: Callable[[Path], str],
) -> dict[str, tuple[str, bool]]:
    """For files found at keys the store does not know (``new``: (path, key) pairs), the
    store's sources they are at a new location: ``{new key: (old key, same bytes)}``.

    ``candidates`` are the store's file sources not found where they were. A file matches,
    in this order: a candidate with the same relative path and the same content hash (moved
    or copied), one with the same content hash (renamed), or the only candidate with the same
    relative path (moved, then edited). Each candidate matches at most one file."""
    if not new or not candidates:
        return {}
    by_rel: dict[str, list[str]] = {}
    by_content: dict[tuple[int, str], list[str]] = {}
    for key, row in candidates.items():
        by_rel.setdefault(relative_key(key, old_roots), []).append(key)
        if row["hash"]:
            by_content.setdefault((row["size"], row["hash"]), []).append(key)
    sizes = {s for s, _ in by_content}
    used: set[str] = set()
    out: dict[str, tuple[str, bool]] = {}

    def content(path: Path) -> tuple[int, str] | None:
        try:
            size = path.stat().st_size
        except OSError:
            return None
        return (size, hash_of(path)) if size in sizes else None

    rels = {key: relative_key(key, new_roots) for _, key in new}
    for path, key in new:  # same relative path, same bytes
        same = [k for k in by_rel.get(rels[key], ()) if k not in used]
        c = content(path) if same else None
        hit = next(
            (k for k in same if c and (candidates[k]["size"], candidates[k]["hash"]) == c), None
        )
        if hit is not None:
            out[key] = (hit, True)
            used.add(hit)
    for path, key in new:  # same bytes elsewhere: renamed
        if key in out:
            continue
        c = content(path)
        hit = next((k for k in by_content.get(c, ()) if k not in used), None) if c else None
        if hit is not None:
            out[key] = (hit, True)
            used.add(hit)
    for _, key in new:  # same relative path, other bytes: edited at its new place
        if key in out:
            continue
        same = [k for k in by_rel.get(rels[key], ()) if k not in used]
        if len(same) == 1:
            out[key] = (same[0], False)
            used.add(same[0])
    return out


def other_corpus_message(
    store: str, have: list[str], want: list[str], matched: int, known: int
) -> str:
    """Why a store made from ``have`` is not re-read from ``want``, and what to do instead."""
    return (
        f"store {store!r} was built from {short_list(have)}, not {short_list(want)}, and "
        f"only {matched} of its {known} files were found there; to add these sources use "
        f"fastrag.Document(store={store!r}).add(paths) (CLI: fastrag ingest PATHS --store "
        f"{store} --add); to make them the store's only sources pass replace=True (CLI: "
        "--replace); to keep both stores, pick another store directory"
    )


def kept_message(store: str, changes: SourceChanges, want: list[str]) -> str:
    """The warning of an update that kept sources it did not read."""
    why = []
    if changes.missing:
        why.append(f"{len(changes.missing):,} missing on disk ({short_list(changes.missing)})")
    if changes.outside:
        why.append(
            f"{len(changes.outside):,} not under {short_list(want)} ({short_list(changes.outside)})"
        )
    n = len(changes.missing) + len(changes.outside)
    return (
        f"store {store!r} keeps {n:,} sources that were not read: {'; '.join(why)}; they "
        "are served as stored. To remove them pass remove_missing=True (CLI: fastrag "
        "ingest PATHS --store STORE --sync)"
    )


def status_message(store: str, missing: list[str], changed: list[str], inputs: list[str]) -> str:
    """The warning of an open that found source files gone or changed on disk."""
    parts = []
    if missing:
        parts.append(
            f"{len(missing):,} of its source files are missing ({short_list(missing)})"
            "; they are kept and served as stored (the store does not need them)"
        )
    if changed:
        parts.append(
            f"{len(changed):,} changed on disk since they were read (by size or time) "
            f"({short_list(changed)}); the store serves them as they were read"
        )
    made = f" (the store was made from {short_list(inputs)})" if inputs else ""
    return (
        f"store {store!r}: {'; '.join(parts)}. Moved sources: `fastrag ingest NEW_PATH "
        f"--store {store}` re-links them{made}; doc.refresh(reread=True) re-reads changed "
        "files; doc.refresh(remove_missing=True) (CLI: fastrag ingest PATHS --store "
        f"{store} --sync) removes missing ones"
    )


def source_keys(
    sources: pa.Table, paths: Sequence[str | os.PathLike], inputs: Sequence[str]
) -> list[str | None]:
    """The key (absolute path) of the file source each of ``paths`` names: as a path
    (absolute or from the working directory), else as metadata's ``file_path`` (relative to
    the folder read, one of ``inputs``) when exactly one source has it; None when none does."""
    files = set()
    if sources.num_rows:
        files = set(sources.filter(pc.equal(sources.column("kind"), "file"))["key"].to_pylist())
    by_rel: dict[str, list[str]] = {}
    out: list[str | None] = []
    for path in paths:
        key = str(Path(path).expanduser().resolve())
        if key in files:
            out.append(key)
            continue
        if not by_rel and files:
            roots = resolved_roots(inputs)
            for k in files:
                by_rel.setdefault(relative_key(k, roots), []).append(k)
        hits = by_rel.get(Path(path).as_posix(), [])
        out.append(hits[0] if len(hits) == 1 else None)
    return out


def user_paths(table: pa.Table, sources: pa.Table, inputs: Sequence[str]) -> pa.Table:
    """``table`` (a group table read from a store) with file paths as users see them.

    Stores written before issue 42 hold the absolute path in ``file_path``. A row whose
    ``file_path`` is one of ``sources``' file keys and that has no ``abs_path`` gets, in
    memory only, ``abs_path`` = that absolute path and ``file_path`` = the path relative to
    the folder read (``inputs``, the manifest's). Nothing is written: the store's files stay
    as they are until a writer replaces those rows."""
    if table.num_rows == 0 or sources.num_rows == 0:
        return table
    meta = table.column("metadata")
    old = pc.and_(
        pc.match_substring(meta, '"file_path"'), pc.invert(pc.match_substring(meta, '"abs_path"'))
    )
    rows = np.flatnonzero(np.asarray(old.fill_null(False), dtype=bool))
    if not len(rows):
        return table
    keys = set(sources.filter(pc.equal(sources.column("kind"), "file")).column("key").to_pylist())
    roots = resolved_roots(inputs)
    values = meta.to_pylist()
    for i in rows:
        d = json.loads(values[i])
        key = d.get("file_path")
        if isinstance(key, str) and key in keys:
            d.update(file_path=relative_key(key, roots), abs_path=key)
            values[i] = dump_metadata(d)
    col = table.schema.get_field_index("metadata")
    return table.set_column(col, table.schema.field(col), pa.array(values, meta.type))
