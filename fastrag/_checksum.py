"""A file's xxh3-64 checksum (hex): what stores and the cached word lists record per file."""

from __future__ import annotations

from pathlib import Path

import xxhash

__all__ = ["checksum_file"]


def checksum_file(path: Path) -> str:
    """xxh3-64 of the file's bytes, read in 4 MiB blocks, as 16 hex digits."""
    h = xxhash.xxh3_64()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()
