"""File readers: one file in, ``(text, metadata)`` per root document out.

Readers are chosen by extension: ``.txt``/``.md`` (as is), ``.json`` (a string, an object
with a text field, or a list of them), ``.jsonl`` (one record a line), ``.csv`` (one document
a row), ``.html``/``.htm`` (visible text), ``.pdf`` (``[pdf]`` extra, pypdf) and ``.docx``
(``[docx]`` extra, python-docx). ``register_reader`` adds readers globally, ``readers=``
per call; both override the built-ins. Text files are decoded by
:mod:`fastrag.documents.decoding` (BOMs, strict UTF-8, then charset-normalizer under checks).

Every root document's metadata holds ``file_path`` (absolute), ``file_name``, ``file_type``
(extension without the dot), ``file_size`` (bytes) and ``mtime``; records of multi-document
files (.json lists, .jsonl, .csv) also carry ``row`` (0-based) and their other fields.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
import warnings
from collections.abc import Callable, Iterable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

from fastrag.documents.decoding import decode_bytes
from fastrag.errors import ConfigError, MissingExtraError, ReaderError, missing_extra

logger = logging.getLogger(__name__)

ReaderResult = str | list[str] | list[tuple[str, dict]]
ReaderFn = Callable[[Path], ReaderResult]

_REGISTERED: dict[str, ReaderFn] = {}
_ON_ERROR = ("raise", "skip")


# -- decoding ---------------------------------------------------------------------------------
def _read_text_file(path: Path) -> str:
    return decode_bytes(path.read_bytes(), path)


# -- built-in readers: (path, text_field) -> list[(text, metadata)] ---------------------------
def _read_plain(path: Path, text_field: str) -> list[tuple[str, dict]]:
    return [(_read_text_file(path), {})]


def _record(item: Any, text_field: str, path: Path, where: str) -> tuple[str, dict]:
    if isinstance(item, str):
        return item, {}
    if isinstance(item, dict):
        if text_field not in item:
            raise ReaderError(
                f"{path}: {where} has no {text_field!r} field (fields: {sorted(item)[:8]}); "
                "pass json_text_field='<field with the text>'"
            )
        text = item[text_field]
        if not isinstance(text, str):
            raise ReaderError(f"{path}: {where} field {text_field!r} must be a string, "
                              f"got {type(text).__name__}")
        return text, {k: v for k, v in item.items() if k != text_field}
    raise ReaderError(f"{path}: {where} must be a string or an object with a {text_field!r} "
                      f"field, got {type(item).__name__}")


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


def _read_json(path: Path, text_field: str) -> list[tuple[str, dict]]:
    try:
        data = _clean_json(json.loads(_read_text_file(path)), path)
    except json.JSONDecodeError as exc:
        raise ReaderError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: "
                          f"{exc.msg}") from exc
    if isinstance(data, list):
        out = []
        for i, item in enumerate(data):
            text, meta = _record(item, text_field, path, f"item {i}")
            out.append((text, {**meta, "row": i}))
        return out
    return [_record(data, text_field, path, "the document")]


def _read_jsonl(path: Path, text_field: str) -> list[tuple[str, dict]]:
    items = []
    for lineno, line in enumerate(_read_text_file(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ReaderError(f"{path}: line {lineno} is not valid JSON ({exc.msg} at column "
                              f"{exc.colno}); fix or remove the line") from exc
    out = []
    for lineno, item in _clean_json(items, path):
        text, meta = _record(item, text_field, path, f"line {lineno}")
        out.append((text, {**meta, "row": len(out)}))
    return out


def _read_csv(path: Path, text_field: str) -> list[tuple[str, dict]]:
    text = _read_text_file(path)
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise ReaderError(f"{path}: invalid CSV ({exc})") from exc
    if not rows:
        return []
    header = [h.strip() for h in rows[0]]
    out = []
    for i, row in enumerate(rows[1:]):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) > len(header):
            raise ReaderError(f"{path}: row {i + 2} has {len(row)} cells but the header has "
                              f"{len(header)} columns; fix the row")
        rec = dict(zip(header, row + [""] * (len(header) - len(row)), strict=False))
        if text_field in rec:
            body = rec.pop(text_field)
            meta = rec
        else:
            body = "\n".join(f"{k}: {v}" for k, v in rec.items())
            meta = {}
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


def _read_html(path: Path, text_field: str) -> list[tuple[str, dict]]:
    parser = _HTMLText()
    parser.feed(_read_text_file(path))
    parser.close()
    meta = {}
    title = " ".join("".join(parser.title).split())
    if title:
        meta["title"] = title
    return [(parser.text(), meta)]


def _read_pdf(path: Path, text_field: str) -> list[tuple[str, dict]]:
    try:
        import pypdf
    except ImportError:
        raise missing_extra("pypdf", "pdf", "reading .pdf files") from None
    try:
        reader = pypdf.PdfReader(str(path))
        pages = [page.extract_text() or "" for page in reader.pages]
    except Exception as exc:  # pypdf raises many types on broken files
        raise ReaderError(f"{path}: not a readable PDF ({type(exc).__name__}: {exc})") from exc
    return [("\n".join(pages), {"page_count": len(pages)})]


def _read_docx(path: Path, text_field: str) -> list[tuple[str, dict]]:
    try:
        import docx
    except ImportError:
        raise missing_extra("python-docx", "docx", "reading .docx files") from None
    try:
        document = docx.Document(str(path))
        lines: list[str] = []
        for block in document.iter_inner_content():
            if hasattr(block, "rows"):  # a table: one line per row, cells tab-separated
                for row in block.rows:
                    lines.append("\t".join(cell.text for cell in row.cells))
            else:
                lines.append(block.text)
    except Exception as exc:  # python-docx raises many types on broken files
        raise ReaderError(f"{path}: not a readable .docx ({type(exc).__name__}: {exc})") from exc
    return [("\n".join(lines), {})]


_BUILTIN: dict[str, Callable[[Path, str], list[tuple[str, dict]]]] = {
    ".txt": _read_plain,
    ".md": _read_plain,
    ".json": _read_json,
    ".jsonl": _read_jsonl,
    ".csv": _read_csv,
    ".html": _read_html,
    ".htm": _read_html,
    ".pdf": _read_pdf,
    ".docx": _read_docx,
}


# -- registry ---------------------------------------------------------------------------------
def _check_ext(ext: object) -> str:
    if not isinstance(ext, str) or not re.fullmatch(r"\.[^./\\\s]+", ext):
        raise ConfigError(f"reader extension must look like '.xyz', got {ext!r}")
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
    """Extensions that have a reader (built-in, registered, or in ``readers``), sorted."""
    return sorted(set(_BUILTIN) | set(_REGISTERED) | set(_check_readers(readers)))


def _is_hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def iter_source_files(paths: str | os.PathLike | Iterable, *,
                      readers: dict | None = None) -> list[Path]:
    """The files to read under ``paths`` (files and directories), in a deterministic order.

    Directories are walked recursively in sorted order, skipping hidden files and folders and
    files without a reader (logged); an explicitly named file without a reader is an error.
    Each file appears once (first occurrence wins).
    """
    extra = _check_readers(readers)
    if isinstance(paths, (str, os.PathLike)):
        items = [paths]
    elif isinstance(paths, Iterable) and not isinstance(paths, (bytes, dict)):
        items = list(paths)
    else:
        raise ConfigError(f"paths must be a path or a list of paths, got {type(paths).__name__}")
    if not items:
        raise ConfigError("paths is empty; pass a file, a directory, or a list of them")
    exts = set(supported_extensions(extra))
    out: list[Path] = []
    seen: set[Path] = set()
    skipped: dict[str, list[str]] = {}

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
            found = []
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in files:
                    if name.startswith("."):
                        continue
                    f = Path(root) / name
                    if f.suffix.lower() not in exts:
                        logger.info("skipping %s: no reader for %r", f, f.suffix or name)
                        continue
                    why = _not_a_file(f)
                    if why:
                        skipped.setdefault(why, []).append(str(f))
                    else:
                        found.append(f)
                for name in dirs:
                    if (Path(root) / name).is_symlink():  # os.walk does not follow them
                        skipped.setdefault("symlinked folder (not followed)", []).append(
                            str(Path(root) / name))
            for f in sorted(found, key=lambda f: f.relative_to(p).parts):
                add(f)
        elif _not_a_file(p) not in (None, "dangling link"):
            raise ReaderError(f"{str(p)!r} is a {_not_a_file(p)}, not a file fastrag can read; "
                              "pass regular files or directories")
        elif p.is_file():
            if p.suffix.lower() not in exts:
                raise ReaderError(f"no reader for {str(p)!r} (extension {p.suffix or 'none'!r}); "
                                  f"supported: {', '.join(sorted(exts))}; register one with "
                                  "fastrag.register_reader('.ext', fn) or pass readers=")
            add(p)
        else:
            raise ReaderError(f"path {str(p)!r} does not exist; pass an existing file or "
                              "directory")
    if skipped:
        warnings.warn("skipped " + "; ".join(
            f"{len(v)} {why}{'s' if len(v) > 1 else ''} (e.g. {v[0]!r})"
            for why, v in sorted(skipped.items())) + " while walking the folders", stacklevel=2)
    return out


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


def read_file(path: str | os.PathLike, *, readers: dict | None = None, on_error: str = "raise",
              json_text_field: str = "text") -> list[tuple[str, dict]]:
    """``(text, metadata)`` of each root document in the file at ``path``.

    ``on_error="raise"`` raises :class:`ReaderError` naming the file when it cannot be read,
    decoded or parsed; ``"skip"`` warns and returns ``[]`` instead. A missing optional
    package (pdf, docx) always raises :class:`MissingExtraError`.
    """
    if on_error not in _ON_ERROR:
        raise ConfigError(f"on_error={on_error!r} is not one of {_ON_ERROR}")
    if not isinstance(json_text_field, str) or not json_text_field:
        raise ConfigError(f"json_text_field must be a non-empty field name, got "
                          f"{json_text_field!r}")
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"path must be a str or Path, got {type(path).__name__}")
    extra = _check_readers(readers)
    p = Path(path).expanduser()
    try:
        p = p.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        err = ReaderError(f"cannot read {str(p)!r}: {exc}")
        if on_error == "skip":
            warnings.warn(f"skipping {str(p)!r}: {err}", stacklevel=2)
            return []
        raise err from exc
    ext = p.suffix.lower()
    if ext in extra or ext in _REGISTERED:
        fn = extra.get(ext) or _REGISTERED[ext]

        def run() -> list[tuple[str, dict]]:
            return _normalize(fn(p), p)
    elif ext in _BUILTIN:
        def run() -> list[tuple[str, dict]]:
            return _BUILTIN[ext](p, json_text_field)
    else:
        raise ReaderError(f"no reader for {str(p)!r} (extension {ext or 'none'!r}); supported: "
                          f"{', '.join(supported_extensions(extra))}")
    try:
        if p.is_dir():
            raise ReaderError(f"{str(p)!r} is a directory; list its files with "
                              "iter_source_files()")
        why = _not_a_file(p)
        if why:
            raise ReaderError(f"{str(p)!r} is a {why}, not a regular file; it was not opened")
        st = p.stat()
        docs = run()
    except MissingExtraError:
        raise
    except Exception as exc:  # every failure of one file is reported alike
        if isinstance(exc, ReaderError) and str(p) in str(exc):
            err = exc
        elif isinstance(exc, FileNotFoundError):
            err = ReaderError(f"file {str(p)!r} does not exist")
        else:
            err = ReaderError(f"cannot read {str(p)!r}: {type(exc).__name__}: {exc}")
        if on_error == "skip":
            warnings.warn(f"skipping {str(p)!r}: {err}", stacklevel=2)
            return []
        if err is exc:
            raise
        raise err from exc
    base = {
        "file_path": str(p),
        "file_name": p.name,
        "file_type": ext.lstrip("."),
        "file_size": st.st_size,
        "mtime": st.st_mtime,
    }
    return [(text, {**meta, **base}) for text, meta in docs]
