"""A Document and a store used for real from many threads and processes at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import fastrag as fr
from fastrag.documents.store import LOCK, Store
from fastrag.errors import StoreError, StoreLockTimeout

ROOT = Path(__file__).resolve().parents[2]
WORDS = "cat dog bird fish lion tiger bear wolf fox deer owl hawk crow duck frog toad".split()


def texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        " ".join(rng.choice(WORDS, 6)) + "\n" + " ".join(rng.choice(WORDS, 4)) for _ in range(n)
    ]


class CountingEmbedding:
    """A deterministic embedder that counts the texts it embeds (thread-safe)."""

    def __init__(self, dim: int = 16) -> None:
        self.dim = dim
        self.n = 0
        self._lock = threading.Lock()

    def embed(self, batch: list[str]) -> np.ndarray:
        with self._lock:
            self.n += len(batch)
        out = np.zeros((len(batch), self.dim), np.float32)
        for i, t in enumerate(batch):
            for w in t.split():
                out[i, WORDS.index(w) % self.dim if w in WORDS else 0] += 1.0
            out[i, -1] += 0.01 * (len(t) % 7)
        return out


class CountingSplit:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, text: str) -> list[str]:
        self.n += 1
        return text.split("\n")


def run_threads(fn, n: int = 8) -> list:
    barrier = threading.Barrier(n)
    out: list = [None] * n
    errors: list = []

    def work(i):
        try:
            barrier.wait()
            out[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return out


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def hits(ret, queries) -> list[list[tuple[str, float]]]:
    return [[(h.id, round(h.score, 5)) for h in r] for r in ret.batch(queries)]


QUERIES = ["cat dog", "tiger owl frog", "wolf", "duck duck fox"]


@pytest.mark.parametrize("with_store", [False, True])
def test_threads_first_use_builds_once_and_agree(tmp_path, with_store):
    corpus = texts(300)
    store = tmp_path / "st" if with_store else None

    def make():
        emb, split = CountingEmbedding(), CountingSplit()
        doc = fr.Document.from_texts(corpus, embed=emb, store=store)
        doc.create_node_group("line", transform=split)
        return doc, emb, split

    # sequential reference (in memory)
    ref_doc = fr.Document.from_texts(corpus, embed=CountingEmbedding())
    ref_doc.create_node_group("line", transform=CountingSplit())
    expected = {
        sim: hits(fr.Retriever(ref_doc, "line", sim, topk=5), QUERIES) for sim in ("bm25", "cosine")
    }

    doc, emb, split = make()
    kinds = ["bm25", "cosine", "hnsw"]

    def work(i):
        kind = kinds[i % 3]
        ret = fr.Retriever(
            doc,
            "line",
            "cosine" if kind == "hnsw" else kind,
            topk=5,
            index="hnsw" if kind == "hnsw" else "default",
        )
        return kind, hits(ret, QUERIES)

    results = run_threads(work, 9)
    assert split.n == len(corpus)  # the group was built once
    n_lines = len(doc.group("line"))
    assert emb.n == n_lines + 6 * len(QUERIES)  # nodes embedded once; queries per call
    assert doc.derived.builds == {"bm25": 1, "vectors": 1, "hnsw": 1}
    for kind, got in results:
        if kind != "hnsw":
            assert got == expected[kind]
    hnsw = [got for kind, got in results if kind == "hnsw"]
    assert all(h == hnsw[0] for h in hnsw)
    assert str(doc.group("line").table.schema).count("_emb_default") == 1

    if with_store:
        assert Store(store).verify() == []
        # reopened read-only: the same answers, nothing built, nothing embedded
        emb2 = CountingEmbedding()
        again = fr.Document.from_texts(corpus, embed=emb2, store=store, mode="r")
        again.create_node_group("line", transform=split)
        before = split.n
        for sim in ("bm25", "cosine"):
            assert hits(fr.Retriever(again, "line", sim, topk=5), QUERIES) == expected[sim]
        assert split.n == before and emb2.n == len(QUERIES) and again.derived.builds == {}


def test_threads_adding_and_querying_one_document(tmp_path):
    doc = fr.Document.from_texts(texts(50), store=tmp_path / "st")
    doc.create_node_group("line", transform=CountingSplit())

    def work(i):
        ret = fr.Retriever(doc, "line", "bm25", topk=3)
        added = []
        for j in range(5):
            added += doc.add([f"thread{i} item{j} cat"])
            assert ret("cat")  # never a half-updated table
        return added

    added = [x for ids in run_threads(work, 6) for x in ids]
    assert len(set(added)) == 30  # ids never collide
    again = fr.Document(store=tmp_path / "st")
    again.create_node_group("line", transform=CountingSplit())
    assert set(again.group("root").ids) == set(doc.group("root").ids)
    assert len(again.group("line")) == len(doc.group("line")) == 100 + 30


WRITER = textwrap.dedent("""
    import sys
    import fastrag as fr
    store, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    doc = fr.Document(store=store, lock_timeout=60)
    doc.create_node_group("line", transform=lambda t: t.split("\\n"))
    doc.create_node_group(f"g_{who}", transform=lambda t: t.split(" "))
    from pathlib import Path
    folder = Path(sys.argv[4])
    mine = list(doc.add(folder))  # ingest a folder of files
    for j in range(n):
        mine += doc.add([f"{who} text {j}\\nsecond line {j}"])
        doc.group("line")
        if j % 3 == 2:
            doc.delete([mine.pop(0)])
    doc.group(f"g_{who}")
    fr.Retriever(doc, "line", "bm25", topk=2)("text")
    print("done", len(mine))
