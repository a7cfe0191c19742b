"""A group this process wrote to its store can drop its table (``NodeGroup.release_table``) and
read it back from the segment files mapped at that moment, whole or a segment at a time
(``text_parts``); ``fastrag ingest`` does so before its BM25 index build, which then reads
the chunk texts in pieces (issue 42, goal 7)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from test_ingest_streaming import _bm25_files, _log

import fastrag as fr
import fastrag.documents.indexes as indexes_mod
from fastrag.cli import main as cli_main
from fastrag.documents import group as group_mod
from fastrag.documents import store as store_mod
from fastrag.documents.store import Store
from fastrag.errors import ConfigError


def _chunked(kb: Path, store: Path, monkeypatch) -> fr.Document:
    monkeypatch.setattr(store_mod, "COMPRESS_BELOW", 96 << 10)  # several compressed segments
    doc = fr.Document(kb, store=store)
    doc.create_node_group("chunk", transform=fr.SentenceSplitter(chunk_size=128, chunk_overlap=16))
    doc.group("chunk")
    return doc


@pytest.fixture
def kb(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    _log(kb / "server.log", 300_000)
    return kb


def test_a_released_table_reads_back_equal_in_segment_pieces(tmp_path, kb, monkeypatch):
    doc = _chunked(kb, tmp_path / "st", monkeypatch)
    g = doc.group("chunk")
    table, ids = g.table, list(g.ids)
    segs = Store(tmp_path / "st", mode="r").manifest["groups"]["chunk"]["segments"]
    assert len(segs) >= 3 and sum(s["rows"] for s in segs) == table.num_rows
    assert g.release_table()
    assert len(g) == table.num_rows  # no read back for the length
    pieces = list(g.text_parts())
    assert [len(p) for p in pieces] == [s["rows"] for s in segs]
    texts = table.column("text")
    assert [t for p in pieces for t in p.to_pylist()] == texts.to_pylist()
    assert pieces[0].type == texts.type
    small = list(g.text_parts(30))
    assert len(small) > len(segs) and max(len(p) for p in small) == 30
    assert [t for p in small for t in p.to_pylist()] == texts.to_pylist()
    assert g.table.equals(table) and g.ids == ids  # read back whole, byte for byte
    assert g.node_by_id(ids[7]).text == table.column("text")[7].as_py()
    assert g.release_table()  # and dropped again
    with pytest.raises(ConfigError, match="rows"):
        list(g.text_parts(0))


def test_a_released_table_reads_back_after_its_files_are_gone(tmp_path, kb, monkeypatch):
    """The segment files are mapped by release_table: a writer replacing the group and
    collecting its files (here: deleting them) leaves the read-back unchanged."""
    doc = _chunked(kb, tmp_path / "st", monkeypatch)
    g = doc.group("chunk")
    table = g.table
    assert g.release_table()
    for seg in Store(tmp_path / "st", mode="r").manifest["groups"]["chunk"]["segments"]:
        os.unlink(tmp_path / "st" / seg["file"])
    assert g.table.equals(table)


def test_a_table_with_no_store_copy_is_not_released(tmp_path, kb, monkeypatch):
    doc = _chunked(kb, tmp_path / "st", monkeypatch)
    g = doc.group("chunk")
    table = g.table
    for seg in Store(tmp_path / "st", mode="r").manifest["groups"]["chunk"]["segments"]:
        os.unlink(tmp_path / "st" / seg["file"])  # gone before release: nothing to map
    assert not g.release_table() and g.table is table
    # a group read from the store, one in memory only, and a replaced table: no copy to map
    splitter = fr.SentenceSplitter(chunk_size=128, chunk_overlap=16)
    again = fr.Document(kb, store=tmp_path / "st2")
    again.create_node_group("chunk", transform=splitter)
    again.group("chunk")
    reread = fr.Document(kb, store=tmp_path / "st2")
    reread.create_node_group("chunk", transform=splitter)
    assert not reread.group("chunk").release_table()
    mem = fr.Document.from_texts(["alpha beta", "gamma"])
    assert not mem.group("root").release_table()
    g2 = again.group("chunk")
    g2.table = g2.table.append_column("extra", pa.array([1] * len(g2)))
    assert not g2.release_table() and "extra" in g2.table.column_names


def test_threads_reading_a_released_table_get_one_equal_copy(tmp_path, kb, monkeypatch):
    doc = _chunked(kb, tmp_path / "st", monkeypatch)
    g = doc.group("chunk")
    table = g.table
    reads = []
    real = Store.segment_readers

    def counting(self, segments, schema=None):
        readers = real(self, segments, schema)
        return [lambda r=r: reads.append(1) or r() for r in readers]

    monkeypatch.setattr(Store, "segment_readers", counting)
    assert g.release_table()
    got = []
    barrier = threading.Barrier(8)

    def read():
        barrier.wait()
        got.append(g.table)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(t is got[0] for t in got) and got[0].equals(table)
    n_segs = len(Store(tmp_path / "st", mode="r").manifest["groups"]["chunk"]["segments"])
    assert len(reads) == n_segs  # read back once, not once per thread


def test_ingest_builds_its_index_from_the_released_chunk_texts(tmp_path, kb, monkeypatch):
    """``fastrag ingest`` releases the chunk table before the BM25 build, which reads the
    texts a segment at a time (never the table whole): the same index files, byte for byte,
    as a build from the table in memory."""
    monkeypatch.setattr(store_mod, "COMPRESS_BELOW", 96 << 10)
    monkeypatch.setattr(indexes_mod, "PACK_MIN_POSTINGS", 1000)
    spec = ["--group", "chunk=sentence:128:16"]
    held = fr.Document(kb, store=tmp_path / "held")
    held.create_node_group("chunk", transform=fr.SentenceSplitter(chunk_size=128, chunk_overlap=16))
    held.derived.keep_tokens = False
    fr.Retriever(held, "chunk", "bm25", topk=1).prepare()
    whole_reads, pieces = [], []
    real_get, real_parts = group_mod.NodeGroup.table.fget, group_mod.NodeGroup.text_parts

    def get(self):
        if self.name == "chunk" and self._table is None:
            whole_reads.append(self.name)
        return real_get(self)

    def parts(self, rows=None):
        for p in real_parts(self, rows):
            pieces.append(len(p))
            yield p

    monkeypatch.setattr(group_mod.NodeGroup, "table", property(get, group_mod.NodeGroup.table.fset))
    monkeypatch.setattr(group_mod.NodeGroup, "text_parts", parts)
    assert cli_main(["ingest", str(kb), "--store", str(tmp_path / "cli"), *spec, "-q"]) == 0
    assert whole_reads == [] and len(pieces) >= 3
    assert _bm25_files(tmp_path / "cli") == _bm25_files(tmp_path / "held")


@pytest.mark.parametrize("env", [None, "jemalloc"])
def test_ingest_allocates_arrow_memory_from_the_c_heap(tmp_path, kb, env):
    """``fastrag ingest`` sets Arrow's default pool (its C++ code's too) to the system
    allocator unless the user chose one with ARROW_DEFAULT_MEMORY_POOL."""
    code = (
        "import sys; from fastrag.cli import main; rc = main(sys.argv[1:]); "
        "import pyarrow as pa; print(pa.default_memory_pool().backend_name); sys.exit(rc)"
    )
    env_vars = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if env:
        env_vars["ARROW_DEFAULT_MEMORY_POOL"] = env
    run = subprocess.run(
        [sys.executable, "-c", code, "ingest", str(kb), "--store", str(tmp_path / "s"), "-q"],
        capture_output=True,
        text=True,
        env=env_vars,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[-1] == (env or "system")
