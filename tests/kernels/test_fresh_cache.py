"""Cached kernels follow the code on disk: editing a kernel module that another module's kernel
inlines recompiles the caller (numba alone checks a kernel against its own file only)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import fastrag._kernels as kernels
from fastrag._kernels import _fresh

# posting_weight (bm25/codec.py) inlines tf_component (bm25/build.py)
PROBE = (
    "import kcopy.bm25.codec as c; "
    "print(repr(float(c.posting_weight(0, 1.0, 0.0, 3, 10.0, 10.0, 1.2, 0.75, 0.0))))"
)


def _run(root: Path, cache: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(root), "NUMBA_CACHE_DIR": str(cache)}
    env.pop("NUMBA_DISABLE_JIT", None)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def test_editing_an_inlined_kernel_recompiles_its_callers(tmp_path):
    src = Path(kernels.__file__).parent
    pkg = tmp_path / "kcopy"
    shutil.copytree(src, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    before = _run(tmp_path, cache)
    assert abs(before - 3 / (1.2 + 3)) < 1e-6  # lucene tf component, dl = avgdl
    assert list(cache.rglob("*.nbi"))  # compiled and cached
    assert _run(tmp_path, cache) == before  # loaded from the cache

    build = pkg / "bm25" / "build.py"
    text = build.read_text()
    old = "        return tf / (k1 * norm + tf)\n"
    assert text.count(old) == 1
    build.write_text(text.replace(old, "        return 2.0 * tf / (k1 * norm + tf)\n"))
    codec_mtime = (pkg / "bm25" / "codec.py").stat().st_mtime_ns  # the caller is unchanged
    after = _run(tmp_path, cache)
    assert (pkg / "bm25" / "codec.py").stat().st_mtime_ns == codec_mtime
    assert abs(after - 2 * before) < 1e-6


def test_drop_stale_cache_keeps_a_current_cache(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text("x = 1\n")
    cache = tmp_path / "cache"
    assert _fresh.drop_stale_cache(src, cache)  # no stamp yet: dropped (nothing there)
    (cache / "a.f-1.py311.nbi").write_bytes(b"index")
    (cache / "a.f-1.py311.1.nbc").write_bytes(b"code")
    assert not _fresh.drop_stale_cache(src, cache)
    assert sorted(p.name for p in cache.iterdir()) == [
        "a.f-1.py311.1.nbc",
        "a.f-1.py311.nbi",
        _fresh.STAMP,
    ]
    (src / "a.py").write_text("x = 2\n")
    assert _fresh.drop_stale_cache(src, cache)
    assert sorted(p.name for p in cache.iterdir()) == [_fresh.STAMP]


def test_a_change_in_any_folder_drops_every_folders_cache(tmp_path):
    """A kernel in a subpackage may inline one of the parent folder (bm25/primitives.py calls
    topk.py's heap offers): the digest covers every folder, and each folder's cache follows."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.py").write_text("x = 1\n")
    (src / "sub" / "b.py").write_text("y = 1\n")
    caches = [tmp_path / "cache_root", tmp_path / "cache_sub"]
    for cache in caches:
        _fresh.drop_stale_cache(src, cache)
        (cache / "k.f-1.py311.nbi").write_bytes(b"index")
    for edit in (src / "a.py", src / "sub" / "b.py"):
        edit.write_text(edit.read_text() + "z = 2\n")
        for cache in caches:
            assert _fresh.drop_stale_cache(src, cache)
            assert not (cache / "k.f-1.py311.nbi").exists()
            (cache / "k.f-1.py311.nbi").write_bytes(b"index")
            assert not _fresh.drop_stale_cache(src, cache)  # current again: kept


def test_every_kernel_folder_has_its_own_cache():
    folders = kernels.kernel_folders()
    assert folders[1:] == [folders[0] / "bm25"]
    caches = [kernels.cache_dir(f) for f in folders]
    assert len(set(caches)) == len(caches)
    assert kernels.cache_dir() == caches[0]


def test_processes_starting_at_once_after_an_edit_all_see_it(tmp_path):
    """Several processes import the edited package at the same moment: each may drop the cache
    while another loads from it (numba treats a vanished file as a miss); all compute the new
    result and none fails."""
    src = Path(kernels.__file__).parent
    pkg = tmp_path / "kcopy"
    shutil.copytree(src, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    before = _run(tmp_path, cache)
    build = pkg / "bm25" / "build.py"
    old = "        return tf / (k1 * norm + tf)\n"
    build.write_text(build.read_text().replace(old, "        return 3.0 * tf / (k1 * norm + tf)\n"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "NUMBA_CACHE_DIR": str(cache)}
    env.pop("NUMBA_DISABLE_JIT", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROBE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(4)
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()[-2000:]
        assert abs(float(out.decode().split()[-1]) - 3 * before) < 1e-6
