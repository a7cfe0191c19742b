"""Bounded inflation: what a reader decompresses from a user's file stops at a cap set by the
file's size, checked while inflating, never after.

One :class:`InflateBudget` per file is spent by all of its compressed parts: draw.io's packed
pages (raw deflate), a DOCX's ZIP members, a PDF's streams (pypdf), a ``.json.gz`` data set.
The cap is :func:`inflate_cap`: ``INFLATE_RATIO`` times the file's size, at least
``INFLATE_FLOOR``, at most ``INFLATE_CEILING``:

* documents inflate 5-20x (XML parts of a DOCX, draw.io's URL-encoded XML, PDF content and
  object streams; images and fonts hardly compress); 100x leaves 5x room above that, while
  deflate reaches about 1,000x on a bomb (a 1.36 MB draw.io page inflated to 1 GB);
* a small file may always inflate to 16 MiB: a tiny file of very repetitive markup is no
  threat at that size;
* no file inflates past 1 GiB: at 100x a 50 MiB upload could otherwise ask for 5 GiB, and
  no genuine document holds a gigabyte of text or markup.

The caps are module globals read at each call: a user with genuine files past them may raise
them (``fastrag.documents.inflate.INFLATE_RATIO = 200``).
"""

from __future__ import annotations

import functools
import io
import struct
import threading
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from pathlib import Path
from typing import Any, BinaryIO

from fastrag.errors import ReaderError

__all__ = [
    "INFLATE_CEILING",
    "INFLATE_FLOOR",
    "INFLATE_RATIO",
    "InflateBudget",
    "InflateLimitError",
    "check_zip",
    "inflate_cap",
    "pypdf_budget",
]

INFLATE_RATIO = 100
INFLATE_FLOOR = 16 << 20
INFLATE_CEILING = 1 << 30
CHUNK = 1 << 20  # inflated a piece at a time: the most held beyond what the budget counts


class InflateLimitError(ReaderError):
    """A file's compressed data inflates past its cap (a decompression bomb, or a file far
    more compressed than documents are)."""


def inflate_cap(size: int) -> int:
    """The most bytes a file of ``size`` bytes may inflate to, all its parts together."""
    return min(INFLATE_CEILING, max(INFLATE_FLOOR, INFLATE_RATIO * size))


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n < (1 << 30) else f"{n / (1 << 30):.1f} GiB"


class InflateBudget:
    """The bytes one file may inflate to (:func:`inflate_cap` of ``size``), spent by each of
    its compressed parts in turn."""

    def __init__(self, path: Path | str, size: int) -> None:
        self.path = path
        self.size = size
        self.cap = inflate_cap(size)
        self.used = 0

    @property
    def left(self) -> int:
        return self.cap - self.used

    def error(self, where: str, over: str = "", fix: str = "") -> InflateLimitError:
        """The refusal: ``where`` says which part passed the cap ("diagram page 2");
        ``over`` and ``fix`` replace the words for another limit passed."""
        over = over or (
            f"inflates to more than {_mib(self.cap)} ({where}), the cap for a file of its "
            f"size ({INFLATE_RATIO}x its size, at least {_mib(INFLATE_FLOOR)}, at most "
            f"{_mib(INFLATE_CEILING)})"
        )
        fix = fix or (
            "split it into smaller files or raise INFLATE_RATIO / INFLATE_CEILING in "
            "fastrag.documents.inflate"
        )
        return InflateLimitError(
            f"file {str(self.path)!r} ({_mib(self.size)}) {over}; it looks like a "
            f"decompression bomb and was not read. If it is genuine, {fix}"
        )

    def spend(self, n: int, where: str) -> None:
        """Count ``n`` inflated bytes; raise :class:`InflateLimitError` past the cap."""
        self.used += n
        if self.used > self.cap:
            raise self.error(where)

    def inflate(self, data: bytes, wbits: int, where: str) -> bytes:
        """``data`` inflated (``wbits`` as :func:`zlib.decompressobj`), stopping at what is
        left of the budget; a truncated stream gives what it holds, bad data
        :class:`zlib.error`."""
        d = zlib.decompressobj(wbits)
        out = d.decompress(data, max(self.left, 0) + 1)  # one byte more tells "over"
        self.spend(len(out), where)
        return out  # all input consumed below max_length: nothing is left in zlib

    def read(self, f: BinaryIO, where: str) -> bytes:
        """All of ``f`` (a decompressing file object, e.g. :class:`gzip.GzipFile`), read
        :data:`CHUNK` bytes at a time and counted."""
        out = bytearray()
        while chunk := f.read(CHUNK):
            self.spend(len(chunk), where)
            out += chunk
        return bytes(out)


