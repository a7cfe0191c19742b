"""Each similarity is a search path object (fastrag.retrieval.paths): a new kind is one class
and one registry row, and it runs through Retriever, ShardedRetriever, ``fastrag serve`` and
the MCP server with nothing else edited; no code outside the paths branches on a kind."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from mcp_support import mcp_search

import fastrag as fr
from fastrag.errors import ConfigError
from fastrag.retrieval.paths import (
    BM25Path,
    CustomPath,
    DensePath,
    HybridPath,
    MapPath,
    SearchPath,
    SparsePath,
)
from fastrag.retrieval.similarity import get_similarity

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE / "plugins"))
import toy_kind  # noqa: E402  (registers the "toy" similarity)

TEXTS = [
    "the cat sat on the mat",
    "a dog and a cat play",
    "stock prices fell sharply today",
    "the dog barked at the mailman",
    "cats and dogs are common pets",
    "the mat was red",
]
QUERIES = ["the cat on the mat", "dog", "prices today", "nothing matches here"]


def reference(k: int) -> list[list[tuple[str, float]]]:
    """Plain-Python toy scores: distinct query words in the node, ties by row."""
    out = []
    for q in QUERIES:
        scored = [(len(toy_kind.words(q) & toy_kind.words(t)), i) for i, t in enumerate(TEXTS)]
        hits = sorted((s, i) for s, i in scored if s > 0)
        hits.sort(key=lambda x: (-x[0], x[1]))
        out.append([(f"n{i}", float(s)) for s, i in hits[:k]])
    return out


def hits_of(results) -> list[list[tuple[str, float]]]:
    return [[(h.node.id, h.score) for h in hits] for hits in results]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("toy") / "store"
    fr.Document.from_texts(TEXTS, None, [f"n{i}" for i in range(len(TEXTS))], store=str(path))
    return path


def test_registry_maps_each_name_to_its_path():
    rows = {
        "bm25": BM25Path,
        "bm25_cjk": BM25Path,
        "cosine": DensePath,
        "dot": DensePath,
        "sparse": SparsePath,
        "hybrid": HybridPath,
        "toy": toy_kind.ToyPath,
    }
    for name, path in rows.items():
        assert get_similarity(name).path is path and get_similarity(name).kind == path.kind
    assert MapPath.kind == "map" and CustomPath.kind == "custom"
    with pytest.raises(ConfigError, match="SearchPath subclass with a kind"):
        fr.register_similarity(name="bad", path=dict)
    with pytest.raises(ConfigError, match="built-in similarity"):
        fr.register_similarity(name="bm25", path=toy_kind.ToyPath)


def test_a_new_kind_runs_through_the_retriever(store):
    doc = fr.Document(store=str(store), mode="r")
    ret = fr.Retriever(doc, "root", "toy", topk=3)
    assert isinstance(ret.path, toy_kind.ToyPath) and isinstance(ret.path, SearchPath)
    assert hits_of(ret.batch(QUERIES)) == reference(3)
    assert ret("") == []
    assert hits_of([ret("dog", filter=lambda t: np.arange(t.num_rows) != 1)]) == [[("n3", 1.0)]]
    with pytest.raises(ConfigError, match=r"unknown parameters \['k1'\] for similarity 'toy'"):
        fr.Retriever(doc, "root", "toy", k1=1.2)
    with pytest.raises(ConfigError, match="analyzer= applies to BM25"):
        fr.Retriever(doc, "root", "toy", analyzer="bm25")


def test_a_new_kind_runs_through_a_sharded_index(tmp_path):
    from fastrag.ray import build_index

    sr = build_index(
        TEXTS, tmp_path / "sharded", similarity="toy", num_shards=3, executor="local", topk=3
    )
    assert len(sr.segments) == 3 and len(sr) == len(TEXTS)
    by_text = {t: f"n{i}" for i, t in enumerate(TEXTS)}  # the index numbers a list of texts
    got = [[(by_text[h.node.text], h.score) for h in hits] for hits in sr.batch(QUERIES)]
    assert got == reference(3)


def test_a_new_kind_runs_through_serve_and_mcp(store, tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "serve"))
    from serve_support import ServeProcess

    proc = ServeProcess(
        [str(store), "--similarity", "toy", "--topk", "3"],
        tmp_path / "serve.log",
        env={"PYTHONPATH": f"{ROOT}{os.pathsep}{HERE / 'plugins'}", "FASTRAG_PLUGINS": "toy_kind"},
    )
    try:
        body = httpx.post(f"{proc.url}/v1/retrieve", json={"queries": QUERIES}, timeout=60).json()
    finally:
        proc.stop()
    assert body["similarity"] == "toy"
    assert [[(h["id"], h["score"]) for h in q] for q in body["results"]] == reference(3)
    assert body["no_hits"][0]["query_idx"] == 3

    hits = mcp_search(store, QUERIES[0], similarity="toy", topk=3)
    assert [(h["id"], h["score"]) for h in hits] == reference(3)[0]


def test_no_code_outside_the_paths_branches_on_a_kind():
    """``.kind`` of a similarity is read only in fastrag/retrieval/paths/ and the registry."""
    allowed = {ROOT / "fastrag" / "retrieval" / "similarity.py"}
    found = []
    for path in sorted((ROOT / "fastrag").rglob("*.py")):
        if "paths" in path.relative_to(ROOT / "fastrag").parts or path in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "kind":
                src = ast.unparse(node.value)
                if "sim" in src.lower():
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {src}.kind")
    assert found == []


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE / 'plugins'}"}
    env.pop("FASTRAG_PLUGINS", None)
    return subprocess.run(
        [sys.executable, "-m", "fastrag.cli", *args], capture_output=True, text=True, env=env
    )


def test_the_cli_loads_a_plugin_and_names_one_that_fails(store):
    done = _cli(
        "--plugin", "toy_kind", "search", str(store), "dog", "--similarity", "toy", "--json"
    )
    assert done.returncode == 0, done.stderr
    hits = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(h["id"], h["score"]) for h in hits] == reference(10)[1]
    bad = _cli("--plugin", "no_such_plugin", "search", str(store), "dog")
    assert bad.returncode == 2
    assert "plugin 'no_such_plugin' could not be imported (ModuleNotFoundError" in bad.stderr
    unknown = _cli("search", str(store), "dog", "--similarity", "toy")
    assert unknown.returncode == 2 and "unknown similarity 'toy'" in unknown.stderr
