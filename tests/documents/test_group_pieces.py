"""A stored group is opened without reading its table: its ids are read alone (the group's
fingerprint), and a node's columns come from the one record batch of a stored segment that
holds it, so a search on a large store reads the batches holding its hits, not the group. The
nodes, the table and the hits are the same as the whole table's; damage is still reported."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import fastrag as fr
import fastrag.documents.building as building_mod
import fastrag.documents.groupstream as groupstream_mod
import fastrag.documents.store as store_mod
import fastrag.documents.transaction as layout_mod
from fastrag.documents.group import ids_fingerprint
from fastrag.documents.store import Store
from fastrag.errors import StoreError

QUERIES = ["ERROR request_id login", "GET /cart/billing 500", "health took ms"]


def _log(path: Path, lines: int) -> None:
    words = "api users orders cart login search static health metrics billing export".split()
    out = []
    for i in range(lines):
        a, b = words[i % len(words)], words[(i * 7) % len(words)]
        if i % 3:
            out.append(
                f'10.0.{i % 256}.{i % 97} "GET /{a}/{b}/{i} HTTP/1.1" {200 + i % 3} rt=0.{i}'
            )
        else:
            out.append(
                f"app[{i}]: ERROR request_id={i * 7919:08x} {a} took {i % 100}ms. {b} waits!"
            )
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


@pytest.fixture
def pieces_store(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """A store whose chunk group is several compressed pieces, and its folder."""
    kb = tmp_path / "kb"
    kb.mkdir()
    _log(kb / "server.log", 3000)
    monkeypatch.setattr(groupstream_mod, "PIECE_BYTES", 40 << 10)
    monkeypatch.setattr(layout_mod, "COMPRESS_BELOW", 16 << 10)
    monkeypatch.setattr(building_mod, "SPAN_BATCH", 40)  # several record batches a segment
    doc = fr.Document(kb, store=tmp_path / "store")
    doc.create_node_group("chunk", transform=fr.SentenceSplitter(chunk_size=64, chunk_overlap=8))
    doc.group("chunk")
    fr.Retriever(doc, "chunk", "bm25", topk=3).batch(QUERIES)  # its index in the store too
    return tmp_path / "store", kb


def _batches(store: Path, segments: list[dict]) -> list[tuple[str, int | None]]:
    """(file, batch) of every record batch of ``segments``."""
    out = []
    for seg in segments:
        with pa.memory_map(str(store / seg["file"])) as f:
            out += [(seg["file"], i) for i in range(ipc.open_file(f).num_record_batches)]
    return sorted(out)


def _reads(monkeypatch) -> list[tuple[str, int | None]]:
    """(file, record batch or None: whole) of each read of a chunk segment from now on."""
    seen: list[tuple[str, int | None]] = []
    real = Store._read_segment

    def counted(self, seg, schema=None, mapped=None, batch=None):
        if Path(seg["file"]).name.startswith("chunk."):
            seen.append((seg["file"], None if batch is None else batch[0]))
        return real(self, seg, schema, mapped, batch)

    monkeypatch.setattr(Store, "_read_segment", counted)
    return seen


def test_a_search_reads_only_the_batches_holding_its_hits(pieces_store, monkeypatch):
    store, _ = pieces_store
    segments = Store(store, mode="r").manifest["groups"]["chunk"]["segments"]
    assert len(segments) >= 4
    whole = Store(store, mode="r").read_segments(segments)
    reads = _reads(monkeypatch)
    doc = fr.Document(store=store, mode="r")
    group = doc.group("chunk")
    assert reads == []  # the ids alone were read
    assert len(group) == whole.num_rows
    assert group.fingerprint == ids_fingerprint(whole.column("id"))
    for bad in (-1, len(group)):
        with pytest.raises(IndexError, match=f"row {bad} out of range for group 'chunk'"):
            group.row_table(bad)
    ret = fr.Retriever(doc, "chunk", "bm25", topk=1)
    hits = ret.batch(QUERIES[:1])[0]
    (hit,) = hits
    row = whole.column("id").to_pylist().index(hit.id)
    assert hit.text == whole.column("text")[row].as_py()
    assert hit.node.metadata["file_path"] == "server.log"
    assert len(reads) == 1 and reads[0][1] is not None  # the batch holding the hit alone
    # every node read batch by batch equals the whole table's row
    rows = range(0, whole.num_rows, 7)
    want = [(whole.column("id")[r].as_py(), whole.column("text")[r].as_py()) for r in rows]
    assert [(group[r].id, group[r].text) for r in rows] == want
    batches = _batches(store, segments)
    assert len(batches) > 2 * len(segments)
    assert sorted(reads) == batches  # each batch read once, then kept
    assert group.table.equals(whole)  # the batches read are reused
    assert sorted(reads) == batches


def test_hits_from_pieces_equal_the_hits_of_the_whole_table(pieces_store):
    store, kb = pieces_store
    fresh = fr.Retriever(fr.Document(store=store, mode="r"), "chunk", "bm25", topk=5)
    got = fresh.batch_arrow(QUERIES)
    doc = fr.Document(store=store, mode="r")
    assert doc.group("chunk").table.num_rows > 0  # read whole first: the old path
    old = fr.Retriever(doc, "chunk", "bm25", topk=5)
    want = old.batch_arrow(QUERIES)
    assert got.equals(want) and got.num_rows == 15
    texts = [[(h.id, h.text, h.node.metadata) for h in hits] for hits in fresh.batch(QUERIES)]
    assert texts == [[(h.id, h.text, h.node.metadata) for h in hits] for hits in old.batch(QUERIES)]


def test_threads_reading_nodes_of_a_group_in_pieces(pieces_store, monkeypatch):
    store, _ = pieces_store
    segments = Store(store, mode="r").manifest["groups"]["chunk"]["segments"]
    whole = Store(store, mode="r").read_segments(segments)
    ids = whole.column("id").to_pylist()
    reads = _reads(monkeypatch)
    group = fr.Document(store=store, mode="r").group("chunk")
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def work(k: int) -> None:
        try:
            barrier.wait()
            for r in range(k, len(ids), 5):
                assert group[r].id == ids[r]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(reads) == _batches(store, segments)  # each batch read once


def test_a_damaged_piece_is_reported_when_the_group_is_opened(pieces_store):
    store, _ = pieces_store
    seg = Store(store, mode="r").manifest["groups"]["chunk"]["segments"][2]
    path = store / seg["file"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="fails its checksum"):
        fr.Document(store=store, mode="r").group("chunk")


def test_an_unchecked_piece_with_bad_structure_fails_when_its_node_is_read(tmp_path, monkeypatch):
    """A piece not checksummed on open (as files over ``VERIFY_BELOW`` are; the limit patched)
    whose metadata column is damaged: opening reads the ids only; reading a node of that piece
    fails with StoreError, nodes of the other pieces read."""
    monkeypatch.setattr(layout_mod, "COMPRESSION", None)  # the bytes must be findable
    monkeypatch.setattr(layout_mod, "COMPRESS_BELOW", 16 << 10)
    kb = tmp_path / "kb"
    kb.mkdir()
    _log(kb / "server.log", 3000)
    monkeypatch.setattr(groupstream_mod, "PIECE_BYTES", 40 << 10)
    doc = fr.Document(kb, store=tmp_path / "store")
    doc.create_node_group("chunk", transform=fr.SentenceSplitter(chunk_size=64, chunk_overlap=8))
    doc.group("chunk")
    segments = Store(tmp_path / "store", mode="r").manifest["groups"]["chunk"]["segments"]
    assert len(segments) >= 3
    path = tmp_path / "store" / segments[1]["file"]
    data = bytearray(path.read_bytes())
    data[data.index(b"{}{}")] = ord("[")  # a row's metadata is no longer a JSON object
    path.write_bytes(bytes(data))
    monkeypatch.setattr(store_mod, "VERIFY_BELOW", 1)
    group = fr.Document(store=tmp_path / "store", mode="r").group("chunk")
    assert group[0].text and group[len(group) - 1].text
    with pytest.raises(StoreError, match="is not a JSON object.*damaged"):
        _ = group[segments[0]["rows"]].metadata


def test_a_segment_collected_while_the_group_opens_is_missing_not_a_crash(
    pieces_store, monkeypatch
):
    """A segment file that disappears between its check and its mapping (a writer collected
    it) is a MissingFile, which the group's opening handles as before: it re-reads the
    manifest and, when the manifest still names the file, warns and rebuilds the group."""
    from fastrag.documents.storeio import FileMaps
    from fastrag.errors import StoreWarning

    store, _ = pieces_store
    want = fr.Document(store=store, mode="r").group("chunk").ids
    real = FileMaps.open

    def gone(self, path):
        if Path(path).name.startswith("chunk."):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real(self, path)

    monkeypatch.setattr(FileMaps, "open", gone)
    doc = fr.Document(store=store, mode="r")
    with pytest.warns(StoreWarning, match="is damaged and is rebuilt from its parent"):
        group = doc.group("chunk")
    assert group.ids == want