# -- ZIP containers (DOCX) --------------------------------------------------------------------
def check_zip(data: bytes, budget: InflateBudget) -> None:
    """Refuse a ZIP (``data``) whose members would inflate past ``budget``, before a library
    such as python-docx reads it.

    The members' declared sizes are checked first (free); then each deflated member is
    inflated a :data:`CHUNK` at a time and counted, because declared sizes can lie:
    ``ZipFile.read`` inflates all of a member's compressed bytes in one call and only then
    cuts the output to the declared size, so a member declaring 1 KB may take gigabytes.
    Only stored and deflated members are accepted (what Office writes): zipfile inflates
    bzip2 and LZMA members without any output bound. Raises :class:`InflateLimitError`, or
    :class:`ReaderError`; a damaged archive raises :class:`zipfile.BadZipFile` or
    :class:`zlib.error`.
    """
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
    for info in infos:
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ReaderError(
                f"file {str(budget.path)!r}: member {info.filename!r} uses ZIP compression "
                f"method {info.compress_type}; only stored (0) and deflated (8) members are "
                "read (what Office writes); re-save the file from its application"
            )
    declared = sum(i.file_size for i in infos)
    if declared > budget.left:
        raise budget.error(f"its {len(infos)} members declare {_mib(declared)}")
    for info in infos:
        where = f"member {info.filename!r}"
        if info.compress_type == zipfile.ZIP_STORED:  # read as is: at most its own bytes
            budget.spend(min(info.file_size, info.compress_size), where)
            continue
        n = _inflated_size(_raw_member(data, info), min(info.file_size, budget.left))
        if n > info.file_size:
            raise budget.error(
                where,
                f"has a {where} inflating past the {info.file_size} bytes it declares, "
                "which no sound ZIP does",
                "re-save it from the application that wrote it",
            )
        budget.spend(n, where)


def _raw_member(data: bytes, info: zipfile.ZipInfo) -> memoryview:
    """The compressed bytes of a ZIP member, found by its local header."""
    at = info.header_offset
    head = data[at : at + 30]
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"member {info.filename!r} has no local header at {at}")
    name_len, extra_len = struct.unpack("<2H", head[26:30])
    start = at + 30 + name_len + extra_len
    return memoryview(data)[start : start + info.compress_size]


def _inflated_size(raw: memoryview, stop: int) -> int:
    """The bytes raw deflate ``raw`` inflates to, counted a :data:`CHUNK` at a time (none
    kept); counting stops once past ``stop``."""
    d = zlib.decompressobj(-15)
    n = 0
    for at in range(0, len(raw), 1 << 16):  # 64 KiB of input a time: its tail copies are small
        piece: bytes | memoryview = raw[at : at + (1 << 16)]
        while piece and n <= stop:
            n += len(d.decompress(piece, CHUNK))
            piece = d.unconsumed_tail
        if n > stop or d.eof:
            break
    return n


# -- PDF streams (pypdf) ----------------------------------------------------------------------
_PDF_BUDGET: ContextVar[InflateBudget | None] = ContextVar("fastrag_pdf_budget", default=None)
_PDF_LIMITS = (  # pypdf's per-stream output limits (pypdf.Configuration, pypdf >= 7)
    "zlib_maximum_output_length",
    "lzw_maximum_output_length",
    "run_length_maximum_output_length",
    "brotli_maximum_output_length",
    "array_based_stream_maximum_output_length",
)
_hook_lock = threading.Lock()


def _budgeted(decode: Any, pypdf: Any) -> Any:
    """pypdf's ``decode_stream_data`` charging each stream to the :class:`InflateBudget` of
    the read in progress (none: unchanged), its output limits lowered to what is left."""
    import pypdf.errors

    limit_reached = getattr(pypdf.errors, "LimitReachedError", ())  # () catches nothing

    @functools.wraps(decode)
    def decode_stream_data(stream: Any) -> bytes:
        budget = _PDF_BUDGET.get()
        if budget is None:
            return decode(stream)
        if budget.left <= 0:  # pypdf reads a limit of 0 as "no limit"
            raise budget.error("its streams")
        limits: Any = nullcontext()
        stream_limit = 0  # pypdf's own limit, when it is below what is left
        if hasattr(pypdf, "apply_configuration"):
            config = pypdf.get_configuration()
            now = {k: getattr(config, k) for k in _PDF_LIMITS if hasattr(config, k)}
            new = {k: budget.left if v <= 0 else min(v, budget.left) for k, v in now.items()}
            zlib_limit = now.get("zlib_maximum_output_length", 0)
            stream_limit = zlib_limit if 0 < zlib_limit < budget.left else 0
            limits = pypdf.apply_configuration(**new)
        try:
            with limits:
                data = decode(stream)
        except limit_reached as exc:
            if str(exc).startswith("Limit reached while decompressing"):
                if not stream_limit:
                    raise budget.error("its streams") from None
                raise budget.error(
                    "a stream",
                    f"holds a stream inflating past {_mib(stream_limit)}, pypdf's limit for "
                    "one stream",
                    "raise it with pypdf.overwrite_configuration(zlib_maximum_output_length=...)",
                ) from None
            raise
        budget.spend(len(data), "its streams")
        return data

    decode_stream_data.fastrag_budgeted = True
    return decode_stream_data


@contextmanager
def pypdf_budget(pypdf: Any, budget: InflateBudget) -> Iterator[None]:
    """Within the block, every stream pypdf decodes (content, object, xref streams, fonts)
    in this thread or task is charged to ``budget``, and each is inflated no further than
    what is left (pypdf's own per-stream limits, 75 MB in pypdf 7, still hold).

    pypdf limits each stream but not a file: 20 pages of 70 MB content streams, 1.46 MB of
    PDF, took 1.6 GB (decoded streams stay cached on the reader). Installs, once, a wrapper
    around ``pypdf.filters.decode_stream_data``; reads outside this block are unchanged.
    """
    import pypdf.filters as filters

    with _hook_lock:
        if not getattr(filters.decode_stream_data, "fastrag_budgeted", False):
            filters.decode_stream_data = _budgeted(filters.decode_stream_data, pypdf)
    token = _PDF_BUDGET.set(budget)
    try:
        yield
    finally:
        _PDF_BUDGET.reset(token)
