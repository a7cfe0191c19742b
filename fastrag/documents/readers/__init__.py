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
Compressed parts (draw.io pages, DOCX members, PDF streams) inflate no further than the cap
of :mod:`fastrag.documents.inflate` (100x the file's size, at least 16 MiB, at most 1 GiB);
JSON nested more than 512 levels deep is an error naming the file.

Every root document's metadata holds ``file_path`` (the path as users see it: relative to the
deepest folder of ``relative_to`` holding the file, with ``/`` separators, e.g. ``ko/chmod.md``;
a file under none, or read on its own, is its name), ``abs_path`` (the absolute, resolved path:
where the file is on disk), ``file_name``, ``file_type``
(extension without the dot), ``file_size`` (bytes), ``mtime`` and, for decoded text files,
``encoding``; records of multi-document files (.json lists, .jsonl, .csv) also carry ``row``
(0-based), JSON records ``json_path`` ("$", "$[3]"), JSONL records ``line`` (1-based), PDF
pages ``page`` (1-based), ``page_label`` and ``page_count``. ``metadata_fields=[...]`` keeps
only those fields of a record in its metadata (the others are dropped, not moved to the text).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from fastrag._checks import check_bool
from fastrag.analysis.language import texts_languages
from fastrag.documents.decoding import (
    BinaryContentError,
    decode_bytes,
)
from fastrag.documents.readers.formats import BUILTIN_READERS, ReadContext, read_unknown
from fastrag.documents.readers.registry import REGISTERED, check_readers, register_reader
from fastrag.documents.readers.report import ON_ERROR, ReadEntry, ReadReport, logger
from fastrag.documents.readers.walk import (
    check_str_list,
    iter_source_files,
    not_a_file,
    relative_key,
    resolved_roots,
    supported_extensions,
)
from fastrag.documents.xmltext import NoText
from fastrag.errors import ConfigError, MissingExtraError, ReaderError
from fastrag.transforms.longtext import BufferText

__all__ = [
    "ReadEntry",
    "ReadReport",
    "decode_bytes",
    "iter_source_files",
    "read_file",
    "register_reader",
    "supported_extensions",
]

LANGUAGE_PER_DOCUMENT = 64


# -- reading ----------------------------------------------------------------------------------
def _normalize(result: object, path: Path) -> list[tuple[str, dict]]:
    if isinstance(result, str):
        return [(result, {})]
    if isinstance(result, list):
        out = []
        for i, item in enumerate(result):
            if isinstance(item, str):
                out.append((item, {}))
            elif (
                isinstance(item, tuple)
                and len(item) == 2
                and isinstance(item[0], str)
                and isinstance(item[1], dict)
            ):
                out.append((item[0], dict(item[1])))
            else:
                raise ReaderError(
                    f"reader for {path.suffix!r} returned item {i} of type "
                    f"{type(item).__name__} for {str(path)!r}; a reader returns "
                    "str, list[str] or list[(str, dict)]"
                )
        return out
    raise ReaderError(
        f"reader for {path.suffix!r} returned {type(result).__name__} for "
        f"{str(path)!r}; a reader returns str, list[str] or list[(str, dict)]"
    )


def _say(path: Path, message: str) -> str:
    """``message``, prefixed with the path unless it already names it."""
    return message if str(path) in message else f"{str(path)!r}: {message}"


def read_file(
    path: str | os.PathLike,
    *,
    readers: dict | None = None,
    on_error: str = "raise",
    json_text_field: str = "text",
    metadata_fields: Sequence[str] | None = None,
    report: ReadReport | None = None,
    relative_to: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    long_texts: bool = False,
) -> list[tuple[str | BufferText, dict]]:
    """``(text, metadata)`` of each root document in the file at ``path``.

    ``json_text_field`` names the text field of JSON, JSONL and CSV records (the other fields
    become metadata; JSON without it is flattened into ``key: value`` lines);
    ``metadata_fields=[...]`` keeps only those record fields in metadata. A file of an
    extension without a reader is read as plain text when it decodes as text.

    ``on_error="raise"`` raises :class:`ReaderError` naming the file when it cannot be read,
    decoded or parsed, or is binary; ``"skip"`` logs one warning line and returns ``[]``.
    An empty file gives ``[]``. A missing optional package (pdf, docx) always raises
    :class:`MissingExtraError` (recorded in ``report`` as failed, reason "missing extra", with
    the install command). ``report`` records the outcome. ``relative_to``: the folder(s) the
    file was found under; metadata ``file_path`` is relative to the deepest holding it (else
    the file's name), ``abs_path`` is absolute. ``long_texts=True`` (a store's ingest): a
    plain UTF-8 file of ``LONG_TEXT`` bytes or more comes as a
    :class:`~fastrag.transforms.longtext.BufferText` of its bytes instead of a ``str``.
    """
    if on_error not in ON_ERROR:
        raise ConfigError(f"on_error={on_error!r} is not one of {ON_ERROR}")
    if not isinstance(json_text_field, str) or not json_text_field:
        raise ConfigError(
            f"json_text_field must be a non-empty field name, got {json_text_field!r}"
        )
    fields = check_str_list(metadata_fields, "metadata_fields", "['author', 'date']")
    long_texts = check_bool("long_texts", long_texts)
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"path must be a str or Path, got {type(path).__name__}")
    if report is not None and not isinstance(report, ReadReport):
        raise ConfigError(f"report must be a ReadReport, got {type(report).__name__}")
    report = report if report is not None else ReadReport()
    custom = check_readers(readers)
    p = Path(path).expanduser()
    ext = p.suffix.lower()
    ctx = ReadContext(p, json_text_field, fields, long_texts=long_texts)
    fn = custom.get(ext) or REGISTERED.get(ext)
    try:
        try:
            p = ctx.path = p.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop
            raise ReaderError(f"cannot read {str(p)!r}: {exc}") from exc
        if p.is_dir():
            raise ReaderError(f"{str(p)!r} is a directory; list its files with iter_source_files()")
        why = not_a_file(p)
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
            docs = BUILTIN_READERS.get(ext, read_unknown)(ctx)
    except MissingExtraError as exc:
        report.add(p, "failed", "missing extra", str(exc))
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
    if isinstance(relative_to, (str, os.PathLike)):
        relative_to = [relative_to]
    base = {
        "file_path": relative_key(str(p), resolved_roots(list(relative_to or []))),
        "abs_path": str(p),
        "file_name": p.name,
        "file_type": ext.lstrip("."),
        "file_size": st.st_size,
        "mtime": st.st_mtime,
    }
    if ctx.encoding is not None:
        base["encoding"] = ctx.encoding
    # each document's language and its probability (a record's own "language" field wins);
    # files of many records (JSONL, CSV) detect an even sample first (texts_languages)
    langs = texts_languages([text for text, _ in docs], LANGUAGE_PER_DOCUMENT)
    return [
        (text, {**_language(lang, score, meta), **meta, **base})
        for (text, meta), (lang, score) in zip(docs, langs, strict=True)
    ]


def _language(lang: str | None, score: float, meta: dict) -> dict:
    if lang is None or "language" in meta:
        return {}
    return {"language": lang, "language_score": score}
