"""Sharded indexes (fastrag.ray.build_index with executor="local": no Ray needed): segments
weighed with global statistics score exactly as one index over the whole corpus."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import fastrag as fr
from fastrag.datasets import load_cmrc2018_dev, squad_questions
from fastrag.distributed.sharded import merge_stats, ranks_of
from fastrag.errors import ConfigError
from fastrag.ray import ShardedRetriever, build_index, open_index

ROOT = Path(__file__).resolve().parents[2]


def base1(table: pa.Table) -> pa.Table:
    """A single-process ``batch_arrow`` table with ranks from 1 (fastrag's one rank base;
    unchanged when the Retriever already counts from 1)."""
    i = table.schema.get_field_index("rank")
    return table.set_column(i, "rank", pa.array(ranks_of(table.column("query_idx").to_numpy())))


@pytest.fixture(scope="module")
def cmrc():
    """(texts, metadatas, ids, questions) of the CMRC dev set."""
    questions, _, contexts = squad_questions(load_cmrc2018_dev())
    metas = [{"part": i % 3, "long": len(t) > 500} for i, t in enumerate(contexts)]
    ids = [f"p{i:04d}" for i in range(len(contexts))]
    return contexts, metas, ids, questions


def corpus_table(texts, metas, ids) -> pa.Table:
    return pa.table(
        {
            "id": ids,
            "text": texts,
            "part": [m["part"] for m in metas],
            "long": [m["long"] for m in metas],
        }
    )


@pytest.mark.parametrize("similarity", ["bm25_chinese", "bm25_cjk"])
def test_shards_score_exactly_as_one_index(tmp_path, cmrc, similarity):
    texts, metas, ids, questions = cmrc
    whole = fr.Document.from_texts(texts, metas, ids)
    ret = fr.Retriever(whole, "root", similarity, topk=10)
    want = base1(ret.batch_arrow(questions))
    want_f = base1(ret.batch_arrow(questions, filter="part == 1 && long == true"))
    for n in (1, 2, 4):
        sr = build_index(
            corpus_table(texts, metas, ids),
            tmp_path / f"s{n}",
            num_shards=n,
            similarity=similarity,
            executor="local",
            topk=10,
        )
        assert len(sr.segments) == n and len(sr) == len(texts)
        # each segment's index comes from its packed postings, decoded as searches reach them
        assert all(seg.postings is not None for seg in sr._segs.items)
        assert all(seg.index._unchecked is not None for seg in sr._segs.items)
        got = sr.batch_arrow(questions)
        assert got.equals(want), n  # same ids, ranks and bit-identical float32 scores
        assert sr.batch_arrow(questions, filter="part == 1 && long == true").equals(want_f)
        # the global statistics are the whole corpus's
        assert sr.stats.n_docs == len(texts)
        assert (
            sr.stats.n_tokens == ret.path.prepare(whole, whole.group("root")).index.stats.n_tokens
        )
    one = sr(questions[5])
    assert [(h.node.id, h.score) for h in one] == [(h.node.id, h.score) for h in ret(questions[5])]
    assert [h.node.text for h in one] == [h.node.text for h in ret(questions[5])]


def test_ties_break_by_global_node_order(tmp_path):
    # identical documents score the same: the first in corpus order wins in every shard layout
    texts = ["apple pie recipe"] * 6 + ["banana bread"] * 2
    ids = [f"d{i}" for i in range(len(texts))]
    whole = fr.Retriever(fr.Document.from_texts(texts, ids=ids), "root", "bm25", topk=4)
    for n in (1, 3, 8):
        sr = build_index(
            pa.table({"id": ids, "text": texts}),
            tmp_path / f"t{n}",
            num_shards=n,
            executor="local",
            topk=4,
        )
        assert sr.batch_arrow(["apple", "bread pie"]).equals(
            base1(whole.batch_arrow(["apple", "bread pie"]))
        )


def test_added_segment_equals_a_full_rebuild(tmp_path, cmrc):
    texts, metas, ids, questions = cmrc
    qs = questions[:400]
    sr = build_index(
        corpus_table(texts[:600], metas[:600], ids[:600]),
        tmp_path / "ix",
        num_shards=2,
        similarity="bm25_chinese",
        executor="local",
        topk=10,
    )
    name = sr.add(corpus_table(texts[600:], metas[600:], ids[600:]), executor="local")
    assert sr.segments == ["seg-000001", "seg-000002", name]
    full = fr.Retriever(fr.Document.from_texts(texts, metas, ids), "root", "bm25_chinese", topk=10)
    assert sr.batch_arrow(qs).equals(base1(full.batch_arrow(qs)))
    # another process opening the directory sees the same index
    again = open_index(tmp_path / "ix", topk=10)
    assert again.batch_arrow(qs).equals(base1(full.batch_arrow(qs)))
    # compaction keeps every result; superseded segment folders are gone
    merged = sr.merge(1, executor="local")
    assert merged == ["seg-000004"] and sr.batch_arrow(qs).equals(base1(full.batch_arrow(qs)))
    assert sorted(p.name for p in (tmp_path / "ix").iterdir()) == [
        ".lock",
        "seg-000004",
        "shards.json",
    ]
    # the reader opened before the merge still answers (its files stay mapped), and refresh
    # moves it to the merged segment
    assert again.batch_arrow(qs[:50]).equals(base1(full.batch_arrow(qs[:50])))
    assert again.refresh().segments == ["seg-000004"]


def test_delete_equals_a_rebuild_without_them(tmp_path, cmrc):
    texts, metas, ids, questions = cmrc
    qs = questions[:300]
    sr = build_index(
        corpus_table(texts, metas, ids),
        tmp_path / "ix",
        num_shards=3,
        similarity="bm25_chinese",
        executor="local",
        topk=10,
    )
    gone = [ids[3], ids[500], ids[501], "no-such-id"]
    assert sr.delete(gone) == 3
    keep = [i for i in range(len(ids)) if ids[i] not in gone]
    rebuilt = fr.Retriever(
        fr.Document.from_texts(
            [texts[i] for i in keep], [metas[i] for i in keep], [ids[i] for i in keep]
        ),
        "root",
        "bm25_chinese",
        topk=10,
    )
    assert sr.batch_arrow(qs).equals(base1(rebuilt.batch_arrow(qs)))
    assert len(sr) == len(keep)
    with pytest.raises(fr.ConfigError, match="already in the index"):
        sr.add(pa.table({"id": [ids[0]], "text": ["x"]}), executor="local")


def test_dense_shards_merge_exact_top_k(tmp_path, openai_server):
    texts = [f"document {i} about topic {i % 7} and colour {i % 5}" for i in range(120)]
    ids = [f"d{i}" for i in range(120)]
    emb = fr.OpenAIEmbedding(model="m", base_url=openai_server.url, api_key="k")
    whole = fr.Retriever(
        fr.Document.from_texts(texts, ids=ids, embed=emb), "root", "cosine", topk=8
    )
    qs = [f"topic {i} colour {i % 3}" for i in range(20)]
    want = base1(whole.batch_arrow(qs))
    sr = build_index(
        pa.table({"id": ids, "text": texts}),
        tmp_path / "dense",
        num_shards=3,
        similarity="cosine",
        embed=emb,
        executor="local",
        topk=8,
    )
    got = sr.batch_arrow(qs)
    assert got.column("node_id").to_pylist() == want.column("node_id").to_pylist()
    np.testing.assert_allclose(
        got.column("score").to_numpy(), want.column("score").to_numpy(), rtol=0, atol=1e-6
    )


def test_custom_group_needs_its_transform(tmp_path):
    texts = ["a b\nc d", "e f\ng h"]
    with pytest.raises(fr.ConfigError, match="pass transform="):
        build_index(texts, tmp_path / "x", group_name="line", executor="local")
    sr = build_index(
        texts,
        tmp_path / "y",
        group_name="line",
        num_shards=2,
        transform=lambda t: t.split("\n"),
        executor="local",
        topk=2,
    )
    assert [h.node.text for h in sr("g h")] == ["g h"]
    assert [h.node.text for h in open_index(tmp_path / "y", topk=2)("c")] == ["c d"]


def test_bad_arguments_say_what_to_do(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f.txt").write_text("x")
    with pytest.raises(fr.ConfigError, match="not empty"):
        build_index(["a"], tmp_path / "full", executor="local")
    with pytest.raises(fr.ConfigError, match="not a sharded index"):
        build_index(["a"], tmp_path / "full", executor="local", overwrite=True)
    with pytest.raises(fr.ConfigError, match="unknown BM25 parameters"):
        build_index(["a"], tmp_path / "p", kk1=1.0, executor="local")
    with pytest.raises(fr.ConfigError, match="needs embed="):
        build_index(["a"], tmp_path / "p", similarity="cosine", executor="local")
    with pytest.raises(fr.ConfigError, match="num_shards"):
        build_index(["a"], tmp_path / "p", num_shards=0, executor="local")
    with pytest.raises(fr.ConfigError, match="executor"):
        build_index(["a"], tmp_path / "p", executor="spark")
    assert not any((tmp_path / "p").glob("seg-*")) and not any((tmp_path / "p").glob(".tmp-*"))
    with pytest.raises(fr.ConfigError, match="not a sharded index"):
        ShardedRetriever(tmp_path / "full")
    sr = build_index(["alpha beta", "gamma"], tmp_path / "ok", executor="local")
    with pytest.raises(fr.ConfigError, match="list of strings"):
        sr.batch("alpha")
    with pytest.raises(fr.ConfigError, match="query 1"):
        sr.batch(["alpha", 3])
    assert sr.batch(["", "   "]) == [[], []]


def test_failed_segment_build_leaves_nothing(tmp_path, monkeypatch):
    from fastrag.distributed import build

    sr = build_index(["alpha beta", "gamma delta"], tmp_path / "ix", executor="local")
    before = json.loads((tmp_path / "ix" / "shards.json").read_text())
    real = build.build_segment

    def fail(dest, *a, **kw):
        real(dest, *a, **kw)  # the folder is complete on disk ...
        raise OSError("disk full")  # ... but the build fails before the commit

    monkeypatch.setattr(build, "build_segment", fail)
    with pytest.raises(OSError, match="disk full"):
        sr.add(["epsilon"], executor="local")
    assert json.loads((tmp_path / "ix" / "shards.json").read_text()) == before
    assert sorted(p.name for p in (tmp_path / "ix").iterdir()) == [
        ".lock",
        "seg-000001",
        "seg-000002",
        "shards.json",
    ]
    assert [h.node.text for h in sr("gamma")] == ["gamma delta"]


ADDER = textwrap.dedent("""
    import sys
    import fastrag as fr
    sr = fr.ray.open_index(sys.argv[1], lock_timeout=120)
    who = sys.argv[2]
    for j in range(3):
        sr.add(__import__("pyarrow").table({"id": [f"{who}-{j}"],
                                           "text": [f"{who} words number {j}"]}),
               executor="local")
    print("ok")
