"""First run of a fresh install: kernels compile in a background process while BM25 answers on
its NumPy path (fastrag._coldstart, fastrag.indexes.bm25.numpy_path), with the kernels' results."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from wallclock import below

import fastrag._coldstart as cs
import fastrag.analysis.segment as segment
import fastrag.indexes.bm25.backend as bk
from fastrag.analysis import get_analyzer
from fastrag.datasets import load_cmrc2018_dev
from fastrag.errors import ConfigError
from fastrag.eval.loaders import squad_questions
from fastrag.indexes.bm25 import numpy_path
from fastrag.indexes.bm25.index import BM25_METHODS, BM25Index

ROOT = Path(__file__).resolve().parents[1]


def _corpus(rng, n_docs, n_vocab, max_len=40):
    lens = rng.integers(0, max_len, n_docs)
    off = np.zeros(n_docs + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    vals = (rng.zipf(1.3, int(off[-1])) % n_vocab).astype(np.int32)  # many repeated terms
    return vals, off


def _queries(rng, n_q, n_vocab):
    ql = rng.integers(0, 8, n_q)
    qo = np.zeros(n_q + 1, np.int64)
    np.cumsum(ql, out=qo[1:])
    return (rng.zipf(1.3, int(qo[-1])) % n_vocab).astype(np.int32), qo


def _set_ready(monkeypatch, ready: bool) -> None:
    monkeypatch.setattr(cs, "kernels_ready", lambda numpy_s=0.0: ready)


@pytest.mark.parametrize("seed", range(6))
def test_numpy_path_equals_kernels_bit_for_bit(seed, monkeypatch):
    """Index arrays, and rows, scores and counts of every search, are identical to the
    kernels' for every BM25 variant, with masks, cut-offs, k beyond the hits and repeated
    query terms."""
    rng = np.random.default_rng(seed)
    n_docs, n_vocab = int(rng.integers(1, 3000)), int(rng.integers(1, 500))
    vals, off = _corpus(rng, n_docs, n_vocab)
    qv, qo = _queries(rng, 60, n_vocab)
    mask = rng.random(n_docs) < 0.7
    for method in BM25_METHODS:
        _set_ready(monkeypatch, True)
        fast = BM25Index.build(vals, off, n_vocab, method=method)
        _set_ready(monkeypatch, False)
        slow = BM25Index.build(vals, off, n_vocab, method=method)
        for name in ("indptr", "indices", "data", "term_max", "base_weights"):
            a, b = getattr(fast, name), getattr(slow, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), (method, name)
        for kw in ({}, {"mask": mask}, {"cutoff": 0.5}, {"mask": mask, "cutoff": 1.0}):
            for k in (1, 10, n_docs + 5):
                _set_ready(monkeypatch, True)
                want = fast.search_csr(qv, qo, k, **kw)
                _set_ready(monkeypatch, False)
                got = fast.search_csr(qv, qo, k, **kw)
                for w, g in zip(want, got, strict=True):
                    assert w.dtype == g.dtype and np.array_equal(w, g), (method, kw, k)
        q = qv[qo[3] : qo[8]]
        _set_ready(monkeypatch, True)
        want = fast.get_scores(q)
        _set_ready(monkeypatch, False)
        assert np.array_equal(fast.get_scores(q), want), method


# Probe-script lines: record every module compiled from source (``seen``), then put the
# folder given as argv[1] first on sys.path.
_SPY_SOURCE_COMPILER = (
    "seen = []\n"
    "orig = be.SourceLoader.source_to_code\n"
    "def spy(self, data, path, **kw):\n"
    "    seen.append(path)\n"
    "    return orig(self, data, path, **kw)\n"
    "be.SourceLoader.source_to_code = spy\n"
    "sys.path.insert(0, sys.argv[1])\n"
)


def test_numpy_path_rejects_what_the_kernels_reject(monkeypatch):
    rng = np.random.default_rng(0)
    vals, off = _corpus(rng, 50, 20)
    idx = BM25Index.build(vals, off, 20)
    _set_ready(monkeypatch, False)
    with pytest.raises(ConfigError, match="query token id 20 is outside the vocabulary"):
        idx.search_csr(np.array([1, 20], np.int32), np.array([0, 2]), 5)
    with pytest.raises(ConfigError, match="q_offsets"):
        idx.search_csr(np.array([1, 2], np.int32), np.array([0, 2, 1]), 5)
    bad = vals.copy()
    bad[7] = 99
    with pytest.raises(ConfigError, match=r"token id 99 at values\[7\]"):
        BM25Index.build(bad, off, 20)


@pytest.mark.parametrize("name", ["bm25_chinese", "bm25_cjk", "bm25"])
def test_cold_analyzers_give_the_same_tokens(name, monkeypatch):
    """While the kernels compile, the analyzers tokenize in Python (jieba itself for
    bm25_chinese and bm25's Han runs): the same vocabulary, ids and offsets on real CMRC text
    (with English words and numbers in it)."""
    questions, _, contexts = squad_questions(load_cmrc2018_dev())
    texts = contexts[:120] + questions[:300] + ["BM25 ranks iPhone 15 reviews, 3.14% 中文 かな"]
    an = get_analyzer(name)
    want = an.encode_chunk(texts)
    assert segment.segmenter() is segment.get_segmenter()  # the port, before
    monkeypatch.setattr(cs, "kernels_ready", lambda numpy_s=0.0: False)  # every analyzer asks it
    assert isinstance(segment.segmenter(), segment.JiebaPython)
    got = get_analyzer(name).encode_chunk(texts)
    assert got[0] == want[0]
    assert np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])


def test_failed_background_compile_falls_back_to_compiling_here(tmp_path, monkeypatch, caplog):
    """A background compile that dies without marking the cache ready is reported once and
    the process calls its kernels (compiling them itself) from then on."""
    monkeypatch.setenv(cs.ENV, "1")
    monkeypatch.setattr(cs, "_ready", False)
    monkeypatch.setattr(cs, "_proc", None)
    monkeypatch.setattr(cs, "_spawned_at", 0.0)
    monkeypatch.setattr(cs, "cache_dir", lambda: tmp_path)
    spawned = []

    def spawn():
        spawned.append(1)
        cs._spawned_at = time.monotonic()
        cs._proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])

    monkeypatch.setattr(cs, "_spawn", spawn)
    assert cs.kernels_ready() is False and spawned == [1]
    cs._proc.wait(timeout=60)
    with caplog.at_level(logging.WARNING, logger="fastrag"):
        assert cs.kernels_ready() is True
    assert "background kernel compile failed (exit 7" in caplog.text
    assert spawned == [1]


def test_switched_off_means_ready(monkeypatch):
    monkeypatch.setenv(cs.ENV, "0")
    monkeypatch.setattr(cs, "_ready", False)
    assert cs.kernels_ready() is True


CHILD = r"""
import json, sys, time
from numba.core import event
import fastrag as fr
import fastrag._coldstart as cs
from fastrag.datasets import load_cmrc2018_dev
from fastrag.eval.loaders import squad_questions
q, _, ctx = squad_questions(load_cmrc2018_dev())
ready_at_start = cs.kernels_ready()
with event.install_recorder("numba:compile") as rec:
    doc = fr.Document.from_texts(ctx[:200])
    hits = {}
    for sim in ("bm25_chinese", "bm25_cjk"):
        ret = fr.Retriever(doc, "root", sim, topk=5)
        one = ret(q[0])
        batch = ret.batch(q[:300])
        hits[sim] = [[n.text[:30] for n in one]] + [[n.text[:30] for n in b] for b in batch]
compiles = sum(1 for _, e in rec.buffer if e.is_start)
print(json.dumps({"ready_at_start": ready_at_start, "compiles": compiles, "hits": hits}))
"""


def _run_child(env):
    proc = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.slow
def test_fresh_install_answers_at_once_then_uses_the_cached_kernels(tmp_path):
    """A process with an empty numba cache compiles nothing itself: it says that kernels
    compile in the background and answers (the same hits as compiled kernels give). A second
    background compile finds the first one's lock and leaves. Once the cache is marked ready, a
    new process calls the cached kernels from its first query, again compiling nothing."""
    cache = tmp_path / "numba"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), cs.ENV: "1"}
    cold, err = _run_child(env)
    assert cold["ready_at_start"] is False and cold["compiles"] == 0
    assert "compiling kernels in a background process" in err
    busy = subprocess.run(
        [sys.executable, "-c", "from fastrag.warmup import background_warmup; background_warmup()"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    markers = list(cache.rglob("fastrag-kernels-*.ready"))
    assert busy.returncode == cs.BUSY_EXIT or markers, busy.stderr[-2000:]
    deadline = time.monotonic() + 900
    while not markers and time.monotonic() < deadline:
        time.sleep(0.5)
        markers = list(cache.rglob("fastrag-kernels-*.ready"))
    assert markers, (
        (cache / "fastrag-warmup.log").read_text()[-2000:]
        if (cache / "fastrag-warmup.log").exists()
        else "no marker and no log"
    )
    warm, err = _run_child(env)
    assert warm["ready_at_start"] is True and warm["compiles"] == 0
    assert "compiling kernels" not in err
    assert warm["hits"] == cold["hits"]
    assert len(cold["hits"]["bm25_chinese"]) == 301 and all(cold["hits"]["bm25_chinese"])


def test_warmup_writes_bytecode_and_reports_what_it_cannot(tmp_path):
    """`fastrag warmup` byte-compiles modules even under PYTHONDONTWRITEBYTECODE (the new
    process then loads the .pyc, it does not compile the source); a folder it cannot write is
    listed, not raised."""
    import importlib.util

    from fastrag.warmup import _compile_bytecode

    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "mod.py").write_text("X = 1\n")
    (pkg / "sub" / "deep.py").write_text("Y = 2\n")
    done, failed = _compile_bytecode([pkg])
    assert (done, failed) == (2, [])
    for src in (pkg / "mod.py", pkg / "sub" / "deep.py"):
        assert Path(importlib.util.cache_from_source(str(src))).is_file()
    probe = (
        "import sys, importlib._bootstrap_external as be\n" + _SPY_SOURCE_COMPILER + "import mod\n"
        "print(sys.flags.dont_write_bytecode, mod.X, seen)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(pkg)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        check=True,
    )
    assert out.stdout.split() == ["1", "1", "[]"]
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "m.py").write_text("Z = 3\n")
    (ro / "__pycache__").write_text("a file where the cache folder should be\n")
    done, failed = _compile_bytecode([ro])
    assert done == 0 and len(failed) == 1 and failed[0].startswith(str(ro / "m.py"))


def test_concurrent_warmups_write_loadable_bytecode(tmp_path):
    """Two processes byte-compiling the same modules at once (a background compile beside an
    image's `fastrag warmup`) leave only whole .pyc files: a new process loads every module
    from its .pyc, with the right values."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    for i in range(60):
        (pkg / f"m{i}.py").write_text(f"VALUE = {i}\n" + "X = [1, 2, 3]\n" * 200)
    writer = (
        "import sys\nfrom pathlib import Path\nfrom fastrag.warmup import _compile_bytecode\n"
        "for _ in range(5):\n"
        "    done, failed = _compile_bytecode([Path(sys.argv[1])])\n"
        "    assert (done, failed) == (60, []), failed\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", writer, str(pkg)]) for _ in range(3)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]
    probe = (
        "import sys, importlib, importlib._bootstrap_external as be\n"
        + _SPY_SOURCE_COMPILER
        + "vals = [importlib.import_module(f'm{i}').VALUE for i in range(60)]\n"
        "print(vals == list(range(60)), seen)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(pkg)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        check=True,
    )
    assert out.stdout.split() == ["True", "[]"]


def _compiling(monkeypatch, tmp_path, compile_s: float, last_s: float):
    """A background 'compile' that writes the ready marker after ``compile_s`` seconds; the
    log says the last compile took ``last_s``."""
    monkeypatch.setenv(cs.ENV, "1")
    monkeypatch.setattr(cs, "_ready", False)
    monkeypatch.setattr(cs, "_proc", None)
    monkeypatch.setattr(cs, "_spawned_at", 0.0)
    monkeypatch.setattr(cs, "cache_dir", lambda: tmp_path)
    (tmp_path / "fastrag-warmup.log").write_text(
        f"2026-11-01 10:00:00 fastrag warmup 123: {last_s:.1f} s\n"
    )
    marker = cs.marker()

    def spawn():
        cs._spawned_at = time.monotonic()
        cs._proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import time, pathlib; "
                f"time.sleep({compile_s}); "
                f"pathlib.Path({str(marker)!r}).write_text('ready')",
            ]
        )

    monkeypatch.setattr(cs, "_spawn", spawn)


def test_a_batch_longer_on_numpy_than_the_compile_waits_for_it(tmp_path, monkeypatch, caplog):
    """A batch whose NumPy estimate is below what the compile has left runs at once on the
    NumPy path; one above it waits for the compile and then uses the kernels."""
    _compiling(monkeypatch, tmp_path, compile_s=2.0, last_s=3.0)
    assert cs.kernels_ready() is False  # starts the compile
    assert 1.0 <= cs.remaining_compile_s() <= 3.0
    t0 = time.monotonic()
    assert cs.kernels_ready(0.5) is False
    below(time.monotonic() - t0, 0.5, "kernels_ready(0.5)")
    with caplog.at_level(logging.WARNING, logger="fastrag"):
        assert cs.kernels_ready(60.0) is True
    assert 1.0 <= time.monotonic() - t0
    below(time.monotonic() - t0, 30.0, "waiting for the compile")
    assert "waiting for the background kernel compile" in caplog.text
    assert "would take about 60 s on the NumPy path" in caplog.text
    cs._proc.wait(timeout=600)


def test_bm25_search_hands_its_numpy_estimate_to_the_compile_check(monkeypatch):
    rng = np.random.default_rng(0)
    vals, off = _corpus(rng, 2000, 300)
    qv, qo = _queries(rng, 500, 300)
    index = BM25Index.build(vals, off, 300)
    asked = []
    monkeypatch.setattr(cs, "kernels_ready", lambda numpy_s=0.0: asked.append(numpy_s) or False)
    index.search_csr(qv, qo, 5)
    want = numpy_path.estimate_seconds(index.indptr, index.n_docs, qv, 500)
    assert want > 500 * 150e-6 and asked == [0.0, want]


def test_bm25_backends_offer_the_same_functions_and_signatures():
    """The kernels and their NumPy twins are one Backend shape: same fields, same argument
    names (the search's NumPy twin mirrors the kernel's signature)."""
    import inspect

    assert bk.KERNELS._fields == bk.NUMPY._fields
    for name in ("weigh_postings", "search_batch_serial", "score_dense"):
        kern = getattr(bk.KERNELS, name)
        kern = getattr(kern, "py_func", kern)
        twin = getattr(bk.NUMPY, name)
        assert list(inspect.signature(kern).parameters) == list(
            inspect.signature(twin).parameters
        ), name
    assert bk.backend() is (bk.KERNELS if cs.kernels_ready() else bk.NUMPY)


