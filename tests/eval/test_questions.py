"""Query and question files: malformed ones make ``fastrag eval`` / ``fastrag search`` exit 2
with a message naming the file and what is wrong (never a traceback); well-formed files of each
format read the same records."""

from __future__ import annotations

import pytest

from fastrag.cli import main
from fastrag.errors import ReaderError
from fastrag.eval.questions import read_questions
from fastrag.eval.records import read_queries

BAD = [
    (
        "q.jsonl",
        '{"question": "a", "answer": "b"}\n{"question": "c", answer\n',
        "line 2 is not valid JSON",
    ),
    ("q.json", '{"question": "a", ', "the file is not valid JSON"),
    ("q.json", "3", "holds a list of records, or"),
    ("q.json", '{"items": []}', "holds a list of records, or"),
    ("q.jsonl", '{"question": "a", "answer": 3}\n', "line 1: 'answers' and 'node_ids'"),
    ("q.jsonl", '{"question": "a", "node_ids": "n1"}\n', "line 1: 'answers' and 'node_ids'"),
    ("q.jsonl", '["a", "b"]\n', "line 1 is not an object"),
    ("q.csv", 'question,answer\n"a,b\n', "not valid CSV"),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD)
def test_malformed_question_files_name_the_problem(tmp_path, capsys, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ReaderError, match=message):
        read_questions(path)
    store = tmp_path / "st"
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.txt").write_text("one line of text\n", encoding="utf-8")
    assert main(["ingest", str(kb), "--store", str(store), "-q"]) == 0
    capsys.readouterr()
    assert main(["eval", str(store), "--questions", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(path) in err and "Traceback" not in err


def test_non_utf8_question_file(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_bytes('{"question": "é", "answer": "x"}\n'.encode("latin-1"))
    with pytest.raises(ReaderError, match="not UTF-8 text"):
        read_questions(path)


def test_each_format_reads_the_same_records(tmp_path):
    want = [
        {"question": "q1", "answers": ["a1"], "source": None, "node_ids": []},
        {"question": "q2", "answers": [], "source": "f.md", "node_ids": []},
    ]
    (tmp_path / "q.jsonl").write_text(
        '{"question": "q1", "answer": "a1"}\n\n{"query": "q2", "file": "f.md"}\n'
    )
    (tmp_path / "q.json").write_text(
        '{"questions": [{"question": "q1", "answers": ["a1"]}, '
        '{"question": "q2", "source": "f.md"}]}'
    )
    (tmp_path / "q.csv").write_text("question,answer,source\nq1,a1,\nq2,,f.md\n")
    assert read_questions(tmp_path / "q.jsonl") == want
    assert read_questions(tmp_path / "q.json") == want
    got = read_questions(tmp_path / "q.csv")
    assert [(r["question"], r["answers"]) for r in got] == [("q1", ["a1"]), ("q2", [])]
    assert got[1]["source"] == "f.md"


def test_read_queries_reads_every_format_alike(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    want = ["first query", "第二个问题", "third"]
    (tmp_path / "q.txt").write_text("first query\n\n第二个问题\nthird\n", encoding="utf-8")
    (tmp_path / "q.jsonl").write_text(
        '"first query"\n{"question": "第二个问题"}\n{"text": "third", "id": 3}\n',
        encoding="utf-8",
    )
    (tmp_path / "q.json").write_text(
        '{"queries": ["first query", {"query": "第二个问题"}, "third"]}', encoding="utf-8"
    )
    (tmp_path / "q.csv").write_text("query\nfirst query\n第二个问题\nthird\n", encoding="utf-8")
    pq.write_table(pa.table({"question": want}), tmp_path / "q.parquet")
    for name in ("q.txt", "q.jsonl", "q.json", "q.csv", "q.parquet"):
        assert read_queries(tmp_path / name) == want, name


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("q.jsonl", '"a"\n{"id": 1}\n', "line 2 has no query"),
        ("q.jsonl", '"a"\n{"query": \n', "line 2 is not valid JSON"),
        ("q.json", '[{"query": "a"}, 5]', "record 2 has no query"),
        ("q.csv", "id\n1\n", "row 2 has no query"),
        ("q.txt", "\n\n", "no queries"),
        ("q.parquet", "not parquet", "not a readable Parquet file"),
    ],
)
def test_malformed_query_files_name_the_problem(tmp_path, capsys, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ReaderError, match=message):
        read_queries(path)
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.txt").write_text("one line of text\n", encoding="utf-8")
    assert main(["ingest", str(kb), "--store", str(tmp_path / "st"), "-q"]) == 0
    capsys.readouterr()
    assert main(["search", str(tmp_path / "st"), "--queries", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "--queries" in err and "Traceback" not in err
