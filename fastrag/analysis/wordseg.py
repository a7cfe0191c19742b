"""Word segmenters for the scripts written without spaces that jieba does not cover.

The default analyzer hands each run of these scripts here (a Japanese run is kana mixed with
kanji: ``ファイルの所有者を変更``), and gets its words back:

* **Japanese**: MeCab with UniDic (``fugashi`` + ``unidic-lite``, the ``[ja]`` extra), base
  forms of the content words (particles, auxiliary verbs and symbols dropped:
  ``ファイル, 所有, 者, 変更, する``). Without it: katakana runs whole, kanji runs by jieba,
  hiragana runs dropped (they are mostly particles and inflections).
* **Thai**: PyThaiNLP's ``newmm`` dictionary maximal matching (``pythainlp``, the ``[thai]``
  extra). **Lao**: LaoNLP (``laonlp``, newmm over its Lao dictionary).
* **Khmer, Myanmar (Burmese)**, and Thai/Lao without their package: ICU's word break, which
  segments these scripts by its dictionaries (``icu4py``, the ``[icu]`` extra: ICU 78 in the
  wheel); without it, overlapping bigrams of characters with their combining signs.

``segmenter_tags()`` names what is in use, so an index built with one segmenter is rebuilt,
not silently mixed, when another becomes available.
"""

from __future__ import annotations

import functools
import threading
import unicodedata
from collections.abc import Callable
from typing import Any

from fastrag.errors import ConfigError

__all__ = ["SEG_RANGES", "japanese_without_dictionary", "segment_run", "segmenter_tags"]

KANA_RANGES = ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F))
_SCRIPTS = (
    ("ja", KANA_RANGES),
    ("th", ((0x0E00, 0x0E7F),)),
    ("lo", ((0x0E80, 0x0EFF),)),
    ("km", ((0x1780, 0x17FF), (0x19E0, 0x19FF))),
    ("my", ((0x1000, 0x109F), (0xA9E0, 0xA9FF), (0xAA60, 0xAA7F))),
)
#: every code point range whose runs are segmented here (the analyzer's class 4)
SEG_RANGES = tuple(r for _, ranges in _SCRIPTS for r in ranges)
# UniDic parts of speech that carry no content: particles, auxiliaries, symbols, blanks
_JA_DROP = frozenset(("助詞", "助動詞", "補助記号", "記号", "空白"))
_HAN_LO, _HAN_HI = 0x4E00, 0x9FFF


def _script(ch: str) -> str | None:
    c = ord(ch)
    for name, ranges in _SCRIPTS:
        for lo, hi in ranges:
            if lo <= c <= hi:
                return name
    return None


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


_LOCAL = threading.local()


@functools.cache
def _installed(*modules: str) -> bool:
    """Whether every module is installed, without importing it (laonlp's import alone loads
    its dictionary: 0.26 s that a search of text without Lao would pay)."""
    from importlib.util import find_spec

    return all(find_spec(m) is not None for m in modules)


def _load(package: str, load: Callable[[], Any]) -> Any:
    """``load()``, or a ConfigError when an installed segmenter fails to import (the index's
    identity names it, so falling back to bigrams would give other tokens under its name)."""
    try:
        return load()
    except ImportError as exc:
        raise ConfigError(
            f"{package} is installed but fails to import ({exc}); reinstall it "
            f"(pip install --force-reinstall {package}) or uninstall it"
        ) from exc


@functools.lru_cache(maxsize=1)
def _has_mecab() -> bool:
    if not _installed("fugashi", "unidic_lite"):  # unidic_lite: the dictionary fugashi finds
        return False
    return _load("fugashi", _import_fugashi)


def _import_fugashi() -> bool:
    import fugashi  # noqa: F401

    return True


def _mecab() -> Any:
    """This thread's MeCab tagger (a tagger holds its lattice: one per thread), or None."""
    if not _has_mecab():
        return None
    tagger = getattr(_LOCAL, "tagger", None)
    if tagger is None:
        import fugashi

        tagger = _LOCAL.tagger = fugashi.Tagger()
    return tagger


def _thai_tokenize() -> Callable[[str], list[str]]:
    from pythainlp.tokenize import word_tokenize

    return functools.partial(word_tokenize, engine="newmm", keep_whitespace=False)


def _lao_tokenize() -> Callable[[str], list[str]]:
    from laonlp.tokenize import word_tokenize

    return word_tokenize


