"""Traditional Chinese for the default analyzer: which texts read as Traditional, and each
Han character's Simplified form, one for one.

jieba's dictionary is Simplified Chinese, so it cuts Traditional text badly (``資料夾`` is
unknown; ``在空資料夾裡`` becomes ``空資料, 夾裡``). ``bm25``'s ``han_traditional`` says what
a text that reads as Traditional gets instead: ``"bigrams"`` (the default) its Han runs as
characters and overlapping pairs, as ``bm25_cjk``; ``"simplified"`` jieba's cut of its
characters' Simplified forms, the tokens keeping the text's own characters (the table maps
one character to one character, so every span of the converted text is a span of the
original).

The table (``data/han_t2s.txt``) is OpenCC's character conversions (``t2s`` and ``s2t``,
Apache License 2.0) over the Han range jieba segments, written by :func:`build_table`. A text
reads as Traditional when it holds more characters that only Traditional writes (``資``,
``夾``) than characters that only Simplified writes (``资``, ``们``), and no kana: Japanese
writes many of the same characters (``東``, ``語``) and is cut by MeCab.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np

__all__ = [
    "HAN_HI",
    "HAN_LO",
    "build_table",
    "han_tables",
    "is_traditional",
    "segmentation_view",
    "table_tag",
    "to_simplified",
    "traditional_han",
]

HAN_LO, HAN_HI = 0x4E00, 0x9FD5  # the Han range jieba segments (the default analyzer's too)
# kana letters (hiragana, katakana, their phonetic extensions, halfwidth katakana): a text
# holding one is not Traditional Chinese (the middle dot U+30FB and U+30FC are not letters)
KANA_LETTERS = ((0x3041, 0x3096), (0x30A1, 0x30FA), (0x31F0, 0x31FF), (0xFF66, 0xFF9D))
_KANA = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in KANA_LETTERS) + "]")
TABLE = Path(__file__).resolve().parent / "data" / "han_t2s.txt"


@functools.lru_cache(maxsize=1)
def han_tables() -> SimpleNamespace:
    """``t2s`` (uint32 code point of each Han character's Simplified form, indexed from
    ``HAN_LO``), ``evidence`` (int8: +1 a character only Traditional writes, -1 one only
    Simplified writes), ``trans`` (a ``str.translate`` table) and ``tag`` (the table's
    source, part of the analyzer's identity)."""
    lines = TABLE.read_text(encoding="utf-8").splitlines()
    tag = lines[0].removeprefix("# ").split(";")[0].strip()
    pairs = lines[1].removeprefix("t2s ")
    simplified = lines[2].removeprefix("simplified ")
    size = HAN_HI - HAN_LO + 1
    t2s = np.arange(HAN_LO, HAN_HI + 1, dtype=np.uint32)
    evidence = np.zeros(size, dtype=np.int8)
    trans = {}
    for t, s in zip(pairs[0::2], pairs[1::2], strict=True):
        t2s[ord(t) - HAN_LO] = ord(s)
        evidence[ord(t) - HAN_LO] = 1
        trans[ord(t)] = s
    for s in simplified:
        evidence[ord(s) - HAN_LO] = 0 if evidence[ord(s) - HAN_LO] else -1
    t2s.setflags(write=False)
    evidence.setflags(write=False)
    return SimpleNamespace(t2s=t2s, evidence=evidence, trans=trans, tag=tag)


def table_tag() -> str:
    """Where the table came from (``opencc-1.4.2-chars``)."""
    return han_tables().tag


def traditional_han(cps: np.ndarray, doc_off: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Positions (int64, ascending) of the Han characters jieba would cut (not in a run with
    kana, Thai, ...: ``wordseg`` cuts those) in the texts of ``cps`` (texts joined,
    ``doc_off`` their offsets, as ``texts_to_codepoints``) that read as Traditional Chinese
    (:func:`is_traditional`); ``classes``: the default analyzer's ``mixed_classes()``."""
    from fastrag._kernels.mixed import traditional_han as kernel  # lazy: numba

    return kernel(cps, doc_off, classes, han_tables().evidence, HAN_LO, _kana_ranges())


@functools.lru_cache(maxsize=1)
def _kana_ranges() -> np.ndarray:
    out = np.asarray(KANA_LETTERS, dtype=np.int64)
    out.setflags(write=False)
    return out


def segmentation_view(cps: np.ndarray, doc_off: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """``cps`` with the Han characters of each text that reads as Traditional replaced by
    their Simplified forms (:func:`traditional_han`); ``cps`` itself when no text changes."""
    pos = traditional_han(cps, doc_off, classes)
    if not pos.size:
        return cps
    out = cps.copy()
    out[pos] = han_tables().t2s[cps[pos] - HAN_LO]
    return out


def is_traditional(text: str) -> bool:
    """Whether ``text`` holds more Traditional-only than Simplified-only Han characters, and
    no kana."""
    evidence = han_tables().evidence
    votes = sum(int(evidence[ord(c) - HAN_LO]) for c in text if HAN_LO <= ord(c) <= HAN_HI)
    return votes > 0 and not _KANA.search(text)


def to_simplified(text: str) -> str:
    """``text`` with every Han character in the table replaced by its Simplified form."""
    return text.translate(han_tables().trans)


def build_table(path: Path = TABLE) -> int:
    """Write the table from the installed OpenCC (``pip install opencc``); returns the number
    of Traditional characters. The shipped file was written this way."""
    import opencc  # a maintainer's tool: the analyzer reads the file, never OpenCC

    t2s, s2t = opencc.OpenCC("t2s"), opencc.OpenCC("s2t")
    pairs, simplified = [], []
    for c in range(HAN_LO, HAN_HI + 1):
        ch = chr(c)
        s = t2s.convert(ch)
        if s != ch and len(s) == 1 and HAN_LO <= ord(s) <= HAN_HI:
            pairs.append(ch + s)
        if s2t.convert(ch) != ch:
            simplified.append(ch)
    header = (
        f"# opencc-{opencc.__version__}-chars; OpenCC (https://github.com/BYVoid/OpenCC, "
        "Apache License 2.0) t2s/s2t of each character, written by "
        "fastrag.analysis.hant.build_table"
    )
    body = f"{header}\nt2s {''.join(pairs)}\nsimplified {''.join(simplified)}\n"
    path.write_text(body, encoding="utf-8")
    return len(pairs)
