"""Crash a writer at every os.replace / os.fsync / os.unlink of the writes that
test_store_crash.py does not cover: the first dense query (vectors segment), the first HNSW
query (index folder), a BM25 index packed from the tokens in pieces, add + delete followed by
BM25, flat and HNSW queries (incremental vector and HNSW updates), an add that compacts
segments, and reopening a store built from files after the files changed. After each kill:

* a reader (``mode="r"``) sees the state before or after the operation and changes nothing on
  disk (file names, sizes and mtimes are the same before and after it), with no StoreWarning;
* a writer's open removes every leftover, ``verify()`` finds nothing, no StoreWarning is
  raised (a kill never leaves a named file damaged), and BM25, flat and HNSW answers equal a
  clean in-memory build from the same texts.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from store_probe import CHILD_PRELUDE

import fastrag as fr
from fastrag.documents.store import LOCK, Store
from fastrag.errors import StoreWarning
from fastrag.indexes.bm25.stored import FORMAT_PACKED

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [f"doc {i} cat dog\nline two {i} bird" for i in range(18)]
NEW = "doc new cat\nnew line bird"
QUERIES = ["cat", "bird two", "doc 3 dog"]
SIMS = [("bm25", "default"), ("cosine", "default"), ("cosine", "hnsw")]

COMMON = CHILD_PRELUDE + textwrap.dedent("""
    LINE = lambda t: t.split("\\n")  # noqa: E731  (same identity in every process)

    def query(doc, sims):
        doc.create_node_group("line", transform=LINE)
        for sim, index in sims:
            fr.Retriever(doc, "line", sim, topk=3, index=index)("cat")
""")

OPS = {
    "dense": "query(fr.Document(store=st, embed=emb), [('cosine', 'default')])",
    "hnsw": "query(fr.Document(store=st, embed=emb), [('cosine', 'hnsw')])",
    "update": textwrap.dedent("""
        d = fr.Document(store=st, embed=emb)
        d.add([NEW])
        d.delete([d.group('root').ids[1]])
        query(d, [('bm25', 'default'), ('cosine', 'default'), ('cosine', 'hnsw')])
    """),
    "compact": "d = fr.Document(store=st); d.add([NEW]); query(d, [('bm25', 'default')])",
    "reread": "query(fr.Document(kb, store=st), [('bm25', 'default')])",
    # a BM25 index packed into the store from the tokens (stream.pack_tokens), in many chunks
    "packed": textwrap.dedent("""
        import fastrag.documents.bm25data as _ix, fastrag.indexes.bm25.stream as _bs
        _saved = _ix.PACK_MIN_POSTINGS, _bs.PACK_TOKENS
        _ix.PACK_MIN_POSTINGS, _bs.PACK_TOKENS = 1, 16
        try:
            query(fr.Document(store=st), [('bm25', 'default')])
        finally:
            _ix.PACK_MIN_POSTINGS, _bs.PACK_TOKENS = _saved
    """),
}

# For each planned case: copy the template store, fork a writer that dies with os._exit(137)
# at the n-th call of os.replace, os.fsync or os.unlink (n = 0: no crash; it reports how
# many calls the operation made).
SERVER = COMMON + textwrap.dedent("""
    import json, os, shutil, sys
    OPS = json.loads(sys.argv[1])
    NEW = sys.argv[2]
    plan = json.loads(sys.stdin.read())
    # warm up (JIT-compiled kernels, imports) once here, so that the forked writers inherit it
    for op, item in {item["op"]: item for item in plan}.items():
        st, kb = item["dir"] + ".warm", item["kb"]
        shutil.copytree(item["template"], st)
        exec(OPS[op])
        shutil.rmtree(st)
    out = []
    for item in plan:
        st, kb = item["dir"], item["kb"]
        shutil.copytree(item["template"], st)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            calls = {"replace": 0, "fsync": 0, "unlink": 0}
            real = {name: getattr(os, name) for name in calls}

            def hook(name):
                def f(*a, **k):
                    calls[name] += 1
                    if name == item["call"] and calls[name] == item["n"]:
                        os._exit(137)
                    return real[name](*a, **k)
                return f

            for name in calls:
                setattr(os, name, hook(name))
            exec(OPS[item["op"]])
            os.write(w, json.dumps(calls).encode())
            os._exit(0)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        data = os.read(r, 4096).decode()
        os.close(r)
        out.append({**item, "exit": os.waitstatus_to_exitcode(status),
                    "calls": json.loads(data) if data else None})
    print(json.dumps(out))