""")


@pytest.mark.parametrize("n_proc", [2, pytest.param(4, marks=pytest.mark.slow)])  # 4: CI's run
def test_processes_writing_one_store_equal_a_serial_order(tmp_path, n_proc):
    st = tmp_path / "st"
    fr.Document.from_texts(["seed one\nseed two"], store=st)
    n = 6
    for i in range(n_proc):
        (tmp_path / f"kb{i}").mkdir()
        for f in range(2):
            (tmp_path / f"kb{i}" / f"f{f}.txt").write_text(
                f"p{i} file {f}\nline two {f}", encoding="utf-8"
            )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(st), f"p{i}", str(n), str(tmp_path / f"kb{i}")],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n_proc)
    ]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
    doc = fr.Document(store=st)
    doc.create_node_group("line", transform=lambda t: t.split("\n"))
    roots = [n.text for n in doc.group("root")]
    # every process ingested 2 files, added n texts and deleted its first n // 3 roots (the
    # files first): in any serial order the survivors are the same set
    want = {"seed one\nseed two"} | {
        t
        for i in range(n_proc)
        for t in (
            [f"p{i} file {f}\nline two {f}" for f in range(2)]
            + [f"p{i} text {j}\nsecond line {j}" for j in range(n)]
        )[n // 3 :]
    }
    assert set(roots) == want and len(roots) == len(want)
    lines = [n.text for n in doc.group("line")]
    assert lines == [line for t in roots for line in t.split("\n")]
    assert Store(st).verify() == []
    assert set(json.loads((st / "manifest.json").read_text())["groups"]) >= {"root", "line"}
    leftovers = (
        {str(p.relative_to(st)) for p in st.rglob("*") if p.is_file()}
        - Store(st).referenced()
        - {LOCK}
    )
    assert leftovers == set()


READER = textwrap.dedent("""
    import sys
    import numpy as np
    import fastrag as fr
    def emb(batch):
        return np.array([[len(t) % 5 + 1.0, t.count("a") + 1.0, 1.0] for t in batch], np.float32)
    doc = fr.Document(store=sys.argv[1], mode="r", embed=emb)
    doc.create_node_group("line", transform=lambda t: t.split("\\n"))
    doc.create_node_group("words", transform=lambda t: t.split(" "))
    for _ in range(3):
        fr.Retriever(doc, "words", "bm25", topk=2)("cat")
        fr.Retriever(doc, "line", "cosine", topk=2)("cat")
        doc.refresh()
    print("ok", len(doc.group("root")))
