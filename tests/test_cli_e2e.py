"""From files to answers with the command line, each verb in its own process: ingest a mixed
folder, search (one query, a batch to JSONL/Parquet), ask (a real HTTP LLM, and none), eval,
re-open the CLI store from Python. Further checks of a command's output run it in this process
(``here``): a process start costs more than they do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import fastrag as fr
from fastrag.cli.main import main
from fastrag.errors import StoreWarning

ROOT = Path(__file__).resolve().parents[1]
LATIN = "Caf\u00e9 na\u00efve r\u00e9sum\u00e9: the \u00abclich\u00e9\u00bb of d\u00e9j\u00e0 vu."


def run(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "fastrag.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    if check:
        assert proc.returncode == 0, (args, proc.stdout[-2000:], proc.stderr[-3000:])
    return proc


def here(capsys, *args: str) -> tuple[int, str, str]:
    """``fastrag ARGS`` in this process: (exit status, stdout, stderr)."""
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("cli")
    kb = base / "kb"
    (kb / "guide").mkdir(parents=True)
    (kb / "guide" / "install.md").write_text(
        "# Installing\nRun pip install fastrag-engine to install the package.\n"
        "Python 3.10 or newer is required.\n",
        encoding="utf-8",
    )
    (kb / "guide" / "tuning.rst").write_text(
        "Tuning\n======\n\nThe k1 parameter controls term frequency saturation.\n"
        "The b parameter controls length normalization.\n",
        encoding="utf-8",
    )
    (kb / "faq.html").write_text(
        "<html><head><title>FAQ</title><style>p{}</style></head><body>"
        "<p>Stores are folders of Arrow files.</p><p>A manifest names every file.</p>"
        "</body></html>",
        encoding="utf-8",
    )
    (kb / "people.json").write_text(
        json.dumps({"team": {"lead": "Ada", "members": ["Grace", "Linus"]}}), encoding="utf-8"
    )
    (kb / "notes").write_text(
        "Cafe notes: the espresso machine is on the second floor.\n", encoding="utf-8"
    )
    (kb / "latin1.txt").write_bytes(LATIN.encode("cp1252") + b"\n")
    (kb / "blob.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    store = base / "kb" / "store"  # a store inside the source folder is never read as a source
    run("ingest", str(kb), "--store", str(store), "--group", "line=lines", "-q")
    return kb, store


def test_ingest_summary_and_reopen_from_python(corpus):
    kb, store = corpus
    doc = fr.Document(store=store, mode="r")
    assert "line" in doc.group_names
    files = {Path(n.metadata["file_path"]).name for n in doc.group("root")}
    assert files == {"install.md", "tuning.rst", "faq.html", "people.json", "notes", "latin1.txt"}
    texts = doc.group("line").texts()
    assert LATIN in texts
    assert any("Ada" in t for t in texts)
    # ingesting the same folder again changes nothing
    gen = json.loads((store / "manifest.json").read_text())["generation"]
    out = run("ingest", str(kb), "--store", str(store), "-q")
    assert json.loads((store / "manifest.json").read_text())["generation"] == gen
    assert "blob.txt" in out.stdout or "binary" in out.stdout  # the summary counts the binary


def test_search_table_json_and_batch(corpus, tmp_path, capsys):
    kb, store = corpus
    out = run("search", str(store), "length normalization parameter", "--topk", "3").stdout
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["rank", "score", "source"]
    assert "tuning.rst" in lines[1] and "length normalization" in lines[1]
    code, out, _ = here(capsys, "search", str(store), "espresso", "--json")
    hits = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and hits[0]["path"] == "notes" and hits[0]["rank"] == 1
    code, out, _ = here(
        capsys,
        "search",
        str(store),
        "the parameter files",
        "--json",
        "--filter",
        "file_type == 'html'",
    )
    filtered = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and filtered and {Path(h["path"]).suffix for h in filtered} == {".html"}
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        "\n".join(json.dumps({"query": q}) for q in ["install the package", "Arrow files", "Grace"])
    )
    run("search", str(store), "--queries", str(queries), "--out", str(tmp_path / "h.parquet"))
    table = pq.read_table(tmp_path / "h.parquet")
    assert sorted(set(table.column("query_idx").to_pylist())) == [0, 1, 2]
    top = {r["query_idx"]: r["path"] for r in table.to_pylist() if r["rank"] == 1}
    assert top == {0: "guide/install.md", 1: "faq.html", 2: "people.json"}
    code = here(
        capsys, "search", str(store), "--queries", str(queries), "--out", str(tmp_path / "h.jsonl")
    )[0]
    assert code == 0
    assert len((tmp_path / "h.jsonl").read_text().splitlines()) == table.num_rows


def test_ask_with_an_llm_over_http_and_without_one(corpus, openai_server):
    kb, store = corpus
    openai_server.reply = "Install it with pip install fastrag-engine."
    out = run(
        "ask",
        str(store),
        "How do I install it?",
        "--base-url",
        openai_server.url,
        "--model",
        "test-model",
    )
    assert out.stdout.startswith("Install it with pip install fastrag-engine.")
    assert "Sources:" in out.stdout and "guide/install.md" in out.stdout.split("Sources:")[1]
    prompt = openai_server.requests[-1].body["messages"][-1]["content"]
    assert "pip install fastrag-engine" in prompt and "How do I install it?" in prompt
    env = {"FASTRAG_LLM_BASE_URL": "", "FASTRAG_LLM_MODEL": ""}
    out = run("ask", str(store), "How do I install it?", env=env)
    assert "Run pip install fastrag-engine to install the package." in out.stdout
    assert "[guide/install.md]" in out.stdout
    assert "FASTRAG_LLM_BASE_URL" in out.stderr and "Traceback" not in out.stderr


def test_eval_on_own_questions(corpus, tmp_path):
    kb, store = corpus
    qs = tmp_path / "qs.jsonl"
    qs.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"question": "which python version is required", "answer": "Python 3.10"},
                {"question": "where is the espresso machine", "source": "notes"},
                {"question": "what controls term frequency saturation", "answer": "k1 parameter"},
            ]
        )
    )
    out = run(
        "eval",
        str(store),
        "--questions",
        str(qs),
        "--topk",
        "1,3",
        "--json",
        str(tmp_path / "r.json"),
    ).stdout
    assert "bm25 |" in out  # English data: the English analyzer
    res = json.loads((tmp_path / "r.json").read_text())
    assert list(res["similarities"]) == ["bm25"]
    assert res["similarities"]["bm25"]["hit_rate@3"] == 1.0


def test_version_errors_and_a_closed_pipe(corpus, tmp_path, capsys):
    kb, store = corpus
    out = run("--version")
    assert out.stdout.startswith("fastrag ")
    bad = run("search", str(kb / "nothing"), "x", check=False)
    assert bad.returncode == 2 and "not a fastrag store" in bad.stderr
    code, _, err = here(capsys, "ingest", str(kb / "guide"), "--store", str(store), "-q")
    assert code == 2 and "--add" in err and "--replace" in err
    many = tmp_path / "many.txt"  # megabytes of output: the pipe closes while it writes
    many.write_text("install the parameter files\n" * 3000)
    shell = subprocess.run(
        f"{sys.executable} -m fastrag.cli search {store} --queries {many} --json | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert shell.stdout.count("\n") == 1 and "Traceback" not in shell.stderr
    assert "BrokenPipe" not in shell.stderr


def test_first_run_says_kernels_are_compiling(tmp_path):
    """With an empty numba cache the first import of the kernels says so; once a kernel is
    cached, it says nothing."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    code = (  # one of the quickest kernels to compile
        "import numpy as np\nfrom fastrag._kernels.dense import row_sq_norms_serial\n"
        "row_sq_norms_serial(np.ones((2, 4), np.float32), np.zeros(2))\n"
    )
    first = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert first.returncode == 0, first.stderr[-2000:]
    assert "compiling kernels (first run only" in first.stderr
    second = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert second.returncode == 0 and "compiling kernels" not in second.stderr


