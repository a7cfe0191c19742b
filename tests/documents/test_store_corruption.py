"""Damage every file of a store (flipped bytes, truncation): opening and querying it must never
crash the interpreter; derived files are rebuilt with a warning, source files are a StoreError
naming the file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from store_probe import CHILD_PRELUDE, emb

import fastrag as fr
from fastrag.cli import main
from fastrag.documents import transaction as layout_mod
from fastrag.documents.store import Store

# these tests damage packed BM25 indexes: stores here pack every index
pytestmark = pytest.mark.usefixtures("pack_every_index")


ROOT = Path(__file__).resolve().parents[2]
TEXTS = [f"doc {i} cat dog {'bird ' * (i % 3)}\nline two {i} fish" for i in range(40)]


CHILD = CHILD_PRELUDE + textwrap.dedent("""
    import json, sys, warnings
    from fastrag.errors import StoreError

    def probe(store):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                doc = fr.Document(store=store, embed=emb)
                doc.create_node_group("line", transform=lambda t: t.split("\\n"))
                got = []
                for sim, index in (("bm25", "default"), ("cosine", "default"),
                                   ("cosine", "hnsw")):
                    ret = fr.Retriever(doc, "line", sim, topk=3, index=index)
                    got.append([[(h.text, round(h.score, 4)) for h in r]
                                for r in ret.batch(["cat bird", "fish 7"])])
                result = {"status": "OK", "hits": got}
            except StoreError as exc:
                result = {"status": "STOREERROR", "message": str(exc)}
        result["warnings"] = [str(w.message) for w in caught
                              if w.category.__name__ == "StoreWarning"]
        return result

    for store in json.loads(sys.argv[1]):
        print("BEGIN " + store, flush=True)  # names the case if the interpreter dies in it
        print("RESULT " + json.dumps({"store": store, **probe(store)}), flush=True)
