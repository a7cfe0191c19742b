"""Damage beyond test_store_corruption.py: missing, emptied, grown and replaced files, every
damage seen through a read-only open (which must not change a byte on disk), a lost manifest,
``info --verify`` before and after a repair, and files over VERIFY_BELOW (checked by size only
unless verify=True), whose damage may go unseen but must never crash the interpreter or raise
anything but a StoreError. Every probe runs in a subprocess, so a crash fails the test instead
of killing the run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from store_probe import CHILD_PRELUDE

import fastrag as fr
from fastrag.cli import main
from fastrag.documents import transaction as layout_mod
from fastrag.documents.store import LOCK, Store

# these tests damage packed BM25 indexes: stores here pack every index
pytestmark = pytest.mark.usefixtures("pack_every_index")


ROOT = Path(__file__).resolve().parents[2]
TEXTS = [f"doc {i} cat dog {'bird ' * (i % 3)}\nline two {i} fish" for i in range(40)]
DERIVED = ("vec", "index")  # dropped and rebuilt with a StoreWarning when damaged

COMMON = CHILD_PRELUDE + textwrap.dedent("""
    LINE = lambda t: t.split("\\n")  # noqa: E731  (same group identity in every process)
    SIMS = [("bm25", "default"), ("cosine", "default"), ("cosine", "hnsw")]

    def answers(doc):
        doc.create_node_group("line", transform=LINE)
        out = []
        for sim, index in SIMS:
            res = fr.Retriever(doc, "line", sim, topk=3, index=index).batch(["cat bird",
                                                                              "fish 7"])
            if index == "hnsw":  # approximate: nodes of equal score may swap places
                out.append([[round(h.score, 4) for h in r] for r in res])
            else:
                out.append([[(h.text, round(h.score, 4)) for h in r] for r in res])
        return out
""")

# argv: JSON list of [store, mode]; VERIFY_BELOW in the environment overrides the store's.
CHILD = COMMON + textwrap.dedent("""
    import json, os, sys, warnings
    from fastrag.documents import store as store_mod
    from fastrag.errors import StoreError, StoreWarning

    if os.environ.get("FASTRAG_TEST_VERIFY_BELOW"):
        store_mod.VERIFY_BELOW = int(os.environ["FASTRAG_TEST_VERIFY_BELOW"])

    def probe(store, mode):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                got = answers(fr.Document(store=store, embed=emb, mode=mode))
                result = {"status": "OK", "hits": got}
            except StoreError as exc:
                result = {"status": "STOREERROR", "message": str(exc)}
            except Exception as exc:  # reported, and failed by the test
                result = {"status": "OTHER", "message": f"{type(exc).__name__}: {exc}"}
        result["warnings"] = [str(w.message) for w in caught
                              if issubclass(w.category, StoreWarning)]
        return result

    for store, mode in json.loads(sys.argv[1]):
        print("BEGIN " + store, flush=True)  # names the case if the interpreter dies in it
        print("RESULT " + json.dumps({"store": store, **probe(store, mode)}), flush=True)
""")

ns: dict = {"__name__": "__main__"}  # LINE gets the group identity it has in the children
exec(COMMON, ns)
emb, LINE, answers = ns["emb"], ns["LINE"], ns["answers"]


def run_children(
    cases: list[tuple[Path, str]], *, verify_below: int | None = None, check: bool = True
) -> tuple[dict[str, dict], subprocess.CompletedProcess]:
    env = dict(os.environ)
    if verify_below is not None:
        env["FASTRAG_TEST_VERIFY_BELOW"] = str(verify_below)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps([[str(s), m] for s, m in cases])],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    begun = [x[6:] for x in proc.stdout.splitlines() if x.startswith("BEGIN ")]
    if check:  # never a crash: a signal or an uncaught exception fails here, naming the case
        assert proc.returncode == 0, (proc.returncode, begun[-1:], proc.stderr[-2000:])
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            out[r["store"]] = r
    return out, proc


def kind(rel: str) -> str:
    if rel == "manifest.json":
        return "manifest"
    if rel.startswith("indexes/"):
        return "index"
    return rel.split("/")[-1].split(".")[0].split("-")[0]  # sources, root, line, vec


def snapshot(st: Path) -> dict[str, tuple[int, int, bytes]]:
    return {
        str(p.relative_to(st)): (
            p.stat().st_size,
            p.stat().st_mtime_ns,
            p.read_bytes() if p.is_file() else b"",
        )
        for p in sorted(st.rglob("*"))
    }


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    st = tmp_path_factory.mktemp("damage") / "template"
    answers(fr.Document.from_texts(TEXTS, store=st, embed=emb))
    return st


@pytest.fixture(scope="module")
def clean(template):
    return json.loads(json.dumps(answers(fr.Document.from_texts(TEXTS, embed=emb))))


def copy_of(template: Path, dest: Path) -> Path:
    shutil.copytree(template, dest)
    return dest


def damage(st: Path, rel: str, how: str) -> None:
    path = st / rel
    if how == "delete":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "grow":
        with open(path, "ab") as f:
            f.write(b"\0" * 7)
    elif how == "directory":
        path.unlink()
        path.mkdir()
    elif how == "flip":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    elif how == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:  # pragma: no cover
        raise AssertionError(how)


FORMS = ("delete", "empty", "grow", "directory", "flip", "truncate")


def test_every_damage_form_read_only_and_writable(template, clean, tmp_path):
    """Each damage form of each file, opened read-only (nothing on disk may change) and
    writable (derived files are rebuilt and stored again)."""
    files = sorted(Store(template).referenced())
    assert {kind(f) for f in files} == {"manifest", "sources", "root", "line", "vec", "index"}
    cases, where = [], {}
    for rel in files:
        for how in FORMS:
            if (rel, how) == ("manifest.json", "delete"):
                continue  # a lost manifest: test_lost_manifest_never_wipes_the_store
            for mode in ("r", "a"):
                st = copy_of(template, tmp_path / f"case{len(cases)}")
                damage(st, rel, how)
                cases.append((st, mode))
                where[str(st)] = (rel, how, mode, snapshot(st) if mode == "r" else None)
    results, _ = run_children(cases)
    assert len(results) == len(cases) >= 140
    for st, (rel, how, mode, before) in where.items():
        got = results[st]
        assert got["status"] != "OTHER", (rel, how, mode, got)
        if mode == "r":
            assert snapshot(Path(st)) == before, (rel, how, mode)  # not a byte changed
        if kind(rel) in DERIVED:  # dropped and rebuilt with a warning: clean answers
            assert got["status"] == "OK" and got["warnings"], (rel, how, mode, got)
            assert got["hits"] == clean, (rel, how, mode)
            if mode == "a":  # the rebuilt files were stored in place of the damaged ones
                assert Store(st, mode="r").verify() == [], (rel, how)
        elif kind(rel) == "line" and how == "delete":
            # A missing group segment is taken for one collected by a concurrent writer: the
            # group is rebuilt from the root (answers are right; see the test below
            # about the missing warning).
            assert got["status"] == "OK" and got["hits"] == clean, (rel, how, mode, got)
        elif kind(rel) == "line" and how == "directory":  # damage (opening removes nothing)
            assert got["status"] == "STOREERROR" and Path(rel).name in got["message"], got
        else:  # sources, root, group, manifest: a StoreError naming the file, nothing else
            assert got["status"] == "STOREERROR", (rel, how, mode, got)
            assert Path(rel).name in got["message"], (rel, how, mode, got)
            assert got["warnings"] == [], (rel, how, mode, got)


def test_missing_group_segment_is_reported(template, tmp_path):
    st = copy_of(template, tmp_path / "st")
    rel = next(f for f in Store(st).referenced() if kind(f) == "line")
    damage(st, rel, "delete")
    got, _ = run_children([(st, "a")])
    assert got[str(st)]["status"] == "STOREERROR" or got[str(st)]["warnings"]


def test_lost_manifest_never_wipes_the_store(template, tmp_path):
    st = copy_of(template, tmp_path / "st")
    (st / "manifest.json").unlink()
    data = sorted(str(p.relative_to(st)) for p in st.rglob("*") if p.is_file())
    got, _ = run_children([(st, "r")])
    assert got[str(st)]["status"] == "STOREERROR"  # read-only: "not a fastrag store"
    got, _ = run_children([(st, "a")])
    assert sorted(str(p.relative_to(st)) for p in st.rglob("*") if p.is_file()) == data
    assert got[str(st)]["status"] == "STOREERROR"


def test_clean_up_keeps_committed_files_beside_a_foreign_one(template, tmp_path):
    st = copy_of(template, tmp_path / "st")
    folder = st / Store(st).manifest["indexes"][next(iter(Store(st).manifest["indexes"]))]["dir"]
    (folder / "notes.txt").write_text("not the store's")
    fr.Document(store=st)  # a writable open removes what the manifest does not name
    assert Store(st, mode="r").verify() == []


def test_flipped_format_version_names_a_damaged_manifest(template, tmp_path):
    st = copy_of(template, tmp_path / "st")
    raw = (st / "manifest.json").read_bytes()
    pos = raw.index(b'"format_version": 3') + len(b'"format_version": ')
    (st / "manifest.json").write_bytes(raw[:pos] + b"2" + raw[pos + 1 :])  # '3' ^ 0x01
    got, _ = run_children([(st, "r")])
    assert "manifest.json" in got[str(st)]["message"]


def test_info_verify_before_and_after_a_repair(template, tmp_path, capsys):
    st = copy_of(template, tmp_path / "st")
    assert main(["info", "--verify", str(st)]) == 0
    hnsw = next(f for f in sorted(Store(st).referenced()) if f.endswith("index.bin"))
    damage(st, hnsw, "flip")
    assert main(["info", "--verify", str(st)]) == 1
    assert Path(hnsw).name in capsys.readouterr().err
    got, _ = run_children([(st, "a")])  # the query rebuilds and stores the HNSW index
    assert got[str(st)]["status"] == "OK" and got[str(st)]["warnings"]
    assert main(["info", "--verify", str(st)]) == 0
    vec = next(f for f in sorted(Store(st).referenced()) if kind(f) == "vec")
    (st / vec).unlink()
    assert main(["info", "--verify", str(st)]) == 1
    assert "missing" in capsys.readouterr().err
    # a damaged manifest: info cannot open the store at all
    damage(st, "manifest.json", "flip")
    assert main(["info", "--verify", str(st)]) == 1
    assert "manifest.json" in capsys.readouterr().err
    files = {str(p.relative_to(st)) for p in st.rglob("*") if p.is_file()}
    assert LOCK in files  # info never removed or created anything but reading


# -- files over VERIFY_BELOW: damage may go unseen, but never a crash or a foreign exception --


def _large_probe(template: Path, tmp_path: Path, rel_kind: str, edit) -> dict:
    st = copy_of(template, tmp_path / "st")
    rel = next(
        f
        for f in sorted(Store(st).referenced())
        if kind(f) == rel_kind and (rel_kind != "index" or f.endswith("words.npy"))
    )
    data = bytearray((st / rel).read_bytes())
    edit(data)
    (st / rel).write_bytes(bytes(data))
    got, proc = run_children([(st, "r")], verify_below=1, check=False)
    assert proc.returncode == 0, (rel, proc.returncode, proc.stderr[-1500:])
    r = got[str(st)]
    assert r["status"] in ("OK", "STOREERROR"), (rel, r)
    return r


def test_large_files_unseen_flip_in_text_bytes_is_harmless(template, tmp_path, monkeypatch):
    """A flipped ASCII letter in a large (uncompressed) root segment is not detected without
    verify=True (by design), and does not disturb anything else."""

    monkeypatch.setattr(layout_mod, "COMPRESSION", None)  # the letter must be findable
    plain = tmp_path / "plain"
    copy_of(template, plain)
    doc = fr.Document(store=plain)
    doc.delete(doc.group("root").ids[:1])  # rewrites the root segment, uncompressed
    doc.add(texts=["a fish of a text"])

    def edit(data):
        data[data.find(b"fish")] ^= 0x01

    assert _large_probe(plain, tmp_path, "root", edit)["status"] == "OK"


def test_large_vector_segment_with_damaged_schema_never_crashes(template, tmp_path):
    def edit(data):
        # The Arrow footer (the last 10 bytes hold its length and "ARROW1") repeats the schema;
        # the FixedSizeList type table of field "vector" follows the name and holds list_size
        # (int32 8): flip its high byte, so list_size becomes negative.
        footer = len(data) - 10 - int.from_bytes(data[-10:-6], "little")
        pos = data.index(b"\x08\x00\x00\x00", data.index(b"vector", footer))
        data[pos + 3] ^= 0xFF

    _large_probe(template, tmp_path, "vec", edit)


def test_large_vector_segment_with_non_finite_value(template, tmp_path):
    def edit(data):
        data[data.index(b"\x00\x00\x80\x3f") + 3] = 0x7F  # 1.0f -> +inf

    _large_probe(template, tmp_path, "vec", edit)


def test_large_bm25_array_with_damaged_npy_header(template, tmp_path):
    def edit(data):
        data[10] ^= 0xFF  # the '{' opening the header dict

    _large_probe(template, tmp_path, "index", edit)


def test_large_group_segment_with_invalid_utf8(template, tmp_path):
    first_id = (
        Store(template)
        .read_segments(Store(template).manifest["groups"]["line"]["segments"])
        .column("id")[0]
        .as_py()
    )

    def edit(data):
        data[data.find(first_id.encode())] ^= 0x80  # an ASCII hex digit -> a lone 0xB0-0xBF

    _large_probe(template, tmp_path, "line", edit)
