"""The reader registry and the folder walk that never fails on what it cannot read."""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from fastrag.documents.decoding import (
    SNIFF_BYTES,
    binary_kind,
    why_not_text,
)
from fastrag.documents.readers.formats import (
    BUILTIN_READERS,
    EXTRA_READERS,
    TEXT_READERS,
    check_extras,
)
from fastrag.documents.readers.registry import REGISTERED, check_ext, check_readers
from fastrag.documents.readers.report import NOTABLE_SKIPS, ReaderFn, ReadReport, logger
from fastrag.errors import ConfigError, ReaderError


# -- registry ---------------------------------------------------------------------------------
def supported_extensions(readers: dict | None = None) -> list[str]:
    """Extensions that have a dedicated reader (built-in, registered, or in ``readers``),
    sorted. Files of other extensions are read as plain text when they decode as text."""
    return sorted(set(BUILTIN_READERS) | set(REGISTERED) | set(check_readers(readers)))


# -- paths as users see them ------------------------------------------------------------------
def resolved_roots(paths: Sequence[str | os.PathLike]) -> list[str]:
    """Input paths as resolved absolute paths (what source keys are made of)."""
    out = []
    for p in paths:
        try:
            out.append(str(Path(p).expanduser().resolve()))
        except (OSError, RuntimeError, ValueError):
            out.append(str(Path(p).expanduser().absolute()))
    return out


def relative_key(key: str, roots: Sequence[str]) -> str:
    """``key`` relative to the deepest of ``roots`` holding it (POSIX separators); a file that
    is a root itself, or is under none, is its name."""
    best = None
    for root in roots:
        if key == root:
            return Path(key).name
        prefix = root.rstrip(os.sep) + os.sep
        if key.startswith(prefix) and (best is None or len(root) > len(best)):
            best = root
    if best is None:
        return Path(key).name
    return Path(key[len(best.rstrip(os.sep)) + 1 :]).as_posix()


