"""A span transform reads a long parent from its Arrow buffer a chunk at a time (no Python
copy of the whole text): the same rows as slicing the str, ASCII or not, in memory and from a
store, and the store's mapped pages are dropped after each batch."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

import fastrag as fr
import fastrag.documents.buffertext as buffertext_mod
import fastrag.documents.building as building_mod
from fastrag.documents.buffertext import BufferText, buffer_views
from fastrag.documents.building import SpanRows
from fastrag.documents.store import Store


def _texts() -> list[str]:
    rng = random.Random(7)
    words = "alpha beta gamma delta error login cart billing export health".split()

    def para(n: int, extra: str = "") -> str:
        lines = [
            " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + "." for _ in range(n)
        ]
        return (extra + "\n").join(lines)

    return [
        para(400),  # long, ASCII: read from the buffer
        "a short parent. Only one line.",  # short: stays a str
        para(300, " café 中文 🙂"),  # long, not ASCII: 2-, 3- and 4-byte characters
        "   \n\n   ",  # blank chunks are dropped either way
        para(500),  # long, ASCII, after the others (offsets into the same buffer)
    ]


def _chunks(doc: fr.Document) -> pa.Table:
    doc.create_node_group("chunk", transform=fr.SentenceSplitter(chunk_size=40, chunk_overlap=8))
    return doc.group("chunk").table


@pytest.mark.parametrize("stored", [False, True])
def test_long_ascii_parents_give_the_rows_of_the_str_path(tmp_path, monkeypatch, stored):
    texts = _texts()
    monkeypatch.setattr(building_mod, "SPAN_BATCH", 25)
    monkeypatch.setattr(buffertext_mod, "LONG_TEXT", 10**9)
    want = _chunks(fr.Document.from_texts(texts))

    made = []

    class Spy(BufferText):
        def __init__(self, view, n_chars, bounds):
            made.append(n_chars)
            super().__init__(view, n_chars, bounds)

    monkeypatch.setattr(buffertext_mod, "BufferText", Spy)
    monkeypatch.setattr(buffertext_mod, "LONG_TEXT", 5_000)
    store = tmp_path / "st" if stored else None
    got = _chunks(fr.Document.from_texts(texts, store=store))
    assert made == [len(texts[i]) for i in (0, 2, 4)]  # the long parents
    assert got.equals(want)  # ids, texts, offsets, metadata
    if stored:
        again = fr.Document(store=store, mode="r").group("chunk").table
        assert again.equals(want)


def test_parents_in_several_sliced_chunks(monkeypatch):
    """Views find each parent's bytes in a chunked, sliced text column."""
    texts = _texts()
    table = fr.Document.from_texts(texts).group("root").table
    column = table.column("text")
    sliced = pa.chunked_array([column.slice(0, 2).combine_chunks(), column.slice(2)])
    parts = pa.chunked_array([c.slice(0) for c in sliced.chunks] + [sliced.chunks[1].slice(3, 0)])
    monkeypatch.setattr(buffertext_mod, "LONG_TEXT", 5_000)
    d = building_mod.GroupDef(
        "chunk",
        "root",
        fn=lambda t: [t],
        trans_node=False,
        num_workers=0,
        identity="x",
        spans=lambda ts: [[(0, len(t))] for t in ts],
    )
    calls = []
    parents = parts.to_pylist()
    rows = SpanRows(
        d,
        table.column("id").to_pylist(),
        table.column("doc_id").to_pylist(),
        parents,
        ["{}"] * len(texts),
        parts,
        lambda: calls.append(1),
    )
    assert [isinstance(t, BufferText) for t in parents] == [True, False, True, False, True]
    out = rows.table()
    assert out.column("text").to_pylist() == [t for t in texts if t.strip()]
    assert calls == []  # one batch: nothing to drop between batches


def test_a_stored_parents_pages_are_dropped_after_each_batch(tmp_path, monkeypatch):
    texts = _texts()
    fr.Document.from_texts(texts, store=tmp_path / "st")
    monkeypatch.setattr(building_mod, "SPAN_BATCH", 25)
    monkeypatch.setattr(buffertext_mod, "LONG_TEXT", 5_000)
    dropped = []
    release = Store.release_pages

    def spy(self):
        dropped.append(1)
        return release(self)

    monkeypatch.setattr(Store, "release_pages", spy)
    doc = fr.Document(store=tmp_path / "st")
    table = _chunks(doc)
    without = len(dropped)
    assert table.num_rows >= 100
    dropped.clear()
    monkeypatch.setattr(buffertext_mod, "LONG_TEXT", 10**9)
    other = fr.Document(store=tmp_path / "st")
    other.create_node_group("other", transform=fr.SentenceSplitter(chunk_size=40, chunk_overlap=8))
    assert other.group("other").table.num_rows == table.num_rows
    # once per full batch of 25 rows on top of the str path's calls
    assert without - len(dropped) == table.num_rows // 25


def test_a_buffer_text_slices_like_its_str_at_its_offsets_only():
    text = "héllo wörld, 中文字符 and 🙂 emoji.\n" * 40
    spans = [(0, 7), (5, 30), (30, 30), (29, len(text) - 3), (len(text) - 3, len(text))]
    column = pa.chunked_array([pa.array(["x", text], pa.large_string())])
    texts = column.to_pylist()
    assert buffer_views(texts, [[], spans], column) == 0  # shorter than LONG_TEXT
    view = BufferText(memoryview(text.encode()), len(text), buffertext_mod.byte_bounds(text, spans))
    assert [view[s:e] for s, e in spans] == [text[s:e] for s, e in spans]
    assert len(view) == len(text)
    with pytest.raises(ValueError, match=r"slice \[6:30\] is not at the offsets"):
        view[6:30]
