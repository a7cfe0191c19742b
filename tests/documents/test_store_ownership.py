"""A store is the user's data: opening and reading it never writes it, sources whose files are
missing or moved are kept and reported (removed only on request), a store moved, copied or
mounted read-only serves as before, re-ingesting a moved folder re-links its sources, a full
disk is a StoreError, and a failed first ingest leaves nothing behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

import fastrag as fr
from fastrag.cli import main
from fastrag.documents import store as store_mod
from fastrag.errors import ConfigError, StoreError, StoreWarning

ROOT = Path(__file__).resolve().parents[2]
DOCS = {
    "guide/upload.md": "# Uploading files\n\nUse the upload button to send a file. Uploads "
    "over 50 MB are refused.\n",
    "guide/cors.md": "# CORS\n\nCross-origin requests need the Access-Control-Allow-Origin "
    "header on every response.\n",
    "zh/upload.md": "# 上传文件\n\n使用上传按钮发送文件。超过五十兆的文件会被拒绝。\n",
    "notes.txt": "The cat sat on the mat.\nDogs bark at the postman every morning.\n",
}
QUERIES = ["upload a file", "cors header", "cat mat"]


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def snapshot(st: Path) -> dict[str, tuple]:
    """Every path under a store with its size, modification time and bytes."""
    return {
        str(p.relative_to(st)): (
            p.is_dir(),
            p.stat().st_size if p.is_file() else 0,
            p.stat().st_mtime_ns,
            p.read_bytes() if p.is_file() else b"",
        )
        for p in sorted(st.rglob("*"))
    } | {".": (True, 0, st.stat().st_mtime_ns, b"")}


def hits(doc: fr.Document, group: str = "chunk") -> list[list[tuple[str, float]]]:
    ret = fr.Retriever(doc, group, "bm25", topk=3)
    return [[(h.text, round(h.score, 5)) for h in hs] for hs in ret.batch(QUERIES)]


@pytest.fixture()
def ingested(tmp_path, capsys):
    """(source folder, store) after `fastrag ingest`; the folder is then moved away."""
    src = write_tree(tmp_path / "src", DOCS)
    st = tmp_path / "kb.store"
    assert main(["ingest", str(src), "--store", str(st), "-q"]) == 0
    capsys.readouterr()
    return src, st


def test_read_verbs_and_python_opens_never_change_a_moved_store(ingested, tmp_path, capsys):
    src, st = ingested
    before_hits = hits(fr.Document(store=st, mode="r"))
    src.rename(tmp_path / "moved")
    before = snapshot(st)
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "upload a file", "source": "upload.md"}) + "\n")

    assert main(["search", str(st), "upload a file"]) == 0
    out, err = capsys.readouterr()
    assert "upload.md" in out and "has no nodes" not in err
    assert re.search(r"warning: store .*4 of its source files are missing", err)
    assert main(["search", str(st), "--queries", str(questions), "--json"]) == 0
    assert main(["ask", str(st), "how do I upload a file?"]) == 0
    assert "Uploading files" in capsys.readouterr().out
    assert main(["eval", str(st), "--questions", str(questions)]) == 0
    assert main(["info", str(st), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "sources 4" in out and "4 source files missing on disk" in out
    assert str(src / "guide" / "cors.md") in out
    assert snapshot(st) == before

    for mode in ("a", "r"):
        with pytest.warns(StoreWarning, match="4 of its source files are missing"):
            doc = fr.Document(store=st, mode=mode)
        assert len(doc.group("root")) == 4
        assert hits(doc) == before_hits  # the stored index, read; nothing rebuilt or written
        assert snapshot(st) == before


def test_serve_reads_a_store_without_its_sources(ingested, tmp_path):
    src, st = ingested
    shutil.rmtree(src)  # "another machine": the store alone
    before = snapshot(st)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fastrag.cli",
                "serve",
                str(st),
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--tasks-dir",
                str(tmp_path / "tasks"),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url, deadline = None, time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            m = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", log.read_text())
            if m and httpx.get(m.group(1) + "/ready", timeout=5).status_code == 200:
                url = m.group(1)
            time.sleep(0.1)
        assert url is not None, log.read_text()
        r = httpx.post(url + "/v1/retrieve", json={"queries": QUERIES}, timeout=30)
        assert r.status_code == 200, r.text
        assert "Uploading files" in r.json()["results"][0][0]["text"]
        assert httpx.get(url + "/v1/groups", timeout=30).status_code == 200
    finally:
        proc.terminate()
        proc.wait(30)
    assert snapshot(st) == before
    assert "missing" in log.read_text()  # the warning names what is gone


def test_copied_store_answers_the_same_elsewhere(ingested, tmp_path):
    src, st = ingested
    want = hits(fr.Document(store=st, mode="r"))
    copy = shutil.copytree(st, tmp_path / "elsewhere" / "copy.store")
    shutil.rmtree(src)
    with pytest.warns(StoreWarning, match="missing"):
        assert hits(fr.Document(store=copy)) == want


def test_reingest_from_a_new_place_relinks_without_reading(ingested, tmp_path, capsys):
    src, st = ingested
    doc = fr.Document(store=st, mode="r")
    ids, texts = doc.group("root").ids, doc.group("chunk").table.column("text").to_pylist()
    chunk_before = json.loads((st / "manifest.json").read_text())["groups"]["chunk"]["segments"]
    moved = src.rename(tmp_path / "moved")
    assert main(["ingest", str(moved), "--store", str(st), "-q"]) == 0
    out = capsys.readouterr().out
    assert "re-linked 4 moved" in out and "read " not in out.split("updated")[1].split(";")[0]
    m = json.loads((st / "manifest.json").read_text())
    assert m["inputs"] == [str(moved)]
    assert m["groups"]["chunk"]["segments"] == chunk_before  # no node recomputed
    doc = fr.Document(store=st, mode="r")  # no warning: every source is where it says
    assert doc.group("root").ids == ids
    assert doc.group("chunk").table.column("text").to_pylist() == texts
    paths = {(n.metadata["file_path"], n.metadata["abs_path"]) for n in doc.group("chunk")}
    assert paths == {(rel, str(moved / rel)) for rel in DOCS}  # as users see it, and on disk
    assert main(["info", str(st)]) == 0
    assert "missing" not in capsys.readouterr().out


def test_copied_folder_renamed_and_edited_files(tmp_path):
    src = write_tree(tmp_path / "src", DOCS)
    st = tmp_path / "s"
    fr.Document(src, store=st)
    copy = shutil.copytree(src, tmp_path / "copy")  # the original stays where it was
    (copy / "notes.txt").rename(copy / "animals.txt")  # renamed, same bytes
    (copy / "guide" / "cors.md").write_text("# CORS\n\nAllow-Origin headers, rewritten.\n")
    doc = fr.Document(copy, store=st)
    ch = doc.source_changes
    assert (ch.moved, ch.changed, ch.read, ch.outside, ch.missing) == (3, 1, 0, [], [])
    keys = sorted(
        r["key"] for r in doc.store.read_segments(doc.store.manifest["sources"]).to_pylist()
    )
    assert keys == sorted(
        str(copy / r) for r in ("guide/upload.md", "guide/cors.md", "zh/upload.md", "animals.txt")
    )
    texts = [n.text for n in doc.group("root")]
    assert len(texts) == 4 and sum("rewritten" in t for t in texts) == 1


def test_other_corpus_is_refused_and_kept_sources_are_reported(tmp_path):
    src = write_tree(tmp_path / "src", DOCS)
    st = tmp_path / "s"
    fr.Document(src, store=st)
    other = write_tree(tmp_path / "other", {"x.md": "something else entirely"})
    with pytest.raises(ConfigError, match=r"only 0 of its 4 files were found there.*--add"):
        fr.Document(other, store=st)
    (src / "notes.txt").unlink()
    with pytest.warns(StoreWarning, match=r"keeps 1 sources .*missing on disk .*notes\.txt"):
        doc = fr.Document(src, store=st)
    assert len(doc.group("root")) == 4
    doc = fr.Document(src, store=st, remove_missing=True)
    assert len(doc.group("root")) == 3
    assert doc.source_changes.removed == [str(src / "notes.txt")]


def test_cli_sync_removes_and_the_summary_says_what_changed(ingested, tmp_path, capsys):
    src, st = ingested
    (src / "notes.txt").unlink()
    (src / "guide" / "new.md").write_text("# New\n\nA new page about tokens.\n")
    assert main(["ingest", str(src), "--store", str(st), "-q"]) == 0
    out, err = capsys.readouterr()
    assert "updated " in out
    assert "read 1 new file, unchanged 3, kept 1 missing on disk; 5 documents" in out
    assert "--sync" in err
    assert main(["ingest", str(src), "--store", str(st), "--sync", "-q"]) == 0
    out = capsys.readouterr().out
    assert "removed 1, unchanged 4; 4 documents" in out
    assert "missing" not in out.split("removed")[1]


def test_opening_reads_no_file_and_refresh_rereads_on_request(tmp_path):
    src = write_tree(tmp_path / "src", DOCS)
    st = tmp_path / "s"
    fr.Document(src, store=st)
    time.sleep(0.01)
    (src / "notes.txt").write_text("Completely new notes about parrots.\n")
    before = snapshot(st)
    with pytest.warns(StoreWarning, match=r"1 changed on disk since they were read"):
        doc = fr.Document(store=st)
    assert snapshot(st) == before
    assert not any("parrots" in n.text for n in doc.group("root"))
    doc.refresh(reread=True)
    assert doc.source_changes.changed == 1
    assert any("parrots" in n.text for n in fr.Document(store=st, mode="r").group("root"))


def test_failed_first_ingest_leaves_no_store_folder(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "blank.txt").write_text("")
    st = tmp_path / "s.store"
    assert main(["ingest", str(empty), "--store", str(st), "-q"]) == 2
    assert "no documents found" in capsys.readouterr().err
    assert not st.exists()

    src = write_tree(tmp_path / "src", DOCS)

    def boom(self, name, table):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_mod.Transaction, "write_segment", boom)
    with pytest.raises(StoreError, match=r"no space left on device \(ENOSPC\)"):
        fr.Document(src, store=st)
    assert not st.exists()  # no empty folder holding a .lock


@pytest.mark.parametrize("bad", [5, b"kb", [b"kb"], [], 3.5, {"a": 1}])
def test_document_path_must_be_a_path(bad):
    with pytest.raises(ConfigError, match="path"):
        fr.Document(bad)


# -- read-only mounts and full disks, in a mount namespace of their own ------------------------
def _unshare() -> list[str] | None:
    exe = shutil.which("unshare")
    if exe is None:
        return None
    ok = subprocess.run(
        [exe, "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True
    )
    return [exe, "-rm"] if ok.returncode == 0 else None


UNSHARE = _unshare()
needs_mounts = pytest.mark.skipif(
    UNSHARE is None,
    reason="needs `unshare -rm` (a user and "
    "mount namespace) to mount a read-only or a tiny file system",
)


def run_mounted(setup: str, script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run ``script`` (Python) after the shell ``setup`` (mounts), in a namespace of its own."""
    code = tmp_path / "child.py"
    code.write_text(textwrap.dedent(script))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*UNSHARE, "sh", "-c", f"{setup} && exec {sys.executable} {code}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )


