"""fastrag on an AVX-512 machine made to look like an AVX2-only one (``bench/_avx2only.py``:
CPUID faulting hides AVX-512 from one process), so the AVX2 paths run as they do there: every
library dispatches on what the process sees, not only the kernels fastrag lets tests choose."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _flags() -> set[str]:
    try:
        return set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return set()


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not {"cpuid_fault", "avx512f"} <= _flags(),
        reason="needs an AVX-512 CPU with CPUID faulting (flags avx512f, cpuid_fault)",
    ),
    pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)"),
]


@pytest.fixture(scope="module")
def avx2_env(tmp_path_factory):
    sys.path.insert(0, str(BENCH))
    try:
        import _avx2only

        _avx2only.WORK_DIR = tmp_path_factory.mktemp("avx2only")
        return {**os.environ, **_avx2only.hide_avx512_env()}
    finally:
        sys.path.remove(str(BENCH))


CHILD = r"""
import json
import numpy as np
import llvmlite.binding as llvm
from fastrag.indexes.flat import FlatIndex
from fastrag.indexes.int8 import int8_format

rng = np.random.default_rng(3)
common = rng.standard_normal(64)
x = rng.standard_normal((4000, 64)) * 0.3 + common
x = np.concatenate([x, x[:40] + 1e-4 * rng.standard_normal((40, 64))])  # near-duplicates
x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
q = np.concatenate([x[:30] + 0.05 * rng.standard_normal((30, 64)), x[100:110]]).astype(np.float32)
fast = FlatIndex.from_vectors(x, "cosine", bf16=False, int8=True)
plain = FlatIndex.from_vectors(x, "cosine", bf16=False, int8=False)
got = fast.search(q, 10, num_threads=2)
want = plain.search(q, 10, num_threads=2)
print(json.dumps({
    "avx512f": bool(llvm.get_host_cpu_features().get("avx512f")),
    "kernel": int8_format().name,
    "pass_ran": fast._approx["int8"].n,
    "rows_equal": bool((got[0] == want[0]).all()),
    "scores_equal": bool((got[1] == want[1]).all()),
}))
"""


def test_the_child_sees_avx2_and_the_int8_search_stays_exact(avx2_env, tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        env={**avx2_env, "FASTRAG_CACHE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {
        "avx512f": False,
        "kernel": "avx2",
        "pass_ran": 4040,
        "rows_equal": True,
        "scores_equal": True,
    }
