"""File readers: one file in, ``(text, metadata)`` per root document out; a folder walk that
never fails on what it cannot read; a :class:`ReadReport` saying what happened to each file.

Readers are chosen by extension: ``.txt``/``.md`` (as is), ``.json`` (records: a string, an
object with a text field, or a list of them; any other JSON is flattened), ``.jsonl`` (one
record a line), ``.csv`` (one document a row), ``.html``/``.htm`` (visible text), ``.pdf``
(``[pdf]`` extra, pypdf: one document a page) and ``.docx`` (``[docx]`` extra, python-docx).
``register_reader`` adds readers globally, ``readers=`` per call; both override the built-ins.
Any other file is sniffed: what decodes as text (.rst, .py, .yaml, files without extension,
...) is read as plain text; binaries are skipped (counted in the report), or, named
explicitly with ``on_error="raise"``, a :class:`ReaderError`. Text is decoded by
:mod:`fastrag.documents.decoding` (BOMs, strict UTF-8, then charset-normalizer under checks);
what cannot be decoded with confidence is an error naming the file, never mangled text.

Every root document's metadata holds ``file_path`` (absolute), ``file_name``, ``file_type``
(extension without the dot), ``file_size`` (bytes), ``mtime`` and, for decoded text files,
``encoding``; records of multi-document files (.json lists, .jsonl, .csv) also carry ``row``
(0-based), JSON records ``json_path`` ("$", "$[3]"), JSONL records ``line`` (1-based), PDF
pages ``page`` (1-based), ``page_label`` and ``page_count``. ``metadata_fields=[...]`` keeps
only those fields of a record in its metadata (the others are dropped, not moved to the text).
"""

from __future__ import annotations

import csv
import fnmatch
import importlib
import io
import json
import logging
import os
import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

from fastrag.analysis.language import detect_text_language
from fastrag.documents.decoding import (
    SNIFF_BYTES,
    BinaryContentError,
    binary_kind,
    decode_bytes,
    decode_text,
    why_not_text,
)
from fastrag.documents.xmltext import XML_READERS, NoText
from fastrag.errors import ConfigError, MissingExtraError, ReaderError

__all__ = ["ReadEntry", "ReadReport", "decode_bytes", "iter_source_files", "read_file",
           "register_reader", "supported_extensions"]

logger = logging.getLogger(__name__)

ReaderResult = str | list[str] | list[tuple[str, dict]]
ReaderFn = Callable[[Path], ReaderResult]

_REGISTERED: dict[str, ReaderFn] = {}
_ON_ERROR = ("raise", "skip")
NO_EXT = "(none)"
FOLDER = "(folder)"
_STATUSES = ("read", "skipped", "failed")
# walk skips worth a warning: the user did not ask for them and may not know they are there
_NOTABLE = ("symlink loop", "FIFO", "socket", "device file", "dangling link", "unreadable entry",
            "symlinked folder")


# -- the report -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReadEntry:
    """What happened to one file (or folder) of a read.

    ``status`` is "read", "skipped" or "failed"; ``reason`` is short and countable ("binary",
    "hidden", "excluded", "not in required_exts", "fastrag store", "symlink loop", "FIFO",
    "empty file", ... for skips; "error" for failures); ``detail`` says more (the binary kind,
    the matching pattern, the error message); ``documents`` counts the root documents read,
    ``left_out`` the empty pages left out of a read file.
    """

    path: str
    ext: str
    status: str
    reason: str = ""
    detail: str = ""
    documents: int = 0
    left_out: int = 0