""")

ns: dict = {}
exec(COMMON, ns)
emb, LINE, query = ns["emb"], ns["LINE"], ns["query"]


def run_server(plan: list[dict]) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-c", SERVER, json.dumps(OPS), NEW],
        input=json.dumps(plan),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def snapshot(st: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(st)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(st.rglob("*"))
    }


def committed_roots(st: Path) -> list[str]:
    """The root texts the manifest commits (read directly: a Document of files would re-read
    the changed files)."""
    store = Store(st, mode="r")
    entry = store.manifest["groups"].get("root")
    if entry is None:
        return []
    return store.read_segments(entry["segments"]).column("text").to_pylist()


def answers(doc) -> list:
    doc.create_node_group("line", transform=LINE)
    out = []
    for sim, index in SIMS:
        res = fr.Retriever(doc, "line", sim, topk=3, index=index).batch(QUERIES)
        if index == "hnsw":  # approximate: nodes of equal score may swap places
            out.append([[round(h.score, 5) for h in r] for r in res])
        else:
            out.append([[(h.text, round(h.score, 5)) for h in r] for r in res])
    return out


def observe(doc, **kw) -> tuple[list[str], list, list[str]]:
    """(root texts, answers, StoreWarnings) of a Document opened with ``doc(**kw)``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = doc(**kw)
        got = [n.text for n in d.group("root")], answers(d)
    return (*got, [str(w.message) for w in caught if issubclass(w.category, StoreWarning)])


def damage_warnings(warned: list[str]) -> list[str]:
    """The warnings about damaged store files (not those about source files changed or gone
    on disk, which the "reread" case has)."""
    return [
        w
        for w in warned
        if "of its source files are missing" not in w
        and "changed on disk since they were read" not in w
    ]


def clean(roots: list[str]) -> list:
    return answers(fr.Document.from_texts(roots, embed=emb))


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    base = tmp_path_factory.mktemp("crash-derived")
    t = {}
    t["dense"] = base / "t-dense"  # roots, line, BM25
    query(fr.Document.from_texts(TEXTS, store=t["dense"]), [("bm25", "default")])
    t["hnsw"] = base / "t-hnsw"  # ... and vectors
    shutil.copytree(t["dense"], t["hnsw"])
    query(fr.Document(store=t["hnsw"], embed=emb), [("cosine", "default")])
    t["update"] = base / "t-update"  # ... and an HNSW index
    shutil.copytree(t["hnsw"], t["update"])
    query(fr.Document(store=t["update"], embed=emb), [("cosine", "hnsw")])
    t["compact"] = base / "t-compact"  # 16 root segments: the next add compacts
    doc = fr.Document.from_texts(TEXTS[:3], store=t["compact"])
    for text in TEXTS[3:]:
        doc.add([text])
    query(doc, [("bm25", "default")])
    assert len(Store(t["compact"]).manifest["groups"]["root"]["segments"]) == 16
    kb = base / "kb"
    kb.mkdir()
    for i in range(5):
        (kb / f"f{i}.txt").write_text(f"file {i} cat\nline {i} bird two")
    t["packed"] = base / "t-packed"  # roots and the line group, no index
    doc = fr.Document.from_texts(TEXTS, store=t["packed"])
    doc.create_node_group("line", transform=LINE)
    doc.group("line")
    t["reread"] = base / "t-reread"
    query(fr.Document(kb, store=t["reread"]), [("bm25", "default")])
    time.sleep(0.01)
    (kb / "f1.txt").write_text("file one changed cat\nchanged bird")
    (kb / "f2.txt").unlink()
    (kb / "f9.txt").write_text("new file nine\ncat dog")
    return base, t, kb


def expected_states(op: str, template: Path, kb: Path) -> list[list[str]]:
    before = committed_roots(template)
    if op in ("dense", "hnsw", "packed"):
        return [before]
    if op == "update":
        added = before + [NEW]
        return [before, added, added[:1] + added[2:]]
    if op == "compact":
        return [before, before + [NEW]]
    fresh = [n.text for n in fr.Document(kb).group("root")]
    # unchanged files keep their place, and so does the removed f2 (kept until asked to
    # remove it); changed and new ones follow, in file order
    after = [x for x in before if x in fresh or x.startswith("file 2 ")] + [
        x for x in fresh if x not in before
    ]
    return [before, after]


