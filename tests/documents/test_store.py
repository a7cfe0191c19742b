"""Store: round trip, memory-mapped reopen with no transform, incremental updates, atomicity."""

from __future__ import annotations

import json
import os
import time

import pytest

import fastrag as fr
from fastrag.documents import store as store_mod
from fastrag.errors import ConfigError, StoreError, StoreWarning

CALLS: list[str] = []


def counting_split(text: str) -> list[str]:
    CALLS.append(text)
    return text.split("\n")


@pytest.fixture(autouse=True)
def _reset_calls():
    CALLS.clear()


def write_kb(folder, files: dict[str, str]):
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")


def open_doc(kb, store):
    doc = fr.Document(kb, store=store)
    doc.create_node_group("line", transform=counting_split)
    return doc


def test_round_trip_and_reopen_runs_no_transform(tmp_path):
    kb, st = tmp_path / "kb", tmp_path / "store"
    write_kb(kb, {"a.txt": "one\ntwo", "b.txt": "three\nfour\nfive"})
    doc = open_doc(kb, st)
    first = doc.group("line").table
    assert len(CALLS) == 2
    manifest = json.loads((st / "manifest.json").read_text())
    assert manifest["format_version"] == store_mod.FORMAT_VERSION
    assert manifest["groups"]["line"]["nodes"] == 5
    assert sum(seg["rows"] for seg in manifest["sources"]) == 2

    CALLS.clear()
    again = open_doc(kb, st)
    table = again.group("line").table
    assert CALLS == []  # memory-mapped, nothing transformed
    assert table.equals(first)
    assert [n.text for n in again.group("line")] == ["one", "two", "three", "four", "five"]
    assert again.group("line")[0].root_node.metadata["file_name"] == "a.txt"


def test_changed_added_removed_files_are_reprocessed_alone(tmp_path):
    kb, st = tmp_path / "kb", tmp_path / "store"
    write_kb(kb, {"a.txt": "one\ntwo", "b.txt": "three", "c.txt": "six"})
    open_doc(kb, st).group("line")
    CALLS.clear()
    time.sleep(0.01)
    (kb / "b.txt").write_text("THREE\nthree-b", encoding="utf-8")
    (kb / "c.txt").unlink()
    (kb / "d.txt").write_text("seven", encoding="utf-8")
    with pytest.warns(StoreWarning, match=r"keeps 1 sources .*1 missing on disk .*c\.txt"):
        doc = open_doc(kb, st)
    # the removed file's node is kept until asked: the store owns what it was given
    assert [n.text for n in doc.group("line")] == ["one", "two", "six", "THREE", "three-b", "seven"]
    assert sorted(CALLS) == ["THREE\nthree-b", "seven"]
    assert doc.source_changes.summary() == (
        "read 1 new file, re-read 1 changed, unchanged 1, kept 1 missing on disk"
    )
    doc.refresh(remove_missing=True)
    assert [n.text for n in doc.group("line")] == ["one", "two", "THREE", "three-b", "seven"]
    assert doc.source_changes.removed == [str((kb / "c.txt").resolve())]
    assert sorted(CALLS) == ["THREE\nthree-b", "seven"]
    # the same result as a fresh build
    CALLS.clear()
    fresh = open_doc(kb, tmp_path / "fresh")
    assert fresh.group("line").table.equals(doc.group("line").table)


def test_touched_file_with_same_bytes_is_not_reprocessed(tmp_path):
    kb, st = tmp_path / "kb", tmp_path / "store"
    write_kb(kb, {"a.txt": "one\ntwo"})
    open_doc(kb, st).group("line")
    CALLS.clear()
    os.utime(kb / "a.txt", (time.time() + 5, time.time() + 5))
    assert len(open_doc(kb, st).group("line")) == 2
    assert CALLS == []


