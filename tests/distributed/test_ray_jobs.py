"""fastrag.ray jobs on a real local Ray cluster (ray.init(num_cpus=2)): retrieval, shard builds,
embedding, synthesis and parsing, a killed actor, bad rows."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import fastrag as fr
from fastrag.datasets import load_cmrc2018_dev, squad_questions
from fastrag.distributed.sharded import ranks_of

ray = pytest.importorskip("ray", reason="needs the [ray] extra: pip install -e '.[ray]'")
pytestmark = pytest.mark.ray


def base1(table: pa.Table) -> pa.Table:
    """A single-process ``batch_arrow`` table with ranks from 1 (fastrag's one rank base;
    unchanged when the Retriever already counts from 1)."""
    i = table.schema.get_field_index("rank")
    return table.set_column(i, "rank", pa.array(ranks_of(table.column("query_idx").to_numpy())))


@pytest.fixture(scope="module")
def cluster():
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"FASTRAG_BACKGROUND_COMPILE": "0"}},
    )
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def cmrc(tmp_path_factory):
    """A CMRC store (with metadata to filter on) and its questions."""
    questions, _, contexts = squad_questions(load_cmrc2018_dev())
    metas = [{"part": i % 3} for i in range(len(contexts))]
    path = tmp_path_factory.mktemp("cmrc") / "store"
    fr.Document.from_texts(contexts, metas, store=path)
    return path, contexts, metas, questions


def processes() -> list[tuple[int, str]]:
    """(pid, command line) of this machine's processes (Ray names actor processes
    ``ray::MapWorker(MapBatches(<class>))``)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    out.append((int(entry), f.read().replace(b"\0", b" ").decode(errors="replace")))
            except OSError:
                continue
    return out


def collect(ds) -> pa.Table:
    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


def as_batch_arrow(t: pa.Table) -> pa.Table:
    """The job's rows in batch_arrow's shape and order."""
    t = t.sort_by([("query_index", "ascending"), ("rank", "ascending")])
    return pa.table(
        {
            "query_idx": t.column("query_index").cast(pa.int32()),
            "rank": t.column("rank"),
            "node_id": t.column("node_id"),
            "score": t.column("score"),
        }
    )


@pytest.mark.parametrize(
    "similarity,flt",
    [("bm25_chinese", None), ("bm25_chinese", "part == 2"), ("bm25_cjk", {"part": 0})],
)
def test_retrieve_equals_batch_arrow(cluster, cmrc, similarity, flt):
    path, _, _, questions = cmrc
    ds = fr.ray.retrieve(
        path, questions, similarity=similarity, topk=10, filter=flt, batch_size=400, concurrency=2
    )
    got = collect(ds)
    assert got.column("error").null_count == got.num_rows
    doc = fr.Document(store=path, mode="r")
    want = base1(fr.Retriever(doc, "root", similarity, topk=10).batch_arrow(questions, filter=flt))
    assert as_batch_arrow(got).equals(want)
    # the query's own column comes along with every hit
    assert got.column("query").to_pylist() == [
        questions[i] for i in got.column("query_index").to_pylist()
    ]


def test_retrieve_cosine_with_filter_on_cmrc(cluster, tmp_path, cmrc, openai_server):
    _, contexts, metas, questions = cmrc
    emb = fr.OpenAIEmbedding(model="m", base_url=openai_server.url, api_key="k")
    fr.Document.from_texts(contexts, metas, store=tmp_path / "s", embed=emb)
    flt = "part in [1, 2]"
    got = collect(
        fr.ray.retrieve(
            tmp_path / "s",
            questions,
            similarity="cosine",
            topk=10,
            filter=flt,
            embed=emb,
            batch_size=500,
        )
    )
    doc = fr.Document(store=tmp_path / "s", mode="r", embed=emb)
    want = base1(fr.Retriever(doc, "root", "cosine", topk=10).batch_arrow(questions, filter=flt))
    # bit-identical scores: every hit is rescored in one fixed order, whatever the batch
    assert as_batch_arrow(got).equals(want)
    assert got.num_rows == 10 * len(questions)


