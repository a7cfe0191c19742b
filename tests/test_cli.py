"""The fastrag command line: ingest (with groups), info, eval, and their errors."""

from __future__ import annotations

import json

import pytest

from fastrag.cli import main


def test_ingest_then_info(tmp_path, capsys):
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.txt").write_text("第一段。第二句。\n第二段。", encoding="utf-8")
    (kb / "b.md").write_text("one line\nanother line\n\npara two", encoding="utf-8")
    store = tmp_path / "st"
    rc = main(
        [
            "ingest",
            str(kb),
            "--store",
            str(store),
            "--group",
            "block=lines",
            "--group",
            "s=sentence:16:2@block",
            "--builtin",
            "FineChunk",
            "-q",
        ]
    )
    assert rc == 0
    manifest = json.loads((store / "manifest.json").read_text())
    assert manifest["groups"]["block"]["nodes"] == 5  # empty line dropped
    assert manifest["groups"]["s"]["parent"] == "block"
    assert set(manifest["groups"]) == {"root", "block", "s", "FineChunk"}
    capsys.readouterr()
    assert main(["info", str(store)]) == 0
    out = capsys.readouterr().out
    assert "block" in out and "FineChunk" in out and " 5 " in out.replace(",", "")


def test_ingest_add_then_search_finds_both_folders(tmp_path, capsys):
    """The walkthrough's `ingest docs/` then `ingest more/ --add` (its shell run is slow-marked):
    the second folder joins the store and both are searched."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "store.md").write_text("A store is verified by checksums.\n")
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "notes.txt").write_text("Verification runs on every read.\n")
    store = str(tmp_path / "my.store")
    assert main(["ingest", str(tmp_path / "docs"), "--store", store, "-q"]) == 0
    assert main(["ingest", str(tmp_path / "more"), "--store", store, "--add", "-q"]) == 0
    capsys.readouterr()
    assert main(["search", store, "checksums", "--json"]) == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert hits[0]["path"] == "store.md"
    # retrieval.present's record, after the query's fields, with the whole text
    keys = ["query_idx", "query", "rank", "id", "doc_id", "score", "path", "page", "snippet"]
    assert list(hits[0]) == [*keys, "text"]
    assert main(["search", store, "every read", "--json"]) == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert hits[0]["path"] == "notes.txt"


def test_cli_errors(tmp_path, capsys):
    assert main(["info", str(tmp_path)]) == 2
    assert "not a fastrag store" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["ingest", str(tmp_path), "--store", str(tmp_path / "s"), "--group", "oops"])
    assert "expected NAME=SPEC" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["ingest", str(tmp_path), "--store", str(tmp_path / "s"), "--group", "x=words"])
    assert "unknown SPEC 'words'" in capsys.readouterr().err
    assert main(["ingest", str(tmp_path / "missing"), "--store", str(tmp_path / "s2"), "-q"]) == 2
    assert "error:" in capsys.readouterr().err


def test_eval_on_a_small_squad_file(tmp_path, capsys):
    squad = {
        "version": "t",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "猫坐在垫子上。",
                        "qas": [{"id": "1", "question": "猫坐在哪里？", "answers": []}],
                    },
                    {
                        "context": "今天天气很好，阳光明媚。",
                        "qas": [{"id": "2", "question": "今天天气怎么样？", "answers": []}],
                    },
                    {
                        "context": "亚硫酸盐是一种食品添加剂。",
                        "qas": [{"id": "3", "question": "亚硫酸盐是什么？", "answers": []}],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")
    out_json = tmp_path / "res.json"
    rc = main(
        [
            "eval",
            "--squad",
            str(path),
            "--kb-per-file",
            "2",
            "--topk",
            "1,2",
            "--json",
            str(out_json),
        ]
    )
    assert rc == 0
    res = json.loads(out_json.read_text())
    assert res["n_queries"] == 3 and res["n_nodes"] == 3
    assert res["similarities"]["bm25_chinese"]["recall@1"] == 1.0
    assert set(res["similarities"]) == {"bm25_chinese", "bm25_cjk"}
    assert "recall@1 | recall@2" in capsys.readouterr().out


def test_info_cpu_says_which_dense_pass_runs_and_why(tmp_path, capsys, monkeypatch):
    """``fastrag info --cpu``: the SIMD classes, the int8 probe's verdict and reason (cached per
    CPU: the second call measures nothing), the pass a batch dense search takes; misuse is a
    usage error."""
    from fastrag.indexes import int8

    monkeypatch.setenv("FASTRAG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FASTRAG_INT8", raising=False)
    monkeypatch.setattr(int8, "_STATE", {})
    assert main(["info", "--cpu"]) == 0
    out = capsys.readouterr().out
    assert "SIMD: AVX2 " in out and "dense batch search (FlatIndex defaults):" in out
    probe = int8.int8_probe()
    assert f"int8 first pass: {'yes' if probe['fast'] else 'no'}: {probe['reason']}" in out
    if int8.int8_format() is not None:
        monkeypatch.setattr(int8, "_STATE", {})
        monkeypatch.setattr(int8, "_timed_probe", lambda fmt: pytest.fail("probed again"))
        assert main(["info", "--cpu"]) == 0
        assert "(cached in " in capsys.readouterr().out
    assert main(["info"]) == 2
    assert "name a store (fastrag info STORE), or pass --cpu" in capsys.readouterr().err
    assert main(["info", "--cpu", str(tmp_path)]) == 2
    assert "pass it alone" in capsys.readouterr().err


def test_a_command_parses_the_same_with_only_its_module_loaded():
    """main() builds only the command it runs (fast start): the same namespace, handler and
    ``fastrag --help`` as the whole parser."""
    from fastrag.cli.main import build_parser, command_of

    assert build_parser([]).format_help() == build_parser().format_help()
    for name, argv in (
        ("search", ["search", "S", "q", "--topk", "3", "--json"]),
        ("ask", ["--plugin", "search", "ask", "S", "why?"]),
        ("info", ["--plugin=m", "--pl", "n", "info", "--cpu"]),
        ("mcp", ["mcp", "S", "--http", "--port", "9"]),
        ("serve", ["serve", "S", "--workers", "2"]),
        ("ingest", ["ingest", "kb", "--store", "S", "--group", "b=lines"]),
        ("warmup", ["warmup", "--jobs", "1"]),
        ("embed", ["embed", "--build-static", "minilm", "--dim", "64"]),
        ("eval", ["eval", "S", "--questions", "q.jsonl"]),
        ("demo", ["demo", "--topk", "1"]),
    ):
        assert command_of(argv) == name
        assert vars(build_parser([name]).parse_args(argv)) == vars(build_parser().parse_args(argv))
    for argv in ([], ["--help"], ["--version"], ["nope", "S"], ["--", "search"], ["--plugin"]):
        assert command_of(argv) is None


def test_the_store_as_a_flag_as_ingest_takes_it(tmp_path, capsys):
    """`fastrag search --store ST QUERY` (and ask, eval, mcp) equals `fastrag search ST QUERY`;
    a store given both ways must agree, and a missing one is a usage error."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("A store is verified by checksums.\n")
    (tmp_path / "docs" / "b.md").write_text("Queries run in batches.\n")
    store = str(tmp_path / "st")
    assert main(["ingest", str(tmp_path / "docs"), "--store", store, "-q"]) == 0
    capsys.readouterr()
    assert main(["search", store, "checksums", "--json"]) == 0
    positional = capsys.readouterr().out
    assert main(["search", "--store", store, "checksums", "--json"]) == 0
    assert capsys.readouterr().out == positional
    assert main(["search", "checksums", "--store", store, "--json"]) == 0
    assert capsys.readouterr().out == positional
    assert main(["search", store, "checksums", "--store", store, "--json"]) == 0
    assert capsys.readouterr().out == positional
    assert json.loads(positional.splitlines()[0])["path"] == "a.md"
    assert main(["search", store, "store batches", "--json", "--topk", "1"]) == 0
    one = capsys.readouterr().out
    assert len(one.splitlines()) == 1
    assert main(["search", store, "store batches", "--json", "-k", "1"]) == 0  # as bm25s's k
    assert capsys.readouterr().out == one
    assert main(["ask", "--store", store, "how is a store verified?"]) == 0
    assert "a.md" in capsys.readouterr().out
    cases = [
        (["search", "other", "checksums", "--store", store], "given twice"),
        (["search", "--queries", "q.txt"], "name the store: `fastrag search STORE"),
        (["ask", "--store", store], "give the question"),
        (["serve"], "name the store: `fastrag serve STORE"),
        (["mcp", "--store", str(tmp_path / "none")], "is not a fastrag store"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv
