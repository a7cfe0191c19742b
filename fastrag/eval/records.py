"""Query and question files, one reader for every command that takes them
(``fastrag search --queries``, ``fastrag eval --questions``).

Formats, by suffix: ``.jsonl`` (one JSON value per line), ``.json`` (a list, or an object
with a ``questions`` or ``queries`` list), ``.csv`` (a header row, then one record per row),
``.parquet`` (one record per row) and anything else as plain text (one query per non-empty
line). A query record is a string or an object with ``query``, ``question`` or ``text``.
Malformed input raises :class:`~fastrag.errors.ReaderError` naming the file and the line or
record.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from fastrag.errors import ReaderError

__all__ = ["QUERY_FIELDS", "read_queries", "read_records"]

QUERY_FIELDS = ("query", "question", "text")


def _json(path: Path, text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReaderError(
            f"{path}: {where} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
            f"{exc.colno}); JSONL holds one JSON value per line"
        ) from None
    except RecursionError:
        raise ReaderError(
            f"{path}: {where} nests JSON arrays/objects too deeply to read; write flat records "
            '("text" or {"query": "text"})'
        ) from None


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ReaderError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def read_records(path: str | os.PathLike) -> list[tuple[str, Any]]:
    """The records of a query or question file as ``(where, record)`` pairs, ``where`` naming
    its line (``"line 3"``) or position (``"record 2"``) for messages."""
    path = Path(path)
    if not path.is_file():
        raise ReaderError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as exc:  # pyarrow's ArrowInvalid / OSError on a damaged file
            raise ReaderError(f"{path}: not a readable Parquet file ({exc})") from None
        return [(f"row {i + 1}", r) for i, r in enumerate(rows)]
    text = _text(path)
    if suffix == ".csv":
        try:
            rows = list(csv.DictReader(text.splitlines(), strict=True))
        except csv.Error as exc:
            raise ReaderError(f"{path}: not valid CSV ({exc})") from None
        return [(f"row {i + 2}", r) for i, r in enumerate(rows)]  # row 1 is the header
    if suffix == ".jsonl":
        return [
            (f"line {n}", _json(path, ln, f"line {n}"))
            for n, ln in enumerate(text.splitlines(), 1)
            if ln.strip()
        ]
    if suffix == ".json":
        data = _json(path, text, "the file")
        if isinstance(data, dict):
            data = next((data[k] for k in ("questions", "queries") if k in data), data)
        if not isinstance(data, list):
            raise ReaderError(
                f"{path}: a JSON file holds a list of records, or {{'questions': [...]}} or "
                f"{{'queries': [...]}}, not {type(data).__name__}"
            )
        return [(f"record {i + 1}", r) for i, r in enumerate(data)]
    return [(f"line {n}", ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]


def read_queries(path: str | os.PathLike) -> list[str]:
    """The query texts of a file (see the module docstring for the formats)."""
    out = []
    for where, rec in read_records(path):
        q = rec
        if isinstance(rec, dict):
            q = next((rec[k] for k in QUERY_FIELDS if isinstance(rec.get(k), str)), None)
        if not isinstance(q, str):
            raise ReaderError(
                f"{path}: {where} has no query: write a string or an object with a "
                "'query', 'question' or 'text' string"
            )
        out.append(q)
    if not out:
        raise ReaderError(f"{path}: no queries")
    return out
