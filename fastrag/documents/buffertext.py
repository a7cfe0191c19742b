"""Long parent texts read from their Arrow buffer a chunk at a time: once a span transform has
found its spans, the parent need not stay a Python ``str`` (a 50 MB log's text is 50 MB as one)
while its child rows are made."""

from __future__ import annotations

import bisect

import numpy as np
import pyarrow as pa

LONG_TEXT = 1 << 20  # characters from which a parent's text is read from its buffer


class BufferText:
    """A text's UTF-8 bytes in an Arrow buffer, sliced like the str at the character offsets
    given (``bounds``, sorted; None for an ASCII text, whose character offsets are its byte
    offsets): each slice is decoded on its own. Slicing elsewhere raises ValueError."""

    __slots__ = ("_view", "_chars", "_bytes", "_n")

    def __init__(
        self, view: memoryview, n_chars: int, bounds: tuple[np.ndarray, np.ndarray] | None
    ) -> None:
        self._view = view
        self._n = n_chars
        self._chars, self._bytes = bounds if bounds is not None else (None, None)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, part: slice) -> str:
        if self._chars is None:
            return str(self._view[part], "ascii")
        start, stop = part.start or 0, self._n if part.stop is None else part.stop
        i, j = np.searchsorted(self._chars, (start, stop))
        if (
            part.step is not None
            or j >= len(self._chars)
            or self._chars[i] != start
            or self._chars[j] != stop
        ):
            raise ValueError(f"slice [{start}:{stop}] is not at the offsets this text was made for")
        return str(self._view[self._bytes[i] : self._bytes[j]], "utf-8")


def buffer_views(texts: list, spans: list[list[tuple[int, int]]], column: pa.ChunkedArray) -> int:
    """Replace each text of ``texts`` of at least :data:`LONG_TEXT` characters by a
    :class:`BufferText` of its bytes in ``column`` (the column ``texts`` was read from) that
    can be sliced at its ``spans``; returns how many were replaced."""
    long = [i for i, t in enumerate(texts) if len(t) >= LONG_TEXT]
    if not long:
        return 0
    starts = np.cumsum([0] + [len(chunk) for chunk in column.chunks])
    for i in long:
        c = bisect.bisect_right(starts, i) - 1  # the last chunk starting at or before row i
        chunk, k = column.chunks[c], i - int(starts[c])
        width = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
        offsets = np.frombuffer(chunk.buffers()[1], dtype=width)
        lo, hi = int(offsets[chunk.offset + k]), int(offsets[chunk.offset + k + 1])
        text = texts[i]
        bounds = None if text.isascii() else byte_bounds(text, spans[i])
        texts[i] = BufferText(memoryview(chunk.buffers()[2])[lo:hi], len(text), bounds)
    return len(long)


def byte_bounds(text: str, spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The sorted character offsets of ``spans``' ends and their byte offsets in ``text``'s
    UTF-8."""
    chars = np.unique(np.fromiter((x for span in spans for x in span), np.int64))
    out = np.empty_like(chars)
    pos = at = 0
    for n, c in enumerate(chars.tolist()):
        piece = text[pos:c]
        at += len(piece) if piece.isascii() else len(piece.encode("utf-8"))
        out[n], pos = at, c
    return chars, out
