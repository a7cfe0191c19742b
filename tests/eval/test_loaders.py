"""Loaders (SQuAD-style, BEIR folders) and the bundled CMRC 2018 dataset helpers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from fastrag.datasets import build_squad_kb, load_cmrc2018_dev, squad_questions
from fastrag.errors import ConfigError, ReaderError
from fastrag.eval import evaluate_retrieval, load_beir, load_squad

SQUAD = {
    "version": "v1",
    "data": [
        {
            "title": "T1",
            "paragraphs": [
                {
                    "context": "line one\nline two",
                    "qas": [{"question": "q1?", "id": "a"}, {"question": "q2?", "id": "b"}],
                },
                {"context": "second para", "qas": [{"question": "q3?", "id": "c"}]},
            ],
        },
        {
            "title": "T2",
            "paragraphs": [
                {"context": "line one\nline two", "qas": [{"question": "q4?", "id": "d"}]},
                {"context": "third\r\npara", "qas": []},
            ],
        },
    ],
}


# -- SQuAD ------------------------------------------------------------------------------------
def test_squad_questions_dedupes_and_normalises():
    questions, gold, contexts = squad_questions(SQUAD)
    assert questions == ["q1?", "q2?", "q3?", "q4?"]
    assert contexts == ["line one line two", "second para", "third para"]
    assert gold == [0, 0, 1, 0]


def test_load_squad_dict_and_file(tmp_path):
    ds = load_squad(SQUAD)
    assert ds.corpus_ids == ["ctx-0", "ctx-1", "ctx-2"]
    assert ds.corpus_titles == ["T1", "T1", "T2"]
    assert ds.query_ids == ["a", "b", "c", "d"]
    assert ds.qrels == {"a": {"ctx-0": 1}, "b": {"ctx-0": 1}, "c": {"ctx-1": 1}, "d": {"ctx-0": 1}}
    assert ds.gold_ids() == [["ctx-0"], ["ctx-0"], ["ctx-1"], ["ctx-0"]]
    assert ds.corpus_index("ctx-2") == 2
    path = tmp_path / "s.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(SQUAD, f)
    again = load_squad(path)
    assert (again.corpus_texts, again.query_texts, again.qrels) == (
        ds.corpus_texts,
        ds.query_texts,
        ds.qrels,
    )
    assert again.name == "s.json.gz"


def test_squad_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [\n  {"paragraphs": [}\n]}', encoding="utf-8")
    with pytest.raises(ReaderError, match=r"bad\.json: invalid JSON at line 2, column 19"):
        load_squad(bad)
    with pytest.raises(ReaderError, match=r"does not exist"):
        load_squad(tmp_path / "missing.json")
    with pytest.raises(ReaderError, match=r"expected a JSON object with a 'data' list"):
        load_squad({"paragraphs": []})
    with pytest.raises(ReaderError, match=r"data\[0\]\.paragraphs\[1\] has no 'context' string"):
        squad_questions({"data": [{"paragraphs": [{"context": "x"}, {"qas": []}]}]})
    with pytest.raises(
        ReaderError, match=r"data\[0\]\.paragraphs\[0\]\.qas\[0\] has no 'question'"
    ):
        load_squad({"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "1"}]}]}]})
    with pytest.raises(ReaderError, match=r"question id 'a' appears twice"):
        load_squad(
            {
                "data": [
                    {
                        "paragraphs": [
                            {
                                "context": "x",
                                "qas": [{"id": "a", "question": "1"}, {"id": "a", "question": "2"}],
                            }
                        ]
                    }
                ]
            }
        )
    with pytest.raises(ConfigError, match=r"needs a path or a SQuAD dict, got int"):
        load_squad(3)


# -- bundled CMRC 2018 ----------------------------------------------------------------------------
def test_cmrc_bundle_counts_and_kb(tmp_path):
    squad = load_cmrc2018_dev()
    questions, gold, contexts = squad_questions(squad)
    assert (len(questions), len(contexts)) == (3219, 848)
    assert min(gold) == 0 and max(gold) == 847
    paths = build_squad_kb(squad, tmp_path / "kb", per_file=10)
    assert len(paths) == 85
    assert [p.name for p in paths[:2]] == ["part_0000.txt", "part_0001.txt"]
    pieces = [piece for p in paths for piece in p.read_text(encoding="utf-8").split("\n")]
    assert len(pieces) == 848
    assert pieces == contexts
    assert paths[0].read_text(encoding="utf-8").split("\n") == contexts[:10]
    assert len(paths[-1].read_text(encoding="utf-8").split("\n")) == 8
    ds = load_squad(squad, name="cmrc")
    assert (ds.n_docs, ds.n_queries) == (848, 3219)
    assert ds.corpus_texts == contexts
    assert [ds.corpus_index(g[0]) for g in ds.gold_ids()] == gold
    # retrieving the gold paragraph first scores perfectly
    perfect = evaluate_retrieval([[f"ctx-{g}", "x"] for g in gold], ds.gold_ids(), ks=(1,))
    assert perfect["recall@1"] == 1.0 and perfect["mrr"] == 1.0


def test_build_squad_kb_rewrites_and_removes_stale_files(tmp_path):
    out = tmp_path / "kb"
    first = build_squad_kb(SQUAD, out, per_file=1)
    assert [p.read_text(encoding="utf-8") for p in first] == [
        "line one line two",
        "second para",
        "third para",
    ]
    (out / "notes.md").write_text("keep me", encoding="utf-8")
    second = build_squad_kb(SQUAD, out, per_file=2)
    assert [p.name for p in second] == ["part_0000.txt", "part_0001.txt"]
    assert sorted(p.name for p in out.iterdir()) == ["notes.md", "part_0000.txt", "part_0001.txt"]
    assert second[0].read_text(encoding="utf-8") == "line one line two\nsecond para"


@pytest.mark.parametrize("per_file", [0, -1, 2.5, True, "10"])
def test_build_squad_kb_rejects_bad_per_file(tmp_path, per_file):
    with pytest.raises(
        ConfigError, match=r"per_file must be an int >= 1 \(paragraphs per file\), got "
    ):
        build_squad_kb(SQUAD, tmp_path, per_file=per_file)


def test_build_squad_kb_other_errors(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"exists and is not a directory"):
        build_squad_kb(SQUAD, f)
    with pytest.raises(ConfigError, match=r"has no paragraphs"):
        build_squad_kb({"data": []}, tmp_path / "empty")


# -- BEIR -------------------------------------------------------------------------------------
def _beir(root: Path, corpus=None, queries=None, qrels=None, split="test") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    corpus = (
        corpus
        if corpus is not None
        else [
            {"_id": "d1", "title": "One", "text": "first doc"},
            {"_id": "d2", "text": "second doc"},
            {"_id": "d3", "title": "Three", "text": "third doc"},
        ]
    )
    queries = (
        queries
        if queries is not None
        else [
            {"_id": "q1", "text": "which first"},
            {"_id": "q2", "text": "which second"},
            {"_id": "q3", "text": "unjudged"},
            {"_id": "q4", "text": "only negatives"},
        ]
    )
    qrels = (
        qrels
        if qrels is not None
        else ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\nq2\td3\t1\nq4\td1\t0\n")
    )
    for name, rows in (("corpus.jsonl", corpus), ("queries.jsonl", queries)):
        text = rows if isinstance(rows, str) else "".join(json.dumps(r) + "\n" for r in rows)
        (root / name).write_text(text, encoding="utf-8")
    (root / "qrels").mkdir(exist_ok=True)
    (root / "qrels" / f"{split}.tsv").write_text(qrels, encoding="utf-8")
    return root


def test_load_beir_folder(tmp_path):
    ds = load_beir(_beir(tmp_path / "tiny"))
    assert ds.name == "tiny"
    assert ds.corpus_ids == ["d1", "d2", "d3"]
    assert ds.corpus_texts == ["first doc", "second doc", "third doc"]
    assert ds.corpus_titles == ["One", "", "Three"]
    assert ds.query_ids == ["q1", "q2"]  # q3 unjudged, q4 only score 0
    assert ds.query_texts == ["which first", "which second"]
    assert ds.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2, "d3": 1}}
    assert ds.gold_ids() == [["d1"], ["d2", "d3"]]
    assert ds.gold_grades() == [{"d1": 1}, {"d2": 2, "d3": 1}]
    res = evaluate_retrieval([["d1"], ["d3", "d2"]], ds.gold_grades(), ks=(1, 2))
    assert res["recall@2"] == 1.0 and res["hit_rate@1"] == 1.0
    log2_3 = 1.5849625007211562
    assert res["ndcg@2"] == pytest.approx((1 + (1 + 2 / log2_3) / (2 + 1 / log2_3)) / 2)


def test_load_beir_other_split_and_headerless_qrels(tmp_path):
    root = _beir(tmp_path / "b", qrels="q1\td2\t1\n", split="dev")
    ds = load_beir(root, split="dev")
    assert ds.qrels == {"q1": {"d2": 1}}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"corpus": '{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": \n'},
            r"corpus\.jsonl line 2: invalid JSON",
        ),
        (
            {"corpus": '{"_id": "d1", "text": "a"}\n\n["x"]\n'},
            r"corpus\.jsonl line 3: expected a JSON object, got list",
        ),
        ({"corpus": [{"text": "no id"}]}, r"corpus\.jsonl line 1: document record has no '_id'"),
        (
            {"corpus": [{"_id": "d1", "title": "t"}]},
            r"corpus\.jsonl line 1: document 'd1' has no 'text' string",
        ),
        (
            {"corpus": [{"_id": "d1", "text": "a"}, {"_id": "d1", "text": "b"}]},
            r"corpus\.jsonl line 2: duplicate document id 'd1'",
        ),
        ({"queries": [{"_id": "q1"}]}, r"queries\.jsonl line 1: query 'q1' has no 'text'"),
        (
            {"qrels": "query-id\tcorpus-id\tscore\nq1\td1\n"},
            r"test\.tsv line 2: expected 3 tab-separated columns .* got 2",
        ),
        (
            {"qrels": "query-id\tcorpus-id\tscore\nq1\td1\thigh\n"},
            r"test\.tsv line 2: score 'high' is not an integer",
        ),
        (
            {"qrels": "query-id\tcorpus-id\tscore\nq9\td1\t1\n"},
            r"test\.tsv line 2: query id 'q9' is not in queries\.jsonl",
        ),
        (
            {"qrels": "query-id\tcorpus-id\tscore\nq1\td9\t1\n"},
            r"test\.tsv line 2: corpus id 'd9' is not in corpus\.jsonl",
        ),
        (
            {"qrels": "query-id\tcorpus-id\tscore\nq1\td1\t0\n"},
            r"test\.tsv: no query has a judgement with score > 0",
        ),
    ],
)
def test_load_beir_malformed(tmp_path, kwargs, match):
    root = _beir(tmp_path / "bad", **kwargs)
    with pytest.raises(ReaderError, match=match):
        load_beir(root)


def test_load_beir_missing_parts(tmp_path):
    with pytest.raises(ReaderError, match=r"BEIR folder .*nowhere.* does not exist"):
        load_beir(tmp_path / "nowhere")
    root = _beir(tmp_path / "b")
    with pytest.raises(ReaderError, match=r"has no qrels/dev\.tsv; available splits: \['test'\]"):
        load_beir(root, split="dev")
    (root / "queries.jsonl").unlink()
    with pytest.raises(ReaderError, match=r"has no queries\.jsonl"):
        load_beir(root)
    (root / "corpus.jsonl").unlink()
    with pytest.raises(ReaderError, match=r"has no corpus\.jsonl"):
        load_beir(root)
