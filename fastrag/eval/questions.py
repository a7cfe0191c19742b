"""Your own evaluation questions (``fastrag eval STORE --questions FILE``): reading them, and
finding the nodes of a group that answer each.

A question file is JSONL, a JSON list (or ``{"questions": [...]}``), CSV or Parquet
(:mod:`fastrag.eval.records`). Each record has
``question`` (or ``query``) and at least one gold field: ``answer``/``answers`` (text that a
relevant passage contains), ``source`` (or ``file``: the file name or path the passage comes
from) or ``node_ids``. Malformed input raises :class:`~fastrag.errors.ReaderError` naming the
file and the record.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

import pyarrow.compute as pc

from fastrag.errors import ReaderError
from fastrag.eval.records import read_records

__all__ = ["Question", "gold_ids", "read_questions"]


class Question(TypedDict):
    """One evaluation question and what marks a passage as answering it."""

    question: str
    answers: list[str]
    source: str | None
    node_ids: list[str]


def read_questions(path: str | os.PathLike) -> list[Question]:
    """The question records of a JSONL, JSON, CSV or Parquet file (see the module docstring)."""
    out: list[Question] = []
    for where, rec in read_records(path):
        if not isinstance(rec, dict):
            raise ReaderError(f"{path}: {where} is not an object")
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
                f"{path}: {where}: 'answers' and 'node_ids' are strings or lists of "
                "strings, 'source' a string"
            )
        if not isinstance(q, str) or not (answers or source or ids):
            raise ReaderError(
                f"{path}: {where} needs 'question' and one of 'answer', 'source' or 'node_ids'"
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
