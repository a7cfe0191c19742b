"""A file's xxh3-64 checksum (hex): what stores and the cached word lists record per file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import xxhash

__all__ = ["checksum_file"]


def checksum_file(path: Path) -> str:
    """xxh3-64 of the file's bytes, as 16 hex digits."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, xxhash.xxh3_64).hexdigest()
