"""Indexes: BM25 (numba), exact dense (FlatIndex), HNSW (hnswlib), filter expressions.

The classes load on first access (``fastrag.indexes.BM25Index``), so importing the package
compiles nothing and loads no numba.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "BM25Index": "fastrag.indexes.bm25",
    "FlatIndex": "fastrag.indexes.flat",
    "HNSWIndex": "fastrag.indexes.hnsw",
    "SparseIndex": "fastrag.indexes.sparse",
    "FilterExpressionBuilder": "fastrag.indexes.filters",
    "FilterSyntaxError": "fastrag.indexes.filters",
    "parse_filter": "fastrag.indexes.filters",
    "filter_mask": "fastrag.indexes.filters",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fastrag.indexes' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
