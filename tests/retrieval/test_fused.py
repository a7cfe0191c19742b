"""similarity="bm25_fused": the retriever equal to fusing its two BM25 rankings by hand (bm25's
and bm25_cjk's), both indexes kept in the store, options and errors, the fusion kernel equal
to its NumPy twin, the CLI, the server and the MCP server."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
from mcp_support import mcp_search

import fastrag as fr
from fastrag.cli import main
from fastrag.documents.store import Store
from fastrag.errors import ConfigError
from fastrag.retrieval.fusion import fuse_topk_numpy
from fastrag.retrieval.paths import FusedBM25Path
from fastrag.retrieval.similarity import get_similarity

TEXTS = [
    "Configuring the router: routes are matched in order.",
    "A route with a dynamic parameter matches /users/:id.",
    "路由配置：按顺序匹配路由。",
    "带参数的动态路由匹配 /users/:id",
    "Navigation guards run before each route change.",
    "导航守卫在每次路由变化之前运行。",
    "Stores are folders of Arrow files with a manifest.",
    "Nested routes render children inside a parent layout.",
]
ROOT = Path(__file__).resolve().parents[2]
QUERIES = ["configure the router", "dynamic route parameter", "路由配置", "导航守卫", "nested"]


def _reference(lists, k, method, weights, rrf_k=60.0):
    """Plain-Python fusion of lists of [(row, score)], best first, ties by row."""
    total: dict[int, float] = {}
    for hits, w in zip(lists, weights, strict=True):
        if not hits:
            continue
        lo, hi = min(s for _, s in hits), max(s for _, s in hits)
        for rank, (row, s) in enumerate(hits):
            add = w / (rrf_k + rank + 1) if method == "rrf" else w * ((s - lo) / (hi - lo or 1))
            if method != "rrf" and hi == lo:
                add = w
            total[row] = total.get(row, 0.0) + add
    return sorted(total.items(), key=lambda x: (-x[1], x[0]))[:k]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("fused") / "store"
    fr.Document.from_texts(TEXTS, metadatas=[{"n": i} for i in range(len(TEXTS))], store=str(path))
    return path


@pytest.mark.parametrize(("fusion", "weights"), [("relative", None), ("rrf", [0.7, 0.3])])
def test_fused_retriever_is_its_two_rankings_fused(store, fusion, weights):
    doc = fr.Document(store=str(store))
    depth = len(TEXTS)
    lists = [fr.Retriever(doc, "root", s, topk=depth).batch(QUERIES) for s in ("bm25", "bm25_cjk")]
    ids = doc.group("root").table.column("id").to_pylist()
    ret = fr.Retriever(doc, "root", "bm25_fused", topk=3, fusion=fusion, weights=weights)
    assert isinstance(ret.path, FusedBM25Path) and get_similarity("bm25_fused").kind == "bm25_fused"
    got = ret.batch(QUERIES)
    for q in range(len(QUERIES)):
        ranked = [[(ids.index(h.id), h.score) for h in path[q]] for path in lists]
        want = _reference(ranked, 3, fusion, weights or [0.5, 0.5])
        assert [ids.index(h.id) for h in got[q]] == [r for r, _ in want]
        np.testing.assert_allclose([h.score for h in got[q]], [s for _, s in want], rtol=1e-6)
    # the two rankings differ on these queries (or fusing them would prove nothing)
    assert [[h.id for h in x] for x in lists[0]] != [[h.id for h in x] for x in lists[1]]


def test_both_indexes_are_stored_and_read_back_without_a_build(store):
    first = fr.Document(store=str(store))
    want = fr.Retriever(first, "root", "bm25_fused", topk=4).batch_arrow(QUERIES)
    again = fr.Document(store=str(store), mode="r")
    got = fr.Retriever(again, "root", "bm25_fused", topk=4).batch_arrow(QUERIES)
    assert got.equals(want) and again.derived.builds == {}


def test_prepare_without_loading_stores_both_indexes(tmp_path):
    """``prepare(load=False)`` (what ``fastrag ingest`` does) writes both indexes; a reader
    then builds nothing and gets the writer's hits."""
    path = str(tmp_path / "store")
    writer = fr.Document.from_texts(TEXTS, store=path)
    fr.Retriever(writer, "root", "bm25_fused").prepare(load=False)
    assert writer.derived.builds == {"bm25": 2}
    reader = fr.Document(store=path, mode="r")
    got = fr.Retriever(reader, "root", "bm25_fused", topk=4).batch_arrow(QUERIES)
    want = fr.Retriever(fr.Document.from_texts(TEXTS), "root", "bm25_fused", topk=4)
    assert reader.derived.builds == {}
    assert got.column("score").to_pylist() == want.batch_arrow(QUERIES).column("score").to_pylist()