@dataclass
class ReadReport:
    """Per extension, the files read, skipped and failed, with reasons and paths.

    Pass one to :func:`iter_source_files` and :func:`read_file` (``report=``); both add to
    it. ``summary()`` is a short table, ``details()`` one line per file. Extensions are
    lower-case with the dot; ``"(none)"`` is a file without one, ``"(folder)"`` a folder
    skipped whole (hidden, excluded, a fastrag store, a symlinked folder).
    """

    entries: list[ReadEntry] = field(default_factory=list)

    def add(self, path: str | os.PathLike, status: str, reason: str = "", detail: str = "",
            *, documents: int = 0, left_out: int = 0, folder: bool = False) -> None:
        if status not in _STATUSES:
            raise ConfigError(f"status={status!r} is not one of {_STATUSES}")
        ext = FOLDER if folder else (Path(path).suffix.lower() or NO_EXT)
        self.entries.append(ReadEntry(str(path), ext, status, reason, detail, documents,
                                      left_out))

    @property
    def read(self) -> list[ReadEntry]:
        return [e for e in self.entries if e.status == "read"]

    @property
    def skipped(self) -> list[ReadEntry]:
        return [e for e in self.entries if e.status == "skipped"]

    @property
    def failed(self) -> list[ReadEntry]:
        return [e for e in self.entries if e.status == "failed"]

    def counts(self) -> dict[str, dict[str, int]]:
        """``{ext: {"read": n, "skipped": n, "failed": n, "documents": n}}``, sorted by ext."""
        out: dict[str, dict[str, int]] = {}
        for e in self.entries:
            c = out.setdefault(e.ext, dict.fromkeys((*_STATUSES, "documents"), 0))
            c[e.status] += 1
            c["documents"] += e.documents
        return dict(sorted(out.items()))

    def reasons(self) -> dict[str, dict[str, int]]:
        """``{ext: {reason: n}}`` of the skipped and failed entries (and of empty pages left
        out of read files, as ``"empty pages left out"``)."""
        out: dict[str, Counter] = {}
        for e in self.entries:
            c = out.setdefault(e.ext, Counter())
            if e.status != "read":
                c[e.reason] += 1
            elif e.left_out:
                c["empty pages left out"] += e.left_out
        return {ext: dict(sorted(c.items())) for ext, c in sorted(out.items()) if c}

    def summary(self) -> str:
        """A short table: one row per extension (read / skipped / failed / documents and the
        reasons), then the totals."""
        counts, reasons = self.counts(), self.reasons()
        rows = [["ext", "read", "skipped", "failed", "documents", "reasons"]]
        for ext, c in counts.items():
            why = ", ".join(f"{r} {n}" for r, n in reasons.get(ext, {}).items())
            rows.append([ext, *(str(c[k]) for k in (*_STATUSES, "documents")), why])
        rows.append(["total", *(str(sum(c[k] for c in counts.values()))
                                for k in (*_STATUSES, "documents")), ""])
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        return "\n".join(
            "  ".join([r[0].ljust(widths[0]), *(r[i].rjust(widths[i]) for i in range(1, 5)),
                       r[5]]).rstrip() for r in rows)

    def details(self) -> str:
        """One line per entry: status, extension, path, and the reason or document count."""
        lines = []
        for e in sorted(self.entries, key=lambda e: (_STATUSES.index(e.status), e.path)):
            if e.status == "read":
                tail = f"{e.documents} document{'s' * (e.documents != 1)}"
                if e.left_out:
                    tail += f", {e.left_out} empty page{'s' * (e.left_out != 1)} left out"
            else:
                tail = e.reason + (f": {e.detail}" if e.detail else "")
            lines.append(f"{e.status:<8} {e.ext:<9} {e.path}  ({tail})")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


# -- reading context --------------------------------------------------------------------------
@dataclass
class _Ctx:
    """One file being read by a built-in reader, and what the reader found out."""

    path: Path
    text_field: str
    metadata_fields: tuple[str, ...] | None
    encoding: str | None = None
    left_out: int = 0

    def text(self) -> str:
        text, self.encoding = decode_text(self.path.read_bytes(), self.path)
        return text

    def pick(self, fields: dict) -> dict:
        """The record fields that go into metadata: all, or only ``metadata_fields``."""
        if self.metadata_fields is None:
            return dict(fields)
        return {k: fields[k] for k in self.metadata_fields if k in fields}


# -- built-in readers: _Ctx -> list[(text, metadata)] -----------------------------------------
def _read_plain(ctx: _Ctx) -> list[tuple[str, dict]]:
    return [(ctx.text(), {})]


