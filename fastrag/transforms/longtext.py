"""A long text read from its UTF-8 bytes (a memory-mapped Arrow buffer) like a ``str``, a
window at a time: what the splitters that read long texts (``reads_long_texts``) take instead
of a text that would be 50-200 MB as one ``str``."""

from __future__ import annotations

import bisect
from collections.abc import Callable

import numpy as np

BLOCK = 1 << 16  # bytes per entry of a non-ASCII text's character index
WINDOW = 1 << 16  # characters decoded at a time by find, rfind and isspace
RELEASE_BYTES = 1 << 24  # bytes decoded between two calls of ``release``


class BufferText:
    """A text's UTF-8 bytes in a buffer, read like its ``str``: ``len``, slices and single
    characters (each decoded on its own), ``find``, ``rfind``, ``isspace`` and ``isascii``.
    A text that is not ASCII keeps one character count per :data:`BLOCK` bytes, so a
    character offset finds its byte in one block. ``release`` (a store's ``release_pages``)
    is called after each :data:`RELEASE_BYTES` read, so a mapped text's pages come and go."""

    __slots__ = ("_view", "_bytes", "_n", "_blocks", "_cache", "_release", "_read")

    def __init__(self, view: memoryview, release: Callable[[], object] | None = None) -> None:
        self._view = view
        self._bytes = np.frombuffer(view, dtype=np.uint8)
        self._release = release
        self._read = 0
        counts = [
            int(np.count_nonzero((self._bytes[i : i + BLOCK] & 0xC0) != 0x80))
            for i in range(0, len(self._bytes), BLOCK)
        ]
        self._n = sum(counts)
        # characters before each block (None when ASCII: offsets are byte offsets)
        self._blocks = None if self._n == len(self._bytes) else [0, *np.cumsum(counts).tolist()]
        self._cache: tuple[int, np.ndarray] = (-1, np.zeros(0, np.int64))
        self._touch(len(self._bytes))

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"BufferText({self._n:,} characters, {len(self._bytes):,} bytes)"

    @property
    def utf8(self) -> memoryview:
        """The text's UTF-8 bytes."""
        return self._view

    def isascii(self) -> bool:
        return self._blocks is None

    def __getitem__(self, part: int | slice) -> str:
        if type(part) is slice and part.step is None and self._blocks is None:  # ASCII rows
            start, stop = part.start, part.stop
            if type(start) is int and type(stop) is int and 0 <= start <= stop <= self._n:
                self._touch(stop - start)
                return str(self._view[start:stop], "ascii")
        if isinstance(part, slice):
            start, stop, step = part.indices(self._n)
            if step != 1:
                raise ValueError("a BufferText slices with step 1 only")
        else:
            start = part + self._n if part < 0 else part
            if not 0 <= start < self._n:
                raise IndexError("BufferText index out of range")
            stop = start + 1
        if stop <= start:
            return ""
        lo, hi = self._byte(start), self._byte(stop)
        self._touch(hi - lo)
        return str(self._view[lo:hi], "utf-8")

    def find(self, sub: str, start: int | None = None, end: int | None = None) -> int:
        """As ``str.find``: the first offset of ``sub`` in ``[start, end)``, else -1."""
        start, end, _ = slice(start, end).indices(self._n)
        if not sub:
            return start if start <= end else -1
        step = max(WINDOW, 2 * len(sub))
        i = start
        while end - i >= len(sub):
            j = min(end, i + step)
            k = self[i:j].find(sub)
            if k >= 0:
                return i + k
            if j == end:
                break
            i = j - len(sub) + 1  # a match across the windows' edge is in the next
        return -1

    def rfind(self, sub: str, start: int | None = None, end: int | None = None) -> int:
        """As ``str.rfind``: the last offset of ``sub`` in ``[start, end)``, else -1."""
        start, end, _ = slice(start, end).indices(self._n)
        if not sub:
            return end if start <= end else -1
        step = max(WINDOW, 2 * len(sub))
        j = end
        while j - start >= len(sub):
            i = max(start, j - step)
            k = self[i:j].rfind(sub)
            if k >= 0:
                return i + k
            if i == start:
                break
            j = i + len(sub) - 1
        return -1

    def isspace(self) -> bool:
        return self._n > 0 and all(
            self[i : i + WINDOW].isspace() for i in range(0, self._n, WINDOW)
        )

    def _byte(self, char: int) -> int:
        """The byte offset of character offset ``char`` (0 <= char <= len)."""
        blocks = self._blocks
        if blocks is None:
            return char
        if char >= self._n:
            return len(self._bytes)
        k = bisect.bisect_right(blocks, char) - 1  # the block where that character starts
        cached = self._cache  # one tuple: read and replaced whole
        if cached[0] != k:
            block = self._bytes[k * BLOCK : (k + 1) * BLOCK]
            cached = self._cache = (k, np.flatnonzero((block & 0xC0) != 0x80))
        return k * BLOCK + int(cached[1][char - blocks[k]])

    def _touch(self, n: int) -> None:
        self._read += n
        if self._read >= RELEASE_BYTES and self._release is not None:
            self._read = 0
            self._release()
