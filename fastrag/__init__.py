"""fastrag: throughput-first retrieval-augmented generation.

Public names are imported lazily (PEP 562), so ``import fastrag`` stays cheap and compiles
nothing; ``fastrag.X`` loads X's module on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # data model
    "DocNode": "fastrag.schema",
    "NodeWithScore": "fastrag.schema",
    "FastragError": "fastrag.errors",
    "ConfigError": "fastrag.errors",
    "ReaderError": "fastrag.errors",
    "StoreError": "fastrag.errors",
    "MissingExtraError": "fastrag.errors",
    # documents and transforms
    "Document": "fastrag.documents.document",
    "NodeGroup": "fastrag.documents.group",
    "Store": "fastrag.documents.store",
    "register_reader": "fastrag.documents.readers",
    "NodeTransform": "fastrag.transforms.base",
    "SentenceSplitter": "fastrag.transforms.sentence",
    "TokenTextSplitter": "fastrag.transforms.sentence",
    # analysis
    "count_tokens": "fastrag.analysis.tokens",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fastrag' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
