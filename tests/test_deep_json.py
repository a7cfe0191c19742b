"""JSON nested deeper than Python's parser can follow, wherever fastrag reads JSON it did not
write (question files, query files, HTTP error bodies, an LLM's JSON answer), is an error
naming what was read, never Python's RecursionError."""

from __future__ import annotations

import pytest

from fastrag._http import error_detail
from fastrag.errors import ReaderError
from fastrag.eval.questions import read_questions
from fastrag.eval.records import read_queries
from fastrag.llms.base import parse_json_object

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("name", ["q.json", "q.jsonl"])
def test_question_files(tmp_path, name):
    path = tmp_path / name
    path.write_text(DEEP)
    with pytest.raises(ReaderError, match="nests JSON arrays/objects too deeply") as info:
        read_questions(path)
    assert "Recursion" not in str(info.value)


def test_query_files(tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_text('"a query"\n' + DEEP + "\n")
    with pytest.raises(ReaderError, match="line 2 nests JSON arrays/objects too deeply"):
        read_queries(path)


def test_remote_bodies_and_llm_answers():
    assert error_detail(DEEP.encode()).startswith("[[[")  # shown as text, not parsed
    with pytest.raises(ValueError) as info:
        parse_json_object('{"a": ' + DEEP + "}")
    assert not isinstance(info.value, RecursionError)