def test_bad_rows_become_error_rows(cluster, cmrc):
    path, _, _, questions = cmrc
    rows = pa.table({"query": [questions[0], None, questions[1]], "tag": ["a", "b", "c"]})
    got = collect(fr.ray.retrieve(path, rows, similarity="bm25_chinese", topk=3))
    bad = got.filter(pc.is_valid(got.column("error")))
    assert bad.column("tag").to_pylist() == ["b"]
    assert bad.column("error").to_pylist() == ["query is null, expected a string"]
    assert bad.column("node_id").null_count == 1
    assert sorted(set(got.filter(pc.is_null(got.column("error"))).column("tag").to_pylist())) == [
        "a",
        "c",
    ]
    with pytest.raises(fr.ConfigError, match="no column 'question'"):
        fr.ray.retrieve(path, rows, query_column="question")
    with pytest.raises(fr.ConfigError, match="unknown node group"):
        fr.ray.retrieve(path, ["q"], group_name="nope")


def test_sharded_index_on_ray(cluster, tmp_path, cmrc):
    _, contexts, metas, questions = cmrc
    table = pa.table(
        {
            "id": [f"p{i}" for i in range(len(contexts))],
            "text": contexts,
            "part": [m["part"] for m in metas],
        }
    )
    sr = fr.ray.build_index(
        table, tmp_path / "ix", num_shards=4, similarity="bm25_chinese", executor="ray", topk=10
    )
    whole = fr.Retriever(
        fr.Document.from_texts(contexts, metas, [f"p{i}" for i in range(len(contexts))]),
        "root",
        "bm25_chinese",
        topk=10,
    )
    assert sr.batch_arrow(questions).equals(base1(whole.batch_arrow(questions)))
    # one Ray actor per segment: the query fans out to the actors and the top-k lists merge
    on_actors = fr.ray.open_index(tmp_path / "ix", topk=10, executor="ray")
    assert on_actors.batch_arrow(questions).equals(base1(whole.batch_arrow(questions)))
    assert on_actors.batch_arrow(questions, filter="part == 1").equals(
        base1(whole.batch_arrow(questions, filter="part == 1"))
    )
    # a segment actor that dies is restarted by Ray and weighed again on the next query
    victims = [pid for pid, cmd in processes() if "ray::Segment" in cmd]
    assert len(victims) == 4
    os.kill(victims[1], signal.SIGKILL)
    assert on_actors.batch_arrow(questions).equals(base1(whole.batch_arrow(questions)))
    got_nodes = on_actors.batch(questions[:20])
    want_nodes = whole.batch(questions[:20])
    assert [[(h.node.id, h.node.text, h.score) for h in hits] for hits in got_nodes] == [
        [(h.node.id, h.node.text, h.score) for h in hits] for hits in want_nodes
    ]
    # the retrieval job over the sharded index gives the same rows
    got = collect(fr.ray.retrieve(tmp_path / "ix", questions[:500], topk=10, batch_size=100))
    assert as_batch_arrow(got).equals(base1(whole.batch_arrow(questions[:500])))


def test_killed_actor_gives_complete_unduplicated_output(cluster, cmrc):
    path, _, _, questions = cmrc
    qs = questions * 10  # 805 batches: the job outlives the kill
    ds = fr.ray.retrieve(path, qs, similarity="bm25_chinese", topk=5, batch_size=40, concurrency=2)
    result = {}

    def run():
        result["table"] = collect(ds)

    t = threading.Thread(target=run)
    t.start()
    killed = None
    running_at_kill = False
    deadline = time.monotonic() + 120
    while killed is None and time.monotonic() < deadline and t.is_alive():
        for pid, cmd in processes():
            if "_RetrieveActor" in cmd and "MapWorker" in cmd:
                time.sleep(0.5)  # let it take a few batches
                os.kill(pid, signal.SIGKILL)
                killed = pid
                running_at_kill = t.is_alive()
                break
        time.sleep(0.1)
    t.join(timeout=300)
    assert killed is not None, "no retrieval actor process found to kill"
    assert running_at_kill, "the job ended before the kill: make it longer"
    got = result["table"]
    doc = fr.Document(store=path, mode="r")
    want = base1(fr.Retriever(doc, "root", "bm25_chinese", topk=5).batch_arrow(qs))
    assert as_batch_arrow(got).equals(want)  # every hit once: nothing lost or duplicated


