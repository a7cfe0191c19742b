"""Packed BM25 indexes built from streamed chunks (fastrag/indexes/bm25/stream.py): the same
files as packing the whole corpus's index, nothing half-written on failure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fastrag.errors import ConfigError, StoreWarning
from fastrag.indexes.bm25.index import BM25Index
from fastrag.indexes.bm25.stream import build_packed, open_packed


def _zipf(n_docs=3000, n_vocab=8000, seed=2):
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 200, n_docs)  # empty documents too
    offsets = np.zeros(n_docs + 1, np.int64)
    offsets[1:] = np.cumsum(lens)
    values = (rng.zipf(1.1, int(offsets[-1])) % n_vocab).astype(np.int32)
    return values, offsets, n_vocab


def _chunks(values, offsets, cuts):
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        yield values[offsets[lo] : offsets[hi]], offsets[lo : hi + 1] - offsets[lo]


@pytest.mark.parametrize("method", ["lucene", "bm25l", "bm25+"])
@pytest.mark.parametrize("merge_postings", [1, 5000, 1 << 25])
def test_streamed_build_writes_the_packed_index_of_the_whole_corpus(
    tmp_path, method, merge_postings
):
    values, offsets, n_vocab = _zipf()
    whole = BM25Index.build(values, offsets, n_vocab, method=method, k1=1.2)
    cuts = [0, 1, 700, 700, 2500, 3000]  # a 1-document chunk and an empty one
    meta = build_packed(
        _chunks(values, offsets, cuts),
        n_vocab,
        tmp_path / "idx",
        method=method,
        k1=1.2,
        merge_postings=merge_postings,
    )
    assert meta == whole.meta(packed=True)
    assert json.loads((tmp_path / "idx" / "meta.json").read_text()) == meta
    want = whole.to_arrays(packed=True)
    got = {f.stem: np.load(f) for f in (tmp_path / "idx").glob("*.npy")}
    assert got.keys() == want.keys()
    for name, arr in want.items():
        assert got[name].dtype == arr.dtype, name
        np.testing.assert_array_equal(got[name], arr, err_msg=name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no spills left
    opened = open_packed(tmp_path / "idx")
    qv = np.array([1, 2, 3, 40, 7, 7, 900], np.int32)
    qo = np.array([0, 3, 4, 7])
    for x, y in zip(opened.search_csr(qv, qo, 10), whole.search_csr(qv, qo, 10), strict=True):
        np.testing.assert_array_equal(x, y)


def test_a_bad_chunk_leaves_nothing_behind(tmp_path):
    values, offsets, n_vocab = _zipf(500, 800)
    bad = values.copy()
    bad[-1] = n_vocab  # outside the vocabulary, in the second chunk
    with pytest.raises(ConfigError, match="chunk 1 is outside the vocabulary"):
        build_packed(_chunks(bad, offsets, [0, 250, 500]), n_vocab, tmp_path / "idx")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "idx").mkdir()
    with pytest.raises(ConfigError, match="exists"):
        build_packed(_chunks(values, offsets, [0, 500]), n_vocab, tmp_path / "idx")
    with pytest.raises(ConfigError, match="no chunk"):
        build_packed(iter([]), n_vocab, tmp_path / "other")
    with pytest.raises(ConfigError, match="n_vocab"):
        build_packed(_chunks(values, offsets, [0, 500]), 0, tmp_path / "other")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


_BUILDER = """
import os, signal, sys
import numpy as np
from fastrag.indexes.bm25.stream import build_packed

def chunks():
    yield np.array([1, 2, 3], np.int32), np.array([0, 2, 3])
    print("spilled", flush=True)
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.stdin.readline()
    yield np.array([4], np.int32), np.array([0, 1])

