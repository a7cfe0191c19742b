"""Sources: the files and texts a Document was made from, as one Arrow table.

One row per source (``key`` is the absolute file path or ``text:<root id>``), in document
order. ``roots`` are the root node ids the source produced, ``deleted`` the root ids deleted
from it with ``Document.delete`` (they stay deleted when the file is read again, until the file
is added again with ``Document.add``), ``changed_gen`` the root generation at which its rows last
changed (a group built at an older generation recomputes the nodes of those roots). ``added``
marks sources from ``Document.add``: re-opening a store with its path keeps them.

Planning a change returns a :class:`Change`; ``Document`` applies it to the newest committed
state (in memory, or in a store transaction).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from fastrag.documents.buffertext import text_column
from fastrag.documents.readers import ReadReport, iter_source_files, read_file
from fastrag.documents.readers.walk import relative_key, resolved_roots
from fastrag.documents.relink import SourceChanges, match_moved
from fastrag.errors import ConfigError, MissingExtraError
from fastrag.schema import GROUP_SCHEMA, dump_metadata, node_id

SOURCE_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # "file" | "text"
        pa.field("added", pa.bool_(), nullable=False),
        pa.field("hash", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("mtime_ns", pa.int64(), nullable=False),
        pa.field("roots", pa.list_(pa.string()), nullable=False),
        pa.field("deleted", pa.list_(pa.string()), nullable=False),
        pa.field("changed_gen", pa.int64(), nullable=False),
    ]
)


@dataclass
class Change:
    """New source rows and root rows, and what they replace. ``changed_gen`` of a new source
    is the generation being committed unless ``keep_gen`` holds its old value."""

    sources: list[dict] = field(default_factory=list)
    roots: list[tuple] = field(default_factory=list)
    drop_keys: set[str] = field(default_factory=set)
    drop_roots: set[str] = field(default_factory=set)
    next_id: int | None = None
    result: Any = None
    inputs: list[str] | None = None  # the paths a Document was made from (recorded)
    stats: SourceChanges = field(default_factory=SourceChanges)

    def __bool__(self) -> bool:
        return bool(
            self.sources
            or self.roots
            or self.drop_keys
            or self.drop_roots
            or self.next_id is not None
        )

    def source_table(self, gen: int) -> pa.Table:
        rows = [{**s, "changed_gen": s.get("changed_gen", gen)} for s in self.sources]
        return pa.Table.from_pylist(rows, schema=SOURCE_SCHEMA)

    def root_table(self) -> pa.Table:
        return rows_to_table(self.roots, "root")


def rows_to_table(rows: list[tuple], group: str) -> pa.Table:
    """Node rows ``(id, doc_id, parent_id, text, start, end, metadata)`` as a group table."""
    if not rows:
        return GROUP_SCHEMA.empty_table()
    cols: list = [list(c) for c in zip(*rows, strict=True)]
    cols[3] = text_column(cols[3])
    try:
        return pa.table(dict(zip(GROUP_SCHEMA.names, cols, strict=True)), schema=GROUP_SCHEMA)
    except (pa.ArrowException, UnicodeError) as exc:
        bad = next((r[0] for r in rows if not _is_utf8(r[3]) or not _is_utf8(r[6])), None)
        raise ConfigError(
            f"nodes of group {group!r} cannot be stored ({type(exc).__name__}: {exc})"
            + (
                f"; node {bad!r} has text that is not valid Unicode (a lone surrogate such as "
                "'\\ud800'): clean it, e.g. text.encode('utf-8', 'replace').decode()"
                if bad
                else ""
            )
        ) from exc


def _is_utf8(s: Any) -> bool:
    try:
        str(s).encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def text_hash(text: str, meta_json: str) -> str:
    return hashlib.blake2b(
        (text + meta_json).encode("utf-8", "surrogatepass"), digest_size=16
    ).hexdigest()


def hash_file(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _source(
    key, kind, *, added=False, hash="", size=0, mtime_ns=0, roots=(), deleted=(), changed_gen=None
) -> dict:
    out = {
        "key": key,
        "kind": kind,
        "added": added,
        "hash": hash,
        "size": size,
        "mtime_ns": mtime_ns,
        "roots": list(roots),
        "deleted": list(deleted),
    }
    if changed_gen is not None:
        out["changed_gen"] = changed_gen
    return out


def check_texts(texts, metadatas, ids):
    """Validated ``(texts, metadatas, ids)`` lists for ``from_texts`` / ``add``."""
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise ConfigError("texts must be a list of strings")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ConfigError(f"texts[{i}] is {type(t).__name__}, expected str")
        if not _is_utf8(t):
            raise ConfigError(
                f"texts[{i}] contains a lone surrogate (e.g. '\\ud800'), which is "
                "not valid Unicode; clean it first, e.g. "
                "text.encode('utf-8', 'replace').decode()"
            )
    if metadatas is not None:
        metadatas = list(metadatas)
        if len(metadatas) != len(texts):
            raise ConfigError(
                f"got {len(metadatas)} metadatas for {len(texts)} texts; pass one dict per text"
            )
        for i, m in enumerate(metadatas):
            if not isinstance(m, Mapping):
                raise ConfigError(f"metadatas[{i}] is {type(m).__name__}, expected dict")
    if ids is not None:
        ids = [str(x) for x in ids]
        if len(ids) != len(texts):
            raise ConfigError(f"got {len(ids)} ids for {len(texts)} texts; pass one id per text")
        if len(set(ids)) != len(ids):
            raise ConfigError("ids must be unique")
    return texts, metadatas, ids


class SourceView:
    """Vectorized lookups over a sources table."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def by_key(self, kinds: tuple[str, ...] = ("file", "text")) -> dict[str, dict]:
        """Rows of the sources of ``kinds``, by key."""
        t = self.table
        if t.num_rows == 0:
            return {}
        if len(kinds) == 1:
            t = t.filter(pc.equal(t.column("kind"), kinds[0]))
        return {r["key"]: r for r in t.to_pylist()}

    def files(self) -> dict[str, dict]:
        return self.by_key(("file",))

    def with_keys(self, keys: set[str]) -> dict[str, dict]:
        t = self.table
        if not keys or t.num_rows == 0:
            return {}
        t = t.filter(pc.is_in(t.column("key"), value_set=pa.array(sorted(keys), pa.string())))
        return {r["key"]: r for r in t.to_pylist()}

    def holding(self, roots: set[str]) -> list[dict]:
        """Rows of the sources that hold any of ``roots``."""
        t = self.table
        if not roots or t.num_rows == 0:
            return []
        flat = pc.list_flatten(t.column("roots"))
        parent = np.asarray(pc.list_parent_indices(t.column("roots")))
        hit = np.asarray(pc.is_in(flat, value_set=pa.array(sorted(roots), pa.string())), dtype=bool)
        return t.take(pa.array(np.unique(parent[hit]))).to_pylist()


