"""Stopword lists: the shipped ones (``data/stopwords_*.txt``) and user-given sets."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from importlib import resources
from typing import Any

from fastrag.errors import ConfigError

__all__ = ["DEFAULT", "load_stopwords", "resolve_stopwords", "stopwords_option"]

# Marks "use the analyzer's shipped stopword list" (distinct from None = no stopwords).
DEFAULT = "default"


_SHIPPED = {
    "zh": "stopwords_zh.txt",
    "en": "stopwords_en.txt",
    "en_nltk": "stopwords_en_nltk.txt",
}


@functools.cache
def load_stopwords(lang: str) -> frozenset[str]:
    """A shipped stopword list: ``"zh"`` (841 Chinese words), ``"en"`` (Lucene's 33 English
    words) or ``"en_nltk"`` (NLTK's 179 English words)."""
    if lang not in _SHIPPED:
        raise ConfigError(
            f"no shipped stopword list {lang!r}; shipped lists: {', '.join(sorted(_SHIPPED))}"
        )
    text = resources.files("fastrag.analysis").joinpath("data", _SHIPPED[lang]).read_text("utf-8")
    return frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


def resolve_stopwords(
    stopwords: Any, default_langs: tuple[str, ...], *, lowercase: bool = True
) -> frozenset[str]:
    """``"default"`` -> the shipped lists; None/False -> none; a language code or an iterable
    of str -> that set (lowercased when the analyzer lowercases)."""
    if stopwords is None or stopwords is False:
        return frozenset()
    if isinstance(stopwords, str):
        langs = default_langs if stopwords == DEFAULT else tuple(stopwords.split("+"))
        out: set[str] = set()
        for lang in langs:
            out |= load_stopwords(lang)
        return frozenset(out)
    if isinstance(stopwords, Iterable):
        words = list(stopwords)
        bad = [w for w in words if not isinstance(w, str)]
        if bad:
            raise ConfigError(
                f"stopwords must be strings, got {bad[0]!r} ({type(bad[0]).__name__})"
            )
        return frozenset(w.lower() if lowercase else w for w in words)
    raise ConfigError(
        f"stopwords must be 'default', None, a shipped list name ('zh', 'en', 'zh+en') or an "
        f"iterable of str; got {stopwords!r}"
    )


def stopwords_option(stopwords: frozenset[str], default: frozenset[str]) -> Any:
    """How a stopword set appears in ``options()``: 'default', None, or a short digest."""
    if stopwords == default:
        return DEFAULT
    if not stopwords:
        return None
    digest = hashlib.sha1("\n".join(sorted(stopwords)).encode("utf-8")).hexdigest()[:16]
    return f"custom:{len(stopwords)}:{digest}"
