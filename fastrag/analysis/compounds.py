"""Compound splitting for Latin-script query words (German's ``Datenbankverbindung``), by word
frequency (Koehn & Knight 2003).

A lowercase word of at least :data:`MIN_WORD` letters that is not a common English word is
split into parts of at least :data:`MIN_PART` letters, each a German word (a part may end in a
linking ``s``, ``es``, ``n`` or ``en``, which is dropped; the last part may also be a common
English word), choosing the split whose parts have the highest geometric mean frequency, when
that beats the whole word's own frequency: ``datenbankverbindung`` -> ``daten, bank,
verbindung``, ``hochladen`` -> ``hoch, laden``, ``texteditor`` -> ``text, editor``;
``password``, ``dropdown`` and ``understanding`` stay whole.

The word lists are pyspellchecker's (MIT; frequencies from OpenSubtitles): its 339,000 German
words, and the 14,000 English words of relative frequency at least :data:`MIN_ENGLISH_FREQ`.
They are derived once per pyspellchecker version into ``$FASTRAG_CACHE_DIR/compounds`` (0.4 s
of CPU), the German words as a sorted, memory-mapped byte array (about 10 MB, checksummed),
so a process opens them in milliseconds and holds only the pages its lookups touch.
"""

from __future__ import annotations

import functools
import json
import math
import threading
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from fastrag._cache import cache_root
from fastrag._derived import open_derived

__all__ = [
    "MIN_ENGLISH_FREQ",
    "MIN_PART",
    "MIN_WORD",
    "Decompounder",
    "compounds_tag",
    "decompounder",
]

MIN_WORD = 6
MIN_PART = 3
MAX_PART_BYTES = 32
MIN_ENGLISH_FREQ = 1e-6
LINKS = ("s", "es", "n", "en")
#: bumped when the derived lists or the rule change (part of the cache folder's name)
RECIPE = 2
_UNSEEN = math.log(1e-12)  # a last part outside the German list (an English word)
_LOCK = threading.Lock()
_FILES = ("german.npy", "german_logp.npy", "english.json")


class Decompounder:
    """Splits words into dictionary parts. Immutable once built (safe across threads).

    ``german``: sorted ``S`` byte array of UTF-8 words with ``german_logp`` their log
    frequencies; ``english``: common English words and their frequencies.
    """

    def __init__(self, german: np.ndarray, german_logp: np.ndarray, english: dict[str, float]):
        if german.ndim != 1 or german.shape != german_logp.shape or german.dtype.kind != "S":
            raise ValueError("german must be a 1-d byte-string array with one logp per word")
        self._german = german
        self._logp = german_logp
        self._english = dict(english)

    def _lookup(self, words: list[str]) -> dict[str, float]:
        """Log frequency of each of ``words`` found in the German list."""
        keys = [w.encode("utf-8") for w in words]
        keys = [k for k in keys if len(k) <= self._german.dtype.itemsize]
        if not keys:
            return {}
        cand = np.array(keys, dtype=self._german.dtype)
        pos = np.searchsorted(self._german, cand)
        pos = np.minimum(pos, len(self._german) - 1)
        found = self._german[pos] == cand
        return {
            k.decode("utf-8"): float(self._logp[p])
            for k, p, f in zip(cand.tolist(), pos.tolist(), found.tolist(), strict=True)
            if f
        }

    def split_many(self, words: Iterable[str]) -> dict[str, list[tuple[int, int]]]:
        """:meth:`split` of each word, only the words that split, in one array lookup."""
        todo = {}
        for word in dict.fromkeys(words):
            low = word.lower()
            if (
                len(word) >= MIN_WORD
                and word.isalpha()
                and len(low) == len(word)
                and low not in self._english
            ):
                todo[word] = low
        subs = {
            low[a:b]
            for low in todo.values()
            for a in range(len(low))
            for b in range(a + MIN_PART, len(low) + 1)
        }
        logs = self._lookup(list(subs))
        out = {}
        for word, low in todo.items():
            spans = self._best(low, 0, logs, {})[1]
            if len(spans) > 1:
                out[word] = spans
        return out

    def split(self, word: str) -> list[tuple[int, int]]:
        """The parts of ``word`` as ``(start, end)`` spans, or ``[]`` when it stays whole (too
        short, not all letters, a common English word, or no split beats its frequency)."""
        return self.split_many([word]).get(word, [])

    def _best(
        self,
        w: str,
        start: int,
        logs: dict[str, float],
        memo: dict[int, tuple[float, list[tuple[int, int]]]],
    ) -> tuple[float, list[tuple[int, int]]]:
        """The best split of ``w[start:]``: (geometric mean frequency, spans)."""
        hit = memo.get(start)
        if hit is not None:
            return hit
        n = len(w)
        tail = w[start:]
        own = logs.get(tail)
        whole = max(math.exp(own) if own is not None else 0.0, self._english.get(tail, 0.0))
        best = (whole, [(start, n)])
        if tail in self._english:
            memo[start] = best
            return best
        for i in range(start + MIN_PART, n - MIN_PART + 1):
            head = w[start:i]
            for link in ("", *LINKS):
                if link and not head.endswith(link):
                    continue
                end = i - len(link)
                if end - start < MIN_PART:
                    continue
                lh = logs.get(w[start:end])
                if lh is None:
                    continue
                rest_score, rest = self._best(w, i, logs, memo)
                if rest_score <= 0:
                    continue
                total = lh + sum(logs.get(w[a:b], _UNSEEN) for a, b in rest)
                g = math.exp(total / (len(rest) + 1))
                if g > best[0]:
                    best = (g, [(start, end), *rest])
        memo[start] = best
        return best


