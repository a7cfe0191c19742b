"""Checksums per 1 MiB chunk of a large store file, verified on first use of a chunk.

A store checksums a file below ``VERIFY_BELOW`` bytes whole on every read; reading a larger
one whole on every open would cost what memory-mapping saves. For those, the writer records
an xxh3 digest per chunk and a reader verifies the chunks a search is about to read, each once
per process: damage is caught before it is used, and opening stays O(1).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import xxhash

from fastrag.errors import StoreError

CHUNK = 1 << 20
_HEX = 16  # hex digits of one xxh3_64 digest


def file_digests(path: Path) -> tuple[str, str]:
    """``path``'s whole-file xxh3_64 digest (a manifest's ``checksum``) and its chunk record
    (``chunks``): ``"<chunk bytes>:"`` then the digest of each consecutive chunk, in one read."""
    chunk = CHUNK
    whole = xxhash.xxh3_64()
    out = [f"{chunk}:"]
    with open(path, "rb") as f:
        for piece in iter(lambda: f.read(chunk), b""):
            whole.update(piece)
            out.append(xxhash.xxh3_64(piece).hexdigest())
    return whole.hexdigest(), "".join(out)


class ChunkCheck:
    """Verifies byte ranges of one file against its recorded chunk digests (thread-safe;
    each chunk is read and hashed at most once per instance)."""

    def __init__(self, path: Path, record: str, size: int) -> None:
        head, _, digests = record.partition(":")
        chunk = int(head) if head.isdigit() else 0
        n = (size + chunk - 1) // chunk if chunk > 0 else -1
        if chunk <= 0 or len(digests) != n * _HEX:
            raise StoreError(
                f"the chunk checksums recorded for {str(path)!r} do not match its size "
                f"({len(digests) // _HEX} digests for chunks of {head!r} bytes); the store's "
                "manifest is damaged"
            )
        self.path = Path(path)
        self.chunk = chunk
        self.size = size
        self._digests = digests
        self._done = np.zeros(n, dtype=bool)
        self._lock = threading.Lock()

    @property
    def n_verified(self) -> int:
        """Chunks verified so far."""
        return int(self._done.sum())

    def ensure(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Verify every chunk that a byte range ``[lo[i], hi[i])`` overlaps (empty ranges
        ignored) and has not been verified yet; StoreError naming the file and the byte
        offset of the first damaged chunk."""
        lo = np.asarray(lo, dtype=np.int64).reshape(-1)
        hi = np.asarray(hi, dtype=np.int64).reshape(-1)
        keep = hi > lo
        if not keep.any():
            return
        c_lo = np.clip(lo[keep] // self.chunk, 0, self._done.shape[0] - 1)
        c_hi = np.clip((hi[keep] - 1) // self.chunk, 0, self._done.shape[0] - 1)
        cover = np.zeros(self._done.shape[0] + 1, np.int64)
        np.add.at(cover, c_lo, 1)
        np.add.at(cover, c_hi + 1, -1)
        need = np.flatnonzero((np.cumsum(cover[:-1]) > 0) & ~self._done)
        if need.size == 0:
            return
        with self._lock:
            need = need[~self._done[need]]
            if need.size == 0:
                return
            with open(self.path, "rb") as f:
                for c in need.tolist():
                    f.seek(c * self.chunk)
                    got = xxhash.xxh3_64(f.read(self.chunk)).hexdigest()
                    if got != self._digests[c * _HEX : (c + 1) * _HEX]:
                        raise StoreError(
                            f"store file {str(self.path)!r} fails its checksum in bytes "
                            f"{c * self.chunk}-{min(self.size, (c + 1) * self.chunk)}: it is "
                            "damaged"
                        )
                    self._done[c] = True