build_packed(chunks(), 10, sys.argv[1])
"""


def _builder(folder, how):
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", _BUILDER, str(folder), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "spilled\n"
    return proc


def _leftovers(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir() if p.name != "idx")


def test_a_killed_build_is_removed_by_the_next_build_of_its_folder(tmp_path):
    """A build killed mid-way (SIGKILL: no cleanup ran) leaves its spills; the next build of
    the same folder removes them, says so, and writes the index. Another folder's build
    leaves them alone."""
    proc = _builder(tmp_path / "idx", "kill")
    assert proc.wait(timeout=120) == -9
    left = _leftovers(tmp_path)
    assert len(left) == 2 and left[0].startswith(".idx.") and left[1] == left[0] + ".building"
    assert any((tmp_path / left[0]).iterdir())  # the first chunk's spills
    values, offsets, n_vocab = _zipf(300, 500)
    build_packed(_chunks(values, offsets, [0, 300]), n_vocab, tmp_path / "idx.2")
    assert _leftovers(tmp_path) == left + ["idx.2"]
    with pytest.warns(StoreWarning, match=r"removed .*\.idx\..* interrupted"):
        build_packed(_chunks(values, offsets, [0, 300]), n_vocab, tmp_path / "idx")
    assert _leftovers(tmp_path) == ["idx.2"]
    want = BM25Index.build(values, offsets, n_vocab).to_arrays(packed=True)
    got = {f.stem: np.load(f) for f in (tmp_path / "idx").glob("*.npy")}
    assert got.keys() == want.keys()
    for name, arr in want.items():
        np.testing.assert_array_equal(got[name], arr, err_msg=name)


def test_a_running_build_keeps_its_spills(tmp_path):
    """A build still running holds its lock: another build of the same folder leaves its
    spills alone (and wins the rename; the first then fails and removes its own)."""
    proc = _builder(tmp_path / "idx", "wait")
    try:
        left = _leftovers(tmp_path)
        assert len(left) == 2
        values, offsets, n_vocab = _zipf(300, 500)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error", StoreWarning)
            build_packed(_chunks(values, offsets, [0, 300]), n_vocab, tmp_path / "idx")
        assert _leftovers(tmp_path) == left
    finally:
        proc.stdin.write("\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "was written by another build meanwhile" in err
    assert _leftovers(tmp_path) == []


def test_pack_tokens_writes_the_packed_index_of_the_whole_build(tmp_path, monkeypatch):
    """``pack_tokens`` (a store's large BM25 index) in many chunks and merge windows: the
    arrays of ``to_arrays(packed=True)`` of the whole build, and nothing else in the folder."""
    import fastrag.indexes.bm25.stream as stream_mod
    from fastrag.indexes.bm25.stream import count_postings, pack_tokens

    values, offsets, n_vocab = _zipf(3000, 8000, seed=5)
    monkeypatch.setattr(stream_mod, "PACK_TOKENS", 5000)
    (tmp_path / "idx").mkdir()
    meta = pack_tokens(values, offsets, n_vocab, tmp_path / "idx", k1=1.2)
    whole = BM25Index.build(values, offsets, n_vocab, k1=1.2)
    want = whole.to_arrays(packed=True)
    assert meta == whole.meta(packed=True)
    assert meta["nnz"] == count_postings(values, offsets, n_vocab) == whole.indices.shape[0]
    got = {f.stem: np.load(f) for f in (tmp_path / "idx").glob("*.npy")}
    assert got.keys() == want.keys()
    for name, arr in want.items():
        assert got[name].dtype == arr.dtype, name
        np.testing.assert_array_equal(got[name], arr, err_msg=name)
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == sorted(
        f"{n}.npy" for n in want
    )  # no spills, no meta.json, no work folder


def _first_occurrence(values):
    """Term ids renumbered in order of first occurrence, as a tokenizer's growing vocabulary
    numbers them."""
    _, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    rank = np.empty(first.shape[0], np.int32)
    rank[np.argsort(first, kind="stable")] = np.arange(first.shape[0], dtype=np.int32)
    return rank[inverse].astype(np.int32)


@pytest.mark.parametrize("pack_tokens_per_chunk", [700, 1 << 21])
def test_pack_token_parts_with_a_growing_vocabulary_equals_packing_the_whole(
    tmp_path, monkeypatch, pack_tokens_per_chunk
):
    """Parts tokenized one after another (each with the vocabulary's size at its end, so
    later parts name terms earlier ones did not know): byte-identical files to
    ``pack_tokens`` of the joined corpus, including terms of the last vocabulary that no
    document uses."""
    import fastrag.indexes.bm25.stream as stream_mod
    from fastrag.indexes.bm25.stream import pack_token_parts, pack_tokens

    values, offsets, _ = _zipf(3000, 8000, seed=7)
    values = _first_occurrence(values)
    n_vocab = int(values.max()) + 1 + 5  # 5 terms without postings
    monkeypatch.setattr(stream_mod, "PACK_TOKENS", pack_tokens_per_chunk)
    cuts = [0, 1, 1, 900, 2000, 3000]  # a 1-document part and an empty one
    parts = []
    for i, (v, o) in enumerate(_chunks(values, offsets, cuts)):
        seen = int(offsets[cuts[i + 1]])
        nv = int(values[:seen].max()) + 1 if seen else 1
        parts.append((v, o, n_vocab if i == len(cuts) - 2 else nv))
    assert len({p[2] for p in parts}) > 3  # the vocabulary really grows
    for name in ("whole", "parts"):
        (tmp_path / name).mkdir()
    want_meta = pack_tokens(values, offsets, n_vocab, tmp_path / "whole", k1=1.3, b=0.7)
    meta = pack_token_parts(iter(parts), tmp_path / "parts", k1=1.3, b=0.7)
    assert meta == want_meta and meta["n_vocab"] == n_vocab
    want = sorted((tmp_path / "whole").iterdir())
    got = sorted((tmp_path / "parts").iterdir())
    assert [f.name for f in got] == [f.name for f in want]
    for a, b in zip(got, want, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_pack_token_parts_rejects_a_shrinking_vocabulary_and_unknown_ids(tmp_path):
    from fastrag.indexes.bm25.stream import pack_token_parts

    v = np.array([0, 1, 2], np.int32)
    o = np.array([0, 3])
    (tmp_path / "idx").mkdir()
    with pytest.raises(ConfigError, match="never shrinks"):
        pack_token_parts([(v, o, 3), (v, o, 2)], tmp_path / "idx")
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        pack_token_parts([(v, o, 3), (v + 1, o, 3)], tmp_path / "idx")
    with pytest.raises(ConfigError, match="n_vocab"):
        pack_token_parts([(v, o, 0)], tmp_path / "idx")
    assert list((tmp_path / "idx").iterdir()) == []  # nothing half-written


_PEAK = """
import json, sys
from pathlib import Path
import numpy as np
from fastrag.indexes.bm25.index import BM25Index
from fastrag.indexes.bm25.stream import count_postings, pack_tokens

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

mode, out = sys.argv[1], Path(sys.argv[2])
rng = np.random.default_rng(5)
n_vocab = 50_000
offsets = np.zeros(100_001, np.int64)
offsets[1:] = np.cumsum(rng.integers(0, 200, 100_000))
values = (rng.zipf(1.1, int(offsets[-1])) % n_vocab).astype(np.int32)
(out / "warm").mkdir()
pack_tokens(values, offsets[:51], n_vocab, out / "warm")  # the kernels loaded first
BM25Index.build(values, offsets[:51], n_vocab).to_arrays(packed=True)
nnz = count_postings(values, offsets, n_vocab)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM starts again from here
base = status("VmRSS")
if mode == "stream":
    (out / "idx").mkdir()
    pack_tokens(values, offsets, n_vocab, out / "idx")
else:
    BM25Index.build(values, offsets, n_vocab).to_arrays(packed=True)
print(json.dumps({"nnz": nnz, "peak": status("VmHWM") - base}))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc")
def test_pack_tokens_memory_is_one_chunk_not_the_index(tmp_path):
    """The peak RSS that ``pack_tokens`` adds (a child process each) is its chunk and merge
    window, about 40 MiB, while building the index whole and packing it adds more than the
    uncompressed postings' 8 bytes each."""
    import json
    import subprocess
    import sys

    peaks = {}
    for mode in ("stream", "whole"):
        (tmp_path / mode).mkdir()
        out = subprocess.run(
            [sys.executable, "-c", _PEAK, mode, str(tmp_path / mode)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        peaks[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    nnz = peaks["stream"]["nnz"]
    assert nnz > 7_000_000
    assert peaks["stream"]["peak"] < 48 << 20 < 8 * nnz < peaks["whole"]["peak"], peaks


def test_pack_tokens_and_count_postings_reject_bad_input(tmp_path):
    from fastrag.indexes.bm25.stream import count_postings, pack_tokens

    values, offsets, n_vocab = _zipf(50, 100)
    bad = values.copy()
    bad[3] = n_vocab
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        count_postings(bad, offsets, n_vocab)
    with pytest.raises(ConfigError, match="n_vocab"):
        count_postings(values, offsets, 0)
    (tmp_path / "idx").mkdir()
    with pytest.raises(ConfigError, match="method"):
        pack_tokens(values, offsets, n_vocab, tmp_path / "idx", method="tfidf")
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        pack_tokens(bad, offsets, n_vocab, tmp_path / "idx")
    assert list((tmp_path / "idx").iterdir()) == []  # nothing half-written
