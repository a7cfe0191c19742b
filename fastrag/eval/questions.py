"""Your own evaluation questions (``fastrag eval STORE --questions FILE``): reading them, and
finding the nodes of a group that answer each.

A question file is JSONL, a JSON list (or ``{"questions": [...]}``) or CSV. Each record has
``question`` (or ``query``) and at least one gold field: ``answer``/``answers`` (text that a
relevant passage contains), ``source`` (or ``file``: the file name or path the passage comes
from) or ``node_ids``. Malformed input raises :class:`~fastrag.errors.ReaderError` naming the
file and the record.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

import pyarrow.compute as pc

from fastrag.errors import ReaderError

__all__ = ["Question", "gold_ids", "read_questions"]


class Question(TypedDict):
    """One evaluation question and what marks a passage as answering it."""

    question: str
    answers: list[str]
    source: str | None
    node_ids: list[str]


def _json(path: Path, text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReaderError(
            f"{path}: {where} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
            f"{exc.colno}); JSONL holds one JSON object per line"
        ) from None
    except RecursionError:
        raise ReaderError(
            f"{path}: {where} nests JSON arrays/objects too deeply to read; a question file "
            "holds flat records ({'question': ..., 'answers': [...]})"
        ) from None


def read_questions(path: str | os.PathLike) -> list[Question]:
    """The question records of a JSONL, JSON or CSV file (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise ReaderError(f"{path}: no such file")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ReaderError(
            f"{path}: not UTF-8 text (byte {exc.start}); save the question file as UTF-8"
        ) from None
    suffix = path.suffix.lower()
    if suffix == ".csv":
        try:
            records: list[Any] = list(csv.DictReader(text.splitlines(), strict=True))
        except csv.Error as exc:
            raise ReaderError(f"{path}: not valid CSV ({exc})") from None
    elif suffix == ".jsonl":
        records = []
        for n, ln in enumerate(text.splitlines(), 1):
            if ln.strip():
                records.append(_json(path, ln, f"line {n}"))
    else:
        data = _json(path, text, "the file")
        if isinstance(data, dict) and isinstance(data.get("questions"), list):
            records = data["questions"]
        elif isinstance(data, list):
            records = data
        else:
            raise ReaderError(
                f"{path}: a JSON question file holds a list of records or "
                '{"questions": [...]}, not ' + type(data).__name__
            )
    out: list[Question] = []
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise ReaderError(f"{path}: record {i} is not an object")
        q = rec.get("question", rec.get("query"))
        answers = rec.get("answers", rec.get("answer"))
        answers = [answers] if isinstance(answers, str) else answers or []
        source = rec.get("source", rec.get("file"))
        ids = rec.get("node_ids") or []
        if not (
            isinstance(answers, list)
            and all(isinstance(a, str) for a in answers)
            and isinstance(ids, list)
            and all(isinstance(x, str) for x in ids)
            and (source is None or isinstance(source, str))
        ):
            raise ReaderError(
                f"{path}: record {i}: 'answers' and 'node_ids' are strings or lists of "
                "strings, 'source' a string"
            )
        if not isinstance(q, str) or not (answers or source or ids):
            raise ReaderError(
                f"{path}: record {i} needs 'question' and one of 'answer', 'source' or 'node_ids'"
            )
        out.append(
            {
                "question": q,
                "answers": [a for a in answers if a],
                "source": source,
                "node_ids": list(ids),
            }
        )
    if not out:
        raise ReaderError(f"{path}: no questions")
    return out


def gold_ids(group: Any, questions: Sequence[Question]) -> list[set[str]]:
    """For each question, the ids of ``group``'s nodes that answer it: its ``node_ids``, the
    nodes whose text contains one of its answers, and the nodes of its source file (matched by
    path, file name or path suffix). ``group`` is a built node group (``doc.group(name)``)."""
    table = group.table
    ids = table.column("id")
    paths = [m.get("file_path") or "" for m in (json.loads(x) for x in group.full_metadata_json())]
    gold = []
    for rec in questions:
        hit = set(rec["node_ids"])
        for ans in rec["answers"]:
            mask = pc.match_substring(table.column("text"), ans)
            hit.update(pc.filter(ids, mask).to_pylist())
        if rec["source"]:
            src = str(rec["source"])
            hit.update(
                i
                for i, p in zip(group.ids, paths, strict=True)
                if p == src or Path(p).name == src or p.endswith("/" + src)
            )
        gold.append(hit)
    return gold
