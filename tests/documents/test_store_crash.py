"""Crash a writer at every file-system step of a commit (and at random times); the store must
open at the previous or the next committed state, equal a clean build, and keep no leftover."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import fastrag as fr
from fastrag.documents.store import LOCK, Store

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [f"doc {i} cat dog\nline two {i} bird" for i in range(12)]
QUERIES = ["cat", "bird two", "doc 3"]

OPS = {
    # build a store, a group and a BM25 index from nothing
    "build": "doc = fr.Document.from_texts(TEXTS, store=st); work(doc)",
    "add": "doc = fr.Document(store=st); doc.add(['doc new cat\\nnew line bird']); work(doc)",
    "delete": "doc = fr.Document(store=st); doc.delete([doc.group('root').ids[2]]); work(doc)",
}

# A fork server: imports fastrag once, then for each (op, syscall, n) copies the template
# store and forks a writer that dies with os._exit(137) at the n-th call of os.replace or
# os.fsync (n = 0: no crash, and it prints how many calls the operation makes).
SERVER = textwrap.dedent("""
    import json, os, shutil, sys
    import fastrag as fr
    TEXTS = json.loads(sys.argv[1])
    OPS = json.loads(sys.argv[2])
    plan = json.loads(sys.stdin.read())

    def work(doc):
        doc.create_node_group("line", transform=lambda t: t.split("\\n"))
        fr.Retriever(doc, "line", "bm25", topk=3)("cat")

    out = []
    for item in plan:
        st = item["dir"]
        if item["template"]:
            shutil.copytree(item["template"], st)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            calls = {"replace": 0, "fsync": 0}
            real = {"replace": os.replace, "fsync": os.fsync}

            def hook(name):
                def f(*a, **k):
                    calls[name] += 1
                    if name == item["call"] and calls[name] == item["n"]:
                        os._exit(137)
                    return real[name](*a, **k)
                return f

            os.replace, os.fsync = hook("replace"), hook("fsync")
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


def run_server(plan: list[dict]) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-c", SERVER, json.dumps(TEXTS), json.dumps(OPS)],
        input=json.dumps(plan),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def state(st: Path) -> dict:
    """Open writable (which cleans up), then what a reader sees."""
    doc = fr.Document(store=st)
    doc.create_node_group("line", transform=lambda t: t.split("\n"))
    roots = [n.text for n in doc.group("root")]
    hits = [
        [(h.text, round(h.score, 5)) for h in r]
        for r in fr.Retriever(doc, "line", "bm25", topk=3).batch(QUERIES)
    ]
    files = {str(p.relative_to(st)) for p in st.rglob("*") if p.is_file()}
    leftovers = files - Store(st).referenced() - {LOCK}
    return {
        "roots": roots,
        "hits": hits,
        "leftovers": sorted(leftovers),
        "verify": Store(st, mode="r", verify=True).verify(),
    }


def clean_hits(roots: list[str]) -> list:
    doc = fr.Document.from_texts(roots)
    doc.create_node_group("line", transform=lambda t: t.split("\n"))
    return [
        [(h.text, round(h.score, 5)) for h in r]
        for r in fr.Retriever(doc, "line", "bm25", topk=3).batch(QUERIES)
    ]


@pytest.mark.slow  # kills a writer at every write step: CI's full run
def test_kill_at_every_replace_and_fsync(tmp_path):
    template = tmp_path / "template"
    doc = fr.Document.from_texts(TEXTS, store=template)
    doc.create_node_group("line", transform=lambda t: t.split("\n"))
    fr.Retriever(doc, "line", "bm25", topk=3)("cat")
    before_roots = [n.text for n in doc.group("root")]
    after_roots = {
        "build": TEXTS,
        "add": before_roots + ["doc new cat\nnew line bird"],
        "delete": before_roots[:2] + before_roots[3:],
    }
    prev_roots = {"build": [], "add": before_roots, "delete": before_roots}

    def item(op, call, n, name):
        return {
            "op": op,
            "call": call,
            "n": n,
            "dir": str(tmp_path / name),
            "template": None if op == "build" else str(template),
        }

    counts = run_server([item(op, "none", 0, f"count-{op}") for op in OPS])
    plan = []
    for c in counts:
        assert c["exit"] == 0 and c["calls"]["replace"] >= 3 and c["calls"]["fsync"] >= 3, c
        for call in ("replace", "fsync"):
            plan += [
                item(c["op"], call, n, f"{c['op']}-{call}-{n}")
                for n in range(1, c["calls"][call] + 1)
            ]
    results = run_server(plan)
    assert len(results) == len(plan) >= 40
    seen = {"before": 0, "after": 0}
    for r in results:
        assert r["exit"] == 137, r  # every planned call was reached
        st = Path(r["dir"])
        if r["op"] == "build" and (
            not (st / "manifest.json").exists() or Store(st, mode="r").manifest["generation"] == 0
        ):
            seen["before"] += 1  # killed before the first commit: no store, or an empty one
            if (st / "manifest.json").exists():  # the next writer collects the dead one's files
                fr.Document(store=st).add(TEXTS)
                got = state(st)
                assert got["roots"] == TEXTS and got["hits"] == clean_hits(TEXTS), r
                assert got["leftovers"] == [] and got["verify"] == [], (r, got)
            continue
        got = state(st)
        assert got["roots"] in (prev_roots[r["op"]], after_roots[r["op"]]), r
        seen["before" if got["roots"] == prev_roots[r["op"]] else "after"] += 1
        assert got["hits"] == clean_hits(got["roots"]), r
        assert got["leftovers"] == [] and got["verify"] == [], (r, got)
    assert seen["before"] and seen["after"]  # both sides of the commit point were hit


RANDOM_WRITER = textwrap.dedent("""
    import sys
    import fastrag as fr
    doc = fr.Document(store=sys.argv[1])
    doc.create_node_group("line", transform=lambda t: t.split("\\n"))
    print("ready", flush=True)
    for j in range(10_000):
        doc.add([f"added {j} cat\\nsecond {j}"])
        if j % 4 == 3:
            doc.delete([doc.group("root").ids[0]])
        fr.Retriever(doc, "line", "bm25", topk=2)("cat")
""")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_at_random_times(tmp_path, seed):
    st = tmp_path / "st"
    fr.Document.from_texts(TEXTS, store=st)
    proc = subprocess.Popen(
        [sys.executable, "-c", RANDOM_WRITER, str(st)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    time.sleep(random.Random(seed).uniform(0.3, 1.5))
    proc.kill()
    proc.wait()
    got = state(st)
    assert got["leftovers"] == [] and got["verify"] == []
    assert got["hits"] == clean_hits(got["roots"])
    # a serial prefix of the writer's operations: n adds, and d deletes of the first root
    added = [int(t.split()[1]) for t in got["roots"] if t.startswith("added ")]
    n = max(added, default=-1) + 1
    everything = TEXTS + [f"added {j} cat\nsecond {j}" for j in range(n)]
    d = len(everything) - len(got["roots"])
    assert d in (n // 4, n // 4 - 1 if n % 4 == 0 else n // 4)
    assert got["roots"] == everything[d:]
    # the store keeps working after the crash
    doc = fr.Document(store=st)
    doc.add(["after the crash"])
    assert [n.text for n in fr.Document(store=st).group("root")][-1] == "after the crash"
    shutil.rmtree(st)