@pytest.mark.slow  # kills a writer at every write step: CI's full run
def test_kill_at_every_replace_fsync_unlink(templates):
    base, t, kb = templates

    def item(op, call, n):
        return {
            "op": op,
            "call": call,
            "n": n,
            "dir": str(base / f"{op}-{call}-{n}"),
            "template": str(t[op]),
            "kb": str(kb),
        }

    counts = run_server([item(op, "none", 0) for op in OPS])
    packed = Store(base / "packed-none-0", mode="r").manifest["indexes"]
    assert [e["meta"]["index"]["format"] for e in packed.values()] == [FORMAT_PACKED]
    plan = []
    for c in counts:
        assert c["exit"] == 0 and c["calls"]["replace"] >= 1, c
        for call in ("replace", "fsync", "unlink"):
            plan += [item(c["op"], call, n) for n in range(1, c["calls"][call] + 1)]
    results = run_server(plan)
    assert len(results) == len(plan) >= 100
    states = {op: expected_states(op, t[op], kb) for op in OPS}
    seen = {op: set() for op in OPS}
    clean_cache: dict[tuple, list] = {}

    def clean_of(roots):
        key = tuple(roots)
        if key not in clean_cache:
            clean_cache[key] = clean(roots)
        return clean_cache[key]

    for r in results:
        assert r["exit"] == 137, r  # every planned call was reached
        st, op = Path(r["dir"]), r["op"]
        roots = committed_roots(st)
        assert roots in states[op], (r, roots)
        seen[op].add(states[op].index(roots))
        # a reader sees a committed state, equal to a clean build, and writes nothing
        before = snapshot(st)
        kw = {"store": st, "mode": "r", "embed": emb}
        got_roots, got, warned = observe(fr.Document, **kw)
        assert got_roots == roots, r
        assert got == clean_of(got_roots), r
        assert damage_warnings(warned) == [], (r, warned)
        assert snapshot(st) == before, r
        # a writer: answers of a clean build, nothing damaged, and its first commit leaves
        # no leftover of the killed one (opening removes nothing)
        got_roots, got, warned = observe(fr.Document, store=st, embed=emb)
        assert got == clean_of(got_roots), r
        assert damage_warnings(warned) == [], (r, warned)
        with Store(st).transaction():
            pass
        files = {str(p.relative_to(st)) for p in st.rglob("*") if p.is_file()}
        assert files - Store(st).referenced() - {LOCK} == set(), r
        assert Store(st, mode="r").verify() == [], r
        shutil.rmtree(st)
    # the kills fell on both sides of every commit point
    assert seen == {op: set(range(len(states[op]))) for op in OPS}, seen


RANDOM_WRITER = COMMON + textwrap.dedent("""
    import sys
    doc = fr.Document(store=sys.argv[1], embed=emb)
    print("ready", flush=True)
    for j in range(10_000):
        doc.add([f"added {j} cat\\nsecond {j} bird"])
        if j % 3 == 2:
            doc.delete([doc.group("root").ids[0]])
        query(doc, [("bm25", "default"), ("cosine", "default"), ("cosine", "hnsw")])
""")


@pytest.mark.parametrize("seed", [11, 12])
def test_kill_at_random_times_during_dense_updates(tmp_path, seed):
    st = tmp_path / "st"
    query(fr.Document.from_texts(TEXTS[:6], store=st, embed=emb), SIMS)
    proc = subprocess.Popen(
        [sys.executable, "-c", RANDOM_WRITER, str(st)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    time.sleep(random.Random(seed).uniform(0.5, 2.0))
    proc.kill()
    proc.wait()
    roots, got, warned = observe(fr.Document, store=st, embed=emb)
    assert any(r.startswith("added ") for r in roots)  # the writer committed something
    assert warned == [] and got == clean(roots)
    files = {str(p.relative_to(st)) for p in st.rglob("*") if p.is_file()}
    assert files - Store(st).referenced() - {LOCK} == set()
    assert Store(st, mode="r").verify() == []
    # a serial prefix of the writer's operations
    n = 1 + max(int(r.split()[1]) for r in roots if r.startswith("added "))
    everything = TEXTS[:6] + [f"added {j} cat\nsecond {j} bird" for j in range(n)]
    assert roots == everything[len(everything) - len(roots) :]
    # deletes follow adds 2, 5, 8, ...: all but perhaps the last one's are committed
    assert len(everything) - len(roots) in ((n - 1) // 3, n // 3)
