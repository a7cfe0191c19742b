"""fastrag._lazy: a module stands in for itself until first used; reads and writes reach it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fastrag._lazy import LazyModule, kernels

PROBE = r"""
import sys
from fastrag._lazy import LazyModule
lazy = LazyModule("colorsys")
before = "colorsys" in sys.modules
value = lazy.rgb_to_hsv(1.0, 0.0, 0.0)
after = "colorsys" in sys.modules
lazy.EXTRA = 7
import colorsys
print(before, after, value, colorsys.EXTRA, lazy.EXTRA)
del lazy.EXTRA
print(hasattr(colorsys, "EXTRA"))
"""


def test_the_module_is_imported_at_the_first_read_and_writes_reach_it():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "(0.0,", "1.0,", "1.0)", "7", "7", "False"]


def test_kernels_names_fastrag_kernels_and_fails_on_a_missing_name():
    mod = kernels("topk")
    assert repr(mod) == "<lazy module 'fastrag._kernels.topk', not imported yet>"
    import fastrag._kernels.topk as real

    assert mod.heap_offer is real.heap_offer
    assert repr(mod) == "<lazy module 'fastrag._kernels.topk', imported>"
    with pytest.raises(ModuleNotFoundError, match="no_such_module"):
        _ = LazyModule("fastrag._kernels.no_such_module").anything


def test_the_search_path_modules_import_no_numba():
    """The modules a search on a small store imports leave numba (and every kernel) unloaded
    until a kernel is called."""
    code = (
        "import sys\n"
        "import fastrag.cli.search, fastrag.documents.document, fastrag.indexes.bm25\n"
        "import fastrag.indexes.bm25.stream, fastrag.indexes.sparse, fastrag.eval.metrics\n"
        "import fastrag._blas, fastrag.retrieval.retriever\n"
        "print('numba' in sys.modules, any(m.startswith('fastrag._kernels') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
