"""Which analyzer fits a corpus: Chinese text gets ``bm25_chinese``, anything else ``bm25``."""

from __future__ import annotations

import re
from collections.abc import Sequence

_LATIN_WORD = re.compile(r"[A-Za-z\u00C0-\u024F]+")
_CJK = re.compile(r"[\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF]")


def detect_language(texts: Sequence[str], sample: int = 400) -> str:
    """"zh" when CJK characters outnumber Latin words in an even sample of ``texts``, else
    "en" (the Latin-script analyzer)."""
    if not texts:
        return "en"
    step = max(1, len(texts) // sample)
    n_cjk = n_words = 0
    for text in texts[::step][:sample]:
        text = text[:4000]
        n_cjk += len(_CJK.findall(text))
        n_words += len(_LATIN_WORD.findall(text))
    return "zh" if n_cjk and n_cjk >= n_words else "en"


def default_similarity(texts: Sequence[str]) -> str:
    """The BM25 similarity for ``texts``' language: ``bm25_chinese`` or ``bm25``."""
    return "bm25_chinese" if detect_language(texts) == "zh" else "bm25"