""")


def test_processes_adding_segments_and_a_reader(tmp_path):
    build_index(
        pa.table({"id": ["seed"], "text": ["seed words"]}), tmp_path / "ix", executor="local"
    )
    reader = open_index(tmp_path / "ix", topk=50)
    stop = threading.Event()
    seen = []

    def read():
        while not stop.is_set():
            hits = reader.refresh().batch_arrow(["words"])
            seen.append(len(hits))

    t = threading.Thread(target=read)
    t.start()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ADDER, str(tmp_path / "ix"), f"w{i}"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err
    finally:
        stop.set()
        t.join()
    final = open_index(tmp_path / "ix", topk=50)
    assert len(final.segments) == 1 + 9 and len(final) == 10
    ids = final.batch_arrow(["words"]).column("node_id").to_pylist()
    assert len(ids) == len(set(ids)) == 10
    assert seen and all(1 <= n <= 10 for n in seen) and seen == sorted(seen)
    rebuilt = fr.Retriever(
        fr.Document.from_texts([n.text for n in final.batch(["words"])[0]]), "root", "bm25", topk=50
    )
    assert sorted(h.score for h in rebuilt("words")) == sorted(h.score for h in final("words"))


def test_overwrite_replaces_an_index(tmp_path):
    build_index(["alpha", "beta"], tmp_path / "ix", num_shards=2, executor="local")
    sr = build_index(
        ["gamma delta", "epsilon"], tmp_path / "ix", num_shards=2, executor="local", overwrite=True
    )
    assert sr.segments == ["seg-000003", "seg-000004"]
    assert sorted(p.name for p in (tmp_path / "ix").iterdir()) == [
        ".lock",
        "seg-000003",
        "seg-000004",
        "shards.json",
    ]
    assert [h.node.text for h in sr("delta")] == ["gamma delta"] and sr("alpha") == []


def test_a_group_the_cli_made_needs_no_transform(tmp_path, cmrc):
    """`fastrag ingest --group` records each group's transform spec in the store; build_index
    rebuilds the transform from it, writes it to shards.json (so add() needs none either), and
    the sharded group equals the store's own group."""
    from fastrag.cli import main

    texts, _, _, questions = cmrc
    src = tmp_path / "docs"
    src.mkdir()
    for i, t in enumerate(texts[:120]):
        (src / f"d{i:03d}.txt").write_text(t, encoding="utf-8")
    store = tmp_path / "kb.store"
    assert (
        main(
            [
                "ingest",
                str(src),
                "--store",
                str(store),
                "--group",
                "chunk=sentence:128:16",
                "--quiet",
            ]
        )
        == 0
    )
    doc = fr.Document(store=store, mode="r")
    one = fr.Retriever(doc, "chunk", "bm25_chinese", topk=8)
    qs = questions[:200]
    for n in (1, 3):
        sr = build_index(
            store,
            tmp_path / f"ix{n}",
            num_shards=n,
            group_name="chunk",
            similarity="bm25_chinese",
            executor="local",
            topk=8,
        )
        assert len(sr) == len(doc.group("chunk"))
        assert sr.batch_arrow(qs).equals(base1(one.batch_arrow(qs)))
    spec = json.loads((tmp_path / "ix3" / "shards.json").read_text())["spec"]
    assert spec["transform"]["class"] == "SentenceSplitter"
    assert spec["transform"]["params"]["chunk_size"] == 128
    assert spec["transform"]["params"]["chunk_overlap"] == 16
    again = open_index(tmp_path / "ix3", topk=8)  # a new process: no transform= anywhere
    again.add(["一个新的文档。它有两句话。"], executor="local")
    assert len(again) == len(doc.group("chunk")) + 1
    # a group made by a function cannot be rebuilt from the store: the error says what to pass
    fn_store = tmp_path / "fn.store"
    d = fr.Document.from_texts(["a b\nc d"], store=fn_store)
    d.create_node_group("line", transform=lambda t: t.split("\n"), parent="root")
    d.group("line")
    with pytest.raises(fr.ConfigError, match="could not record .*pass transform="):
        build_index(fn_store, tmp_path / "fn", group_name="line", executor="local")