def _derive(folder: Path) -> None:
    """Write the word lists from pyspellchecker's German and English dictionaries."""
    from spellchecker import SpellChecker  # lazy: reads ~500k words

    de = SpellChecker(language="de", distance=1).word_frequency.dictionary
    total = sum(de.values())
    rows = sorted(
        (w.encode("utf-8"), math.log(c / total))
        for w, c in de.items()
        if len(w) >= MIN_PART and w.isalpha() and len(w.encode("utf-8")) <= MAX_PART_BYTES
    )
    words = np.array([r[0] for r in rows], dtype=f"S{max(len(r[0]) for r in rows)}")
    np.save(folder / "german.npy", words)
    np.save(folder / "german_logp.npy", np.array([r[1] for r in rows], dtype=np.float64))
    en = SpellChecker(language="en", distance=1).word_frequency.dictionary
    total = sum(en.values())
    common = {w: c / total for w, c in sorted(en.items()) if c / total >= MIN_ENGLISH_FREQ}
    (folder / "english.json").write_text(json.dumps(common, ensure_ascii=False), "utf-8")


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyspellchecker")
    except PackageNotFoundError:
        return None


def compounds_tag() -> str | None:
    """The word lists' source and recipe, or None when pyspellchecker is not installed."""
    v = _version()
    return f"pyspellchecker-{v}-r{RECIPE}" if v else None


def _load(folder: Path, mmap_mode: str | None) -> Decompounder:
    german = np.load(folder / "german.npy", mmap_mode=mmap_mode)
    logp = np.load(folder / "german_logp.npy", mmap_mode=mmap_mode)
    english = json.loads((folder / "english.json").read_text("utf-8"))
    return Decompounder(german, logp, english)


@functools.cache
def _decompounder(tag: str) -> Decompounder:
    folder = cache_root() / "compounds" / tag
    return open_derived(folder, _FILES, _derive, _load, "compound word lists")


def decompounder() -> Decompounder | None:
    """The shared :class:`Decompounder`, or None when pyspellchecker is not installed."""
    tag = compounds_tag()
    if tag is None:
        return None
    with _LOCK:  # one derivation per process even when threads ask together
        return _decompounder(tag)
