"""A long plain UTF-8 file is read as its bytes (a BufferText), never as one str: the same
texts, metadata, stored segments and chunks as the str path; anything else still decodes."""

from __future__ import annotations

import codecs

import pyarrow as pa
import pytest

import fastrag as fr
import fastrag.documents.buffertext as buffertext_mod
import fastrag.documents.readers.formats as formats_mod
from fastrag.documents.buffertext import text_column
from fastrag.documents.decoding import decode_text, plain_utf8
from fastrag.documents.readers import read_file
from fastrag.documents.sources import rows_to_table
from fastrag.errors import ConfigError
from fastrag.transforms.longtext import BufferText

LOG = "".join(
    f"2026-11-{d:02d} worker-{d % 4} GET /api/v{d % 3}/orders?id={d * 7} 200 {d * 13} ms\n"
    + ("user=José région=東京 🙂\n" if d % 5 == 0 else "")
    for d in range(1, 400)
)


def test_plain_utf8_is_what_decode_text_reads_as_utf8():
    mib = 1 << 20
    cases = {
        "ascii": b"abc\n" * 10,
        "wide across a MiB edge": b"a" * (mib - 1) + "東京".encode() * 3,
        "control bytes": b"line\x1b[0m\n" * 5,
        "bom": codecs.BOM_UTF8 + b"text",
        "nul": b"text\x00more",
        "invalid at a MiB edge": b"a" * (mib - 1) + b"\xe6\x9d" + b"b" * 10,
        "cut at the end": "東".encode()[:2],
        "cp1252": "café".encode("cp1252") * 20,
        "png": b"\x89PNG\r\n\x1a\n" + b"x" * 100,
    }
    got = {k: plain_utf8(v) for k, v in cases.items()}
    assert got == {
        "ascii": True,
        "wide across a MiB edge": True,
        "control bytes": True,
        "bom": False,
        "nul": False,
        "invalid at a MiB edge": False,
        "cut at the end": False,
        "cp1252": False,
        "png": False,
    }
    for k, data in cases.items():
        if got[k]:
            assert decode_text(data) == (data.decode("utf-8"), "utf-8")


@pytest.mark.parametrize(
    "data, long",
    [
        (LOG.encode(), True),
        (LOG.encode("utf-8-sig"), False),  # a byte-order mark: decode_text drops it
        (LOG.replace("東京 🙂", "").encode("cp1252"), False),
    ],
    ids=["utf-8", "utf-8 with BOM", "cp1252"],
)
def test_read_file_gives_long_utf8_as_its_bytes(tmp_path, monkeypatch, data, long):
    path = tmp_path / "app.log"
    path.write_bytes(data)
    monkeypatch.setattr(formats_mod, "LONG_TEXT", 1000)
    [(want, want_meta)] = read_file(path)
    assert isinstance(want, str)
    [(got, meta)] = read_file(path, long_texts=True)
    assert isinstance(got, BufferText) is long
    assert got[:] == want and len(got) == len(want) and meta == want_meta
    monkeypatch.setattr(formats_mod, "LONG_TEXT", len(data) + 1)  # shorter: a str
    assert isinstance(read_file(path, long_texts=True)[0][0], str)
    with pytest.raises(ConfigError, match="long_texts"):
        read_file(path, long_texts="yes")


def test_a_text_column_shares_the_bytes_of_its_buffer_texts():
    data = LOG.encode()
    texts = ["a", BufferText(memoryview(data)), "b", "c", BufferText(memoryview(b"")), "d"]
    col = text_column(texts)
    plain = [t if isinstance(t, str) else t[:] for t in texts]
    assert col.to_pylist() == plain and text_column(plain) is plain
    assert col.chunk(1).buffers()[2].address == pa.py_buffer(data).address  # not a copy
    rows = [(str(i), str(i), None, t, None, None, "{}") for i, t in enumerate(texts)]
    want = rows_to_table([(*r[:3], p, *r[4:]) for r, p in zip(rows, plain, strict=True)], "root")
    assert rows_to_table(rows, "root").equals(want)


def test_an_ingested_long_file_stores_what_the_str_path_stores(tmp_path, monkeypatch):
    """The root and chunk segments and the index files are byte-identical either way."""
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "app.log").write_text(LOG * 3, encoding="utf-8")
    (folder / "short.txt").write_text("a short note about orders.", encoding="utf-8")

    def ingest(store, long_text: int) -> dict[str, bytes]:
        monkeypatch.setattr(formats_mod, "LONG_TEXT", long_text)
        monkeypatch.setattr(buffertext_mod, "LONG_TEXT", long_text)
        doc = fr.Document(folder, store=store)
        splitter = fr.SentenceSplitter(chunk_size=48, chunk_overlap=8)
        doc.create_node_group("chunk", transform=splitter)
        fr.Retriever(doc, group_name="chunk", similarity="bm25", topk=3)("orders José")
        files = sorted(p for p in store.rglob("*") if p.is_file() and p.parent != store)
        return {str(p.relative_to(store)): p.read_bytes() for p in files}

    spied = []
    make = formats_mod.BufferText

    def spy(view):
        spied.append(len(view))
        return make(view)

    want = ingest(tmp_path / "str", 10**9)
    monkeypatch.setattr(formats_mod, "BufferText", spy)
    got = ingest(tmp_path / "bytes", 1000)
    assert spied == [len((LOG * 3).encode())]  # the log, not the short note
    assert got == want