def test_ranks_start_at_one(tmp_path):
    sr = build_index(
        ["alpha beta", "alpha", "gamma"], tmp_path / "ix", num_shards=2, executor="local", topk=3
    )
    t = sr.batch_arrow(["alpha", "gamma", "zzz", "alpha"])
    assert t.column("query_idx").to_pylist() == [0, 0, 1, 3, 3]
    assert t.column("rank").to_pylist() == [1, 2, 1, 1, 2]


def _segment_tokens_entry(seg_dir):
    from fastrag.documents.store import Store

    store = Store(seg_dir)
    return next(v for v in store.manifest["indexes"].values() if v["meta"]["kind"] == "tokens")


def _write_manifest(st, body) -> None:
    from fastrag.documents.store import MANIFEST, _manifest_checksum

    data = {**body, "checksum": _manifest_checksum(body)}
    (st / MANIFEST).write_bytes(json.dumps(data, ensure_ascii=False, indent=1).encode())


def _reseal(st, rel) -> None:
    """Record ``rel``'s altered bytes in the manifest (size, checksum): damage no checksum sees."""
    import xxhash

    from fastrag.documents.store import MANIFEST

    body = json.loads((st / MANIFEST).read_bytes())
    body.pop("checksum")
    data = (st / rel).read_bytes()
    for idx in body["indexes"].values():
        for name, f in idx["files"].items():
            if f"{idx['dir']}/{name}" == rel:
                f.update(size=len(data), checksum=xxhash.xxh3_64(data).hexdigest())
                f.pop("chunks", None)
    _write_manifest(st, body)