def _read_unknown(ctx: _Ctx) -> list[tuple[str, dict]]:
    """A file of an extension without a reader: plain text when it decodes, else binary."""
    with open(ctx.path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    kind = binary_kind(head)
    if kind is not None:
        raise BinaryContentError(f"file {str(ctx.path)!r} looks binary ({kind}), not text; "
                                 "register a reader for its extension to read it", kind)
    try:
        return _read_plain(ctx)
    except BinaryContentError:
        raise
    except ReaderError as exc:
        raise BinaryContentError(
            f"file {str(ctx.path)!r} has no reader for its extension and does not decode as "
            f"text ({exc}); register a reader for it, or re-save it as UTF-8",
            "undecodable") from exc


def _flatten(value: Any) -> list[str]:
    """``key: value`` lines of a JSON value; nested keys joined by dots, list items indexed
    (``a.b[0].c: 1``); strings as they are, other scalars as JSON (``true``, ``null``)."""
    lines: list[str] = []
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:  # iterative: JSON may nest deeper than Python's recursion limit
        key, v = stack.pop()
        if isinstance(v, dict) and v:
            stack.extend(reversed([(f"{key}.{k}" if key else str(k), x) for k, x in v.items()]))
        elif isinstance(v, list) and v:
            stack.extend(reversed([(f"{key}[{i}]", x) for i, x in enumerate(v)]))
        else:
            s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
            lines.append(f"{key}: {s}" if key else s)
    return lines


def _record(item: Any, ctx: _Ctx, where: str, json_path: str) -> tuple[str, dict]:
    field_ = ctx.text_field
    if isinstance(item, str):
        return item, {"json_path": json_path}
    if isinstance(item, dict) and field_ in item:
        text = item[field_]
        if not isinstance(text, str):
            raise ReaderError(f"{ctx.path}: {where} field {field_!r} must be a string, "
                              f"got {type(text).__name__}")
        meta = ctx.pick({k: v for k, v in item.items() if k != field_})
    else:  # any other JSON: flattened into the text; named fields copied to metadata
        text = "\n".join(_flatten(item))
        meta = ctx.pick(item) if isinstance(item, dict) and ctx.metadata_fields else {}
    return text, {**meta, "json_path": json_path}


def _replace_surrogates(obj: Any, count: list[int]) -> Any:
    """``obj`` with lone surrogates (from JSON escapes like ``"\\ud800"``) replaced by U+FFFD;
    ``count[0]`` counts the strings changed."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
            return obj
        except UnicodeEncodeError:
            count[0] += 1  # a UTF-16 round trip joins valid pairs, replaces lone ones
            return obj.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(obj, (list, tuple)):
        return type(obj)(_replace_surrogates(x, count) for x in obj)
    if isinstance(obj, dict):
        return {_replace_surrogates(k, count): _replace_surrogates(v, count)
                for k, v in obj.items()}
    return obj


def _clean_json(data: Any, path: Path) -> Any:
    count = [0]
    data = _replace_surrogates(data, count)
    if count[0]:
        warnings.warn(f"{path}: {count[0]} string(s) held lone surrogates (JSON escapes such as "
                      "'\\ud800' without their pair), which are not valid Unicode; each was "
                      "replaced by U+FFFD", stacklevel=4)
    return data


def _read_json(ctx: _Ctx) -> list[tuple[str, dict]]:
    try:
        data = _clean_json(json.loads(ctx.text()), ctx.path)
    except json.JSONDecodeError as exc:
        raise ReaderError(f"{ctx.path}: invalid JSON at line {exc.lineno} column {exc.colno}: "
                          f"{exc.msg}") from exc
    if isinstance(data, list):
        out = []
        for i, item in enumerate(data):
            text, meta = _record(item, ctx, f"item {i}", f"$[{i}]")
            out.append((text, {**meta, "row": i}))
        return out
    return [_record(data, ctx, "the document", "$")]


def _read_jsonl(ctx: _Ctx) -> list[tuple[str, dict]]:
    items = []
    for lineno, line in enumerate(ctx.text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ReaderError(f"{ctx.path}: line {lineno} is not valid JSON ({exc.msg} at "
                              f"column {exc.colno}); fix or remove the line") from exc
    out = []
    for lineno, item in _clean_json(items, ctx.path):
        row = len(out)
        text, meta = _record(item, ctx, f"line {lineno}", f"$[{row}]")
        out.append((text, {**meta, "row": row, "line": lineno}))
    return out


def _read_csv(ctx: _Ctx) -> list[tuple[str, dict]]:
    text = ctx.text()
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise ReaderError(f"{ctx.path}: invalid CSV ({exc})") from exc
    if not rows:
        return []
    header = [h.strip() for h in rows[0]]
    if any(len(row) > len(header) for row in rows[1:]):
        # the first line is no header (a title, or counts as in scikit-learn's data files):
        # one document of "cell, cell" lines, as LlamaIndex's CSVReader reads any CSV
        logger.info("%s: rows are wider than the first line, read as one table", ctx.path)
        lines = [", ".join(cell.strip() for cell in row) for row in rows]
        return [("\n".join(ln for ln in lines if ln.strip(", ")), {"csv_header": False})]
    out = []
    for row in rows[1:]:
        if not any(cell.strip() for cell in row):
            continue
        rec = dict(zip(header, row + [""] * (len(header) - len(row)), strict=False))
        if ctx.text_field in rec:
            body = rec.pop(ctx.text_field)
            meta = ctx.pick(rec)
        else:
            body = "\n".join(f"{k}: {v}" for k, v in rec.items())
            meta = ctx.pick(rec) if ctx.metadata_fields else {}
        out.append((body, {**meta, "row": len(out)}))
    return out


class _HTMLText(HTMLParser):
    """Visible text of an HTML page: no tags, script or style; blocks become lines."""

    _SKIP: ClassVar[set[str]] = {"script", "style", "template", "noscript", "head", "svg", "math"}
    _BLOCK: ClassVar[set[str]] = {"address", "article", "aside", "blockquote", "br", "dd",
              "details", "div", "dl",
              "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4",
              "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section",
              "summary", "table", "tbody", "thead", "tfoot", "tr", "ul", "caption", "body"}
    _CELL: ClassVar[set[str]] = {"td", "th"}
    _VOID: ClassVar[set[str]] = {"br", "hr", "img", "input", "meta", "link", "area", "base",
             "col", "embed",
             "source", "track", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0
        self.pre = 0
        self.title: list[str] = []
        self.in_title = False

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag == "title":
            self.in_title = True
        if tag == "body":  # a page that never closed <head>
            self.skip = 0
        if tag in self._SKIP and tag not in self._VOID:
            self.skip += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")
        elif tag in self._CELL:
            self.parts.append("\t")
        if tag == "pre":
            self.pre += 1

    def handle_startendtag(self, tag: str, attrs) -> None:
        if tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if tag in self._SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in self._BLOCK:
            self.parts.append("\n")
        if tag == "pre":
            self.pre = max(0, self.pre - 1)

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        if self.skip:
            return
        if self.pre:
            # keep pre's line breaks and spaces through the line clean-up
            self.parts.append(data.replace("\n", "\x00").replace(" ", "\x01"))
        else:
            self.parts.append(re.sub(r"[ \t\r\n\f]+", " ", data))

    def text(self) -> str:
        lines = []
        for seg in "".join(self.parts).split("\n"):
            seg = re.sub(r" {2,}", " ", seg).strip(" \t")
            if seg:
                lines.append(seg)
        return "\n".join(lines).replace("\x00", "\n").replace("\x01", " ")


def _read_html(ctx: _Ctx) -> list[tuple[str, dict]]:
    parser = _HTMLText()
    parser.feed(ctx.text())
    parser.close()
    meta = {}
    title = " ".join("".join(parser.title).split())
    if title:
        meta["title"] = title
    return [(parser.text(), meta)]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.messages.append(record.getMessage())
        except Exception:  # a malformed record must not break reading
            self.messages.append(str(record.msg))


@contextmanager
def _pypdf_noise_to_log(path: Path) -> Iterator[None]:
    """Collect what pypdf logs and warns while reading ``path`` and log it as one warning
    line on fastrag's logger (not pypdf's lines on the console)."""
    handler = _Collect()
    plog = logging.getLogger("pypdf")
    propagate = plog.propagate
    plog.addHandler(handler)
    plog.propagate = False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        plog.removeHandler(handler)
        plog.propagate = propagate
        msgs = handler.messages + [str(w.message) for w in caught]
        if msgs:
            uniq = list(dict.fromkeys(" ".join(m.split()) for m in msgs))
            logger.warning("pypdf: %d warning%s reading %s: %s%s", len(msgs),
                           "s" * (len(msgs) != 1), path, "; ".join(uniq[:3]),
                           " ..." if len(uniq) > 3 else "")


def _read_pdf(ctx: _Ctx) -> list[tuple[str, dict]]:
    pypdf = _import_extra(".pdf", ctx.path)
    out = []
    try:
        with _pypdf_noise_to_log(ctx.path):
            reader = pypdf.PdfReader(str(ctx.path))
            if reader.is_encrypted and not reader.decrypt(""):
                raise ReaderError(f"{ctx.path}: the PDF is encrypted with a password; "
                                  "decrypt it first")
            n = len(reader.pages)
            try:
                labels = list(reader.page_labels)
            except Exception:  # a damaged /PageLabels tree: number the pages instead
                labels = []
            if len(labels) != n:
                labels = [str(i + 1) for i in range(n)]
            for i, page in enumerate(reader.pages):
                text = page.extract_text() or ""
                if not text.strip():
                    ctx.left_out += 1
                    continue
                out.append((text, {"page": i + 1, "page_label": labels[i], "page_count": n}))
    except ReaderError:
        raise
    except Exception as exc:  # pypdf raises many types on broken files
        raise ReaderError(f"{ctx.path}: not a readable PDF ({type(exc).__name__}: {exc})") \
            from exc
    return out


def _read_docx(ctx: _Ctx) -> list[tuple[str, dict]]:
    docx = _import_extra(".docx", ctx.path)
    try:
        document = docx.Document(str(ctx.path))
        lines: list[str] = []
        for block in document.iter_inner_content():
            if hasattr(block, "rows"):  # a table: one line per row, cells tab-separated
                for row in block.rows:
                    lines.append("\t".join(cell.text for cell in row.cells))
            else:
                lines.append(block.text)
    except Exception as exc:  # python-docx raises many types on broken files
        raise ReaderError(f"{ctx.path}: not a readable .docx ({type(exc).__name__}: {exc})") \
            from exc
    return [("\n".join(lines), {})]


_BUILTIN: dict[str, Callable[[_Ctx], list[tuple[str, dict]]]] = {
    ".txt": _read_plain,
    ".md": _read_plain,
    ".json": _read_json,
    ".jsonl": _read_jsonl,
    ".csv": _read_csv,
    ".html": _read_html,
    ".htm": _read_html,
    ".pdf": _read_pdf,
    ".docx": _read_docx,
    **{ext: (lambda ctx, fn=fn: fn(ctx.path)) for ext, fn in XML_READERS.items()},
}
# a file of up to this many documents gets each one's language, a larger one its first ones'
LANGUAGE_PER_DOCUMENT = 64
_TEXT_READERS = {ext for ext, fn in _BUILTIN.items() if fn not in (_read_pdf, _read_docx)}


# -- optional packages ------------------------------------------------------------------------
_EXTRAS = {".pdf": ("pypdf", "pypdf", "pdf"), ".docx": ("docx", "python-docx", "docx")}


def _import_extra(ext: str, path: Path) -> Any:
    module = _EXTRAS[ext][0]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise _missing_extras({ext: [str(path)]}) from None


def _missing_extras(missing: dict[str, list[str]]) -> MissingExtraError:
    """One error for every extension whose optional package is missing."""
    missing = {ext: missing[ext] for ext in _EXTRAS if ext in missing}
    parts = []
    for ext, files in missing.items():
        _, package, extra = _EXTRAS[ext]
        n = len(files)
        parts.append(f"{n} {ext} file{'s' * (n != 1)} need{'s' * (n == 1)} the optional "
                     f"package {package!r} (extra [{extra}]), e.g. {files[0]!r}")
    extras = ",".join(_EXTRAS[ext][2] for ext in missing)
    return MissingExtraError(f"reading {'; '.join(parts)}; install "
                             f"{'them' if len(missing) > 1 else 'it'} with: pip install "
                             f"'fastrag-engine[{extras}]'")


def _check_extras(files: Iterable[Path], custom: dict[str, ReaderFn]) -> None:
    """Raise one :class:`MissingExtraError` naming every missing extra, before any file is
    read; extensions with a registered or per-call reader need none."""
    need: dict[str, list[str]] = {}
    for f in files:
        ext = f.suffix.lower()
        if ext in _EXTRAS and ext not in custom and ext not in _REGISTERED:
            need.setdefault(ext, []).append(str(f))
    missing = {}
    for ext, paths in need.items():
        try:
            importlib.import_module(_EXTRAS[ext][0])
        except ImportError:
            missing[ext] = paths
    if missing:
        raise _missing_extras(missing)


# -- registry ---------------------------------------------------------------------------------
def _check_ext(ext: object, what: str = "reader extension") -> str:
    if not isinstance(ext, str) or not re.fullmatch(r"\.[^./\\\s]+", ext):
        raise ConfigError(f"{what} must look like '.xyz', got {ext!r}")
    return ext.lower()


def _check_readers(readers: object) -> dict[str, ReaderFn]:
    if readers is None:
        return {}
    if not isinstance(readers, dict):
        raise ConfigError(f"readers must be a dict like {{'.xyz': fn}}, got "
                          f"{type(readers).__name__}")
    out = {}
    for ext, fn in readers.items():
        if not callable(fn):
            raise ConfigError(f"reader for {ext!r} must be callable (path -> str | list), "
                              f"got {type(fn).__name__}")
        out[_check_ext(ext)] = fn
    return out


def register_reader(ext: str, fn: ReaderFn) -> None:
    """Register ``fn(path) -> str | list[str] | list[(str, dict)]`` for ``ext`` (e.g. ".xyz"),
    for every later read; it overrides a built-in reader of the same extension."""
    if not callable(fn):
        raise ConfigError(f"reader for {ext!r} must be callable (path -> str | list), "
                          f"got {type(fn).__name__}")
    _REGISTERED[_check_ext(ext)] = fn


def supported_extensions(readers: dict | None = None) -> list[str]:
    """Extensions that have a dedicated reader (built-in, registered, or in ``readers``),
    sorted. Files of other extensions are read as plain text when they decode as text."""
    return sorted(set(_BUILTIN) | set(_REGISTERED) | set(_check_readers(readers)))


# -- walking ----------------------------------------------------------------------------------
def _check_str_list(value: object, name: str, example: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigError(f"{name} must be a list like {example}, got {value!r}")
    items = tuple(value)
    for item in items:
        if not isinstance(item, str) or not item:
            raise ConfigError(f"{name} must hold non-empty strings like {example}, got "
                              f"{item!r}")
    return items


def _check_walk_options(required_exts, exclude, recursive, exclude_hidden):
    exts = _check_str_list(required_exts, "required_exts", "['.md', '.pdf']")
    if exts is not None:
        exts = frozenset(_check_ext(e, "each of required_exts") for e in exts)
    patterns = _check_str_list(exclude, "exclude", "['*.log', '**/drafts/*']")
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
        if fnmatch.fnmatchcase(rel, p) or (p.startswith("**/")
                                           and fnmatch.fnmatchcase(rel, p[3:])):
            return pat
    return None


def _is_store(folder: Path) -> bool:
    """Whether ``folder`` is a fastrag store (its ``manifest.json`` has ``format_version``)."""
    manifest = folder / "manifest.json"
    try:
        if not manifest.is_file() or manifest.stat().st_size > (64 << 20):
            return False
        data = json.loads(manifest.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "format_version" in data


def _not_a_file(p: Path) -> str | None:
    """Why ``p`` cannot be read as a file (never opening it: a FIFO would block), or None."""
    import errno
    import stat

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
    if ext in _TEXT_READERS:
        return binary_kind(head)
    return why_not_text(head, truncated=size > len(head))


class _Walk:
    """One folder walk's options and the report it fills."""

    def __init__(self, custom: dict[str, ReaderFn], report: ReadReport, required_exts,
                 exclude, recursive: bool, exclude_hidden: bool) -> None:
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
        if reason in _NOTABLE:
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
        why = _not_a_file(f)
        if why is not None:  # "unreadable entry (Permission denied)": reason and detail
            reason, _, detail = why.partition(" (")
            return reason, detail.rstrip(")")
        size = f.stat().st_size
        if size == 0:
            return "empty file", ""
        if ext in self.custom or ext in _REGISTERED or ext in _EXTRAS:
            return None, ""
        try:
            kind = _sniff(f, size, ext)
        except OSError as exc:
            return "unreadable entry", str(exc.strerror)
        return ("binary", kind) if kind is not None else (None, "")


