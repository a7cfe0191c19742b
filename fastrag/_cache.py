"""fastrag's cache folder: ``$FASTRAG_CACHE_DIR``, else ``$XDG_CACHE_HOME/fastrag`` (by default
``~/.cache/fastrag``). What lives there can be rebuilt: static embedding tables, the CPU probe,
the unpacked language model, the tables of jieba's dictionary."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """The cache folder (not created here)."""
    root = os.environ.get("FASTRAG_CACHE_DIR")
    if not root:
        root = os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache"), "fastrag"
        )
    return Path(root)