# -- walking ----------------------------------------------------------------------------------
def check_str_list(value: object, name: str, example: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigError(f"{name} must be a list like {example}, got {value!r}")
    items = tuple(value)
    for item in items:
        if not isinstance(item, str) or not item:
            raise ConfigError(f"{name} must hold non-empty strings like {example}, got {item!r}")
    return items


def _check_walk_options(required_exts, exclude, recursive, exclude_hidden):
    exts = check_str_list(required_exts, "required_exts", "['.md', '.pdf']")
    if exts is not None:
        exts = frozenset(check_ext(e, "each of required_exts") for e in exts)
    patterns = check_str_list(exclude, "exclude", "['*.log', '**/drafts/*']")
    for name, flag in (("recursive", recursive), ("exclude_hidden", exclude_hidden)):
        if not isinstance(flag, bool):
            raise ConfigError(f"{name} must be True or False, got {flag!r}")
    return exts, patterns or ()


def _excluded(rel: str, patterns: tuple[str, ...], folder: bool) -> str | None:
    """The first pattern matching ``rel`` (a path relative to the walked folder, with "/"),
    fnmatch style ("*" also crosses "/"); "**/x" also matches "x" at the top, "x/" only
    folders."""
    for pat in patterns:
        p = pat.rstrip("/")
        if pat.endswith("/") and not folder:
            continue
        if fnmatch.fnmatchcase(rel, p) or (p.startswith("**/") and fnmatch.fnmatchcase(rel, p[3:])):
            return pat
    return None


def _is_store(folder: Path) -> bool:
    """Whether ``folder`` is a fastrag store (its ``manifest.json`` has ``format_version``)."""
    manifest = folder / "manifest.json"
    try:
        if not manifest.is_file() or manifest.stat().st_size > (64 << 20):
            return False
        data = json.loads(manifest.read_bytes())
    except (OSError, ValueError, RecursionError):  # nested too deep: not a store's manifest
        return False
    return isinstance(data, dict) and "format_version" in data


def not_a_file(p: Path) -> str | None:
    """Why ``p`` cannot be read as a file (never opening it: a FIFO would block), or None."""
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        return "dangling link" if os.path.islink(p) else None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop"
        return f"unreadable entry ({exc.strerror})"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device file"


def _sniff(f: Path, size: int, ext: str) -> str | None:
    """Why the walk leaves ``f`` out as binary, or None. Files for the text readers are
    checked for binary signatures and NUL bytes; files of unknown extensions must also
    decode as text (their first bytes)."""
    with open(f, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    if ext in TEXT_READERS:
        return binary_kind(head)
    return why_not_text(head, truncated=size > len(head))


class _Walk:
    """One folder walk's options and the report it fills."""

    def __init__(
        self,
        custom: dict[str, ReaderFn],
        report: ReadReport,
        required_exts,
        exclude,
        recursive: bool,
        exclude_hidden: bool,
    ) -> None:
        self.custom = custom
        self.report = report
        self.required_exts = required_exts
        self.exclude = exclude
        self.recursive = recursive
        self.exclude_hidden = exclude_hidden
        self.notable: dict[str, list[str]] = {}

    def skip(self, path: Path, reason: str, detail: str = "", folder: bool = False) -> None:
        logger.info("skipping %s: %s%s", path, reason, f" ({detail})" if detail else "")
        self.report.add(path, "skipped", reason, detail, folder=folder)
        if reason in NOTABLE_SKIPS:
            self.notable.setdefault(reason, []).append(str(path))

    def folder(self, top: Path) -> list[Path]:
        if _is_store(top):
            self.skip(top, "fastrag store", folder=True)
            return []
        found = []
        for root, dirs, files in os.walk(top):
            here = Path(root)
            rel_root = here.relative_to(top)
            keep = []
            for d in sorted(dirs):
                full, rel = here / d, (rel_root / d).as_posix()
                pat = _excluded(rel, self.exclude, folder=True)
                if self.exclude_hidden and d.startswith("."):
                    self.skip(full, "hidden", folder=True)
                elif pat is not None:
                    self.skip(full, "excluded", f"matches {pat!r}", folder=True)
                elif full.is_symlink():  # os.walk does not follow them
                    self.skip(full, "symlinked folder", "not followed", folder=True)
                elif _is_store(full):
                    self.skip(full, "fastrag store", folder=True)
                else:
                    keep.append(d)
            dirs[:] = keep if self.recursive else []
            for name in sorted(files):
                f = here / name
                why, detail = self.why_skip(f, (rel_root / name).as_posix())
                if why is None:
                    found.append(f)
                else:
                    self.skip(f, why, detail)
        return sorted(found, key=lambda f: f.relative_to(top).parts)

    def why_skip(self, f: Path, rel: str) -> tuple[str | None, str]:
        ext = f.suffix.lower()
        if self.exclude_hidden and f.name.startswith("."):
            return "hidden", ""
        pat = _excluded(rel, self.exclude, folder=False)
        if pat is not None:
            return "excluded", f"matches {pat!r}"
        if self.required_exts is not None and ext not in self.required_exts:
            return "not in required_exts", ""
        why = not_a_file(f)
        if why is not None:  # "unreadable entry (Permission denied)": reason and detail
            reason, _, detail = why.partition(" (")
            return reason, detail.rstrip(")")
        size = f.stat().st_size
        if size == 0:
            return "empty file", ""
        if ext in self.custom or ext in REGISTERED or ext in EXTRA_READERS:
            return None, ""
        try:
            kind = _sniff(f, size, ext)
        except OSError as exc:
            return "unreadable entry", str(exc.strerror)
        return ("binary", kind) if kind is not None else (None, "")


def iter_source_files(
    paths: str | os.PathLike | Iterable,
    *,
    readers: dict | None = None,
    required_exts: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    recursive: bool = True,
    exclude_hidden: bool = True,
    report: ReadReport | None = None,
    require_extras: bool = True,
) -> list[Path]:
    """The files to read under ``paths`` (files and directories), in a deterministic order.

    Directories are walked in sorted order (``recursive=False``: their top-level files
    only). A walk never fails on a file: it leaves out, and records in ``report`` as skipped,
    hidden files and folders (``exclude_hidden=True``), paths matching an ``exclude`` glob
    (fnmatch style on the path relative to the walked folder; ``**/`` also matches at the
    top), extensions not in ``required_exts`` (when given), fastrag store folders (a
    ``manifest.json`` with ``format_version``), binaries (binary signatures, NUL bytes, or for
    extensions without a reader, bytes that do not decode as text), empty files, FIFOs,
    sockets, devices, dangling links, symlink loops and symlinked folders (the last kinds
    also in one warning log line). Explicitly named files are always kept: ``read_file``
    decides. Each file appears once (first occurrence wins). Before returning, every missing
    optional package (.pdf: [pdf], .docx: [docx]) is reported in one
    :class:`MissingExtraError`; ``require_extras=False`` keeps those files in the list
    instead (:func:`read_file` then fails each, naming the extra to install).
    """
    custom = check_readers(readers)
    exts, patterns = _check_walk_options(required_exts, exclude, recursive, exclude_hidden)
    if report is not None and not isinstance(report, ReadReport):
        raise ConfigError(f"report must be a ReadReport, got {type(report).__name__}")
    if isinstance(paths, (str, os.PathLike)):
        items = [paths]
    elif isinstance(paths, Iterable) and not isinstance(paths, (bytes, dict)):
        items = list(paths)
    else:
        raise ConfigError(f"paths must be a path or a list of paths, got {type(paths).__name__}")
    if not items:
        raise ConfigError("paths is empty; pass a file, a directory, or a list of them")
    walk = _Walk(
        custom,
        report if report is not None else ReadReport(),
        exts,
        patterns,
        recursive,
        exclude_hidden,
    )
    out: list[Path] = []
    seen: set[Path] = set()

    def add(p: Path) -> None:
        rp = p.resolve()
        if rp not in seen:
            seen.add(rp)
            out.append(rp)

    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise ConfigError(f"paths must hold str or Path items, got {type(item).__name__}")
        p = Path(item).expanduser()
        if p.is_dir():
            for f in walk.folder(p):
                add(f)
        elif not_a_file(p) not in (None, "dangling link"):
            raise ReaderError(
                f"{str(p)!r} is a {not_a_file(p)}, not a file fastrag can read; "
                "pass regular files or directories"
            )
        elif p.is_file():
            add(p)
        else:
            raise ReaderError(f"path {str(p)!r} does not exist; pass an existing file or directory")
    if walk.notable:
        logger.warning(
            "skipped %s while walking the folders",
            "; ".join(
                f"{len(v)} {why}{'s' * (len(v) > 1)} (e.g. {v[0]!r})"
                for why, v in sorted(walk.notable.items())
            ),
        )
    if require_extras:
        check_extras(out, custom)
    return out
