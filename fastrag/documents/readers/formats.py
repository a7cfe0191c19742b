"""The built-in readers by format (text, JSON/JSONL, CSV, HTML, PDF, DOCX, XML assets):
``ReadContext -> [(text, metadata)]``, and the optional packages they need."""

from __future__ import annotations

import csv
import importlib
import io
import json
import logging
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

from fastrag.documents.buffertext import LONG_TEXT
from fastrag.documents.decoding import (
    SNIFF_BYTES,
    BinaryContentError,
    binary_kind,
    decode_text,
    plain_utf8,
)
from fastrag.documents.inflate import InflateBudget, check_zip, pypdf_budget
from fastrag.documents.readers.registry import REGISTERED
from fastrag.documents.readers.report import ReaderFn, logger
from fastrag.documents.storecheck import MAX_JSON_DEPTH, json_too_deep
from fastrag.documents.xmltext import XML_READERS
from fastrag.errors import MissingExtraError, ReaderError
from fastrag.transforms.longtext import BufferText


# -- reading context --------------------------------------------------------------------------
@dataclass
class ReadContext:
    """One file being read by a built-in reader, and what the reader found out."""

    path: Path
    text_field: str
    metadata_fields: tuple[str, ...] | None
    encoding: str | None = None
    left_out: int = 0
    long_texts: bool = False  # a long plain UTF-8 file may come as a BufferText of its bytes

    def text(self) -> str:
        text, self.encoding = decode_text(self.path.read_bytes(), self.path)
        return text

    def plain_text(self) -> str | BufferText:
        """The file's text; with ``long_texts``, a UTF-8 file of :data:`LONG_TEXT` bytes or
        more as a :class:`BufferText` of its bytes (never decoded whole)."""
        data = self.path.read_bytes()
        if self.long_texts and LONG_TEXT <= len(data) < 1 << 31 and plain_utf8(data):
            self.encoding = "utf-8"
            return BufferText(memoryview(data))
        text, self.encoding = decode_text(data, self.path)
        return text

    def pick(self, fields: dict) -> dict:
        """The record fields that go into metadata: all, or only ``metadata_fields``."""
        if self.metadata_fields is None:
            return dict(fields)
        return {k: fields[k] for k in self.metadata_fields if k in fields}


# -- built-in readers: ReadContext -> list[(text, metadata)] ---------------------------------
def _read_plain(ctx: ReadContext) -> list[tuple[str | BufferText, dict]]:
    return [(ctx.plain_text(), {})]