class Planner:
    """Turns files and texts into a :class:`Change` against a committed sources table."""

    def __init__(
        self,
        *,
        readers: dict | None,
        on_error: str,
        json_text_field: str,
        global_metadata: dict,
        hash_files: bool,
        metadata_fields: Sequence[str] | None = None,
        required_exts: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
        recursive: bool = True,
        exclude_hidden: bool = True,
        show_progress: bool = False,
    ) -> None:
        self.readers = readers
        self.on_error = on_error
        self.json_text_field = json_text_field
        self.metadata_fields = metadata_fields
        self.walk_options = {
            "required_exts": required_exts,
            "exclude": exclude,
            "recursive": recursive,
            "exclude_hidden": exclude_hidden,
        }
        self.global_metadata = global_metadata
        self.hash_files = hash_files
        self.show_progress = show_progress
        self.report = ReadReport()  # what the last plan of files read, skipped and failed
        self.roots: list[str] = []  # resolved folders that file_path is relative to
        self._hashes: dict[str, str] = {}  # content hashes of the files of one plan

    # -- files -------------------------------------------------------------------------------
    def file_rows(self, path: Path, key: str, deleted: Sequence[str] = ()) -> list[tuple]:
        records = read_file(
            path,
            readers=self.readers,
            on_error=self.on_error,
            json_text_field=self.json_text_field,
            metadata_fields=self.metadata_fields,
            report=self.report,
            relative_to=self.roots,
            long_texts=True,  # a long log stays its bytes until its Arrow column shares them
        )
        gone = set(deleted)
        rows = []
        for i, (text, meta) in enumerate(records):
            rid = node_id("file", key, i)
            if rid not in gone:
                rows.append(
                    (
                        rid,
                        rid,
                        None,
                        text,
                        None,
                        None,
                        dump_metadata({**self.global_metadata, **meta}),
                    )
                )
        return rows

    def _hash(self, path: Path) -> str:
        key = str(path)
        if key not in self._hashes:
            self._hashes[key] = hash_file(path)
        return self._hashes[key]

    def _plan_file(self, change: Change, file: Path, old: dict | None, added: bool) -> None:
        """Add ``file`` to ``change`` unless it is unchanged since ``old``."""
        st = file.stat()
        key = str(file.resolve())
        deleted = old["deleted"] if old is not None and not added else []
        here = old is not None and not added and old["key"] == key
        if here and old["size"] == st.st_size and old["mtime_ns"] == st.st_mtime_ns:
            change.stats.unchanged += 1
            return
        h = self._hash(file) if self.hash_files else ""
        if here and h and old["hash"] == h:  # touched, same bytes
            change.stats.unchanged += 1
            change.drop_keys.add(key)
            change.sources.append(
                _source(
                    key,
                    "file",
                    added=old["added"],
                    hash=h,
                    size=st.st_size,
                    mtime_ns=st.st_mtime_ns,
                    roots=old["roots"],
                    deleted=deleted,
                    changed_gen=old["changed_gen"],
                )
            )
            return
        try:
            rows = self.file_rows(file, key, deleted)
        except MissingExtraError:  # in the read report with the install command; what the
            change.stats.unread.append(key)  # store holds of the file is kept as it was
            return
        if old is not None:
            change.stats.changed += 1
            change.drop_keys.add(old["key"])
            change.drop_roots.update(old["roots"])
        else:
            change.stats.read += 1
        change.sources.append(
            _source(
                key,
                "file",
                added=added or bool(old and old["added"]),
                hash=h,
                size=st.st_size,
                mtime_ns=st.st_mtime_ns,
                roots=[r[0] for r in rows],
                deleted=deleted,
            )
        )
        change.roots += rows

    def _plan_move(self, change: Change, file: Path, old: dict, root: pa.Table) -> None:
        """Re-link source ``old`` to ``file`` (the same bytes at a new path): its root rows keep
        their ids, texts and generation; only the path in their metadata changes."""
        st = file.stat()
        key = str(file.resolve())
        change.stats.moved += 1
        change.drop_keys.add(old["key"])
        change.drop_roots.update(old["roots"])
        change.sources.append(
            _source(
                key,
                "file",
                added=old["added"],
                hash=old["hash"],
                size=st.st_size,
                mtime_ns=st.st_mtime_ns,
                roots=old["roots"],
                deleted=old["deleted"],
                changed_gen=old["changed_gen"],
            )
        )
        if not old["roots"] or root.num_rows == 0:
            return
        rows = root.filter(
            pc.is_in(root.column("id"), value_set=pa.array(old["roots"], pa.string()))
        )
        relinked = {"file_name": file.name, "mtime": st.st_mtime}
        for r in rows.to_pylist():
            meta = json.loads(r["metadata"]) if r["metadata"] else {}
            meta.update({k: v for k, v in relinked.items() if k in meta})
            if "file_path" in meta:
                meta.update(file_path=relative_key(key, self.roots), abs_path=key)
            change.roots.append(
                (
                    r["id"],
                    r["doc_id"],
                    r["parent_id"],
                    r["text"],
                    r["start"],
                    r["end"],
                    dump_metadata(meta),
                )
            )

    def plan_paths(
        self,
        paths,
        committed: pa.Table,
        root: pa.Table,
        *,
        old_inputs: list[str] | None = None,
        replace: bool = False,
        remove_missing: bool = False,
        check: Callable[[int, int], None] | None = None,
    ) -> Change:
        """Sources read from ``paths``: new files are read, changed ones re-read, files found
        at a new path with the store's bytes re-linked (``old_inputs``: the paths the store was
        made from). The store's other sources are kept (counted as missing, or as not under
        ``paths``) unless ``remove_missing`` (drop the file sources not found) or ``replace``
        (keep only what ``paths`` hold, and texts added with ``Document.add``).
        ``check(matched, known)`` runs before any file is read: how many of the store's
        ``known`` file sources (not added with ``Document.add``) were found again."""
        view = SourceView(committed)
        old_files = view.files()
        change = Change()
        self.report = ReadReport()
        self._hashes = {}
        self.roots = resolved_roots(_as_list(paths))
        found = list(
            iter_source_files(
                paths,
                readers=self.readers,
                report=self.report,
                require_extras=False,
                **self.walk_options,
            )
        )
        found_keys = {str(f.resolve()) for f in found}
        found += [
            Path(k)
            for k, r in old_files.items()
            if r["added"] and k not in found_keys and Path(k).is_file()
        ]
        known, new, seen = [], [], set()
        for f in found:
            key = str(f.resolve())
            if key not in seen:
                seen.add(key)
                (known if key in old_files else new).append((f, key))
        candidates = {k: r for k, r in old_files.items() if k not in seen and not r["added"]}
        moves = (
            {}
            if replace or not self.hash_files
            else match_moved(
                new,
                candidates,
                resolved_roots(old_inputs or []),
                self.roots,
                self._hash,
            )
        )
        if check is not None:
            n_known = sum(1 for r in old_files.values() if not r["added"])
            check(sum(1 for _, k in known if not old_files[k]["added"]) + len(moves), n_known)
        todo = known + new
        if self.show_progress:
            todo = tqdm(todo, desc="reading files", unit="file", leave=False)
        for f, key in todo:
            if key in old_files:
                self._plan_file(change, f, old_files[key], added=False)
            elif key in moves and moves[key][1]:
                self._plan_move(change, f, old_files[moves[key][0]], root)
            else:
                old = old_files[moves[key][0]] if key in moves else None
                self._plan_file(change, f, old, added=False)
        relinked = {k for k, _ in moves.values()}
        for key, row in old_files.items():
            if key in seen or key in relinked:
                continue
            gone = not Path(key).is_file()
            if replace or (remove_missing and (gone or not row["added"])):
                change.stats.removed.append(key)
                change.drop_keys.add(key)
                change.drop_roots.update(row["roots"])
            elif gone:
                change.stats.missing.append(key)
            elif not row["added"]:
                change.stats.outside.append(key)
        if replace:  # a Document of files keeps added texts only
            for key, row in view.by_key(("text",)).items():
                if not row["added"]:
                    change.drop_keys.add(key)
                    change.drop_roots.update(row["roots"])
        return change

    def plan_reread(
        self, committed: pa.Table, *, remove_missing: bool = False, roots: Sequence[str] = ()
    ) -> Change:
        """Re-read the file sources that changed on disk; with ``remove_missing``, remove
        those whose file is gone (else they are kept and counted as missing). ``roots``: the
        folders they were read from (``file_path`` is relative to them)."""
        change = Change()
        self.report = ReadReport()
        self._hashes = {}
        self.roots = resolved_roots(roots)
        for key, row in SourceView(committed).files().items():
            path = Path(key)
            if path.is_file():
                self._plan_file(change, path, row, added=False)
            elif remove_missing:
                change.stats.removed.append(key)
                change.drop_keys.add(key)
                change.drop_roots.update(row["roots"])
            else:
                change.stats.missing.append(key)
        return change

    def add_files(
        self, files: list[Path], committed: pa.Table, roots: Sequence[str] = ()
    ) -> Change:
        """New sources for files and folders added with ``Document.add``; ``roots``: the
        Document's folders (``file_path`` is relative to the deepest of them and the folders
        among ``files``; a file under none is its name)."""
        old_files = SourceView(committed).files()
        change = Change()
        self.report = ReadReport()
        self.roots = resolved_roots([*roots, *(f for f in files if Path(f).is_dir())])
        found = iter_source_files(
            files, readers=self.readers, report=self.report, require_extras=False
        )
        for f in found:
            self._plan_file(change, f, old_files.get(str(f.resolve())), added=True)
        change.result = [r[0] for r in change.roots]
        return change

    # -- texts -------------------------------------------------------------------------------
    def _text_row(self, rid: str, text: str, meta: Mapping | None, added: bool):
        meta_json = dump_metadata({**self.global_metadata, **(meta or {})})
        src = _source(
            f"text:{rid}", "text", added=added, hash=text_hash(text, meta_json), roots=[rid]
        )
        return src, (rid, rid, None, text, None, None, meta_json)

    def plan_texts(self, texts, metadatas, ids, committed: pa.Table) -> Change:
        """The sources of ``from_texts``: exactly these texts (plus texts added later with
        ``Document.add``); unchanged ones are reused, deleted ones stay deleted."""
        view = SourceView(committed)
        old = view.by_key(("text",))
        change = Change()
        seen = set()
        for i, text in enumerate(texts):
            rid = ids[i] if ids is not None else node_id("text", i, text)
            src, row = self._text_row(rid, text, metadatas[i] if metadatas else None, False)
            seen.add(src["key"])
            prev = old.get(src["key"])
            if prev is not None and (prev["hash"] == src["hash"] or not prev["roots"]):
                continue  # unchanged, or deleted (stays deleted)
            if prev is not None:
                change.drop_keys.add(src["key"])
                change.drop_roots.update(prev["roots"])
            change.sources.append(src)
            change.roots.append(row)
        for key, row in old.items():
            if key not in seen and not row["added"]:
                change.drop_keys.add(key)
                change.drop_roots.update(row["roots"])
        for key, row in view.files().items():
            if not row["added"]:
                change.drop_keys.add(key)
                change.drop_roots.update(row["roots"])
        if committed.num_rows == 0:
            change.next_id = 0
        change.inputs = []
        return change

    def add_texts(self, texts, metadatas, next_id: int) -> Change:
        """New sources for texts added with ``Document.add``; ids come from a counter that is
        never reused, so they cannot collide with earlier or deleted ones."""
        change = Change(next_id=next_id + len(texts))
        for i, text in enumerate(texts):
            rid = node_id("added", next_id + i, text)
            src, row = self._text_row(rid, text, metadatas[i] if metadatas else None, True)
            change.sources.append(src)
            change.roots.append(row)
        change.result = [r[0] for r in change.roots]
        return change

    # -- delete ------------------------------------------------------------------------------
    @staticmethod
    def delete(doc_ids: list[str], committed: pa.Table, root_ids: Callable[[set], set]) -> Change:
        """Remove root documents (root ids or source file paths); their ids are remembered in
        their source's ``deleted`` list."""
        view = SourceView(committed)
        paths = view.with_keys({str(Path(d).resolve()) for d in doc_ids})
        wanted: set[str] = set()
        for d in doc_ids:
            src = paths.get(str(Path(d).resolve()))
            wanted.update(src["roots"] if src else [str(d)])
        present = root_ids(wanted)
        unknown = wanted - present
        if unknown:
            raise ConfigError(
                f"unknown doc ids {sorted(unknown)[:5]}; use root node ids "
                "(doc.group('root').ids) or source file paths"
            )
        change = Change(drop_roots=present, result=len(present))
        for row in view.holding(present):
            hit = present.intersection(row["roots"])
            change.drop_keys.add(row["key"])
            change.sources.append(
                {
                    **row,
                    "roots": [r for r in row["roots"] if r not in hit],
                    "deleted": sorted(set(row["deleted"]) | hit),
                }
            )
        return change


def _as_list(paths: Any) -> list[str]:
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    return [os.fspath(p) for p in items]


def apply_sources(table: pa.Table, change: Change, gen: int) -> pa.Table:
    """The sources table after ``change`` (in memory)."""
    if change.drop_keys and table.num_rows:
        keep = pc.invert(
            pc.is_in(table.column("key"), value_set=pa.array(sorted(change.drop_keys), pa.string()))
        )
        table = table.filter(keep)
    if change.sources:
        table = pa.concat_tables([table, change.source_table(gen)])
    return table


def drop_mask(column: str, values: set[str]) -> Callable[[pa.Table], Any]:
    """A segment filter marking rows whose ``column`` is in ``values``."""
    value_set = pa.array(sorted(values), pa.string())

    def mask(table: pa.Table):
        if not values or table.num_rows == 0:
            return None
        return np.asarray(pc.is_in(table.column(column), value_set=value_set), dtype=bool)

    return mask