def test_fused_options_filter_cutoff_and_errors(store):
    doc = fr.Document(store=str(store), mode="r")
    hits = fr.Retriever(doc, "root", "bm25_fused", topk=8, filter="n >= 4")("route")
    assert hits and all(h.metadata["n"] >= 4 for h in hits)
    full = fr.Retriever(doc, "root", "bm25_fused", topk=8)("route")
    cut = fr.Retriever(doc, "root", "bm25_fused", topk=8, similarity_cut_off=0.5)("route")
    assert cut and all(h.score >= 0.5 for h in cut) and len(cut) < len(full)
    only_bm25 = fr.Retriever(doc, "root", "bm25_fused", topk=3, weights=[1, 0])("router")
    plain = fr.Retriever(doc, "root", "bm25", topk=3)("router")
    assert [h.id for h in only_bm25][: len(plain)] == [h.id for h in plain]
    stemmed = fr.Retriever(doc, "root", "bm25_fused", stemmer=None)
    assert stemmed.stemmer is None
    with pytest.raises(ConfigError, match=r"weights has 3 numbers; 'bm25_fused' fuses 2"):
        fr.Retriever(doc, "root", "bm25_fused", weights=[1, 1, 1])
    with pytest.raises(ConfigError, match="fusion"):
        fr.Retriever(doc, "root", "bm25_fused", fusion="max")
    with pytest.raises(ConfigError, match="depth"):
        fr.Retriever(doc, "root", "bm25_fused", depth=0)
    with pytest.raises(ConfigError, match=r"unknown parameters \['coverage'\]"):
        fr.Retriever(doc, "root", "bm25_fused", coverage=True)
    with pytest.raises(ConfigError, match="k1"):
        fr.Retriever(doc, "root", "bm25_fused", k1=-1)


def test_why_no_hits_reads_both_analyzers(store):
    """A query neither ranking can score is explained with both analyzers' terms; one that
    only bm25 drops (stopwords) still finds bm25_cjk's hits."""
    doc = fr.Document(store=str(store), mode="r")
    ret = fr.Retriever(doc, "root", "bm25_fused", topk=3)
    assert ret("jumping xylophones") == []
    msg = ret.why_no_hits("jumping xylophones")
    assert msg.startswith("none of the query's terms (jump, xylophon, jumping, xylophones) ")
    assert ret("?!") == []
    assert ret.why_no_hits("?!").startswith(
        "the query has no indexable terms: the 'bm25' and the 'bm25_cjk' analyzers drop all"
    )
    assert fr.Retriever(doc, "root", "bm25", topk=3)("the with") == []
    assert sorted(h.metadata["n"] for h in ret("the with")) == [0, 1, 6]


