"""The on-disk form of a static embedding table: int8 rows, per-row scales, vocabulary, checksums.

A table is a folder of four files::

    table.i8     int8 (vocab_size, dim), row-major, memory-mapped on load
    scales.f32   float32 (vocab_size,): row t is scales[t] * table[t]
    vocab.json   the tokenizer's vocabulary (and what it needs to tokenize like the model)
    meta.json    model, versions, shape, build recipe and the SHA-256 of the three files

It is written into a temporary sibling folder and renamed into place, so a reader sees a whole
table or none. :func:`load_table` checks every checksum before it maps the rows: a damaged or
truncated table raises :class:`~fastrag.errors.StoreError`, never embeds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fastrag._cache import cache_root
from fastrag.errors import StoreError

__all__ = [
    "TABLE_FORMAT",
    "StaticTable",
    "load_table",
    "quantize_rows",
    "static_cache_root",
    "write_table",
]

#: bumped when the files' layout changes; part of every cached table's folder name
TABLE_FORMAT = 1
_FILES = ("table.i8", "scales.f32", "vocab.json")


def static_cache_root() -> Path:
    """``$FASTRAG_CACHE_DIR/static`` (default ``$XDG_CACHE_HOME/fastrag`` or
    ``~/.cache/fastrag``): where :meth:`StaticEmbedding.from_model` keeps its tables."""
    return cache_root() / "static"


@dataclass
class StaticTable:
    """A loaded table: ``rows`` (memory-mapped int8), ``scales``, ``vocab`` and ``meta``."""

    path: Path
    rows: np.ndarray
    scales: np.ndarray
    vocab: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return int(self.rows.shape[1])

    def row(self, token_id: int) -> np.ndarray:
        """Row ``token_id`` as float32 (dequantized)."""
        return self.rows[token_id].astype(np.float32) * self.scales[token_id]

    def nbytes(self) -> int:
        """Bytes of the table's files on disk."""
        return sum((self.path / f).stat().st_size for f in (*_FILES, "meta.json"))


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float rows -> (int8 rows, float32 scales) with ``scale = max|row| / 127`` (0 rows: 0)."""
    x = np.asarray(x, dtype=np.float32)
    amax = np.abs(x).max(axis=1)
    scales = (amax / 127.0).astype(np.float32)
    safe = np.where(scales > 0, scales, 1.0).astype(np.float32)
    q = np.clip(np.rint(x / safe[:, None]), -127, 127).astype(np.int8)
    return q, scales


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_table(
    folder: str | os.PathLike, rows: np.ndarray, vocab: dict[str, Any], meta: dict[str, Any]
) -> Path:
    """Quantize ``rows`` and write a table at ``folder`` atomically (replacing one there)."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    q, scales = quantize_rows(rows)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        (tmp / "table.i8").write_bytes(np.ascontiguousarray(q).tobytes())
        (tmp / "scales.f32").write_bytes(scales.astype("<f4").tobytes())
        (tmp / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
        meta = dict(meta)
        meta.update(
            format=TABLE_FORMAT,
            vocab_size=int(q.shape[0]),
            dim=int(q.shape[1]),
            sha256={f: _sha256(tmp / f) for f in _FILES},
        )
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True), "utf-8")
        for f in (*_FILES, "meta.json"):
            with open(tmp / f, "rb") as fh:
                os.fsync(fh.fileno())
        if folder.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old.", dir=folder.parent))
            os.replace(folder, old / "t")
            os.replace(tmp, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def load_table(folder: str | os.PathLike, *, verify: bool = True) -> StaticTable:
    """Open the table at ``folder``; with ``verify`` (default) every file's SHA-256 must match
    ``meta.json``, else :class:`~fastrag.errors.StoreError` says which file is damaged."""
    folder = Path(folder)
    fix = "delete the folder and build it again (fastrag embed --build-static MODEL)"
    try:
        meta = json.loads((folder / "meta.json").read_text("utf-8"))
    except FileNotFoundError:
        raise StoreError(f"no static embedding table at {folder} (meta.json is missing)") from None
    except (OSError, ValueError) as exc:
        raise StoreError(f"static table {folder}: meta.json unreadable ({exc}); {fix}") from None
    if not isinstance(meta, dict) or meta.get("format") != TABLE_FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else None
        raise StoreError(
            f"static table {folder} has format {got!r}, this fastrag reads {TABLE_FORMAT}; {fix}"
        )
    n, d = int(meta["vocab_size"]), int(meta["dim"])
    sums = meta.get("sha256") or {}
    for f in _FILES:
        if not (folder / f).is_file():
            raise StoreError(f"static table {folder}: {f} is missing; {fix}")
    for f in _FILES if verify else ():
        if _sha256(folder / f) != sums.get(f):
            raise StoreError(
                f"static table {folder}: {f} is damaged (its SHA-256 differs from meta.json); {fix}"
            )
    expect = {"table.i8": n * d, "scales.f32": 4 * n}
    for f, size in expect.items():
        if (folder / f).stat().st_size != size:
            raise StoreError(f"static table {folder}: {f} has the wrong size; {fix}")
    rows = np.memmap(folder / "table.i8", dtype=np.int8, mode="r", shape=(n, d))
    scales = np.fromfile(folder / "scales.f32", dtype="<f4").astype(np.float32)
    vocab = json.loads((folder / "vocab.json").read_text("utf-8"))
    return StaticTable(path=folder, rows=rows, scales=scales, vocab=vocab, meta=meta)