def read_unknown(ctx: ReadContext) -> list[tuple[str, dict]]:
    """A file of an extension without a reader: plain text when it decodes, else binary."""
    with open(ctx.path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    kind = binary_kind(head)
    if kind is not None:
        raise BinaryContentError(
            f"file {str(ctx.path)!r} looks binary ({kind}), not text; "
            "register a reader for its extension to read it",
            kind,
        )
    try:
        return _read_plain(ctx)
    except BinaryContentError:
        raise
    except ReaderError as exc:
        raise BinaryContentError(
            f"file {str(ctx.path)!r} has no reader for its extension and does not decode as "
            f"text ({exc}); register a reader for it, or re-save it as UTF-8",
            "undecodable",
        ) from exc


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


def _record(item: Any, ctx: ReadContext, where: str, json_path: str) -> tuple[str, dict]:
    field_ = ctx.text_field
    if isinstance(item, str):
        return item, {"json_path": json_path}
    if isinstance(item, dict) and field_ in item:
        text = item[field_]
        if not isinstance(text, str):
            raise ReaderError(
                f"{ctx.path}: {where} field {field_!r} must be a string, got {type(text).__name__}"
            )
        meta = ctx.pick({k: v for k, v in item.items() if k != field_})
    else:  # any other JSON: flattened into the text; named fields copied to metadata
        text = "\n".join(_flatten(item))
        meta = ctx.pick(item) if isinstance(item, dict) and ctx.metadata_fields else {}
    return text, {**meta, "json_path": json_path}


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # where lone surrogates come from


def _fix_str(s: str, count: list[int]) -> str:
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        count[0] += 1  # a UTF-16 round trip joins valid pairs, replaces lone ones
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _replace_surrogates(data: Any, count: list[int]) -> Any:
    """``data`` (parsed JSON) with lone surrogates (from JSON escapes like ``"\\ud800"``)
    replaced by U+FFFD, lists and dicts changed in place; ``count[0]`` counts the strings
    changed. Iterative: JSON may nest deeper than Python's recursion limit."""
    if isinstance(data, str):
        return _fix_str(data, count)
    todo = [data]
    while todo:
        obj = todo.pop()
        if isinstance(obj, list):
            for i, x in enumerate(obj):
                if isinstance(x, str):
                    obj[i] = _fix_str(x, count)
                elif isinstance(x, (list, dict)):
                    todo.append(x)
        elif isinstance(obj, dict):
            items = [(_fix_str(k, count), v) for k, v in obj.items()]
            obj.clear()
            for k, v in items:
                obj[k] = _fix_str(v, count) if isinstance(v, str) else v
                if isinstance(v, (list, dict)):
                    todo.append(v)
    return data


def _clean_json(data: Any, text: str, path: Path) -> Any:
    if not _SURROGATE_ESCAPE.search(text):
        return data  # no escape of a surrogate: none to replace
    count = [0]
    data = _replace_surrogates(data, count)
    if count[0]:
        warnings.warn(
            f"{path}: {count[0]} string(s) held lone surrogates (JSON escapes such as "
            "'\\ud800' without their pair), which are not valid Unicode; each was "
            "replaced by U+FFFD",
            stacklevel=4,
        )
    return data


def _deep_error(path: Path, where: str) -> ReaderError:
    return ReaderError(
        f"{path}: {where or 'the file'} nests JSON more than {MAX_JSON_DEPTH} levels deep, "
        "the most fastrag reads (the store's limit for metadata); flatten the data or split "
        "it into records"
    )


def _load_json(text: str, path: Path, where: str = "") -> Any:
    """``json.loads(text)``; JSON nested past :data:`MAX_JSON_DEPTH` is a
    :class:`ReaderError` naming ``path`` (and ``where``: "line 3"), not Python's
    RecursionError."""
    try:
        data = json.loads(text)
    except RecursionError:  # nested deeper than the parser recurses: far past the limit
        raise _deep_error(path, where) from None
    if isinstance(data, (list, dict)) and json_too_deep(data, text):
        raise _deep_error(path, where)
    return data


def _read_json(ctx: ReadContext) -> list[tuple[str, dict]]:
    text = ctx.text()
    try:
        data = _clean_json(_load_json(text, ctx.path), text, ctx.path)
    except json.JSONDecodeError as exc:
        raise ReaderError(
            f"{ctx.path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    if isinstance(data, list):
        out = []
        for i, item in enumerate(data):
            text, meta = _record(item, ctx, f"item {i}", f"$[{i}]")
            out.append((text, {**meta, "row": i}))
        return out
    return [_record(data, ctx, "the document", "$")]


def _read_jsonl(ctx: ReadContext) -> list[tuple[str, dict]]:
    text = ctx.text()
    items = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append([lineno, _load_json(line, ctx.path, f"line {lineno}")])
        except json.JSONDecodeError as exc:
            raise ReaderError(
                f"{ctx.path}: line {lineno} is not valid JSON ({exc.msg} at "
                f"column {exc.colno}); fix or remove the line"
            ) from exc
    out = []
    for lineno, item in _clean_json(items, text, ctx.path):
        row = len(out)
        record, meta = _record(item, ctx, f"line {lineno}", f"$[{row}]")
        out.append((record, {**meta, "row": row, "line": lineno}))
    return out


def _read_csv(ctx: ReadContext) -> list[tuple[str, dict]]:
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
    _BLOCK: ClassVar[set[str]] = {
        "address",
        "article",
        "aside",
        "blockquote",
        "br",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "tbody",
        "thead",
        "tfoot",
        "tr",
        "ul",
        "caption",
        "body",
    }
    _CELL: ClassVar[set[str]] = {"td", "th"}
    _VOID: ClassVar[set[str]] = {
        "br",
        "hr",
        "img",
        "input",
        "meta",
        "link",
        "area",
        "base",
        "col",
        "embed",
        "source",
        "track",
        "wbr",
    }

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


def _read_html(ctx: ReadContext) -> list[tuple[str, dict]]:
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
            logger.warning(
                "pypdf: %d warning%s reading %s: %s%s",
                len(msgs),
                "s" * (len(msgs) != 1),
                path,
                "; ".join(uniq[:3]),
                " ..." if len(uniq) > 3 else "",
            )


def _read_pdf(ctx: ReadContext) -> list[tuple[str, dict]]:
    pypdf = _import_extra(".pdf", ctx.path)
    out = []
    budget = InflateBudget(ctx.path, ctx.path.stat().st_size)
    try:
        with _pypdf_noise_to_log(ctx.path), pypdf_budget(pypdf, budget):
            reader = pypdf.PdfReader(str(ctx.path))
            if reader.is_encrypted and not reader.decrypt(""):
                raise ReaderError(
                    f"{ctx.path}: the PDF is encrypted with a password; decrypt it first"
                )
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
        raise ReaderError(f"{ctx.path}: not a readable PDF ({type(exc).__name__}: {exc})") from exc
    return out


def _read_docx(ctx: ReadContext) -> list[tuple[str, dict]]:
    docx = _import_extra(".docx", ctx.path)
    data = ctx.path.read_bytes()  # read once: what is checked is what python-docx reads
    try:
        check_zip(data, InflateBudget(ctx.path, len(data)))
        document = docx.Document(io.BytesIO(data))
        lines: list[str] = []
        for block in document.iter_inner_content():
            if hasattr(block, "rows"):  # a table: one line per row, cells tab-separated
                for row in block.rows:
                    lines.append("\t".join(cell.text for cell in row.cells))
            else:
                lines.append(block.text)
    except ReaderError:
        raise
    except Exception as exc:  # python-docx raises many types on broken files
        raise ReaderError(
            f"{ctx.path}: not a readable .docx ({type(exc).__name__}: {exc})"
        ) from exc
    return [("\n".join(lines), {})]


BUILTIN_READERS: dict[str, Callable[[ReadContext], list[tuple[str, dict]]]] = {
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
TEXT_READERS = {ext for ext, fn in BUILTIN_READERS.items() if fn not in (_read_pdf, _read_docx)}


# -- optional packages ------------------------------------------------------------------------
EXTRA_READERS = {".pdf": ("pypdf", "pypdf", "pdf"), ".docx": ("docx", "python-docx", "docx")}


def _import_extra(ext: str, path: Path) -> Any:
    module = EXTRA_READERS[ext][0]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise _missing_extras({ext: [str(path)]}) from None


def _missing_extras(missing: dict[str, list[str]]) -> MissingExtraError:
    """One error for every extension whose optional package is missing."""
    missing = {ext: missing[ext] for ext in EXTRA_READERS if ext in missing}
    parts = []
    for ext, files in missing.items():
        _, package, extra = EXTRA_READERS[ext]
        n = len(files)
        parts.append(
            f"{n} {ext} file{'s' * (n != 1)} need{'s' * (n == 1)} the optional "
            f"package {package!r} (extra [{extra}]), e.g. {files[0]!r}"
        )
    extras = ",".join(EXTRA_READERS[ext][2] for ext in missing)
    return MissingExtraError(
        f"reading {'; '.join(parts)}; install "
        f"{'them' if len(missing) > 1 else 'it'} with: pip install "
        f"'fastrag-engine[{extras}]'"
    )


def check_extras(files: Iterable[Path], custom: dict[str, ReaderFn]) -> None:
    """Raise one :class:`MissingExtraError` naming every missing extra, before any file is
    read; extensions with a registered or per-call reader need none."""
    need: dict[str, list[str]] = {}
    for f in files:
        ext = f.suffix.lower()
        if ext in EXTRA_READERS and ext not in custom and ext not in REGISTERED:
            need.setdefault(ext, []).append(str(f))
    missing = {}
    for ext, paths in need.items():
        try:
            importlib.import_module(EXTRA_READERS[ext][0])
        except ImportError:
            missing[ext] = paths
    if missing:
        raise _missing_extras(missing)