""")


def test_readers_never_write_while_a_writer_commits(tmp_path):
    st = tmp_path / "st"
    doc = fr.Document.from_texts(texts(40), store=st)
    doc.create_node_group("line", transform=lambda t: t.split("\n"))
    doc.group("line")
    before = snapshot(st)
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", READER, str(st)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for p in readers:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0 and out.startswith("ok 40"), err
    assert snapshot(st) == before  # no file added, removed or touched (not even a lock)

    # readers running while a writer adds: they see a committed state, never an error
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", READER, str(st)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for j in range(10):
        doc.add([f"writer text {j}"])
        doc.group("line")
    for p in readers:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0 and out.startswith("ok "), err
        assert 40 <= int(out.split()[1]) <= 50


def test_read_only_store_refuses_changes_and_missing_store(tmp_path):
    st = tmp_path / "st"
    with pytest.raises(StoreError, match="not a fastrag store.*mode='a'"):
        fr.Document(store=st, mode="r")
    assert not st.exists()
    fr.Document.from_texts(["a", "b"], store=st)
    doc = fr.Document(store=st, mode="r")
    with pytest.raises(StoreError, match="read-only.*mode='a'"):
        doc.add(["c"])
    with pytest.raises(StoreError, match="read-only"):
        doc.delete([doc.group("root").ids[0]])
    assert [n.text for n in doc.group("root")] == ["a", "b"]


def test_second_writer_times_out_naming_the_lock(tmp_path):
    from filelock import FileLock

    st = tmp_path / "st"
    fr.Document.from_texts(["a"], store=st)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from filelock import FileLock\n"
            "l = FileLock(sys.argv[1]); l.acquire(); print('held', flush=True); time.sleep(30)",
            str(st / LOCK),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        doc = fr.Document(store=st, lock_timeout=0.3)  # opening does not wait for the lock
        with pytest.raises(StoreLockTimeout, match=r"\.lock.*lock_timeout=0\.3"):
            doc.add(["b"])
        assert [n.text for n in doc.group("root")] == ["a"]
    finally:
        holder.kill()
        holder.wait()
    assert FileLock(str(st / LOCK)).acquire(timeout=60)


def test_failed_write_leaves_the_document_unchanged(tmp_path, monkeypatch):
    from fastrag.documents import store as store_mod
    from fastrag.errors import StoreIOError

    st = tmp_path / "st"
    doc = fr.Document.from_texts(["a\nb", "c"], store=st)
    doc.create_node_group("line", transform=lambda t: t.split("\n"))
    doc.group("line")
    root_before = doc.group("root").table

    def boom(self, name, table):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_mod.Transaction, "write_segment", boom)
    with pytest.raises(StoreIOError, match=r"no space left on device \(ENOSPC\)") as err:
        doc.add(["d"])
    assert err.value.errno == 28 and isinstance(err.value, OSError)
    with pytest.raises(StoreIOError, match="nothing was committed"):
        doc.delete([doc.group("root").ids[0]])
    monkeypatch.undo()
    assert doc.group("root").table.equals(root_before)
    assert [n.text for n in doc.group("line")] == ["a", "b", "c"]
    doc.add(["d"])
    assert [n.text for n in fr.Document(store=st).group("root")] == ["a\nb", "c", "d"]


def test_stable_semantics_after_reopen(tmp_path):
    st, kb = tmp_path / "st", tmp_path / "kb"
    kb.mkdir()
    # ties keep their order after a reopen (document order is persisted, not re-sorted)
    same = ["equal words here"] * 3 + ["other"]
    ids = ["z", "a", "m", "b"]
    doc = fr.Document.from_texts(same, ids=ids, store=st)
    first = [h.id for h in fr.Retriever(doc, "root", "bm25", topk=3)("equal")]
    assert first == ["z", "a", "m"]
    again = fr.Document(store=st)
    assert [h.id for h in fr.Retriever(again, "root", "bm25", topk=3)("equal")] == first

    # ids never collide after delete + add, texts added with add() persist with the path
    (kb / "f.txt").write_text("file text", encoding="utf-8")
    st2 = tmp_path / "st2"
    doc = fr.Document(kb, store=st2)
    a = doc.add(["added one"])
    doc.delete(a)
    b = doc.add(["added one"])
    assert a != b
    reopened = fr.Document(kb, store=st2)
    assert [n.text for n in reopened.group("root")] == ["file text", "added one"]

    # a deleted file stays deleted when the folder is read again; adding it clears that
    reopened.delete(str(kb / "f.txt"))
    assert [n.text for n in fr.Document(kb, store=st2).group("root")] == ["added one"]
    again = fr.Document(kb, store=st2)
    again.add(kb / "f.txt")
    assert [n.text for n in fr.Document(kb, store=st2).group("root")] == ["added one", "file text"]


def test_leftovers_are_removed_and_never_block_a_rebuild(tmp_path):
    st = tmp_path / "st"
    doc = fr.Document.from_texts(texts(20), store=st)
    doc.create_node_group(".x", transform=lambda t: t.split("\n"))
    ret = fr.Retriever(doc, ".x", "bm25", topk=2)
    ret("cat")
    # what a crashed writer leaves: temp files, an index folder and a segment nobody names,
    # under names a later commit could pick
    m = json.loads((st / "manifest.json").read_text())
    gen = m["generation"] + 1
    (st / "indexes" / f"_x_bm25_junk.{gen}.1").mkdir()
    (st / "indexes" / f"_x_bm25_junk.{gen}.1" / "indptr.npy").write_bytes(b"junk")
    (st / "data" / f"_x.{gen}.1.arrow").write_bytes(b"junk")
    (st / "data" / ".tmp-root.arrow.1.2").write_bytes(b"junk")
    (st / ".tmp-manifest.json.1.2").write_bytes(b"junk")
    before = {str(p.relative_to(st)) for p in st.rglob("*") if p.is_file()}
    doc = fr.Document(store=st)  # opening writes nothing, not even a clean-up ...
    doc.create_node_group(".x", transform=lambda t: t.split("\n"))
    assert {str(p.relative_to(st)) for p in st.rglob("*") if p.is_file()} == before
    doc.add(["cat first"])  # ... the next commit removes what no manifest names
    files = {str(p.relative_to(st)) for p in st.rglob("*") if p.is_file()}
    assert files == Store(st).referenced() | {LOCK}
    # a writer that crashed after this Document opened left files under the next names
    m = json.loads((st / "manifest.json").read_text())
    gen = m["generation"] + 1
    for n in (1, 2, 3):
        (st / "indexes" / f"_x_bm25_{n}.{gen}.{n}").mkdir()
        (st / "data" / f"_x.{gen}.{n}.arrow").write_bytes(b"junk")
        (st / "data" / f"root.{gen}.{n}.arrow").mkdir()  # even a folder where a file goes
    for j in range(4):  # rebuilds write new generations; old ones are collected
        doc.add([f"cat {j}"])
        assert fr.Retriever(doc, ".x", "bm25", topk=2)("cat")
    files = {str(p.relative_to(st)) for p in st.rglob("*") if p.is_file()}
    assert files == Store(st).referenced() | {LOCK}


def test_manifest_stays_small_and_add_touches_few_files(tmp_path):
    st = tmp_path / "st"
    doc = fr.Document.from_texts([f"text number {i} cat" for i in range(20_000)], store=st)
    size = (st / "manifest.json").stat().st_size
    assert size < 4_000
    before = snapshot(st)
    doc.add(["one more"])
    after = snapshot(st)
    new = set(after) - set(before)
    # one new root segment, one new sources segment, the manifest replaced; nothing rewritten
    assert sorted(p.split("/")[0] for p in new) == ["data", "data"]
    assert all(
        after[p] == before[p]
        for p in before
        if p in after and (st / p).is_file() and p not in ("manifest.json", LOCK)
    )
    assert (st / "manifest.json").stat().st_size < size + 1_000


def test_segments_are_compacted(tmp_path):
    from fastrag.documents.transaction import MAX_SEGMENTS

    st = tmp_path / "st"
    doc = fr.Document.from_texts(["first"], store=st)
    for j in range(MAX_SEGMENTS + 5):
        doc.add([f"text {j}"])
    m = json.loads((st / "manifest.json").read_text())
    assert len(m["groups"]["root"]["segments"]) <= MAX_SEGMENTS
    assert len(m["sources"]) <= MAX_SEGMENTS
    again = fr.Document(store=st)
    assert [n.text for n in again.group("root")] == ["first"] + [
        f"text {j}" for j in range(MAX_SEGMENTS + 5)
    ]


def test_store_argument_errors(tmp_path):
    with pytest.raises(fr.ConfigError, match="mode must be 'r' or 'a'"):
        fr.Document.from_texts(["a"], store=tmp_path / "s", mode="w")
    with pytest.raises(fr.ConfigError, match="lock_timeout must be"):
        fr.Document.from_texts(["a"], store=tmp_path / "s", lock_timeout=-1)
    with pytest.raises(fr.ConfigError, match="unknown arguments"):
        fr.Document.from_texts(["a"], store=tmp_path / "s", verfy=True)
    with pytest.raises(fr.ConfigError, match="lone surrogate"):
        fr.Document.from_texts(["ok", "bad \ud800"])
    doc = fr.Document.from_texts(["x y"])
    doc.create_node_group("bad", transform=lambda t: ["fine", "bad \udfff"])
    with pytest.raises(fr.ConfigError, match="group 'bad'.*lone surrogate"):
        doc.group("bad")
    assert os.listdir(tmp_path) == []  # nothing was created by the failed calls


def test_two_writers_interleaving_group_updates(tmp_path):
    """Two Documents on one store (as two processes would be): one falls behind, the other
    adds, builds, then deletes without rebuilding; the laggard's later update must still
    leave the group equal to its sources."""
    st = tmp_path / "st"
    fr.Document.from_texts(["a1\na2"], store=st)

    def open_doc():
        doc = fr.Document(store=st)
        doc.create_node_group("line", transform=lambda t: t.split("\n"))
        return doc

    a, b = open_doc(), open_doc()
    x = a.add(["x1\nx2"])
    assert [n.text for n in a.group("line")] == ["a1", "a2", "x1", "x2"]  # stored
    assert [n.text for n in b.group("line")] == ["a1", "a2"]  # b is behind: built, not stored
    a.delete(x)  # the stored group still holds x's nodes
    b.add(["y1"])  # b commits on top of the newest state and sees a's changes
    assert [n.text for n in b.group("root")] == ["a1\na2", "y1"]
    assert [n.text for n in b.group("line")] == ["a1", "a2", "y1"]
    assert [n.text for n in open_doc().group("line")] == ["a1", "a2", "y1"]
    assert [n.text for n in a.refresh().group("line")] == ["a1", "a2", "y1"]


def test_add_long_texts_that_cannot_be_paths(tmp_path):
    doc = fr.Document.from_texts(["a"], store=tmp_path / "st")
    long = "word " * 100  # 500 bytes, no newline: too long for a file name
    ids = doc.add([long, "nul \x00 byte", "x" * 5000])
    assert [n.text for n in doc.group("root")][1:] == [long, "nul \x00 byte", "x" * 5000]
    assert len(ids) == 3


@pytest.mark.parametrize("stage", ["checksum", "map"])
def test_file_collected_between_check_and_open_is_reread(tmp_path, monkeypatch, stage):
    # another process's commit removes a segment after this reader stat'ed it: the reader
    # must see MissingFile (and re-read the manifest), never a "damaged store" error
    from fastrag.documents import store as store_mod

    st = tmp_path / "st"
    doc = fr.Document.from_texts(["alpha one\nbeta two", "gamma three"], store=st)
    doc.create_node_group("line", transform=lambda t: t.split("\n"))
    want = [n.text for n in doc.group("line")]
    seg = json.loads((st / "manifest.json").read_text())["groups"]["line"]["segments"][0]
    victim = st / seg["file"]
    saved = victim.read_bytes()
    calls = []

    if stage == "checksum":
        real = store_mod.checksum_file

        def vanish(path):
            if Path(path) == victim and not calls:
                calls.append(path)
                victim.unlink()
            return real(path)

        monkeypatch.setattr(store_mod, "checksum_file", vanish)
    else:
        real = Store.check_file

        def vanish(self, rel, entry, *, full=None):
            path = real(self, rel, entry, full=full)
            if path == victim and not calls:
                calls.append(path)
                victim.unlink()
            return path

        monkeypatch.setattr(Store, "check_file", vanish)
    reader = Store(st, mode="r")
    with pytest.raises(store_mod.MissingFile, match="call doc.refresh"):
        reader.read_segments([seg])
    assert calls == [victim]
    victim.write_bytes(saved)  # the "writer" committed the same content under that name again
    again = fr.Document(store=st, mode="r")
    again.create_node_group("line", transform=lambda t: t.split("\n"))
    assert [n.text for n in again.group("line")] == want