@needs_mounts
def test_read_only_mount_opens_read_only(ingested, tmp_path):
    src, st = ingested
    shutil.rmtree(src)
    before = snapshot(st)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = run_mounted(
        f"mount --bind {st} {mnt} && mount -o remount,ro,bind {mnt}",
        f"""
        import warnings
        import fastrag as fr
        from fastrag.cli import main
        from fastrag.errors import StoreError
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            doc = fr.Document(store={str(mnt)!r})
        notes = [str(x.message) for x in w]
        assert any("on a read-only file system: opened read-only" in n for n in notes), notes
        assert doc.store.mode == "r"
        hits = fr.Retriever(doc, "chunk", "bm25", topk=1)("upload a file")
        assert "Uploading files" in hits[0].text
        try:
            doc.add(texts=["one more"])
        except StoreError as exc:
            assert "read-only file system" in str(exc), exc
        else:
            raise AssertionError("add on a read-only mount")
        assert main(["search", {str(mnt)!r}, "upload a file"]) == 0
        assert main(["info", {str(mnt)!r}, "--verify"]) == 0
        print("CHILD OK")
        """,
        tmp_path,
    )
    assert "CHILD OK" in proc.stdout, proc.stdout + proc.stderr
    assert snapshot(st) == before


@needs_mounts
def test_full_disk_is_a_store_error_and_loses_nothing(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    proc = run_mounted(
        f"mount -t tmpfs -o size=256k tmpfs {mnt}",
        f"""
        import os
        import fastrag as fr
        from fastrag.errors import StoreError
        st = {str(mnt / "s")!r}
        doc = fr.Document.from_texts(["the cat sat on the mat", "dogs bark"], store=st)
        before = sorted(os.listdir(st + "/data"))
        big = "word " * 200_000  # ~1 MB: the tmpfs holds 256 kB
        try:
            doc.add(texts=[big])
        except StoreError as exc:
            msg = str(exc)
            assert "no space left on device (ENOSPC)" in msg and st in msg, msg
            assert "nothing was committed" in msg, msg
        else:
            raise AssertionError("no error on a full disk")
        assert sorted(os.listdir(st + "/data")) == before  # the partial file was removed
        again = fr.Document(store=st, mode="r")
        assert [n.text for n in again.group("root")] == ["the cat sat on the mat", "dogs bark"]
        try:  # a first ingest that cannot be written leaves no folder behind
            fr.Document.from_texts([big], store={str(mnt / "new")!r})
        except StoreError as exc:
            assert "ENOSPC" in str(exc)
        assert not os.path.exists({str(mnt / "new")!r})
        print("CHILD OK")
        """,
        tmp_path,
    )
    assert "CHILD OK" in proc.stdout, proc.stdout + proc.stderr


@needs_mounts
def test_hnsw_index_cut_short_by_a_full_disk_is_not_committed(tmp_path):
    """hnswlib reports no failed write: the saved file is checked before it is committed."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    proc = run_mounted(
        f"mount -t tmpfs -o size=4m tmpfs {mnt}",
        f"""
        import json, os
        import numpy as np
        import fastrag as fr
        from fastrag.errors import StoreIOError

        def emb(batch):
            out = np.zeros((len(batch), 8), np.float32)
            for i, t in enumerate(batch):
                for w in t.split():
                    out[i, sum(map(ord, w)) % 8] += 1.0
            return out

        st = {str(mnt / "s")!r}
        doc = fr.Document.from_texts([f"text {{i}} cat dog {{i * 7}}" for i in range(2000)],
                                     store=st, embed=emb)
        doc.embeddings("root")  # vectors stored; the HNSW index (~350 kB) is not yet
        free = os.statvfs(st).f_bavail * os.statvfs(st).f_frsize
        with open({str(mnt / "filler")!r}, "wb") as f:
            f.write(b"\\0" * (free - 100_000))
        before = json.load(open(st + "/manifest.json"))
        try:
            fr.Retriever(doc, "root", "cosine", topk=2, index="hnsw")("cat 5")
        except StoreIOError as exc:
            assert "no space left on device (ENOSPC)" in str(exc) and exc.errno == 28, exc
        else:
            raise AssertionError("a truncated HNSW index was committed")
        assert json.load(open(st + "/manifest.json")) == before
        assert os.listdir(st + "/indexes") == []  # the partial folder was removed
        os.remove({str(mnt / "filler")!r})
        hits = fr.Retriever(fr.Document(store=st, embed=emb), "root", "cosine", topk=2,
                            index="hnsw")("cat 5")
        assert len(hits) == 2
        print("CHILD OK")
        """,
        tmp_path,
    )
    assert "CHILD OK" in proc.stdout, proc.stdout + proc.stderr
