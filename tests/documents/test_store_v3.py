"""Store format 3 and the store's contract with its users: metadata stored once per document,
groups that re-open with their spec, sources that are not silently replaced, errors that name
the file, one writer at a time (and who it is)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import fastrag as fr
from fastrag.documents import store as store_mod
from fastrag.documents import transaction as layout_mod
from fastrag.documents.store import Store
from fastrag.errors import ConfigError, StoreLockTimeout, TransformError

ROOT = Path(__file__).resolve().parents[2]


def _kb(tmp_path: Path) -> Path:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.md").write_text("# Cats\ncats sit on mats\ncats purr\n", encoding="utf-8")
    (kb / "b.txt").write_text("dogs bark\ndogs run fast\n", encoding="utf-8")
    return kb


def _group_table(store: Path, name: str) -> pa.Table:
    st = Store(store, mode="r")
    return st.read_segments(st.manifest["groups"][name]["segments"])


def test_children_store_no_copy_of_their_documents_metadata(tmp_path):
    kb = _kb(tmp_path)
    doc = fr.Document(kb, store=tmp_path / "st", global_metadata={"team": "pets"})
    doc.create_node_group("line", transform=fr.LineSplitter())
    line = doc.group("line")
    assert len(line) == 5
    raw = _group_table(tmp_path / "st", "line").column("metadata").to_pylist()
    assert raw == ["{}"] * 5  # nothing copied
    node = next(n for n in line if n.text == "dogs bark")
    root_meta = doc.group("root").node_by_id(node.doc_id).metadata
    assert node.metadata == root_meta
    assert node.metadata["file_name"] == "b.txt" and node.metadata["team"] == "pets"
    # filters see inherited metadata
    hits = fr.Retriever(doc, "line", "bm25", topk=5, filter="file_name == 'b.txt'")("dogs")
    assert {h.text for h in hits} == {"dogs bark", "dogs run fast"}
    # and re-opening gives the same
    again = fr.Document(store=tmp_path / "st")
    assert again.group("line").node_by_id(node.id).metadata == root_meta


def test_per_node_metadata_adds_to_the_documents(tmp_path):
    kb = _kb(tmp_path)
    doc = fr.Document(kb, store=tmp_path / "st")

    def tag(node):
        return [
            fr.DocNode(text=line, metadata={"n": i, "file_name": "override"})
            for i, line in enumerate(node.text.splitlines())
        ]

    doc.create_node_group("tagged", transform=tag, trans_node=True)
    doc.create_node_group("words", transform=lambda t: t.split(), parent="tagged")
    nodes = {n.text: n for n in doc.group("tagged")}
    assert nodes["cats purr"].metadata["n"] == 2
    assert nodes["cats purr"].metadata["file_name"] == "override"
    assert nodes["cats purr"].metadata["file_type"] == "md"  # inherited
    stored = {
        json.loads(m)["n"]
        for m in _group_table(tmp_path / "st", "tagged").column("metadata").to_pylist()
    }
    assert stored == {0, 1, 2}
    own = json.loads(_group_table(tmp_path / "st", "tagged").column("metadata")[0].as_py())
    assert set(own) == {"n", "file_name"}  # only what the node adds or changes
    purr = next(n for n in doc.group("words") if n.text == "purr")
    assert purr.metadata["n"] == 2 and purr.metadata["file_name"] == "override"
    assert purr.metadata["file_type"] == "md"


def test_version_2_store_opens_and_upgrades_on_commit(tmp_path):
    kb = _kb(tmp_path)
    st = tmp_path / "st"
    doc = fr.Document(kb, store=st)
    doc.create_node_group("line", transform=fr.LineSplitter())
    want = {n.id: n.metadata for n in doc.group("line")}
    m = json.loads((st / "manifest.json").read_text())
    m.pop("checksum")
    m["format_version"] = 2
    m["checksum"] = store_mod._manifest_checksum(m)
    (st / "manifest.json").write_text(json.dumps(m))
    old = fr.Document(store=st, mode="r")
    assert {n.id: n.metadata for n in old.group("line")} == want
    rw = fr.Document(store=st)
    rw.add(texts=["birds sing"])
    assert json.loads((st / "manifest.json").read_text())["format_version"] == 3
    m["format_version"] = 1
    m["checksum"] = store_mod._manifest_checksum({k: v for k, v in m.items() if k != "checksum"})
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(fr.errors.StoreError, match="rebuild it from its sources"):
        fr.Document(store=bad, mode="r")


def test_groups_reopen_from_the_store_alone(tmp_path):
    kb = _kb(tmp_path)
    st = tmp_path / "st"
    doc = fr.Document(kb, store=st)
    doc.create_node_group("line", transform=fr.LineSplitter())
    doc.create_node_group(
        "chunk", transform=fr.SentenceSplitter, parent="line", chunk_size=8, chunk_overlap=0
    )
    doc.create_node_group("py", transform=lambda t: t.split("\n"))  # not recordable
    for g in ("line", "chunk", "py"):
        doc.group(g)
    again = fr.Document(store=st)
    assert {"line", "chunk", "py"} <= set(again.group_names)
    assert again.parent_of("chunk") == "line"
    assert again.group("chunk").ids == doc.group("chunk").ids
    assert again.group("py").ids == doc.group("py").ids  # as stored
    # a new file: spec groups update, the Python group asks to be registered again
    (kb / "c.txt").write_text("birds sing\n", encoding="utf-8")
    again = fr.Document(kb, store=st)
    assert "birds sing" in again.group("line").texts()
    with pytest.raises(ConfigError, match=r"register it again with doc.create_node_group\('py'"):
        again.group("py")
    again.create_node_group("py", transform=lambda t: t.split("\n"))
    assert "birds sing" in again.group("py").texts()


def test_other_sources_are_not_silently_replaced(tmp_path):
    kb = _kb(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.txt").write_text("fish swim\n", encoding="utf-8")
    st = tmp_path / "st"
    fr.Document(kb, store=st)
    fr.Document(kb, store=st)  # the same sources: fine
    with pytest.raises(ConfigError, match=r"\.add\(paths\).*--add.*replace=True.*--replace"):
        fr.Document(other, store=st)
    assert len(fr.Document(store=st).group("root")) == 2  # nothing changed
    added = fr.Document(store=st).add(other)
    assert len(added) == 1 and len(fr.Document(kb, store=st).group("root")) == 3
    doc = fr.Document(other, store=st, replace=True)
    assert [n.text for n in doc.group("root")] == ["fish swim\n"]


def test_add_a_missing_path_is_an_error_and_texts_go_by_keyword(tmp_path):
    doc = fr.Document.from_texts(["one"], store=tmp_path / "st")
    with pytest.raises(ConfigError, match=r"no such file or folder: 'missing/path.md'.*texts="):
        doc.add("missing/path.md")
    assert len(doc.group("root")) == 1
    ids = doc.add(texts=["missing/path.md", "two"])
    assert [doc.group("root").node_by_id(i).text for i in ids] == ["missing/path.md", "two"]
    with pytest.raises(ConfigError, match="either paths"):
        doc.add("x", texts=["y"])


def test_a_failing_transform_names_group_node_and_file(tmp_path):
    kb = _kb(tmp_path)
    doc = fr.Document(kb)

    def boom(text):
        if "dogs" in text:
            raise ValueError("no dogs allowed")
        return [text]

    doc.create_node_group("picky", transform=boom)
    with pytest.raises(TransformError) as err:
        doc.group("picky")
    msg = str(err.value)
    assert "'picky'" in msg and str(kb / "b.txt") in msg and "ValueError: no dogs allowed" in msg
    assert isinstance(err.value.__cause__, ValueError)


def test_a_waiting_writer_names_the_holder(tmp_path):
    st = tmp_path / "st"
    fr.Document.from_texts(["one"], store=st)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time
        from fastrag.documents.store import Store
        s = Store({str(st)!r})
        with s._locked():
            print("locked", flush=True)
            time.sleep(30)
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        doc = fr.Document(store=st, lock_timeout=0.3)
        with pytest.raises(StoreLockTimeout, match=rf"pid {holder.pid} on .*running"):
            doc.add(texts=["two"])
        assert len(fr.Document(store=st, mode="r").group("root")) == 1  # readers never block
    finally:
        holder.kill()
        holder.wait()
    doc.add(texts=["two"])
    assert not (st / store_mod.HOLDER).exists()


CHILD = """
import sys, fastrag as fr
doc = fr.Document(sys.argv[1], store=sys.argv[2], replace=True, lock_timeout=60)
doc.create_node_group("line", transform=fr.LineSplitter())
print(len(doc.group("line")))
"""


def test_two_processes_ingesting_into_one_store(tmp_path):
    """Both finish (one waits for the other's lock); the store then equals one outcome."""
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, word in ((a, "apple"), (b, "banana")):
        folder.mkdir()
        for i in range(30):
            (folder / f"{i}.txt").write_text(f"{word} {i}\n{word} line two {i}\n", encoding="utf-8")
    st = tmp_path / "st"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(src), str(st)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for src in (a, b)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    assert [o[0].strip() for o in outs] == ["60", "60"]
    doc = fr.Document(store=st, mode="r")
    assert Store(st, mode="r").verify() == []
    texts = set(doc.group("line").texts())
    words = {t.split()[0] for t in texts}
    assert len(words) == 1 and len(texts) == 60  # one of the two outcomes, whole
    assert len(doc.group("root")) == 30


def test_small_text_segments_are_compressed_large_ones_stay_mappable(tmp_path, monkeypatch):
    texts = [
        f"the quick brown fox number {i} jumps over the lazy dog\nline two {i}" for i in range(2000)
    ]

    def build(path):
        doc = fr.Document.from_texts(texts, store=path)
        doc.create_node_group("line", transform=fr.LineSplitter())
        doc.group("line")
        files = Store(path).referenced()
        return (
            doc,
            (path / next(f for f in files if "/line" in f)).read_bytes(),
            (path / next(f for f in files if "/root" in f)).read_bytes(),
        )

    doc, line, root = build(tmp_path / "small")
    assert b"lazy dog" not in line  # zstd
    assert b"number 1999 jumps" in root  # the root table, read by every open, stays plain
    monkeypatch.setattr(layout_mod, "COMPRESS_BELOW", 1024)  # every table counts as large
    monkeypatch.setattr(layout_mod, "SPLIT_BELOW", 1024)  # ... and too large for zstd pieces
    big, plain, _ = build(tmp_path / "large")
    assert b"number 1999 jumps" in plain and len(line) < 0.5 * len(plain)
    assert big.group("line").texts() == doc.group("line").texts()
    assert (
        fr.Document(store=tmp_path / "small", mode="r").group("line").ids == doc.group("line").ids
    )
