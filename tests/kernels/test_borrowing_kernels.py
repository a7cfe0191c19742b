"""Kernels compiled without numba's reference counting (``_nrt=False``: they borrow their
arrays, so they make no ``NRT_incref``/``NRT_decref`` call, an atomic add each, per array per
call). numba passes the flag on to the functions such a kernel calls, unless they set it, and
keeps one compiled version per signature: so every version compiled without reference counting
must allocate nothing (numba refuses to compile that) and return no array (a caller that counts
references would release it once too often). Checked on freshly compiled kernels, after BM25
searches that reach every strategy, plain and packed, masked, cut off, on 1 and 2 threads."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import fastrag._kernels as kernels

_SCRIPT = r"""
import importlib, json, pkgutil, sys
import numpy as np
from numba import types
from numba.core.registry import CPUDispatcher
from fastrag import _coldstart
_coldstart.use_kernels()
_coldstart.serving()
import fastrag._kernels as K
from fastrag.indexes.bm25.index import BM25Index, SEARCH_STRATEGIES

rng = np.random.default_rng(3)
lens = rng.integers(1, 120, 3000)
offsets = np.zeros(lens.shape[0] + 1, np.int64)
offsets[1:] = np.cumsum(lens)
values = (rng.zipf(1.1, int(offsets[-1])) % 4000).astype(np.int32)
plain = BM25Index.build(values, offsets, 4000)
arrays = {k: np.array(v) for k, v in plain.to_arrays(packed=True).items()}
packed = BM25Index.from_arrays(arrays, plain.meta(packed=True))
for ix in (plain, packed):
    ix.build_rank_directories()
qs = [values[offsets[d] : offsets[d] + 4] for d in rng.integers(0, 3000, 40)]
mask = rng.random(3000) < 0.7
for ix in (plain, packed):
    for strategy in SEARCH_STRATEGIES:
        for kw in ({}, {"mask": mask}, {"cutoff": 1.0}):
            for threads in (1, 2):
                ix.search(qs, 10, strategy=strategy, num_threads=threads, **kw)

def arrays_in(t):
    if isinstance(t, types.Array):
        return True
    if isinstance(t, types.BaseTuple):
        return any(arrays_in(x) for x in t.types)
    if isinstance(t, types.Optional):
        return arrays_in(t.type)
    return False

out = []
for info in pkgutil.walk_packages(K.__path__, K.__name__ + "."):
    mod = importlib.import_module(info.name)
    for name, obj in vars(mod).items():
        if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == mod.__name__:
            for sig, cres in obj.overloads.items():
                out.append({
                    "name": f"{mod.__name__}.{name}",
                    "nrt": bool(cres.target_context.enable_nrt),
                    "returns_array": arrays_in(cres.signature.return_type),
                    "sig": str(sig),
                })
print(json.dumps(out))
"""


def _declared_borrowing() -> set[str]:
    """``module.function`` of every kernel whose decorator says ``_nrt=False``."""
    root = Path(kernels.__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        mod = ".".join(("fastrag._kernels", *path.relative_to(root).with_suffix("").parts))
        mod = mod.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                for dec in node.decorator_list:
                    if isinstance(dec, ast.Call) and any(
                        kw.arg == "_nrt" and getattr(kw.value, "value", None) is False
                        for kw in dec.keywords
                    ):
                        found.add(f"{mod}.{node.name}")
    return found


def test_borrowing_kernels_allocate_nothing_and_return_no_array(tmp_path):
    declared = _declared_borrowing()
    assert "fastrag._kernels.bm25.lazy.find" in declared  # the scan sees the decorators
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    compiled = json.loads(proc.stdout.strip().splitlines()[-1])
    borrowing = {c["name"] for c in compiled if not c["nrt"]}
    # the flag took effect: every declared kernel that ran was compiled without counting
    ran = {c["name"] for c in compiled}
    assert declared & ran, "no borrowing kernel ran: the searches above miss them"
    assert declared & ran <= borrowing
    for c in compiled:
        if c["name"] in declared:
            assert not c["nrt"], c
    # ... and nothing compiled without counting (declared or inherited) returns an array
    bad = [c for c in compiled if not c["nrt"] and c["returns_array"]]
    assert not bad, bad