def test_evaluate_squad_rejects_a_negative_wait(tmp_path):
    from fastrag.eval.squad_run import evaluate_squad

    with pytest.raises(ConfigError, match="wait_s must be"):
        evaluate_squad(load_cmrc2018_dev(), tmp_path, wait_s=-1)


def test_parallel_warmup_plan_covers_every_stage_once():
    """`fastrag warmup --jobs N`: every stage in exactly one process, the longest first onto
    the least loaded one; never more processes than stages; a bad count says what to pass."""
    from fastrag.warmup import STAGES, plan_jobs

    assert plan_jobs(1) == [sorted(STAGES, key=lambda s: -STAGES[s][1])]
    two = plan_jobs(2)
    assert sorted(s for g in two for s in g) == sorted(STAGES)
    loads = [sum(STAGES[s][1] for s in g) for g in two]
    assert max(loads) - min(loads) <= max(cost for _, cost in STAGES.values())
    assert len(plan_jobs(64)) == len(STAGES)
    with pytest.raises(ConfigError, match="jobs must be an int >= 1, got 0; use 1"):
        plan_jobs(0)


def test_a_failing_warmup_process_fails_the_warmup_naming_its_stages(monkeypatch):
    """A process of a parallel warm-up that fails makes warmup() raise with that process's
    stages and output (here a stage name no process knows), and no ready marker is written."""
    import fastrag.warmup as wu

    monkeypatch.setattr(wu, "plan_jobs", lambda jobs: [["metrics"], ["no_such_stage"]])
    marked = []
    monkeypatch.setattr(wu, "mark_ready", lambda: marked.append(1))
    with pytest.raises(RuntimeError, match=r"stages \['no_such_stage'\] exited with 1"):
        wu.warmup(verbose=False, jobs=2)
    assert marked == []
    with pytest.raises(ConfigError, match="unknown warm-up stages"):
        wu.run_stages(["no_such_stage"])


