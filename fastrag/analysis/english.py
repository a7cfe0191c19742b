"""``bm25_english``: the English-only analyzer (lowercase, ``\\w+`` words, stopwords,
Snowball stemming when PyStemmer is installed)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from fastrag._checks import check_str
from fastrag.analysis.base import Analyzer
from fastrag.analysis.stopwords import DEFAULT, load_stopwords, resolve_stopwords, stopwords_option
from fastrag.errors import ConfigError, missing_extra

_WORD = re.compile(r"\w+")

AUTO = "auto"
#: Distinct words whose stems an analyzer memoises (a fresh memo when full)
STEM_CACHE = 1 << 18


def default_stemmer() -> str | None:
    """What ``stemmer="auto"`` means here: ``"english"`` when PyStemmer imports (it is a core
    dependency), else None (no stemming, no error)."""
    try:
        import Stemmer  # noqa: F401  (PyStemmer)
    except ImportError:
        return None
    return "english"


MINIMAL = "minimal"


class PluralStemmer:
    """English plurals to the singular and nothing else (Harman's S-stemmer, 1991): ``-ies``
    to ``-y`` (not ``-eies``, ``-aies``), ``-es`` to ``-e`` (not ``-aes``, ``-ees``,
    ``-oes``), ``-s`` dropped (not ``-us``, ``-ss``); words under three letters kept.
    ``stemWords`` as PyStemmer's stemmers. Stateless (safe across threads)."""

    def stemWords(self, words: list[str]) -> list[str]:  # noqa: N802 (PyStemmer's name)
        return [_plural(w) for w in words]


def _plural(w: str) -> str:
    if len(w) < 3 or w[-1] != "s":
        return w
    if w.endswith("ies") and len(w) > 3 and not w.endswith(("eies", "aies")):
        return w[:-3] + "y"
    if w.endswith("es") and not w.endswith(("aes", "ees", "oes")):
        return w[:-1]
    if w.endswith(("us", "ss")):
        return w
    return w[:-1]


def make_stemmer(language: str):
    """PyStemmer's Snowball stemmer of ``language``, or :class:`PluralStemmer` for
    ``"minimal"``."""
    if language == MINIMAL:
        return PluralStemmer()
    try:
        import Stemmer  # PyStemmer
    except ImportError:
        raise missing_extra("PyStemmer", "stem", f"stemmer={language!r}") from None
    try:
        return Stemmer.Stemmer(language)
    except KeyError:
        raise ConfigError(
            f"unknown Snowball stemmer language {language!r}; known: "
            f"{', '.join(sorted(Stemmer.algorithms()))}, or {MINIMAL!r} (plurals only)"
        ) from None


class EnglishAnalyzer(Analyzer):
    """Lowercase, split into ``\\w+`` words, drop stopwords, Snowball-stem.

    ``stopwords``: ``"default"`` (Lucene's 33 English stopwords, as bm25s), None to keep all,
    or an iterable of words. ``stemmer``: ``"auto"`` (the default: ``"english"`` when PyStemmer
    is installed, else None), None (no stemming) or a Snowball language such as ``"english"``
    (needs PyStemmer, a core dependency). ``auto`` is resolved here, so ``stemmer``,
    ``options()`` and ``identity()`` name the stemmer actually used. Stopwords are removed
    before stemming, as bm25s does.
    """

    name = "bm25_english"
    version = 1

    def __init__(
        self, stopwords: Any = DEFAULT, stemmer: str | None = AUTO, lowercase: bool = True
    ):
        check_str(
            "stemmer",
            stemmer,
            none="no stemming",
            note="'auto', 'minimal' or a Snowball language such as 'english'",
        )
        if stemmer == AUTO:
            stemmer = default_stemmer()
        self.lowercase = bool(lowercase)
        self.stopwords = resolve_stopwords(stopwords, ("en",), lowercase=self.lowercase)
        self.stemmer = stemmer
        self._stem = make_stemmer(stemmer) if stemmer else None
        self._stem_cache: dict[str, str] = {}

    def options(self) -> dict[str, Any]:
        return {
            "stopwords": stopwords_option(self.stopwords, load_stopwords("en")),
            "stemmer": self.stemmer,
            "lowercase": self.lowercase,
        }

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_stem"] = None
        state["_stem_cache"] = {}
        return state

    def release_memo(self) -> None:
        self._stem_cache = {}  # a fresh dict: a thread reading the old one is unaffected

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.stemmer:
            self._stem = make_stemmer(self.stemmer)

    def _stem_words(self, words: list[str]) -> list[str]:
        cache = self._stem_cache
        missing = [w for w in set(words) if w not in cache]
        if missing:
            new = dict(zip(missing, self._stem.stemWords(missing), strict=True))
            if len(cache) + len(new) > STEM_CACHE:
                # a fresh dict (a thread reading the old one is unaffected) with these words
                new.update((w, cache[w]) for w in set(words) if w not in new)
                self._stem_cache = cache = {}
            cache.update(new)
        return [cache[w] for w in words]

    def __call__(self, text: str) -> list[str]:
        if not isinstance(text, str):
            raise ConfigError(f"analyzer {self.name!r} needs a str, got {type(text).__name__}")
        if self.lowercase:
            text = text.lower()
        stop = self.stopwords
        words = [w for w in _WORD.findall(text) if w not in stop]
        if self._stem is not None:
            words = self._stem_words(words)
        return words

    def encode_chunk(self, texts: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        # Split and drop stopwords per text, stem each distinct word once.
        local: dict[str, int] = {}
        ids: list[int] = []
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        stop = self.stopwords
        setdefault = local.setdefault
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ConfigError(
                    f"text {i} is a {type(text).__name__}, not a str; analyzers take str"
                )
            if self.lowercase:
                text = text.lower()
            ids.extend([setdefault(w, len(local)) for w in _WORD.findall(text) if w not in stop])
            offsets[i + 1] = len(ids)
        raw = list(local)
        ids_arr = np.asarray(ids, dtype=np.int32)
        if self._stem is None:
            return raw, ids_arr, offsets
        stemmed = self._stem.stemWords(raw)
        final: dict[str, int] = {}
        remap = np.fromiter(
            (final.setdefault(s, len(final)) for s in stemmed), dtype=np.int32, count=len(raw)
        )
        return list(final), remap[ids_arr] if len(ids_arr) else ids_arr, offsets
