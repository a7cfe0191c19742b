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
import fastrag.transforms.longtext as longtext_mod
import fastrag.transforms.sentence as sentence_mod
from fastrag.documents.building import SpanRows
from fastrag.documents.store import Store
from fastrag.errors import ConfigError
from fastrag.transforms import TokenTextSplitter
from fastrag.transforms.longtext import BufferText

TEXTS = [
    "alpha beta gamma. delta error login!\n" * 400,
    "héllo wörld, 中文字符 and 🙂 emoji.\n  indented line\n\n" * 150,
    "中文字符，句子。日本語のテキスト！\n" * 300,
]


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
        def __init__(self, view, release=None):
            super().__init__(view, release)
            made.append(len(self))

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


@pytest.mark.parametrize("text", TEXTS, ids=["ascii", "mixed", "wide"])
def test_a_buffer_text_reads_like_its_str(monkeypatch, text):
    """Slices, characters, find, rfind and isspace equal the str's, at random offsets across
    the character index's blocks and the search windows' edges."""
    monkeypatch.setattr(longtext_mod, "BLOCK", 64)
    monkeypatch.setattr(longtext_mod, "WINDOW", 16)
    view = BufferText(memoryview(text.encode()))
    assert len(view) == len(text) and view.isascii() == text.isascii()
    assert view[:] == text and view[-1] == text[-1] and view[5:5] == ""
    rng = random.Random(3)
    n = len(text)
    for _ in range(300):
        a, b = sorted(rng.randint(-5, n + 5) for _ in range(2))
        assert view[a:b] == text[a:b]
        sub = rng.choice(["\n", "中文", "🙂", "é", "alpha", "xyz", "", "a\nb"])
        assert view.find(sub, a, b) == text.find(sub, a, b), (sub, a, b)
        assert view.rfind(sub, a, b) == text.rfind(sub, a, b), (sub, a, b)
    assert view.find("\n") == text.find("\n") and view.rfind("\n") == text.rfind("\n")
    with pytest.raises(IndexError):
        view[n]
    with pytest.raises(ValueError, match="step 1"):
        view[::2]
    assert not view.isspace()
    blank = " \n\u3000\t" * 50
    assert BufferText(memoryview(blank.encode())).isspace() and not BufferText(memoryview(b""))


def test_a_buffer_text_calls_release_as_it_is_read(monkeypatch):
    monkeypatch.setattr(longtext_mod, "RELEASE_BYTES", 1000)
    calls = []
    text = "line of text\n" * 1000  # 13,000 bytes
    view = BufferText(memoryview(text.encode()), lambda: calls.append(1))
    assert len(calls) == 1  # the character count read every byte once
    for i in range(0, len(text), 500):
        view[i : i + 500]
    assert len(calls) == 14


@pytest.mark.parametrize("text", TEXTS, ids=["ascii", "mixed", "wide"])
def test_the_splitters_plan_a_buffer_text_as_its_str(monkeypatch, text):
    """A long text planned window by window through a BufferText gets the str's spans."""
    monkeypatch.setattr(sentence_mod, "WINDOW_CHARS", 3000)
    monkeypatch.setattr(longtext_mod, "WINDOW", 100)
    for splitter in (fr.SentenceSplitter(64, 8), TokenTextSplitter(48, 6)):
        view = BufferText(memoryview(text.encode()))
        want = splitter.batch_spans([text, "short one."])
        assert splitter.batch_spans([view, "short one."]) == want
        assert len(want[0]) > 10


def test_a_splitter_group_never_decodes_a_long_parent_whole(monkeypatch):
    """The group's splitter receives the long parents as BufferTexts; the rows are the
    str path's."""
    texts = _texts()
    monkeypatch.setattr(buffertext_mod, "LONG_TEXT", 10**9)
    want = _chunks(fr.Document.from_texts(texts))
    seen = []
    spans = fr.SentenceSplitter.batch_spans

    def spy(self, batch):
        seen.append([type(t).__name__ for t in batch])
        return spans(self, batch)

    monkeypatch.setattr(fr.SentenceSplitter, "batch_spans", spy)
    monkeypatch.setattr(buffertext_mod, "LONG_TEXT", 5_000)
    assert _chunks(fr.Document.from_texts(texts)).equals(want)
    assert seen == [["BufferText", "str", "BufferText", "str", "BufferText"]]
    with pytest.raises(ConfigError, match=r"texts\[1\] must be a str"):
        fr.SentenceSplitter().batch_spans([BufferText(memoryview(b"x")), 3])
