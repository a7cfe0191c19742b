"""Issue 42, goal 3: a node's ``file_path`` is the path users see (relative to the folder
ingested, as ``fastrag search`` prints sources), ``abs_path`` where the file is on disk; stores
written before hold the absolute path in ``file_path`` and read as the new ones, unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import fastrag as fr
import fastrag.documents.sources as sources_mod
from fastrag.cli.main import main
from fastrag.documents.store import Store
from fastrag.schema import GROUP_SCHEMA

FILES = {
    "ko/chmod.md": "chmod changes the mode bits of a file.\n",
    "en/chmod.md": "Use chmod to change file permissions.\n",
    "en/tar.md": "tar stores many files in one archive.\n",
}


def _tree(base: Path) -> Path:
    for rel, text in FILES.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text, encoding="utf-8")
    return base


def _paths(doc: fr.Document, group: str = "root") -> dict[str, str]:
    return {n.metadata["file_path"]: n.metadata["abs_path"] for n in doc.group(group)}


def _stored_root_metadata(st: Path) -> list[str]:
    store = Store(st, mode="r")
    segments = store.manifest["groups"]["root"]["segments"]
    return store.read_segments(segments, GROUP_SCHEMA).column("metadata").to_pylist()


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_file_path_is_relative_and_abs_path_absolute(tmp_path):
    kb = _tree(tmp_path / "kb")
    doc = fr.Document(kb)
    assert _paths(doc) == {rel: str((kb / rel).resolve()) for rel in FILES}
    doc.create_node_group("line", transform=lambda t: t.split("\n"))
    assert _paths(doc, "line") == _paths(doc)  # children inherit both
    ret = fr.Retriever(doc, "line", "bm25", topk=5)
    hits = ret("chmod", filter="file_path LIKE 'ko/%'")
    assert [h.metadata["file_path"] for h in hits] == ["ko/chmod.md"]
    assert doc.source_path("ko/chmod.md") == "ko/chmod.md"
    assert doc.source_path(str(kb / "ko" / "chmod.md")) == "ko/chmod.md"
    # a file read on its own: its name; abs_path says where it is
    one = fr.Document(kb / "en" / "tar.md")
    assert _paths(one) == {"tar.md": str((kb / "en" / "tar.md").resolve())}


def test_cli_filter_on_the_path_it_prints(tmp_path, capsys):
    kb = _tree(tmp_path / "kb")
    st = tmp_path / "st"
    assert main(["ingest", str(kb), "--store", str(st), "-q"]) == 0
    capsys.readouterr()
    assert main(["search", str(st), "chmod", "--filter", "file_path LIKE 'ko/%'"]) == 0
    out = capsys.readouterr().out
    assert "ko/chmod.md" in out and "en/chmod.md" not in out


def test_source_text_delete_and_add_take_the_relative_path(tmp_path):
    kb = _tree(tmp_path / "kb")
    doc = fr.Document(kb, store=tmp_path / "st")
    assert doc.source_text("ko/chmod.md") == FILES["ko/chmod.md"]
    assert doc.delete("en/tar.md") == 1
    assert sorted(_paths(doc)) == ["en/chmod.md", "ko/chmod.md"]
    more = _tree(tmp_path / "more")
    (more / "ko" / "chmod.md").unlink()
    (more / "en" / "chmod.md").unlink()
    doc.add([more])  # relative to the folder added
    assert _paths(doc)["en/tar.md"] == str((more / "en" / "tar.md").resolve())
    (kb / "ko" / "ls.md").write_text("ls lists a folder.\n", encoding="utf-8")
    (tmp_path / "alone.md").write_text("A file on its own.\n", encoding="utf-8")
    doc.add([kb / "ko" / "ls.md", tmp_path / "alone.md"])  # under the folder read, or not
    assert _paths(doc)["ko/ls.md"] == str((kb / "ko" / "ls.md").resolve())
    assert _paths(doc)["alone.md"] == str((tmp_path / "alone.md").resolve())


def test_store_written_before_reads_with_user_paths_and_stays_unchanged(tmp_path, monkeypatch):
    kb = _tree(tmp_path / "kb")
    st = tmp_path / "st"
    real = sources_mod.read_file

    def old_reader(*args, **kwargs):  # what readers wrote before issue 42
        kwargs.pop("relative_to")
        out = real(*args, **kwargs)
        for _, meta in out:
            meta["file_path"] = meta.pop("abs_path")
        return out

    monkeypatch.setattr(sources_mod, "read_file", old_reader)
    old = fr.Document(kb, store=st)
    old.create_node_group("line", transform=lambda t: t.split("\n"))
    old.group("line")
    del old
    stored = sorted(json.loads(m)["file_path"] for m in _stored_root_metadata(st))
    assert stored == sorted(str((kb / rel).resolve()) for rel in FILES)  # the old shape
    monkeypatch.setattr(sources_mod, "read_file", real)

    before = _digest(st)
    doc = fr.Document(store=st, mode="r")
    doc.create_node_group("line", transform=lambda t: t.split("\n"))
    want = {rel: str((kb / rel).resolve()) for rel in FILES}
    assert _paths(doc) == want and _paths(doc, "line") == want  # nothing lost
    hits = fr.Retriever(doc, "line", "bm25", topk=5)("chmod", filter="file_path LIKE 'ko/%'")
    assert [h.metadata["file_path"] for h in hits] == ["ko/chmod.md"]
    assert _digest(st) == before  # a read path writes nothing
    assert sorted(json.loads(m)["file_path"] for m in _stored_root_metadata(st)) == stored

    # a writer leaves the old rows alone (nothing changed) and they still read the new way
    again = fr.Document(kb, store=st)
    assert again.source_changes.unchanged == 3 and _paths(again) == want


@pytest.mark.parametrize("move", [False, True])
def test_moved_folder_of_an_old_store_gets_user_paths(tmp_path, monkeypatch, move):
    kb = _tree(tmp_path / "kb")
    st = tmp_path / "st"
    real = sources_mod.read_file

    def old_reader(*args, **kwargs):
        kwargs.pop("relative_to")
        out = real(*args, **kwargs)
        for _, meta in out:
            meta["file_path"] = meta.pop("abs_path")
        return out

    monkeypatch.setattr(sources_mod, "read_file", old_reader)
    fr.Document(kb, store=st)
    monkeypatch.setattr(sources_mod, "read_file", real)
    where = kb.rename(tmp_path / "moved") if move else kb
    doc = fr.Document(where, store=st)
    assert _paths(doc) == {rel: str((where / rel).resolve()) for rel in FILES}