def test_fused_through_the_cli(store, capsys):
    want = fr.Retriever(fr.Document(store=str(store), mode="r"), "root", "bm25_fused", topk=3)
    ids = [h.id for h in want("dynamic route parameter")]
    capsys.readouterr()
    assert main(["search", str(store), "dynamic route parameter", "--similarity", "bm25_fused",
                 "--topk", "3", "--json"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [r["id"] for r in rows] == ids


def test_the_fusion_kernel_equals_its_numpy_twin():
    """The same rows, counts and float32 scores, bit for bit: random lists with repeated rows
    across lists, equal scores and empty queries, for several k."""
    from fastrag._kernels.fusion import fuse_topk  # lazy: numba

    rng = np.random.default_rng(3)
    found = 0
    for trial in range(30):
        nq, n_lists = int(rng.integers(1, 40)), int(rng.integers(1, 4))
        parts = []
        for _ in range(n_lists):
            depth = int(rng.integers(0, 12))
            q = np.repeat(np.arange(nq), depth)
            keep = rng.random(len(q)) < 0.8
            row = rng.integers(0, 25, len(q))
            contrib = rng.integers(0, 4, len(q)) / 3.0  # equal sums on purpose
            parts.append((q[keep], row[keep], contrib[keep]))
        q, row, contrib = (np.concatenate([p[i] for p in parts]) for i in range(3))
        q, row = q.astype(np.int64), row.astype(np.int64)
        for k in (1, 3, 10):
            outs = []
            for fuse in (fuse_topk, fuse_topk_numpy):
                out = (np.full((nq, k), -1, np.int64), np.zeros((nq, k), np.float32))
                counts = np.zeros(nq, np.int32)
                fuse(q, row, contrib.astype(np.float64), k, *out, counts)
                outs.append((*out, counts))
            for a, b in zip(*outs, strict=True):
                assert a.tobytes() == b.tobytes(), (trial, k)
            found += int(outs[0][2].sum())
    assert found > 1000


def test_fused_through_serve_and_mcp(store, tmp_path):
    """The server (real HTTP on 127.0.0.1) and the MCP server return the Retriever's hits."""
    sys.path.insert(0, str(ROOT / "tests" / "serve"))
    from serve_support import ServeProcess

    ret = fr.Retriever(fr.Document(store=str(store), mode="r"), "root", "bm25_fused", topk=3)
    want = [[(h.id, round(h.score, 5)) for h in hits] for hits in ret.batch(QUERIES)]
    proc = ServeProcess(
        [str(store), "--similarity", "bm25_fused", "--topk", "3"], tmp_path / "serve.log"
    )
    try:
        body = httpx.post(f"{proc.url}/v1/retrieve", json={"queries": QUERIES}, timeout=60).json()
    finally:
        proc.stop()
    assert body["similarity"] == "bm25_fused"
    assert [[(h["id"], round(h["score"], 5)) for h in q] for q in body["results"]] == want
    hits = mcp_search(store, QUERIES[0], similarity="bm25_fused", topk=3)
    assert [(h["id"], round(h["score"], 5)) for h in hits] == want[0]


def test_a_sharded_index_refuses_fused_and_says_what_to_do(tmp_path):
    from fastrag.ray import build_index  # lazy: the sharded builder

    with pytest.raises(ConfigError, match=r"not 'bm25_fused'.*bm25 and bm25_cjk for bm25_fused"):
        build_index(TEXTS, tmp_path / "sharded", similarity="bm25_fused", executor="local")
    assert not (tmp_path / "sharded").exists()


SEARCHER = """
import json, sys
import fastrag as fr
ret = fr.Retriever(fr.Document(store=sys.argv[1]), "root", "bm25_fused", topk=3)
print(json.dumps([[h.id for h in hits] for hits in ret.batch(json.loads(sys.argv[2]))]))
"""


def test_threads_and_two_processes_share_the_fused_indexes(tmp_path):
    """Eight threads on one Retriever get the serial hits; two processes that find no index
    both build into one store, get the same hits, and leave a store that verifies."""
    path = tmp_path / "store"
    fr.Document.from_texts(TEXTS, store=str(path))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SEARCHER, str(path), json.dumps(QUERIES)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    doc = fr.Document(store=str(path), mode="r")
    ret = fr.Retriever(doc, "root", "bm25_fused", topk=3)
    want = [[h.id for h in hits] for hits in ret.batch(QUERIES)]
    assert outs == [want, want] and doc.derived.builds == {}
    assert Store(path).verify() == []
    got: list = []

    def search() -> None:
        for _ in range(5):
            got.append([[h.id for h in hits] for hits in ret.batch(QUERIES)])

    threads = [threading.Thread(target=search) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [want] * 40


def test_a_read_only_store_without_the_second_index_is_not_written(tmp_path):
    path = tmp_path / "store"
    fr.Retriever(fr.Document.from_texts(TEXTS, store=str(path)), "root", "bm25").prepare()
    before = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    doc = fr.Document(store=str(path), mode="r")
    hits = fr.Retriever(doc, "root", "bm25_fused", topk=3).batch(QUERIES)
    assert all(hits) and doc.derived.builds == {"bm25": 1}  # bm25_cjk's, in memory
    assert {p: p.read_bytes() for p in path.rglob("*") if p.is_file()} == before