def test_add_and_delete_update_the_store(tmp_path):
    st = tmp_path / "store"
    doc = fr.Document.from_texts(["a\nb", "c"], store=st)
    doc.create_node_group("line", transform=counting_split)
    doc.group("line")
    new_ids = doc.add(["d\ne"])
    assert len(new_ids) == 1
    assert [n.text for n in doc.group("line")] == ["a", "b", "c", "d", "e"]
    assert CALLS == ["a\nb", "c", "d\ne"]  # only the new text was transformed
    first_root = doc.group("root")[0].id
    assert doc.delete([first_root]) == 1
    assert [n.text for n in doc.group("line")] == ["c", "d", "e"]
    with pytest.raises(ConfigError, match="unknown doc ids"):
        doc.delete(["nope"])

    reopened = fr.Document(store=st)
    reopened.create_node_group("line", transform=counting_split)
    CALLS.clear()
    assert [n.text for n in reopened.group("line")] == ["c", "d", "e"]
    assert CALLS == []


def test_delete_by_file_path(tmp_path):
    kb = tmp_path / "kb"
    write_kb(kb, {"a.txt": "one", "b.txt": "two"})
    doc = open_doc(kb, tmp_path / "st")
    doc.delete(str(kb / "a.txt"))
    assert [n.text for n in doc.group("line")] == ["two"]


def test_changed_transform_rebuilds_the_group(tmp_path):
    st = tmp_path / "store"
    doc = fr.Document.from_texts(["a b\nc"], store=st)
    doc.create_node_group("g", transform=lambda t: t.split("\n"))
    assert len(doc.group("g")) == 2
    doc = fr.Document.from_texts(["a b\nc"], store=st)
    doc.create_node_group("g", transform=lambda t: t.split(" "))
    assert [n.text for n in doc.group("g")] == ["a", "b\nc"]


class Boom(RuntimeError):
    pass


def test_interrupted_write_leaves_previous_content(tmp_path, monkeypatch):
    kb, st = tmp_path / "kb", tmp_path / "store"
    write_kb(kb, {"a.txt": "one\ntwo"})
    open_doc(kb, st).group("line")
    files_before = sorted(p.name for p in (st / "data").iterdir() if "sources" not in p.name)
    manifest_before = (st / "manifest.json").read_bytes()

    (kb / "a.txt").write_text("changed\ntext\nhere", encoding="utf-8")
    real_write = store_mod.Transaction.write_segment

    def failing_write(self, name, table):
        if name == "root":  # the sources are written, then the write of the root fails midway
            (self.store.path / "data" / "root.partial.arrow").write_bytes(b"half")
            raise Boom("disk full")
        return real_write(self, name, table)

    monkeypatch.setattr(store_mod.Transaction, "write_segment", failing_write)
    with pytest.raises(Boom):
        open_doc(kb, st)
    monkeypatch.undo()
    assert (st / "manifest.json").read_bytes() == manifest_before
    # the half-written file is a leftover: the next writable open removes it
    CALLS.clear()
    (kb / "a.txt").write_text("one\ntwo", encoding="utf-8")
    doc = open_doc(kb, st)
    # (the touched file's new mtime is recorded in a new sources segment)
    assert (
        sorted(p.name for p in (st / "data").iterdir() if "sources" not in p.name) == files_before
    )
    assert not [p for p in st.rglob(".tmp-*")]
    # the store still has its previous content (before the source change)
    assert [n.text for n in doc.group("line")] == ["one", "two"]
    assert CALLS == []


def test_crash_inside_atomic_write_removes_temp_file(tmp_path):
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")

    def write(f):
        f.write(b"new-partial")
        raise Boom("power cut")

    with pytest.raises(Boom):
        store_mod.atomic_write_bytes(target, write)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_unknown_format_version_is_a_clear_error(tmp_path):
    st = tmp_path / "store"
    fr.Document.from_texts(["x"], store=st)
    m = json.loads((st / "manifest.json").read_text())
    m["format_version"] = 999
    (st / "manifest.json").write_text(json.dumps(m))
    data = (st / "manifest.json").read_bytes()
    with pytest.raises(StoreError, match="format version 999.*nothing was changed"):
        fr.Document.from_texts(["x"], store=st)
    assert (st / "manifest.json").read_bytes() == data


