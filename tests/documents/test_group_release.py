"""A group this process wrote to its store can drop its table (``NodeGroup.release_table``) and
read it back from the segment files mapped at that moment, whole or a segment at a time
(``text_parts``); ``fastrag ingest`` does so before its BM25 index build, which then reads
the chunk texts in pieces. A large group is written as its rows are made, piece by piece,
outside the writers' lock (``groupstream``). Issue 42, goal 7."""

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
import fastrag.documents.bm25data as bm25data_mod
import fastrag.documents.building as building_mod
import fastrag.documents.groupstream as groupstream_mod
import fastrag.documents.incremental as incremental_mod
from fastrag.cli import main as cli_main
from fastrag.documents import group as group_mod
from fastrag.documents import transaction as layout_mod
from fastrag.documents.store import Store
from fastrag.errors import ConfigError


def _chunked(kb: Path, store: Path, monkeypatch) -> fr.Document:
    monkeypatch.setattr(layout_mod, "COMPRESS_BELOW", 96 << 10)  # several compressed segments
    monkeypatch.setattr(groupstream_mod, "PIECE_BYTES", 40 << 10)
    monkeypatch.setattr(building_mod, "SPAN_BATCH", 50)
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
    monkeypatch.setattr(layout_mod, "COMPRESS_BELOW", 96 << 10)
    monkeypatch.setattr(groupstream_mod, "PIECE_BYTES", 40 << 10)
    monkeypatch.setattr(building_mod, "SPAN_BATCH", 50)
    monkeypatch.setattr(bm25data_mod, "PACK_MIN_POSTINGS", 1000)
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