FIRST_QUERIES = """
import fastrag as fr
from fastrag.errors import StoreWarning
from fastrag.datasets import load_cmrc2018_dev
from fastrag.eval.loaders import squad_questions
q, _, ctx = squad_questions(load_cmrc2018_dev())
doc = fr.Document.from_texts(ctx[:100])
doc.create_node_group("line", transform=fr.LineSplitter())
for sim in ("bm25_chinese", "bm25_cjk"):
    ret = fr.Retriever(doc, "line", sim, topk=5)
    assert ret(q[0]) and len(ret.batch(q[:200])) == 200
en = fr.Document.from_texts(["stores are folders of files"] * 50)
fr.Retriever(en, "root", "bm25", topk=3).batch(["folders", "files"] * 20)
"""


@pytest.mark.slow  # compiles every kernel in a fresh cache: CI's full run
def test_warmup_compiles_what_first_queries_need(tmp_path):
    """After `fastrag warmup` into a fresh numba cache, the first queries of a new process
    (Chinese and English BM25, single and batch) compile nothing more."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    warm = subprocess.run(
        [sys.executable, "-m", "fastrag.cli", "warmup"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=900,
    )
    assert warm.returncode == 0, warm.stderr[-2000:]
    assert "warm-up done" in warm.stdout
    before = {p.name for p in (tmp_path / "numba").rglob("*.nbc")}
    assert before
    run_ = subprocess.run(
        [sys.executable, "-c", FIRST_QUERIES],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert run_.returncode == 0, run_.stderr[-2000:]
    after = {p.name for p in (tmp_path / "numba").rglob("*.nbc")}
    assert after == before, sorted(after - before)
    assert "compiling kernels" not in run_.stderr


def test_cli_usage_errors_are_one_line(corpus, tmp_path, capsys, monkeypatch):
    from fastrag.cli import main

    kb, store = corpus
    monkeypatch.delenv("FASTRAG_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("FASTRAG_LLM_MODEL", raising=False)
    cases = [
        (["search", str(store)], "give one query, or --queries FILE"),
        (["search", str(store), "x", "--queries", "q.txt"], "give one query, or --queries"),
        (["search", str(store), "--queries", str(tmp_path / "none.txt")], "no such file"),
        (["search", str(store), "x", "--group", "nope"], "unknown node group 'nope'"),
        (
            ["ask", str(store), "x", "--base-url", "http://127.0.0.1:9/v1"],
            "needs both a base URL and a model",
        ),
        (["eval", str(store)], "eval needs STORE and --questions FILE"),
        (["eval", str(store), "--questions", str(tmp_path / "none.jsonl")], "no such file"),
        (
            ["ingest", str(kb), "--store", str(tmp_path / "new"), "--add"],
            "--add needs an existing store",
        ),
    ]
    bad_q = tmp_path / "bad.jsonl"
    bad_q.write_text('{"question": "x"}\n')
    cases.append(
        (
            ["eval", str(store), "--questions", str(bad_q)],
            "needs 'question' and one of 'answer', 'source' or 'node_ids'",
        )
    )
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (argv, err)


def test_sources_show_the_path_under_the_ingested_folder(tmp_path):
    """The same page in two languages is two sources (en/cors.md, zh/cors.md), not cors.md
    twice; a file ingested on its own is its name; a moved store still shows them."""
    docs = tmp_path / "docs"
    for lang, text in (
        ("en", "Cross-origin requests: allowed origins."),
        ("zh", "Cross-origin 跨域 requests 请求"),
    ):
        (docs / lang).mkdir(parents=True)
        (docs / lang / "cors.md").write_text(text)
    store = tmp_path / "s.store"
    run("ingest", str(docs), "--store", str(store))
    hits = [
        json.loads(x)
        for x in run("search", str(store), "cross-origin requests", "--json").stdout.splitlines()
    ]
    assert sorted(h["path"] for h in hits) == ["en/cors.md", "zh/cors.md"]
    moved = tmp_path / "moved.store"
    store.rename(moved)
    docs.rename(tmp_path / "gone")
    with pytest.warns(StoreWarning, match="2 of its source files are missing"):
        doc = fr.Document(store=str(moved), mode="r")
    paths = [n.metadata["file_path"] for n in doc.group("root").nodes(range(2))]
    assert sorted(doc.source_path(p) for p in paths) == ["en/cors.md", "zh/cors.md"]
    single = fr.Document(str(tmp_path / "gone" / "en" / "cors.md"))
    assert single.source_path(single.group("root").nodes([0])[0].metadata["file_path"]) == "cors.md"
    assert single.source_path(tmp_path / "gone" / "zh" / "cors.md") == "cors.md"  # a Path
    with pytest.raises(fr.ConfigError, match=r"file_path must be a non-empty str .*, got int 5"):
        single.source_path(5)


def test_mixed_folder_default_analyzer_and_no_hit_reasons(tmp_path, capsys):
    """A folder of English and Chinese pages: the default finds Chinese questions (no
    --similarity), and a query without hits says why and what to do."""
    docs = tmp_path / "docs"
    for lang, text in (
        ("en", "Upload files by dragging them onto the drop zone."),
        ("zh", "上传文件：把文件拖到上传区域即可上传。"),
    ):
        (docs / lang).mkdir(parents=True)
        (docs / lang / "upload.md").write_text(text, encoding="utf-8")
    store = tmp_path / "s.store"
    run("ingest", str(docs), "--store", str(store))
    hits = [
        json.loads(x)
        for x in run("search", str(store), "如何上传文件", "--json").stdout.splitlines()
    ]
    assert hits[0]["path"] == "zh/upload.md"
    out = here(capsys, "search", str(store), "the of and")[1]
    assert "no hits: the query has no indexable terms" in out
    out = here(capsys, "search", str(store), "如何上传文件", "--similarity", "bm25_english")[1]
    assert "keeps a run of Chinese characters as one word" in out
    code, out, _ = here(capsys, "ask", str(store), "xylophone")
    assert code == 1
    assert "none of the query's terms (xylophon) occurs in group" in out