@functools.lru_cache(maxsize=1)
def _thai() -> Callable[[str], list[str]] | None:
    return _load("pythainlp", _thai_tokenize) if _installed("pythainlp") else None


@functools.lru_cache(maxsize=1)
def _lao() -> Callable[[str], list[str]] | None:
    return _load("laonlp", _lao_tokenize) if _installed("laonlp") else None


def _icu_tokenize() -> Callable[[str, str], list[str]]:
    from icu4py.breakers import WordBreaker

    def cut(run: str, locale: str) -> list[str]:
        return list(WordBreaker(run, locale))

    return cut


@functools.lru_cache(maxsize=1)
def _icu() -> Callable[[str, str], list[str]] | None:
    return _load("icu4py", _icu_tokenize) if _installed("icu4py") else None


@functools.lru_cache(maxsize=1)
def segmenter_tags() -> dict[str, str]:
    """The segmenter used per script here (a package and version, or ``"bigrams"``)."""
    ja = (
        f"fugashi-{_version('fugashi')}+unidic-lite-{_version('unidic-lite')}"
        if _installed("fugashi", "unidic_lite")
        else "kana-runs+jieba"
    )
    icu = f"icu4py-{_version('icu4py')}" if _installed("icu4py") else "bigrams"
    th = f"pythainlp-{_version('pythainlp')}-newmm" if _installed("pythainlp") else icu
    lo = f"laonlp-{_version('laonlp')}" if _installed("laonlp") else icu
    return {"ja": ja, "th": th, "lo": lo, "km": icu, "my": icu}


def _bigrams(run: str) -> list[str]:
    if len(run) < 2:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def _clusters(run: str) -> list[str]:
    """``run`` cut before each character that is not a combining mark (Thai vowels and tone
    marks, Khmer and Myanmar signs stay on their consonant)."""
    out: list[str] = []
    for ch in run:
        if out and unicodedata.category(ch) in ("Mn", "Mc"):
            out[-1] += ch
        else:
            out.append(ch)
    return out


def _cluster_bigrams(run: str) -> list[str]:
    parts = _clusters(run)
    if len(parts) < 2:
        return ["".join(parts)] if parts else []
    return [parts[i] + parts[i + 1] for i in range(len(parts) - 1)]


def _japanese(run: str, han_cut: Callable[[str], list[str]]) -> list[str]:
    tagger = _mecab()
    if tagger is not None:
        out = []
        for w in tagger(run):
            feat = w.feature
            if feat.pos1 in _JA_DROP:
                continue
            base = feat.orthBase
            out.append(base if base and base != "*" else w.surface)
        return out
    return japanese_without_dictionary(run, han_cut)


def japanese_without_dictionary(run: str, han_cut: Callable[[str], list[str]]) -> list[str]:
    """The Japanese cut when MeCab/UniDic is not installed: katakana runs whole, kanji runs
    by ``han_cut`` (jieba), hiragana runs dropped (mostly particles and inflections)."""
    out: list[str] = []
    kind_prev = None
    start = 0
    for i, ch in enumerate(run + "\0"):
        c = ord(ch)
        kind = (
            "han"
            if _HAN_LO <= c <= _HAN_HI or 0x3400 <= c <= 0x4DBF
            else "hira"
            if 0x3040 <= c <= 0x309F
            else "kata"
            if ch != "\0"
            else None
        )
        if c == 0x30FC and kind_prev == "kata":  # ー lengthens the katakana word before it
            kind = "kata"
        if kind != kind_prev:
            part = run[start:i]
            if kind_prev == "han":
                out.extend(han_cut(part))
            elif kind_prev == "kata":
                out.append(part)
            start = i
            kind_prev = kind
    return out


def segment_run(run: str, han_cut: Callable[[str], list[str]]) -> list[str]:
    """The words of ``run`` (one script's run; Japanese: kana with kanji), in text order.

    ``han_cut`` segments a kanji run when no Japanese dictionary is installed.
    """
    script = next((s for s in map(_script, run) if s is not None), None)
    if script == "ja":
        return _japanese(run, han_cut)
    if script == "th" and _thai() is not None:
        return [w for w in _thai()(run) if w.strip()]
    if script == "lo" and _lao() is not None:
        return [w for w in _lao()(run) if w.strip()]
    if script is not None and _icu() is not None:  # its segments include spaces and marks
        return [w for w in _icu()(run, script) if any(ch.isalnum() for ch in w)]
    return _cluster_bigrams(run)
