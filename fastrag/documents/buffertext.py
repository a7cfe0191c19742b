"""Long parent texts read from their Arrow buffer a window at a time, never as one Python
``str`` (a 50 MB log is 50-200 MB as one): a span transform that reads long texts
(``NodeTransform.reads_long_texts``) finds its spans through them, and every span transform's
child rows are cut from the bytes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from fastrag.transforms.longtext import BufferText

LONG_TEXT = 1 << 20  # UTF-8 bytes from which a parent's text is read from its buffer


def _long_rows(column: pa.ChunkedArray) -> list[tuple[int, memoryview]]:
    """``(row, bytes)`` of each text of ``column`` of at least :data:`LONG_TEXT` bytes."""
    out = []
    row = 0
    for chunk in column.chunks:
        n = len(chunk)
        if n:
            width = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
            offsets = np.frombuffer(chunk.buffers()[1], dtype=width)[chunk.offset :][: n + 1]
            long = np.flatnonzero(np.diff(offsets) >= LONG_TEXT).tolist()
            data = memoryview(chunk.buffers()[2]) if long else None
            for i in long:
                out.append((row + i, data[int(offsets[i]) : int(offsets[i + 1])]))
        row += n
    return out


def read_texts(column: pa.ChunkedArray, release: Callable[[], object] | None = None) -> list:
    """The texts of ``column``: a :class:`BufferText` for each long one (never decoded
    whole), a ``str`` for the others."""
    long = _long_rows(column)
    if not long:
        return column.to_pylist()
    out: list = []
    at = 0
    for row, view in long:
        out += column.slice(at, row - at).to_pylist()
        out.append(BufferText(view, release))
        at = row + 1
    return out + column.slice(at).to_pylist()


def buffer_views(
    texts: list, column: pa.ChunkedArray, release: Callable[[], object] | None = None
) -> int:
    """Replace each ``str`` of ``texts`` (read from ``column``) of at least
    :data:`LONG_TEXT` bytes by a :class:`BufferText` of its bytes; returns how many texts
    are BufferTexts now."""
    views = 0
    for row, view in _long_rows(column):
        if isinstance(texts[row], str):
            texts[row] = BufferText(view, release)
        views += 1
    return views


def text_column(texts: list) -> list | pa.ChunkedArray:
    """``texts`` as they go into a table's text column: a list of ``str``, or, where some are
    :class:`BufferText`, a string column whose chunks of those share their bytes (no copy)."""
    if not any(isinstance(t, BufferText) for t in texts):
        return texts
    chunks, run = [], []
    for t in texts:
        if isinstance(t, BufferText):
            if run:
                chunks.append(pa.array(run, pa.string()))
                run = []
            data = pa.py_buffer(t.utf8)
            ends = pa.py_buffer(np.array([0, data.size], dtype=np.int32))
            chunks.append(pa.Array.from_buffers(pa.string(), 1, [None, ends, data]))
        else:
            run.append(t)
    if run:
        chunks.append(pa.array(run, pa.string()))
    return pa.chunked_array(chunks, pa.string())
