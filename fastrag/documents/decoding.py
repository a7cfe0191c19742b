"""Bytes to text: byte-order marks, strict UTF-8, then charset-normalizer's guess, checked.

The order is fixed: a BOM (UTF-8, UTF-16, UTF-32) decides; else strict UTF-8; else NUL bytes
or a known binary signature mean "binary, not text"; else charset-normalizer ranks the
legacy encodings that fit and three rules pick one, or none:

1. **Chinese.** When charset-normalizer's best reading is a CJK encoding, the bytes are valid
   GB18030 and no other CJK reading is less chaotic or clearly more coherent, the answer is
   GB18030 (a superset of GBK and GB2312). charset-normalizer alone calls two GBK characters
   "Big5" and a short GBK CSV "cp949": short CJK inputs are ambiguous and Simplified Chinese is
   the common case for fastrag's users.
2. **Western.** When cp1252 (a superset of Latin-1's printable range) is among the plausible
   readings and the cp1252 text reads like a Western European language (accented letters
   inside mostly ASCII words, no symbols glued inside words), the answer is cp1252.
   charset-normalizer cannot tell cp1250/cp1252/cp1257 apart on such text ("naïve" comes out
   as "naďve" or "naļve") because each decodes it without chaos.
3. **Otherwise** the first of charset-normalizer's readings that is not chaotic, and either
   coherent (a language was recognized) or a multi-byte CJK text of some length, and whose
   text has no symbols glued inside words or case flipping inside words (the marks of a
   wrong code page).

No rule fits: the bytes cannot be decoded with confidence, and :class:`ReaderError` names the
file and the guesses, so nothing is silently mangled. Very short non-Western single-byte texts
(a 10-byte Russian cp1251 line) are refused this way: any of a dozen code pages decodes them.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

from fastrag.errors import ConfigError, ReaderError

SNIFF_BYTES = 8192

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),  # before UTF-16 LE: FF FE 00 00 starts with FF FE
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)

# leading bytes of common binary formats (each holds bytes no text file starts with)
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"PK\x05\x06", "ZIP archive"),
    (b"\x7fELF", "ELF executable"),
    (b"%PDF-", "PDF document"),
    (b"\x1f\x8b", "gzip archive"),
    (b"\xfd7zXZ\x00", "xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
    (b"Rar!\x1a\x07", "RAR archive"),
    (b"SQLite format 3\x00", "SQLite database"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "OLE2 document (.doc/.xls)"),
    (b"ARROW1", "Arrow file"),
    (b"\x93NUMPY", "NumPy array"),
    (b"\xca\xfe\xba\xbe", "Java class or Mach-O binary"),
    (b"\xcf\xfa\xed\xfe", "Mach-O binary"),
)
_CONTROL = bytes(b for b in range(32) if b not in b"\t\n\v\f\r\x1b")

_CJK = frozenset(
    {
        "gb18030",
        "gbk",
        "gb2312",
        "hz",
        "big5",
        "big5hkscs",
        "cp950",
        "cp949",
        "euc_kr",
        "johab",
        "cp932",
        "shift_jis",
        "shift_jis_2004",
        "shift_jisx0213",
        "euc_jp",
        "euc_jis_2004",
        "euc_jisx0213",
    }
)
_CHECK_CHARS = 200_000  # the text checks look at this much of a long text
_ALPHA = "A-Za-z\u00c0-\u024f\u0370-\u03ff\u0400-\u052f"  # Latin, Greek, Cyrillic letters
# a symbol between two letters ("Za¿ó³æ": Polish cp1250 read as cp1252); general punctuation
# (’ – …), the middle dot and the soft hyphen are fine there
_GLUED = re.compile(f"[{_ALPHA}][^\\w\\s\\x00-\\x7f\u2000-\u206f\u00b7\u00ad][{_ALPHA}]")
_PAIR = re.compile(r"(?=([^\W\d_])([^\W\d_]))")  # overlapping letter pairs
_LETTER = re.compile(r"[^\W\d_]")
_WIDE_LETTER = re.compile(r"[^\W\d_\x00-\x7f]")
_WIDE_RUN = re.compile(r"[^\W\d_\x00-\x7f]{3,}")


class BinaryContentError(ReaderError):
    """The bytes are binary (NUL bytes, a binary format's signature), not text."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def binary_kind(sample: bytes) -> str | None:
    """What binary ``sample`` (a file's first bytes) looks like, or None when it may be text:
    a known signature, NUL bytes (outside a UTF-16/32 BOM), or many control bytes."""
    if sample.startswith(tuple(bom for bom, _ in _BOMS)):
        return None
    for magic, kind in _MAGIC:
        if sample.startswith(magic):
            return kind
    if b"\x00" in sample:
        return "NUL bytes"
    if sample and len(sample) - len(sample.translate(None, _CONTROL)) > 0.1 * len(sample):
        return "control bytes"
    return None


def why_not_text(sample: bytes, truncated: bool) -> str | None:
    """None when ``sample`` (a file's first bytes, ``truncated`` when the file is longer)
    decodes as text; else why not ("PNG image", "NUL bytes", "undecodable")."""
    kind = binary_kind(sample)
    if kind is not None:
        return kind
    # a truncated sample may end inside a multi-byte character: try without its last bytes
    for cut in range(4 if truncated else 1):
        try:
            decode_text(sample[: len(sample) - cut])
        except ReaderError:
            continue
        return None
    return "undecodable"


def decode_bytes(data: bytes, path: Any = None) -> str:
    """Text of ``data`` (see :func:`decode_text`)."""
    return decode_text(data, path)[0]


def decode_text(data: bytes, path: Any = None) -> tuple[str, str]:
    """``(text, encoding)`` of ``data``; ``encoding`` is a Python codec name that decodes it
    exactly ("utf-8", "utf-8-sig", "utf-16", "gb18030", "cp1252", ...).

    Raises :class:`BinaryContentError` (a :class:`ReaderError`) naming ``path`` for binary
    bytes, and :class:`ReaderError` when no encoding fits with confidence.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ConfigError(f"decode_bytes takes bytes, got {type(data).__name__}")
    data = bytes(data)
    where = f" {str(path)!r}" if path is not None else ""
    for bom, enc in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(enc), enc
            except UnicodeDecodeError as exc:
                if enc == "utf-32" and data.startswith(codecs.BOM_UTF16_LE):
                    continue  # a UTF-16 LE BOM followed by U+0000
                raise ReaderError(
                    f"file{where} starts with a {enc.upper()} byte-order mark "
                    f"but is not valid {enc.upper()} ({exc}); re-save it as "
                    "UTF-8"
                ) from exc
    kind = binary_kind(data[:SNIFF_BYTES])
    if kind is None and b"\x00" in data:
        kind = "NUL bytes"
    if kind is not None and kind != "control bytes":
        raise BinaryContentError(
            f"file{where} looks binary ({kind}), not text; convert it to "
            "UTF-8 text or register a reader for its extension",
            kind,
        )
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as exc:
        utf8_error = exc
    enc, guesses = _guess_legacy(data)
    if enc is None:
        raise ReaderError(
            f"cannot decode file{where}: not UTF-8 ({utf8_error}) and no other encoding fits "
            f"with confidence (charset-normalizer's guesses: {', '.join(guesses) or 'none'}); "
            "re-save it as UTF-8, or pass on_error='skip' to skip it"
        )
    return data.decode(enc), enc


def plain_utf8(data: bytes) -> bool:
    """Whether :func:`decode_text` reads ``data`` as plain UTF-8 (no byte-order mark, not
    binary, valid UTF-8): its text is then exactly these bytes, checked a MiB at a time
    without decoding them whole."""
    if data.startswith(tuple(bom for bom, _ in _BOMS)) or b"\x00" in data:
        return False
    if binary_kind(data[:SNIFF_BYTES]) not in (None, "control bytes"):
        return False
    check = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for i in range(0, len(view), 1 << 20):
            check.decode(view[i : i + (1 << 20)])
        check.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _is_cjk(enc: str) -> bool:
    return enc in _CJK or enc.startswith("iso2022")


def _misread(text: str) -> bool:
    """Whether ``text`` shows the marks of a wrong single-byte code page: symbols glued
    inside words, or letters flipping from lower to upper case inside words."""
    text = text[:_CHECK_CHARS]
    wide = sum(1 for c in text if c > "\x7f") or 1
    if len(_GLUED.findall(text)) > 0.01 * wide:
        return True
    flips = sum(
        1
        for a, b in _PAIR.findall(text)
        if (a > "\x7f" or b > "\x7f") and a.islower() and b.isupper()
    )
    return flips > 0.02 * wide


def _reads_western(text: str) -> bool:
    """Accented letters inside mostly-ASCII words, as in French, German, Spanish: at most half
    the letters are non-ASCII, few come in runs of three or more (GBK read as cp1252
    does), and nothing looks misread."""
    sample = text[:_CHECK_CHARS]
    letters = len(_LETTER.findall(sample))
    wide = len(_WIDE_LETTER.findall(sample))
    if wide > 0.5 * letters:
        return False
    if sum(len(r) for r in _WIDE_RUN.findall(sample)) > 0.25 * wide:
        return False
    return not _misread(sample)


def _decodes(data: bytes, enc: str) -> bool:
    try:
        data.decode(enc)
    except UnicodeDecodeError:
        return False
    return True


def _guess_legacy(data: bytes) -> tuple[str | None, list[str]]:
    """The legacy encoding of ``data`` by the module's three rules, or None; and
    charset-normalizer's guesses (for the error message)."""
    from charset_normalizer import from_bytes

    # UTF-16/32 without a BOM would hold NUL bytes, which were refused before
    matches = [m for m in from_bytes(data) if not m.encoding.startswith(("utf_16", "utf_32"))]
    guesses = [m.encoding for m in matches[:5]]
    if not matches:
        return None, guesses
    readings: dict[str, Any] = {}  # every encoding that decodes to a match's text
    for m in matches:
        for enc in m.could_be_from_charset:
            readings.setdefault(enc, m)
    best = matches[0]
    # 1. Chinese
    gb = readings.get("gb18030")
    if gb is not None and any(_is_cjk(e) for e in best.could_be_from_charset):
        rivals = [m for e, m in readings.items() if _is_cjk(e)]
        if all(
            gb.chaos <= m.chaos + 0.01 and gb.coherence >= m.coherence - 0.1 for m in rivals
        ) and _decodes(data, "gb18030"):
            return "gb18030", guesses
    # 2. Western
    west = readings.get("cp1252")
    # charset-normalizer's coherence (a language model over letter frequencies) often ranks
    # iso8859-x first for short Western text; chaos plus the text checks decide instead
    if (
        west is not None
        and (
            west.coherence >= max(m.coherence for m in matches) - 0.2
            or west.chaos <= min(m.chaos for m in matches) + 0.01
        )
        and _decodes(data, "cp1252")
        and _reads_western(data.decode("cp1252"))
    ):
        return "cp1252", guesses
    # 3. a confident reading
    for m in matches:
        if m.chaos > 0.15:
            continue
        text = str(m)
        long_cjk = _is_cjk(m.encoding) and sum(1 for c in text[:1000] if c > "\x7f") >= 10
        if (m.coherence >= 0.2 or long_cjk) and not _misread(text):
            return m.encoding, guesses
    return None, guesses
