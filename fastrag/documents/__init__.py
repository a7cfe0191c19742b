"""Documents: readers, the node-group registry and the on-disk store.

The classes load on first access (``fastrag.documents.Document``), so importing a light module
of the package (``fastrag.documents.store``'s constants, say) loads no index or kernel.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "Document": "fastrag.documents.document",
    "NodeGroup": "fastrag.documents.group",
    "ReadReport": "fastrag.documents.readers",
    "read_file": "fastrag.documents.readers",
    "Store": "fastrag.documents.store",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fastrag.documents' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