@pytest.mark.parametrize("own_process", [True, False])
def test_ingest_does_not_load_pandas_but_to_pandas_still_works(tmp_path, kb, own_process):
    """pyarrow would import pandas (38 MiB) at ingest's first list conversion, only to check
    for pandas objects: not where ingest is the process's own command (``main()``); after it,
    asking pyarrow for pandas still works. An in-process ``main(argv)`` leaves pyarrow's
    detection alone: ``pa.table(data_frame)`` works after it."""
    pytest.importorskip("pandas")
    call = "main()" if own_process else "main(sys.argv[1:])"
    code = (
        f"import sys; from fastrag.cli import main; rc = {call}; "
        "print('pandas' in sys.modules); import pyarrow as pa; "
        "print(pa.table({'a': [1, 2]}).to_pandas()['a'].sum()); "
        "import pandas as pd; print(pa.table(pd.DataFrame({'b': [4]})).num_rows); sys.exit(rc)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, "ingest", str(kb), "--store", str(tmp_path / "s"), "-q"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[-3:] == [str(not own_process), "3", "1"]


def test_a_large_group_is_written_piece_by_piece_with_the_lock_free(tmp_path, kb, monkeypatch):
    """A chunk group big enough for compressed pieces is written as its rows are made, each
    piece with the store's OS lock free, then moved in by a short transaction: the stored
    table, the group's fingerprint and the search results equal the in-memory path's."""
    from filelock import FileLock

    from fastrag.documents.storelock import LOCK

    monkeypatch.setattr(layout_mod, "COMPRESS_BELOW", 96 << 10)
    monkeypatch.setattr(groupstream_mod, "PIECE_BYTES", 40 << 10)
    monkeypatch.setattr(building_mod, "SPAN_BATCH", 50)
    with monkeypatch.context() as m:
        m.setattr(incremental_mod, "streams", lambda *a: False)
        whole = _chunked(kb, tmp_path / "whole", monkeypatch)
    st = tmp_path / "st"
    free = []
    real = groupstream_mod.write_table_file

    def spy(path, name, table, **kw):
        lock = FileLock(str(st / LOCK))
        lock.acquire(timeout=0)  # Timeout if this process held the writers' lock
        lock.release()
        free.append(Path(path).parent.name)
        return real(path, name, table, **kw)

    monkeypatch.setattr(groupstream_mod, "write_table_file", spy)
    doc = _chunked(kb, st, monkeypatch)
    g = doc.group("chunk")
    assert len(free) >= 3 and all(f.startswith(".building-") for f in free)
    stored = Store(st, mode="r")
    segs = stored.manifest["groups"]["chunk"]["segments"]
    assert len(segs) == len(free) and not stored.verify()
    assert not list((st / "indexes").glob(".building-*"))
    want = whole.group("chunk")
    assert stored.read_segments(segs).equals(want.table)
    assert len(g) == len(want) and g.fingerprint == want.fingerprint
    assert g.table.equals(want.table)  # read back from the pieces
    queries = ["ERROR request_id login", "GET /cart/billing 500"]
    got = fr.Retriever(doc, "chunk", "bm25", topk=5).batch_arrow(queries)
    assert got.equals(fr.Retriever(whole, "chunk", "bm25", topk=5).batch_arrow(queries))


def test_a_group_another_writer_stored_meanwhile_reads_its_own_pieces(tmp_path, kb, monkeypatch):
    """While this process writes its pieces, another process stores the same group: this
    one commits nothing, reads its group back from its own pieces (equal to the stored
    group), and leaves no building folder or stray file."""
    monkeypatch.setattr(layout_mod, "COMPRESS_BELOW", 96 << 10)
    monkeypatch.setattr(groupstream_mod, "PIECE_BYTES", 40 << 10)
    monkeypatch.setattr(building_mod, "SPAN_BATCH", 50)
    st = tmp_path / "st"
    fr.Document(kb, store=st).group("root")
    other = (
        "import sys, fastrag as fr\n"
        "doc = fr.Document(sys.argv[1], store=sys.argv[2])\n"
        "doc.create_node_group('chunk', transform=fr.SentenceSplitter("
        "chunk_size=128, chunk_overlap=16))\n"
        "doc.group('chunk')\n"
    )
    real = groupstream_mod.write_table_file
    ran = []

    def spy(path, name, table, **kw):
        if not ran:  # the other writer commits the group before this one's first piece
            subprocess.run([sys.executable, "-c", other, str(kb), str(st)], check=True)
            ran.append(True)
        return real(path, name, table, **kw)

    monkeypatch.setattr(groupstream_mod, "write_table_file", spy)
    doc = _chunked(kb, st, monkeypatch)
    g = doc.group("chunk")
    stored = Store(st, mode="r")
    entry = stored.manifest["groups"]["chunk"]
    assert ran and g.segments is None and not g.release_table()
    assert g.table.equals(stored.read_segments(entry["segments"]))
    assert not list((st / "indexes").glob(".building-*")) and not stored.verify()
    named = {s["file"] for s in stored.manifest["groups"]["root"]["segments"]}
    named |= {s["file"] for s in entry["segments"]} | {
        s["file"] for s in stored.manifest["sources"]
    }
    on_disk = {p.relative_to(st).as_posix() for p in (st / "data").iterdir()}
    assert on_disk == named


_PATCHED_INGEST = """
import sys
import fastrag.documents.building as building
import fastrag.documents.groupstream as groupstream
import fastrag.documents.transaction as store
store.COMPRESS_BELOW, groupstream.PIECE_BYTES, building.SPAN_BATCH = 96 << 10, 8 << 10, 10
from fastrag.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_an_ingest_killed_while_it_writes_pieces_is_repaired_by_the_next(tmp_path):
    """SIGKILL while a group's pieces are written in the store's private folder: the store
    holds no part of the group, and the next ingest removes the folder and stores the group
    as an uninterrupted ingest does."""
    import signal
    import time

    kb = tmp_path / "kb"
    kb.mkdir()
    _log(kb / "server.log", 2_000_000)
    args = ["ingest", str(kb), "-q", "--group", "chunk=sentence:128:16"]
    lone = subprocess.run(
        [sys.executable, "-m", "fastrag.cli", *args, "--store", str(tmp_path / "lone")],
        capture_output=True,
        text=True,
    )
    assert lone.returncode == 0, lone.stderr
    st = tmp_path / "st"
    proc = subprocess.Popen(
        [sys.executable, "-c", _PATCHED_INGEST, *args, "--store", str(st)],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not list((st / "indexes").glob(".building-*/chunk.*.arrow")) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(60) == -signal.SIGKILL, proc.stderr.read()  # killed while writing
    assert list((st / "indexes").glob(".building-*"))
    assert "chunk" not in Store(st, mode="r").manifest["groups"]
    again = subprocess.run(
        [sys.executable, "-m", "fastrag.cli", *args, "--store", str(st)],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0, again.stderr
    assert not list((st / "indexes").glob(".building-*"))
    got, want = Store(st, mode="r"), Store(tmp_path / "lone", mode="r")
    assert not got.verify()
    assert got.read_segments(got.manifest["groups"]["chunk"]["segments"]).equals(
        want.read_segments(want.manifest["groups"]["chunk"]["segments"])
    )