def test_embed_on_actors_commits_through_one_writer(cluster, tmp_path, openai_server):
    texts = [f"passage {i} about {i % 11}" for i in range(150)]
    fr.Document.from_texts(texts, store=tmp_path / "s")
    emb = fr.OpenAIEmbedding(model="m", base_url=openai_server.url, api_key="k")
    out = fr.ray.embed(tmp_path / "s", "root", "default", emb, concurrency=2, batch_size=32)
    assert out == {"nodes": 150, "computed": 150}
    calls = len(openai_server.requests)
    assert calls >= 150 // 32  # the actors called the embedding service
    local = fr.Document.from_texts(texts, embed=emb)
    stored = fr.Document(store=tmp_path / "s", mode="r", embed=emb)
    before = len(openai_server.requests)
    np.testing.assert_array_equal(stored.embeddings("root"), local.embeddings("root"))
    # the store holds every vector: only the local document (no store) called the service
    local_calls = len(openai_server.requests) - before
    assert local_calls > 0
    assert len(fr.Document(store=tmp_path / "s", mode="r", embed=emb).embeddings("root")) == 150
    assert len(openai_server.requests) == before + local_calls
    before = len(openai_server.requests)
    assert fr.ray.embed(tmp_path / "s", "root", "default", emb) == {"nodes": 150, "computed": 0}
    assert len(openai_server.requests) == before  # nothing recomputed
    with pytest.raises(fr.ConfigError, match="embedder must be"):
        fr.ray.embed(tmp_path / "s", "root", "default", 3)


def test_synthesize_with_a_global_limit_on_llm_calls(cluster, openai_server):
    openai_server.script(["slow:0.05"] * 200)
    llm = fr.OpenAILike("test-model", base_url=openai_server.url, api_key="k")
    synth = fr.get_response_synthesizer("compact", llm=llm)
    rows = pa.table(
        {
            "query": [f"question {i}?" for i in range(40)] + [None],
            "contexts": [[f"context {i} one", f"context {i} two"] for i in range(40)] + [["x"]],
        }
    )
    got = collect(
        fr.ray.synthesize(rows, synth, concurrency=2, max_llm_calls=4, batch_size=8)
    ).sort_by("query_index")
    assert got.num_rows == 41
    answers = got.column("response").to_pylist()
    assert all(isinstance(a, str) and a for a in answers[:40]) and answers[40] is None
    assert got.column("error").to_pylist()[40].startswith("query must be a string")
    assert sum(got.column("llm_calls").to_pylist()) == 40 == len(openai_server.requests)
    assert openai_server.max_in_flight <= 4
    asked = {r.body["messages"][-1]["content"] for r in openai_server.requests}
    assert all(any(f"question {i}?" in a for a in asked) for i in range(40))
    with pytest.raises(fr.ConfigError, match="below concurrency"):
        fr.ray.synthesize(rows, synth, concurrency=3, max_llm_calls=2)


def test_parse_builds_the_group_under_the_parsers_identity(cluster, tmp_path, openai_server):
    openai_server.reply = lambda messages: (
        "summary of " + re.search(r"number (\d+)", messages[-1]["content"]).group(1)
    )
    texts = [f"long text number {i:03d}" for i in range(30)]
    fr.Document.from_texts(texts, store=tmp_path / "s")
    llm = fr.OpenAILike("test-model", base_url=openai_server.url, api_key="k")
    parser = fr.LLMParser(llm, task_type="summary")
    out = fr.ray.parse(tmp_path / "s", "summary", parser, concurrency=2, max_llm_calls=4)
    assert out == {"parents": 30, "nodes": 30}
    assert len(openai_server.requests) == 30 and openai_server.max_in_flight <= 4
    # a plain open with the same parser finds the group built: no LLM call
    doc = fr.Document(store=tmp_path / "s")
    doc.create_node_group("summary", transform=fr.LLMParser(llm, task_type="summary"))
    summaries = [n.text for n in doc.group("summary")]
    assert len(openai_server.requests) == 30
    # every parent's own summary, in parent order
    assert summaries == [f"summary of {i:03d}" for i in range(30)]


def test_bad_arguments_name_the_problem(cluster, tmp_path, cmrc):
    path = cmrc[0]
    with pytest.raises(fr.ConfigError, match="batch_size"):
        fr.ray.retrieve(path, ["q"], batch_size=0)
    with pytest.raises(fr.ConfigError, match="concurrency"):
        fr.ray.retrieve(path, ["q"], concurrency=0)
    with pytest.raises(fr.ConfigError, match="not a directory"):
        fr.ray.retrieve(tmp_path / "none", ["q"])
    with pytest.raises(fr.ConfigError, match="expected a ray.data.Dataset"):
        fr.ray.retrieve(path, "one query")
    with pytest.raises(fr.ConfigError, match="synthesizer must be"):
        fr.ray.synthesize(pa.table({"query": ["q"], "contexts": [["c"]]}), 3)
    with pytest.raises(fr.ConfigError, match="no column 'contexts'"):
        fr.ray.synthesize(
            pa.table({"query": ["q"]}), fr.get_response_synthesizer("compact", llm=lambda p: "x")
        )
    with pytest.raises(fr.ConfigError, match="parser must be"):
        fr.ray.parse(path, "summary", lambda t: [t])
    with pytest.raises(fr.ConfigError, match="max_llm_calls"):
        fr.ray.parse(path, "summary", fr.LLMParser(lambda p: "x"), max_llm_calls=0)
    fr.ray.build_index(["alpha", "beta"], tmp_path / "ix", executor="local")
    with pytest.raises(fr.ConfigError, match="executor must be"):
        fr.ray.ShardedRetriever(tmp_path / "ix", executor="dask")