def iter_source_files(paths: str | os.PathLike | Iterable, *,
                      readers: dict | None = None,
                      required_exts: Sequence[str] | None = None,
                      exclude: Sequence[str] | None = None,
                      recursive: bool = True,
                      exclude_hidden: bool = True,
                      report: ReadReport | None = None) -> list[Path]:
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
    :class:`MissingExtraError`.
    """
    custom = _check_readers(readers)
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
    walk = _Walk(custom, report if report is not None else ReadReport(), exts, patterns,
                 recursive, exclude_hidden)
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
        elif _not_a_file(p) not in (None, "dangling link"):
            raise ReaderError(f"{str(p)!r} is a {_not_a_file(p)}, not a file fastrag can read; "
                              "pass regular files or directories")
        elif p.is_file():
            add(p)
        else:
            raise ReaderError(f"path {str(p)!r} does not exist; pass an existing file or "
                              "directory")
    if walk.notable:
        logger.warning("skipped %s while walking the folders", "; ".join(
            f"{len(v)} {why}{'s' * (len(v) > 1)} (e.g. {v[0]!r})"
            for why, v in sorted(walk.notable.items())))
    _check_extras(out, custom)
    return out


# -- reading ----------------------------------------------------------------------------------
def _normalize(result: object, path: Path) -> list[tuple[str, dict]]:
    if isinstance(result, str):
        return [(result, {})]
    if isinstance(result, list):
        out = []
        for i, item in enumerate(result):
            if isinstance(item, str):
                out.append((item, {}))
            elif (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                  and isinstance(item[1], dict)):
                out.append((item[0], dict(item[1])))
            else:
                raise ReaderError(f"reader for {path.suffix!r} returned item {i} of type "
                                  f"{type(item).__name__} for {str(path)!r}; a reader returns "
                                  "str, list[str] or list[(str, dict)]")
        return out
    raise ReaderError(f"reader for {path.suffix!r} returned {type(result).__name__} for "
                      f"{str(path)!r}; a reader returns str, list[str] or list[(str, dict)]")


def _say(path: Path, message: str) -> str:
    """``message``, prefixed with the path unless it already names it."""
    return message if str(path) in message else f"{str(path)!r}: {message}"


def read_file(path: str | os.PathLike, *, readers: dict | None = None, on_error: str = "raise",
              json_text_field: str = "text", metadata_fields: Sequence[str] | None = None,
              report: ReadReport | None = None) -> list[tuple[str, dict]]:
    """``(text, metadata)`` of each root document in the file at ``path``.

    ``json_text_field`` names the text field of JSON, JSONL and CSV records (the other fields
    become metadata; JSON without it is flattened into ``key: value`` lines);
    ``metadata_fields=[...]`` keeps only those record fields in metadata. A file of an
    extension without a reader is read as plain text when it decodes as text.

    ``on_error="raise"`` raises :class:`ReaderError` naming the file when it cannot be read,
    decoded or parsed, or is binary; ``"skip"`` logs one warning line and returns ``[]``.
    An empty file gives ``[]``. A missing optional package (pdf, docx) always raises
    :class:`MissingExtraError`. ``report`` records the outcome.
    """
    if on_error not in _ON_ERROR:
        raise ConfigError(f"on_error={on_error!r} is not one of {_ON_ERROR}")
    if not isinstance(json_text_field, str) or not json_text_field:
        raise ConfigError(f"json_text_field must be a non-empty field name, got "
                          f"{json_text_field!r}")
    fields = _check_str_list(metadata_fields, "metadata_fields", "['author', 'date']")
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"path must be a str or Path, got {type(path).__name__}")
    if report is not None and not isinstance(report, ReadReport):
        raise ConfigError(f"report must be a ReadReport, got {type(report).__name__}")
    report = report if report is not None else ReadReport()
    custom = _check_readers(readers)
    p = Path(path).expanduser()
    ext = p.suffix.lower()
    ctx = _Ctx(p, json_text_field, fields)
    fn = custom.get(ext) or _REGISTERED.get(ext)
    try:
        try:
            p = ctx.path = p.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop
            raise ReaderError(f"cannot read {str(p)!r}: {exc}") from exc
        if p.is_dir():
            raise ReaderError(f"{str(p)!r} is a directory; list its files with "
                              "iter_source_files()")
        why = _not_a_file(p)
        if why:
            raise ReaderError(f"{str(p)!r} is a {why}, not a regular file; it was not opened")
        st = p.stat()
        if st.st_size == 0:
            logger.info("skipping %s: empty file", p)
            report.add(p, "skipped", "empty file")
            return []
        if fn is not None:
            docs = _normalize(fn(p), p)
        else:
            docs = _BUILTIN.get(ext, _read_unknown)(ctx)
    except MissingExtraError:
        raise
    except NoText as exc:  # a drawing without words: left out, as an empty file is
        logger.info("skipping %s: no text (%s)", p, exc.kind)
        report.add(p, "skipped", "no text", exc.kind)
        return []
    except Exception as exc:  # every failure of one file is reported alike
        if isinstance(exc, ReaderError) and str(p) in str(exc):
            err = exc
        elif isinstance(exc, FileNotFoundError):
            err = ReaderError(f"file {str(p)!r} does not exist")
        else:
            err = ReaderError(f"cannot read {str(p)!r}: {type(exc).__name__}: {exc}")
        binary = isinstance(exc, BinaryContentError)
        if binary:
            report.add(p, "skipped", "binary", exc.kind)
        else:
            report.add(p, "failed", "error", str(err))
        if on_error == "skip":
            logger.warning("skipped %s", _say(p, str(err)))
            return []
        if err is exc:
            raise
        raise err from exc
    report.add(p, "read", documents=len(docs), left_out=ctx.left_out)
    base = {
        "file_path": str(p),
        "file_name": p.name,
        "file_type": ext.lstrip("."),
        "file_size": st.st_size,
        "mtime": st.st_mtime,
    }
    if ctx.encoding is not None:
        base["encoding"] = ctx.encoding
    # each document's language (a record's own "language" field wins); files of many records
    # (JSONL, CSV) get the language of their first records, which keeps ingest fast
    if len(docs) <= LANGUAGE_PER_DOCUMENT:
        langs = [detect_text_language(text) for text, _ in docs]
    else:
        langs = [detect_text_language(" ".join(t[:200] for t, _ in
                                               docs[:LANGUAGE_PER_DOCUMENT]))] * len(docs)
    return [(text, {**({"language": lang} if lang else {}), **meta, **base})
            for (text, meta), lang in zip(docs, langs, strict=True)]