SMALL_SEARCH = r"""
import json, sys
from fastrag.cli import main
import fastrag._coldstart as cs
main(["search", sys.argv[1], sys.argv[2], "--json", "--topk", "3"])
print(json.dumps({"numba_started": cs.numba_started(), "numba": "numba" in sys.modules}),
      file=sys.stderr)
"""


def test_one_query_on_a_small_store_starts_no_numba(tmp_path, monkeypatch):
    """A process that searches a store once runs the Python and NumPy twins (the same hits)
    instead of starting numba (0.4 s): the analyzer spans one Latin query in Python, BM25
    scores it on NumPy, and a packed index's query terms are decoded in NumPy too. It does
    not even import numba (0.2 s): kernel modules load on first use."""
    import fastrag as fr
    import fastrag.documents.bm25data as derived_mod

    texts = [
        f"page {i}: the store keeps cats, dogs and {w} notes"
        for i, w in enumerate(["bird", "fish", "search", "kernel"] * 10)
    ]
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    fr.Retriever(fr.Document.from_texts(texts, store=str(plain)), "root", "bm25")("x")
    with monkeypatch.context() as mp:
        mp.setattr(derived_mod, "PACK_MIN_POSTINGS", 0)
        fr.Retriever(fr.Document.from_texts(texts, store=str(packed)), "root", "bm25")("x")
    metas = [json.loads((p / "manifest.json").read_text())["indexes"] for p in (plain, packed)]
    formats = [next(iter(m.values()))["meta"]["index"]["format"] for m in metas]
    assert formats == ["fastrag.bm25/1", "fastrag.bm25/2"]  # unpacked, packed
    got = {}
    for store in (plain, packed):
        out = subprocess.run(
            [sys.executable, "-c", SMALL_SEARCH, str(store), "search kernel notes"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        got[store.name] = [(h["id"], h["score"]) for h in map(json.loads, out.stdout.splitlines())]
        state = json.loads(out.stderr.strip().splitlines()[-1])
        assert state == {"numba_started": False, "numba": False}
    doc = fr.Document(store=str(plain), mode="r")
    want = [
        (h.node.id, h.score)
        for h in fr.Retriever(doc, "root", "bm25", topk=3)("search kernel notes")
    ]
    assert got["plain"] == got["packed"] == [(i, pytest.approx(s, abs=1e-6)) for i, s in want]


TINY_BUILD = r"""
import json, sys
import fastrag as fr
import fastrag._coldstart as cs
texts = json.loads(sys.argv[1])
ret = fr.Retriever(fr.Document.from_texts(texts), "root", "bm25", topk=3)
hits = [(h.node.id, h.score) for h in ret("search kernel notes")]
print(json.dumps({"hits": hits, "numba": "numba" in sys.modules, "started": cs.numba_started()}))
"""


def test_a_small_build_in_memory_and_one_query_import_no_numba():
    """A fresh process that builds a small BM25 index in memory and asks one query runs the
    build's and the search's NumPy twins (the same hits) without importing numba."""
    import fastrag as fr

    texts = [
        f"page {i}: the store keeps cats, dogs and {w} notes"
        for i, w in enumerate(["bird", "fish", "search", "kernel"] * 10)
    ]
    out = subprocess.run(
        [sys.executable, "-c", TINY_BUILD, json.dumps(texts)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["numba"] is False and res["started"] is False
    want = [
        [h.node.id, h.score]
        for h in fr.Retriever(fr.Document.from_texts(texts), "root", "bm25", topk=3)(
            "search kernel notes"
        )
    ]
    assert len(want) == 3
    assert [h[0] for h in res["hits"]] == [h[0] for h in want]
    assert [h[1] for h in res["hits"]] == pytest.approx([h[1] for h in want], abs=1e-6)


MANY_SMALL = r"""
import json, sys
import fastrag as fr
import fastrag._coldstart as cs
doc = fr.Document(store=sys.argv[1], mode="r")
ret = fr.Retriever(doc, "root", "bm25", topk=3)
first = [(h.node.id, h.score) for h in ret("search kernel notes")]
started = [cs.numba_started()]
for i in range(20000):  # a service: one small query at a time
    ret("search kernel notes")
    if cs.numba_started():
        break
started.append(cs.numba_started())
last = [(h.node.id, h.score) for h in ret("search kernel notes")]
print(json.dumps({"started": started, "queries": i + 1, "same": first == last}))
"""


def test_a_service_of_small_queries_starts_numba_after_a_bounded_cost(tmp_path):
    """Small work runs on the twins only until the process has spent about numba's start-up
    on them: a service answering one small query at a time then runs the kernels."""
    import fastrag as fr

    texts = [f"page {i}: the store keeps {w} notes" for i, w in enumerate(["a", "b", "c"] * 10)]
    fr.Retriever(fr.Document.from_texts(texts, store=str(tmp_path / "s")), "root", "bm25")("x")
    out = subprocess.run(
        [sys.executable, "-c", MANY_SMALL, str(tmp_path / "s")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["started"] == [False, True] and res["same"]
    assert res["queries"] < 20000


def test_kernels_for_is_the_one_rule(monkeypatch):
    """Kernels once ready; small work (by the caller's estimate, asked for only then) on the
    twin until numba has started; while compiling, the twin, or a wait for the compile when
    the twin would take longer and the caller may wait."""
    asked = []

    def small():
        asked.append(1)
        return 0.01

    monkeypatch.setattr(cs, "_serving", False)
    monkeypatch.setattr(cs, "_twin_s", 0.0)
    monkeypatch.setattr(cs, "numba_started", lambda: True)
    monkeypatch.setattr(cs, "kernels_ready", lambda numpy_s=0.0: False)
    assert cs.kernels_for() is False and cs.kernels_for(small, wait=False) is False
    assert asked == []
    # before numba has started, small work goes to the twin without asking for the kernels
    # (looking for them loads numba)
    monkeypatch.setattr(cs, "numba_started", lambda: False)
    ready_asked = []
    monkeypatch.setattr(cs, "kernels_ready", lambda numpy_s=0.0: ready_asked.append(1) or True)
    assert cs.kernels_for(small) is False and asked == [1] and ready_asked == []
    assert cs.kernels_for() is True and ready_asked == [1]
    asked.clear()
    assert cs.kernels_for(lambda: cs.NUMBA_START_S + 0.1) is True
    monkeypatch.setattr(cs, "numba_started", lambda: True)
    assert cs.kernels_for(small) is True and asked == []  # started: not even asked
    seen = []

    def compiling(numpy_s=0.0):
        seen.append(numpy_s)
        return numpy_s > 5

    monkeypatch.setattr(cs, "kernels_ready", compiling)
    assert cs.kernels_for(lambda: 9.0) is True and seen == [0.0, 9.0]
    assert cs.kernels_for(lambda: 9.0, wait=False) is False and seen == [0.0, 9.0, 0.0]


def test_every_kernel_or_twin_choice_goes_through_kernels_for():
    """Outside fastrag._coldstart no module applies the rules itself: kernels_pay and
    numba_started are not called, kernels_ready only where evaluation waits for the compile."""
    root = Path(cs.__file__).parent
    waits = {"cli/evaluate.py", "eval/squad_run.py"}
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "_coldstart.py":
            continue
        text = path.read_text(encoding="utf-8")
        for name in ("kernels_pay", "numba_started", "kernels_ready"):
            if re.search(rf"\b{name}\(", text) and not (name == "kernels_ready" and rel in waits):
                found.append(f"{rel}: {name}")
    assert found == []