def test_segments_without_or_with_damaged_packed_postings_use_their_tokens(tmp_path, cmrc):
    """A segment stored before packed postings (its tokens entry names none) builds its index
    from its token ids; one whose postings are damaged does too, with a StoreWarning; both
    score exactly as the packed ones."""
    import warnings

    from fastrag.documents.store import MANIFEST
    from fastrag.errors import StoreWarning

    texts, metas, ids, questions = cmrc
    build_index(
        corpus_table(texts[:400], metas[:400], ids[:400]),
        tmp_path / "ix",
        num_shards=2,
        similarity="bm25_chinese",
        executor="local",
    )
    want = base1(ShardedRetriever(tmp_path / "ix").batch_arrow(questions[:50]))
    seg_dirs = sorted(p for p in (tmp_path / "ix").iterdir() if (p / MANIFEST).exists())
    assert len(seg_dirs) == 2
    # segment 0: damaged words (every block's gaps at their largest), checksums resealed
    entry = _segment_tokens_entry(seg_dirs[0])
    words_path = seg_dirs[0] / entry["dir"] / "words.npy"
    words = np.load(words_path)
    words[:-1] = 0xFFFFFFFF
    np.save(words_path, words)
    _reseal(seg_dirs[0], f"{entry['dir']}/words.npy")
    # segment 1: as stored before packed postings (the meta names none)
    body = json.loads((seg_dirs[1] / MANIFEST).read_bytes())
    body.pop("checksum")
    for v in body["indexes"].values():
        v["meta"].pop("postings", None)
    _write_manifest(seg_dirs[1], body)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sr = ShardedRetriever(tmp_path / "ix")
        got = base1(sr.batch_arrow(questions[:50]))
    assert got.equals(want)
    assert [seg.postings is None for seg in sr._segs.items] == [False, True]
    assert [seg.index._unchecked is None for seg in sr._segs.items] == [True, True]
    assert any(
        issubclass(c.category, StoreWarning) and "skip entries" in str(c.message) for c in caught
    ), [str(c.message) for c in caught]


def test_merge_stats_gives_a_dicts_ids_in_a_read_only_table():
    """The global vocabulary of the segments' terms: ids in order of first occurrence (as a
    dict filled segment by segment), each segment's map to them, the summed frequencies."""
    parts = [
        (["b", "a", "東京"], np.array([3, 1, 2]), 5, 20),
        (["c", "a"], np.array([4, 4]), 6, 30),
        ([], np.zeros(0, np.int64), 1, 0),
        (["東京", "d", "b"], np.array([1, 1, 1]), 2, 9),
    ]
    vocab, maps, stats = merge_stats(parts)
    want: dict[str, int] = {}
    want_maps = [[want.setdefault(t, len(want)) for t in terms] for terms, _, _, _ in parts]
    assert dict(vocab.items()) == want and [m.tolist() for m in maps] == want_maps
    assert all(m.dtype == np.int64 for m in maps)
    assert stats.df.tolist() == [4, 5, 3, 4, 1] and (stats.n_docs, stats.n_tokens) == (14, 59)
    with pytest.raises(ConfigError, match="read-only"):
        vocab.add(["e"])