""")


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    st = tmp_path_factory.mktemp("corrupt") / "template"
    doc = fr.Document.from_texts(TEXTS, store=st, embed=emb)
    doc.create_node_group("line", transform=lambda t: t.split("\n"))
    for sim, index in (("bm25", "default"), ("cosine", "default"), ("cosine", "hnsw")):
        fr.Retriever(doc, "line", sim, topk=3, index=index)("cat")
    return st


def run_children(stores: list[Path], per_child: int = 12) -> dict[str, dict]:
    out = {}
    for i in range(0, len(stores), per_child):
        batch = [str(s) for s in stores[i : i + per_child]]
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(batch)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
        )
        begun = [x[6:] for x in proc.stdout.splitlines() if x.startswith("BEGIN ")]
        # never a crash: a signal or an uncaught exception fails here, naming the case
        assert proc.returncode == 0, (proc.returncode, begun[-1:], proc.stderr[-2000:])
        for line in proc.stdout.splitlines():
            if line.startswith("RESULT "):
                r = json.loads(line[7:])
                out[r["store"]] = r
    assert len(out) == len(stores)
    return out


def kind(rel: str) -> str:
    name = rel.split("/")[-1]
    if rel == "manifest.json":
        return "manifest"
    if rel.startswith("indexes/"):
        return "index"
    return name.split(".")[0].split("-")[0]  # sources, root, line, vec


def damages(size: int, seed: int) -> list[tuple[str, int]]:
    rng = np.random.default_rng(seed)
    offsets = sorted({0, size // 2, size - 1, int(rng.integers(0, size))})
    return [("flip", o) for o in offsets] + [("truncate", size // 2)]


@pytest.mark.slow  # a damage campaign: CI's full run
def test_every_damage_is_detected_or_repaired_never_a_crash(template, tmp_path):
    clean = run_children([template])[str(template)]
    assert clean["status"] == "OK" and clean["warnings"] == []
    files = sorted(Store(template).referenced())
    kinds = {kind(f) for f in files}
    assert kinds == {"manifest", "sources", "root", "line", "vec", "index"}, kinds
    cases = {}
    for i, rel in enumerate(files):
        size = (template / rel).stat().st_size
        for how, offset in damages(size, i):
            st = tmp_path / f"case{len(cases)}"
            shutil.copytree(template, st)
            data = bytearray((st / rel).read_bytes())
            if how == "flip":
                data[offset] ^= 0xFF
            else:
                del data[offset:]
            (st / rel).write_bytes(bytes(data))
            cases[str(st)] = (rel, how, offset)
    results = run_children([Path(s) for s in cases])
    for st, where in cases.items():
        got, rel = results[st], where[0]
        if kind(rel) in ("vec", "index"):  # derived: dropped, rebuilt, same answers
            assert got["status"] == "OK", (where, got)
            assert got["warnings"], (where, got)
            assert got["hits"][:2] == clean["hits"][:2], where  # exact: same nodes
            # HNSW (rebuilt when damaged) is approximate: equal nodes may swap places
            assert [[sc for _, sc in r] for r in got["hits"][2]] == [
                [sc for _, sc in r] for r in clean["hits"][2]
            ], where
            assert Store(st).verify() == [], where  # the rebuilt files replaced it
        else:  # sources, root, group, manifest: a clear error naming the file
            assert got["status"] == "STOREERROR", (where, got)
            assert Path(rel).name in got["message"], (where, got)
    assert len(cases) >= 60


def test_info_verify_reports_damage(template, tmp_path, capsys):
    st = tmp_path / "st"
    shutil.copytree(template, st)
    assert main(["info", "--verify", str(st)]) == 0
    assert "0 damaged" in capsys.readouterr().out
    rel = next(f for f in sorted(Store(st).referenced()) if "/root" in f)
    data = bytearray((st / rel).read_bytes())
    data[len(data) // 2] ^= 1
    (st / rel).write_bytes(bytes(data))
    assert main(["info", "--verify", str(st)]) == 1
    captured = capsys.readouterr()
    assert "1 damaged" in captured.out and Path(rel).name in captured.err
    assert Store(st, mode="r", verify=True).verify() != []


def test_large_files_are_checked_by_size_always_by_checksum_on_request(
    template, tmp_path, monkeypatch
):
    from fastrag.documents import store as store_mod
    from fastrag.errors import StoreError

    st = tmp_path / "st"
    monkeypatch.setattr(layout_mod, "COMPRESSION", None)  # so a flipped letter stays readable
    fr.Document.from_texts(TEXTS, store=st)
    rel = next(f for f in sorted(Store(st).referenced()) if "/root" in f)
    data = bytearray((st / rel).read_bytes())
    data[data.find(b"fish")] ^= 1  # same size, one letter of a text changed
    (st / rel).write_bytes(bytes(data))
    monkeypatch.setattr(store_mod, "VERIFY_BELOW", 0)  # every file counts as large
    fr.Document(store=st, mode="r")  # memory-mapped, not read: the flip goes unseen
    with pytest.raises(StoreError, match=Path(rel).name):
        fr.Document(store=st, mode="r", verify=True)
    (st / rel).write_bytes(bytes(data[:-1]))
    with pytest.raises(StoreError, match="manifest records"):
        fr.Document(store=st, mode="r")


def _drop_chunk_digests(st: Path) -> None:
    """The manifest of a store written before chunk digests (resealed)."""
    from fastrag.documents.store import MANIFEST, _manifest_checksum

    body = json.loads((st / MANIFEST).read_bytes())
    body.pop("checksum")
    for idx in body["indexes"].values():
        for f in idx["files"].values():
            f.pop("chunks", None)
    data = {**body, "checksum": _manifest_checksum(body)}
    (st / MANIFEST).write_bytes(json.dumps(data, ensure_ascii=False, indent=1).encode())


@pytest.mark.parametrize(
    "digests, found", [(True, "fails its checksum in bytes 0-"), (False, "skip entries")]
)
def test_damaged_large_bm25_index_is_rebuilt_at_query_time(tmp_path, monkeypatch, digests, found):
    """Files over VERIFY_BELOW are not checksummed whole on open: the chunks a query's postings
    span are checked against their digests on first use (stores without digests: the postings'
    skip entries), and a damaged index is then rebuilt (and stored again) with a warning."""
    import warnings as w

    from fastrag.documents import store as store_mod
    from fastrag.errors import StoreWarning

    st = tmp_path / "st"
    doc = fr.Document.from_texts(TEXTS, store=st)
    want = [(h.text, h.score) for h in fr.Retriever(doc, "root", "bm25", topk=3)("cat fish")]
    entry = next(v for v in Store(st).manifest["indexes"].values() if v["meta"]["kind"] == "bm25")
    path = st / entry["dir"] / "blk_last.npy"
    last = np.load(path)
    last += 1  # same size, every block's skip entry past its last doc id
    np.save(path, last)
    if not digests:
        _drop_chunk_digests(st)
    monkeypatch.setattr(store_mod, "VERIFY_BELOW", 0)  # as if the files were large
    again = fr.Document(store=st)
    with w.catch_warnings(record=True) as caught:
        w.simplefilter("always")
        got = [(h.text, h.score) for h in fr.Retriever(again, "root", "bm25", topk=3)("cat fish")]
    assert got == want
    assert any(issubclass(c.category, StoreWarning) and found in str(c.message) for c in caught), [
        str(c.message) for c in caught
    ]
    assert Store(st).verify() == []  # the rebuilt index replaced the damaged folder


def test_a_tf_code_changed_is_caught_by_its_chunk(tmp_path, monkeypatch):
    """Damage the decoder's checks cannot see (a term frequency changed: a valid, different
    weight) is caught by the chunk digests before a query uses it; a query whose postings lie
    in other chunks reads and checks only those."""
    from fastrag.documents import chunksums
    from fastrag.documents import store as store_mod
    from fastrag.errors import StoreError

    monkeypatch.setattr(chunksums, "CHUNK", 64)  # tiny chunks: a few postings each
    st = tmp_path / "st"
    doc = fr.Document.from_texts(TEXTS, store=st)
    fr.Retriever(doc, "root", "bm25", topk=3)("cat fish")
    store = Store(st)
    key, entry = next(
        (k, v) for k, v in store.manifest["indexes"].items() if v["meta"]["kind"] == "bm25"
    )
    head, _, digests = entry["files"]["words.npy"]["chunks"].partition(":")
    assert head == "64" and len(digests) == 16 * -(-entry["files"]["words.npy"]["size"] // 64)
    monkeypatch.setattr(store_mod, "VERIFY_BELOW", 0)
    arrays, meta = Store(st).read_arrays(key)
    from fastrag.indexes.bm25.index import BM25Index

    def loaded():
        s2 = Store(st)
        a, m = s2.read_arrays(key)
        a.pop("vocab_bytes"), a.pop("vocab_offsets")
        index = BM25Index.from_arrays(a, m["index"])
        checks = {"words": (s2.chunk_check(key, "words.npy"), int(a["words"].offset))}
        index.verify_postings_with(checks)
        return index, checks

    blk_word, blk_tw = np.asarray(arrays["blk_word"]), np.asarray(arrays["blk_tw"])
    last = len(arrays["indptr"]) - 2  # the last term: its postings end the file
    assert blk_tw[-1] > 0  # its last block's tf codes are the stream's last words
    path = st / entry["dir"] / "words.npy"
    words = np.load(path)
    words[blk_word[-1] - 1] ^= np.uint32(1)  # one bit of a tf code: a valid weight
    np.save(path, words)

    index, checks = loaded()
    index.search_csr(np.array([0], np.int32), np.array([0, 1]), 3)  # the first term: other chunks
    assert 0 < checks["words"][0].n_verified < len(checks["words"][0]._done)
    with pytest.raises(StoreError, match=r"words\.npy' fails its checksum in bytes"):
        index.search_csr(np.array([last], np.int32), np.array([0, 1]), 3)


def test_segment_tokens_changed_within_the_vocabulary_are_rebuilt(tmp_path, monkeypatch):
    """A Ray segment's stored token ids are read whole: a large file's chunks are all checked
    first, so a token id changed to another valid one is caught and the tokens rebuilt."""
    import warnings as w

    from fastrag.analysis.registry import get_analyzer
    from fastrag.distributed.segment import segment_tokens
    from fastrag.documents import store as store_mod
    from fastrag.errors import StoreWarning

    st = tmp_path / "st"
    doc = fr.Document.from_texts(TEXTS, store=st)
    want = segment_tokens(doc, doc.group("root"), get_analyzer("bm25"))
    key, entry = next(
        (k, v) for k, v in Store(st).manifest["indexes"].items() if v["meta"]["kind"] == "tokens"
    )
    path = st / entry["dir"] / "values.npy"
    values = np.load(path)
    values[0] = values[1] if values[0] != values[1] else values[2]  # still a valid token id
    np.save(path, values)
    monkeypatch.setattr(store_mod, "VERIFY_BELOW", 0)  # as if the files were large
    again = fr.Document(store=st)
    with w.catch_warnings(record=True) as caught:
        w.simplefilter("always")
        got = segment_tokens(again, again.group("root"), get_analyzer("bm25"))
    np.testing.assert_array_equal(got.values, want.values)
    assert any(
        issubclass(c.category, StoreWarning) and "fails its checksum in bytes" in str(c.message)
        for c in caught
    ), [str(c.message) for c in caught]