@pytest.mark.parametrize("with_ids", [True, False])
def test_dataset_built_index_equals_one_index(cluster, tmp_path, cmrc, monkeypatch, with_ids):
    """A Ray Dataset is built by the workers, one segment per block (never read into the
    driver: root_table, the driver-side reader, is not called), and equals one index over the
    same rows in the same order: ids (given, or the ids one index gives), ranks, scores."""
    from fastrag.distributed import build

    _, contexts, metas, questions = cmrc
    texts, qs = contexts[:600], questions[:300]
    table = pa.table({"text": texts, "part": [m["part"] for m in metas[:600]]})
    ids = None
    if with_ids:
        ids = [f"c{i:04d}" for i in range(len(texts))]
        table = table.append_column("id", pa.array(ids))
    whole = fr.Retriever(
        fr.Document.from_texts(texts, metas[:600], ids), "root", "bm25_chinese", topk=8
    )
    want = base1(whole.batch_arrow(qs))
    want_f = base1(whole.batch_arrow(qs, filter="part == 2"))

    def no_driver_read(*a, **kw):
        raise AssertionError("the corpus was read on the driver")

    monkeypatch.setattr(build, "root_table", no_driver_read)
    for n in (1, 2, 4):
        ds = ray.data.from_arrow(
            [table.slice(lo, hi - lo) for lo, hi in build.partition(table.num_rows, n)]
        )
        sr = fr.ray.build_index(ds, tmp_path / f"ix{n}", similarity="bm25_chinese", topk=8)
        assert len(sr.segments) == n and len(sr) == len(texts)
        assert sr.batch_arrow(qs).equals(want), n  # ids, ranks, bit-identical float32 scores
        assert sr.batch_arrow(qs, filter="part == 2").equals(want_f)
    # Parquet files by glob, read by the workers (num_shards repartitions, in order)
    for i, (lo, hi) in enumerate(build.partition(table.num_rows, 3)):
        pq.write_table(table.slice(lo, hi - lo), tmp_path / f"part-{i}.parquet")
    sr = fr.ray.build_index(
        str(tmp_path / "part-*.parquet"),
        tmp_path / "pq",
        num_shards=2,
        similarity="bm25_chinese",
        topk=8,
    )
    assert len(sr.segments) == 2 and sr.batch_arrow(qs).equals(want)
    assert not list(tmp_path.glob("*/.tmp-*"))


def test_dataset_build_errors_name_the_fix(cluster, tmp_path):
    with pytest.raises(fr.ConfigError, match="needs a 'text' column"):
        fr.ray.build_index(ray.data.from_items([{"body": "x"}]), tmp_path / "a")
    assert not list((tmp_path / "a").glob(".tmp-*"))
    with pytest.raises(fr.ConfigError, match="executor='auto' or 'ray'"):
        fr.ray.build_index(ray.data.from_items([{"text": "x"}]), tmp_path / "b", executor="local")
    with pytest.raises(fr.ConfigError, match="no file matches"):
        fr.ray.build_index(str(tmp_path / "none-*.parquet"), tmp_path / "c")


def test_refused_llm_connection_is_a_config_error_saying_how_to_start_one(cluster):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = fr.OpenAILike("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
    rows = pa.table({"query": ["q"], "contexts": [["c"]]})
    with pytest.raises(
        fr.ConfigError,
        match=rf"127\.0\.0\.1:{port}/v1 \(connection refused\)"
        r".*FASTRAG_LLM_BASE_URL",
    ):
        fr.ray.synthesize(rows, fr.get_response_synthesizer("compact", llm=llm))
    emb = fr.OpenAIEmbedding(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
    with pytest.raises(fr.ConfigError, match="ollama serve"):
        fr.ray.embed("unused", "root", "default", emb)