def test_store_path_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        fr.Document.from_texts(["x"], store=f)


def test_damaged_manifest(tmp_path):
    st = tmp_path / "store"
    st.mkdir()
    (st / "manifest.json").write_text("{not json")
    with pytest.raises(StoreError, match="damaged"):
        fr.Document.from_texts(["x"], store=st)


def test_a_writable_open_reads_each_file_once(tmp_path, monkeypatch):
    from fastrag.documents import readers, sources

    kb = tmp_path / "kb"
    write_kb(kb, {f"{i}.txt": f"text {i}" for i in range(5)})
    calls = []

    def counting(path, **kw):
        calls.append(path)
        return readers.read_file(path, **kw)

    monkeypatch.setattr(sources, "read_file", counting)
    fr.Document(kb, store=tmp_path / "st")  # planned before the lock, reused inside it
    assert len(calls) == 5
    (kb / "3.txt").write_text("changed", encoding="utf-8")
    calls.clear()
    doc = fr.Document(kb, store=tmp_path / "st")
    assert [p.name for p in calls] == ["3.txt"]
    assert [n.text for n in doc.group("root")] == [
        "text 0",
        "text 1",
        "text 2",
        "text 4",
        "changed",
    ]


def test_a_stored_bm25_index_for_other_analyzer_options_is_named(tmp_path):
    """A store whose BM25 index was built with other options of the same analyzer (e.g. a
    segmenter the writer had) says so, naming each differing option, before it builds one for
    this configuration; the same configuration, or another analyzer, warns nothing."""
    import warnings

    texts = ["running cats follow the log", "dogs changed the owner", "free disk space"]
    store = str(tmp_path / "s")
    fr.Retriever(fr.Document.from_texts(texts, store=store), "root", "bm25")("cats")
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreWarning)
        doc = fr.Document(store=store, mode="r")
        assert fr.Retriever(doc, "root", "bm25")("cats")  # stored one: no warning
        assert fr.Retriever(doc, "root", "bm25_chinese")("cats")  # another analyzer
    doc = fr.Document(store=store, mode="r")
    with pytest.warns(StoreWarning) as caught:
        hits = fr.Retriever(doc, "root", "bm25", stemmer=None)("running")
    assert [h.node.text for h in hits] == [texts[0]]
    (w,) = [w for w in caught if "built by analyzer 'bm25'" in str(w.message)]
    msg = str(w.message)
    assert "group 'root'" in msg and "options.stemmer: english there, None here" in msg
    # only the options that differ: the stemmer, and so what a text's language changes
    assert msg.count(" there, ") == 2 and "options.per_language: function-words-v2:" in msg
    assert "pass the options it was built with" in msg  # not a segmenter: nothing to install


def test_a_writable_store_names_only_a_segmenter_that_differs(tmp_path, monkeypatch):
    """On a writable store another stemmer is a choice (built once, stored) and warns nothing;
    a segmenter the writer had and this process lacks warns, naming it and the extra."""
    import warnings

    import fastrag.analysis.mixed as mixed

    texts = ["running cats follow the log", "dogs changed the owner", "free disk space"]
    store = str(tmp_path / "s")
    fr.Retriever(fr.Document.from_texts(texts, store=store), "root", "bm25")("cats")
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreWarning)
        fr.Retriever(fr.Document(store=store), "root", "bm25", stemmer=None)("running")
    tags = dict(mixed.segmenter_tags(), th="pythainlp-0.0-newmm-elsewhere")
    monkeypatch.setattr(mixed, "segmenter_tags", lambda: tags)
    with pytest.warns(StoreWarning, match="built by analyzer 'bm25'") as caught:
        fr.Retriever(fr.Document(store=store), "root", "bm25")("cats")
    msg = next(str(w.message) for w in caught if "built by analyzer" in str(w.message))
    assert "here" in msg and "options.segmenters.th: " in msg
    assert "pythainlp-0.0-newmm-elsewhere here" in msg and "the fastrag extras" in msg
