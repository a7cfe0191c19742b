"""``bm25``: the default analyzer, for any script and for folders that mix languages.

The text is lowercased and cut by script, in one numba pass (``fastrag._kernels.mixed``):

* Han runs (U+4E00..U+9FD5) are segmented exactly as jieba segments a Chinese block, and a
  word jieba's HMM invented is followed by its characters (``bm25_chinese``'s ``oov_chars``);
  other words of three or more characters are followed by the dictionary words inside them
  (``han_search``, as jieba's ``cut_for_search``: tldr Chinese MRR@10 0.658 -> 0.703, CMRC
  R@1 0.9717 -> 0.9708); after a text's tokens come the overlapping pairs of adjacent Han
  characters outside Japanese runs (``han_bigrams``, as ``bm25_cjk``'s bigrams: a query and a
  page segmented differently by jieba still share them; ant-design Chinese MRR@10 0.836 ->
  0.889, tldr dev 0.762 -> 0.808, Vue 0.532 -> 0.594, CMRC R@1 0.9708 -> 0.9751); in a text
  that reads as Traditional Chinese (:mod:`fastrag.analysis.hant`) the Han runs give their
  characters instead of jieba's words (``han_traditional="bigrams"``: jieba's dictionary is
  Simplified), followed by the same pairs;
* a run of kana (with the kanji around it), Thai, Lao, Khmer or Myanmar is cut into words by
  :mod:`fastrag.analysis.wordseg` (MeCab/UniDic for Japanese, PyThaiNLP's newmm for Thai,
  LaoNLP for Lao when installed; character bigrams otherwise);
* Hangul and rarer ideographs give unigrams plus overlapping bigrams (``bm25_cjk``);
* every other run of word characters (Latin, Cyrillic, Greek, digits, ``_``) is one word, a
  ``.`` between digits kept (``3.14``, ``v1.2``), and words are Snowball-stemmed by script:
  Latin with English (or the ``stemmer`` given), Cyrillic with Russian, Greek with Greek;
  a text whose function words say French, Spanish, Portuguese, German, Italian or Dutch
  (:mod:`fastrag.analysis.latin`) has its Latin words stemmed in that language and that
  language's function words dropped instead of English stopwords (``per_language``).

In a query (``encode_query_chunk``), a Latin-script compound is also followed by its parts
(``compounds``, :mod:`fastrag.analysis.compounds`: ``hochladen`` -> ``hochladen, hoch,
laden``), so ``Datenbankverbindung`` finds pages that say ``Verbindung zur Datenbank``;
indexes keep whole words (splitting both sides was measured worse: Spanish and Chinese
pages lost to German parts).

Stopwords (NLTK's 179 English words and the Chinese list ``bm25_chinese`` uses) are dropped
before stemming (not from segmented-script words). With ``han_search=False`` the tokens of
Chinese text equal ``bm25_chinese``'s except around the few dictionary words that mix Latin
and Han (``T恤``) and decimals (kept whole here too).
"""

from __future__ import annotations

import functools
import re
from itertools import chain
from types import SimpleNamespace
from typing import Any

import numpy as np

from fastrag._checks import check_bool, check_choice, check_str
from fastrag._coldstart import kernels_for
from fastrag.analysis.base import Analyzer
from fastrag.analysis.chinese import dictionary_tag
from fastrag.analysis.cjk import char_classes
from fastrag.analysis.compounds import compounds_tag, decompounder
from fastrag.analysis.english import AUTO, default_stemmer, make_stemmer
from fastrag.analysis.hant import (
    HAN_HI,
    HAN_LO,
    is_traditional,
    segmentation_view,
    table_tag,
    to_simplified,
    traditional_han,
)
from fastrag.analysis.latin import LANGUAGES, function_words, rules_tag, text_languages
from fastrag.analysis.segment import get_segmenter, jieba_tokenizer, segmenter
from fastrag.analysis.spans import (
    append_tokens,
    expand_tokens,
    first_occurrence,
    span_strings,
    text_kernels,
    texts_to_codepoints,
)
from fastrag.analysis.stopwords import DEFAULT, load_stopwords, resolve_stopwords, stopwords_option
from fastrag.analysis.wordseg import SEG_RANGES, segment_run, segmenter_tags
from fastrag.errors import ConfigError

__all__ = ["MixedAnalyzer", "mixed_classes"]

# bigram scripts: CJK ext A, the unified ideographs jieba leaves out, compatibility
# ideographs, Hangul (syllables and jamo) and the supplementary ideograph planes
_CJK_RANGES = (
    (0x3400, 0x4DBF),
    (0x9FD6, 0x9FFF),
    (0xF900, 0xFAFF),
    (0xAC00, 0xD7AF),
    (0x1100, 0x11FF),
    (0x3130, 0x318F),
    (0x20000, 0x2FFFF),
)
# word scripts with their own Snowball stemmer (anything else Latin-like uses ``stemmer``)
_SCRIPT_STEMMERS = (
    ((0x0400, 0x04FF), "russian"),
    ((0x0370, 0x03FF), "greek"),
    ((0x0600, 0x06FF), "arabic"),
)
# NLTK's 179 English stopwords (Lucene's 33 scored 0.6889 vs 0.6908 nDCG@10 on SciFact test,
# 0.6945 vs 0.6982 on train) and the Chinese list bm25_chinese uses
_DEFAULT_LISTS = ("en_nltk", "zh")
#: Distinct raw spans whose tokens an analyzer memoises (a fresh memo when full), and query
#: spans whose compound parts it memoises
SPAN_CACHE = 1 << 18
QUERY_CACHE = 200_000
_HAS_ALNUM = re.compile(r"[^\W_]")
_CJK_CLASS = "".join(f"{chr(a)}-{chr(b)}" for a, b in _CJK_RANGES)
_HAN_CLASS = f"{chr(HAN_LO)}-{chr(HAN_HI)}"
_SEG_CLASS = "".join(f"{chr(a)}-{chr(b)}" for a, b in SEG_RANGES)
_SEG_CHAR = re.compile(f"[{_SEG_CLASS}]")
_HAN_RUN = re.compile(f"[{_HAN_CLASS}]")
# the kernel's cut, as a regex (the path while the kernels compile): a Han/segmented-script
# run holding a segmented-script character | Han run | CJK run | word
_SPANS = re.compile(
    f"([{_HAN_CLASS}{_SEG_CLASS}]*[{_SEG_CLASS}][{_HAN_CLASS}{_SEG_CLASS}]*)"
    f"|([{_HAN_CLASS}]+)|([{_CJK_CLASS}]+)"
    f"|((?:[^\\W{_HAN_CLASS}{_CJK_CLASS}{_SEG_CLASS}]|(?<=[0-9])\\.(?=[0-9]))+)"
)


@functools.lru_cache(maxsize=1)
def mixed_classes() -> np.ndarray:
    """uint8 class of every code point for ``mixed_spans``: 0 other, 1 word, 2 CJK, 3 Han,
    4 a script ``wordseg`` segments (kana, Thai, Lao, Khmer, Myanmar)."""
    cls = (char_classes() != 0).astype(np.uint8)  # \w (CJK included) -> 1
    for a, b in _CJK_RANGES:
        cls[a : b + 1] = 2
    cls[HAN_LO : HAN_HI + 1] = 3
    for a, b in SEG_RANGES:
        cls[a : b + 1] = 4
    cls.setflags(write=False)
    return cls


def _has_han(cps: np.ndarray) -> bool:
    """Whether code points hold a character jieba segments."""
    return bool(cps.size and cps.max() >= HAN_LO and ((cps >= HAN_LO) & (cps <= HAN_HI)).any())


@functools.lru_cache(maxsize=1)
def _no_segmenter() -> SimpleNamespace:
    """Empty tables of jieba's dtypes, for batches without Han (``mixed_spans`` reads them
    only in Han runs): an English corpus never loads jieba's dictionary."""
    f8, i8 = np.float64, np.int64
    return SimpleNamespace(
        keys=np.zeros(0, i8),
        vals=np.zeros(0, np.int32),
        freq=np.zeros(0, i8),
        logp=np.zeros(0, f8),
        start_p=np.zeros(4, f8),
        trans_p=np.zeros((4, 4), f8),
        emit_p=np.zeros((0, 4), f8),
    )


_SCRIPT_RES = tuple(
    (re.compile(f"[{chr(lo)}-{chr(hi)}]"), language) for (lo, hi), language in _SCRIPT_STEMMERS
)


def _drop_pairs(
    starts: np.ndarray, lens: np.ndarray, tok_off: np.ndarray, chars: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``mixed_spans``'s spans without the two-character ones that hold a position of
    ``chars`` (Han characters of Traditional texts cut as characters: their pairs come with
    every text's Han pairs)."""
    mark = np.zeros(n + 1, dtype=bool)
    mark[chars] = True
    keep = ~((lens == 2) & (mark[starts] | mark[starts + 1]))
    n_texts = len(tok_off) - 1
    text_of = np.repeat(np.arange(n_texts), np.diff(tok_off))
    out = np.zeros(n_texts + 1, dtype=np.int64)
    np.cumsum(np.bincount(text_of[keep], minlength=n_texts), out=out[1:])
    return starts[keep], lens[keep], out


def _script_stemmer(word: str) -> str | None:
    for pattern, language in _SCRIPT_RES:
        if pattern.search(word):
            return language
    return None


def _latin_word(span: str) -> bool:
    """Whether a raw span is a word of Latin script (or digits) or punctuation, not a word of
    another script."""
    return not _HAS_ALNUM.search(span) or (
        mixed_classes()[ord(span[0])] == 1 and (span.isascii() or _script_stemmer(span) is None)
    )


def _distinct(ids: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(ids, return_inverse=True)`` for ids below ``n``, without sorting."""
    seen = np.zeros(n, dtype=bool)
    seen[ids] = True
    uniq = np.flatnonzero(seen)
    rank = np.zeros(n, dtype=np.int64)
    rank[uniq] = np.arange(len(uniq))
    return uniq, rank[ids]


def _python_seconds(texts: list[str]) -> float:
    """Rough CPU seconds of :meth:`MixedAnalyzer._spans_python` (AMD EPYC Zen 4): 0.11 us per
    character of ``re``; with Han text, jieba's dictionary load and its ~2 us per character."""
    chars = sum(map(len, texts))
    han = any(_HAN_RUN.search(t) for t in texts)
    return 0.2e-6 * chars + ((0.65 + 2e-6 * chars) if han else 0.0)


class MixedAnalyzer(Analyzer):
    """Lowercase; Han by jieba, kana/Hangul by bigrams, other words whole and stemmed by script.

    ``stopwords``: ``"default"`` (English + Chinese lists; kana, Thai, Lao, Khmer and Myanmar
    words skip them), None to keep all, or an iterable.
    ``stemmer``: the Snowball language for Latin-script words, ``"auto"`` (the default) being
    ``"english"`` (None if PyStemmer cannot be imported), ``"minimal"`` (English plurals to
    the singular only), or None (no stemming at all);
    Cyrillic, Greek and Arabic words are stemmed by their script's language whenever stemming
    is on. ``hmm`` and ``oov_chars`` are ``bm25_chinese``'s options for Han text;
    ``han_search`` (default True) follows each jieba word of three or more characters by the
    2- and 3-character dictionary words inside it (``压缩文件`` -> ``压缩文件, 压缩, 文件``),
    so a query's compound finds the page's parts and vice versa; ``compounds`` (default True)
    follows a query's Latin-script compounds by their parts (``hochladen`` -> ``hochladen,
    hoch, laden``; queries only, see :mod:`fastrag.analysis.compounds`); ``han_chars=True`` adds
    every multi-character word's characters too (better on short pages, worse on long ones:
    tldr Chinese MRR@10 0.735 with the Chinese stopwords off, CMRC R@1 0.9487); with
    ``han_search=False`` and ``han_bigrams=False`` Chinese tokens equal ``bm25_chinese``'s;
    ``han_bigrams`` (default True) appends each text's pairs of adjacent Han characters. Runs
    of kana (with kanji),
    Thai, Lao, Khmer and Myanmar are cut into words by :mod:`fastrag.analysis.wordseg`.
    ``per_language`` (default True): a text (page chunk or query) whose function words say
    French, Spanish, Portuguese, German, Italian or Dutch (:mod:`fastrag.analysis.latin`)
    has its Latin-script words stemmed by that language's Snowball stemmer (with the
    ``"auto"`` stemmer) and that language's function words dropped (with the default
    stopwords) instead of English's.
    ``han_traditional``: what a text that reads as Traditional Chinese gets (more
    Traditional-only than Simplified-only Han characters and no kana,
    :mod:`fastrag.analysis.hant`): ``"bigrams"`` (the default) its Han runs as characters
    plus the pairs every text gets, as ``bm25_cjk`` (jieba cuts ``在空資料夾裡`` into ``空資料,
    夾裡``); ``"simplified"`` (or True) jieba's cut of its characters' Simplified forms, the
    tokens keeping its own characters (``資料夾``; Traditional Chinese MRR@10 0.705 against
    0.713 without it on the held-out tldr set); None (or False) jieba's cut as written.
    """

    name = "bm25"
    version = 7

    def __init__(
        self,
        stopwords: Any = DEFAULT,
        stemmer: str | None = AUTO,
        lowercase: bool = True,
        hmm: bool = True,
        oov_chars: bool = True,
        han_search: bool = True,
        han_chars: bool = False,
        compounds: bool = True,
        han_bigrams: bool = True,
        per_language: bool = True,
        han_traditional: str | bool | None = "bigrams",
    ):
        check_str(
            "stemmer",
            stemmer,
            none="no stemming",
            note="'auto', 'minimal' or a Snowball language such as 'english'",
        )
        self.lowercase = check_bool("lowercase", lowercase)
        self.hmm = check_bool("hmm", hmm)
        self.oov_chars = check_bool("oov_chars", oov_chars)
        self.han_search = check_bool("han_search", han_search)
        self.han_chars = check_bool("han_chars", han_chars)
        self.compounds = check_bool("compounds", compounds)
        self.han_bigrams = check_bool("han_bigrams", han_bigrams)
        self.per_language = check_bool("per_language", per_language)
        mode = check_choice(
            "han_traditional",
            han_traditional,
            ("bigrams", "simplified", True, False, None),
            note="how a text that reads as Traditional Chinese is cut",
        )
        self.han_traditional: str | None = {True: "simplified", False: None}.get(mode, mode)
        self.stopwords = resolve_stopwords(stopwords, _DEFAULT_LISTS, lowercase=self.lowercase)
        # the default lists are English and Chinese: Japanese/Thai/... words skip them
        # (``所有`` is a Chinese stopword, not a Japanese one)
        self._seg_stop = (
            frozenset() if isinstance(stopwords, str) and stopwords == DEFAULT else self.stopwords
        )
        self.stemmer = default_stemmer() if stemmer == AUTO else stemmer
        if self.stemmer:
            make_stemmer(self.stemmer)  # an unknown language fails here, by name
        # what a text in another Latin-script language changes: the stemmer (when "auto"
        # chose it) and the stopwords (when the default lists are used)
        self._lang_stem = bool(self.per_language and stemmer == AUTO and self.stemmer)
        default_stop = isinstance(stopwords, str) and stopwords == DEFAULT
        self._lang_stop = bool(self.per_language and default_stop)
        self._stemmers: dict[str, Any] = {}
        # raw span -> its tokens; None: the span itself, one token (no tuple kept per entry)
        self._cache: dict[str, tuple[str, ...] | None] = {}
        self._qcache: dict[str, tuple[str, ...]] = {}
        # (language, query) -> raw span -> its tokens in a text of that language
        self._lcache: dict[tuple[str, bool], dict[str, tuple[str, ...]]] = {}
        self._latin_memo: dict[str, bool] = {}  # raw span -> a Latin-script word or not

    def options(self) -> dict[str, Any]:
        return {
            "stopwords": stopwords_option(
                self.stopwords, load_stopwords("en_nltk") | load_stopwords("zh")
            ),
            "stemmer": self.stemmer,
            "lowercase": self.lowercase,
            "hmm": self.hmm,
            "oov_chars": self.oov_chars,
            "han_search": self.han_search,
            "han_chars": self.han_chars,
            "han_bigrams": self.han_bigrams,
            "per_language": self._per_language_tag(),
            "dictionary": dictionary_tag(),
            "segmenters": segmenter_tags(),
            **(
                {"han_traditional": f"{self.han_traditional}:{table_tag()}"}
                if self.han_traditional
                else {}
            ),
        }

    def _per_language_tag(self) -> str | None:
        """What a text's language changes (its stemmer, its stopwords) and by which rules."""
        what = [w for w, on in (("stem", self._lang_stem), ("stop", self._lang_stop)) if on]
        return f"{rules_tag()}:{'+'.join(what)}" if what else None

    def query_options(self) -> dict[str, Any]:
        return {"compounds": compounds_tag() if self.compounds else None}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_stemmers"] = {}
        state["_cache"] = {}
        state["_qcache"] = {}
        state["_lcache"] = {}
        state["_latin_memo"] = {}
        return state

    def release_memo(self) -> None:
        self._cache = {}  # fresh dicts: a thread reading the old ones is unaffected
        self._qcache = {}
        self._lcache = {}
        self._latin_memo = {}

    def warmup(self) -> None:
        if kernels_for():
            get_segmenter().warmup()
            self.encode_chunk(["ab 中文 かな 한국 3.14"])

    # -- tokens ---------------------------------------------------------------------------

    def _stem_many(self, words: list[str], latin: str | None = None) -> list[str]:
        """Each word stemmed by its script's Snowball stemmer (unchanged without one); Latin
        script by ``latin`` (default: ``stemmer``)."""
        latin = latin or self.stemmer
        if not latin:
            return words
        by_lang: dict[str, list[int]] = {}
        for i, w in enumerate(words):
            lang = (_script_stemmer(w) if not w.isascii() else None) or latin
            by_lang.setdefault(lang, []).append(i)
        out = list(words)
        for lang, idx in by_lang.items():
            stem = self._stemmers.get(lang)
            if stem is None:
                stem = self._stemmers[lang] = make_stemmer(lang)
            for i, s in zip(idx, stem.stemWords([words[i] for i in idx]), strict=True):
                if s != out[i]:  # an unchanged word stays one string (memo key, term, vocab)
                    out[i] = s
        return out

    def _normalize_many(self, raws: list[str]) -> list[tuple[str, ...]]:
        """The output tokens of each distinct raw span (memoised per process)."""
        return [(r,) if t is None else t for r, t in zip(raws, self._memo_many(raws), strict=True)]

    def _memo_many(self, raws: list[str]) -> list[tuple[str, ...] | None]:
        """:meth:`_normalize_many` as the memo keeps it: None for a span that is its own
        output token."""
        cache = self._cache
        missing = [r for r in raws if r not in cache]
        if missing:
            stop = self.stopwords
            classes = mixed_classes()
            seg = {r for r in missing if _SEG_CHAR.search(r)}
            han = [r for r in missing if HAN_LO <= ord(r[0]) <= HAN_HI and r not in seg]
            oov = [r for r in han if self.oov_chars and len(r) > 1]
            if oov:
                freqs = self._han_freqs(oov).tolist()
                invented = {w for w, f in zip(oov, freqs, strict=True) if f == 0}
            else:
                invented = set()
            han_set = set(han)
            subwords = (
                self._han_subwords([r for r in han if len(r) > 2 and r not in invented])
                if self.han_search
                else {}
            )
            words = [
                r
                for r in missing
                if r not in stop
                and _HAS_ALNUM.search(r)
                and not HAN_LO <= ord(r[0]) <= HAN_HI
                and classes[ord(r[0])] == 1
            ]
            stems = dict(zip(words, self._stem_many(words), strict=True))
            new: dict[str, tuple[str, ...] | None] = {}
            for r in missing:
                if r in seg:
                    segstop = self._seg_stop
                    new[r] = tuple(w for w in segment_run(r, self._cut_han) if w not in segstop)
                elif r in stems:
                    s = stems[r]
                    new[r] = None if s is r else (s,)
                elif r in invented:
                    new[r] = tuple(p for p in (r, *r) if p not in stop)
                elif r not in stop and (
                    r in subwords
                    or (self.han_search and self.han_chars and r in han_set and len(r) > 1)
                ):
                    chars = r if self.han_search and self.han_chars else ()
                    parts = (r, *subwords.get(r, ()), *chars)
                    new[r] = tuple(p for p in parts if p not in stop)
                elif r in stop or not _HAS_ALNUM.search(r):
                    new[r] = ()
                else:
                    new[r] = None
            if len(cache) + len(new) > SPAN_CACHE:
                # a fresh dict (a thread reading the old one is unaffected) with this call's spans
                new.update((r, cache[r]) for r in raws if r not in new)
                self._cache = cache = {}
            cache.update(new)
        return [cache[r] for r in raws]

    def _query_many(self, raws: list[str]) -> list[tuple[str, ...]]:
        """:meth:`_normalize_many`'s tokens, each compound word followed by its parts."""
        base = self._normalize_many(raws)
        if not self.compounds:
            return base
        cache = self._qcache
        missing = {r: t for r, t in zip(raws, base, strict=True) if r not in cache}
        if missing:
            classes = mixed_classes()
            words = [r for r, t in missing.items() if len(t) == 1 and classes[ord(r[0])] == 1]
            parts = self._compound_parts(words)
            if self._lang_stem and parts:
                # the compound (German, by the decompounder's word list) and its parts also as
                # a German page's tokens: a page in German is stemmed in German
                split = list(parts)
                german = self._compound_parts(split, stemmer="german")
                whole = dict(zip(split, self._stem_many(split, "german"), strict=True))
                parts = {
                    w: list(dict.fromkeys([*ps, whole[w], *german.get(w, ())]))
                    for w, ps in parts.items()
                }
            new = {r: tuple(dict.fromkeys((*t, *parts.get(r, ())))) for r, t in missing.items()}
            if len(cache) + len(new) > QUERY_CACHE:
                new.update((r, cache[r]) for r in raws if r not in new)
                self._qcache = cache = {}
            cache.update(new)
        return [cache[r] for r in raws]

    def _compound_parts(
        self, words: list[str], stop: frozenset[str] | None = None, stemmer: str | None = None
    ) -> dict[str, list[str]]:
        """The stemmed parts of each Latin-script compound among ``words`` (stopwords out)."""
        dc = decompounder() if words else None
        if dc is None:
            return {}
        stop = self.stopwords if stop is None else stop
        latin = [w for w in words if w.isascii() or _script_stemmer(w) is None]
        split = {
            w: [p for p in (w[a:b] for a, b in spans) if p.lower() not in stop]
            for w, spans in dc.split_many(latin).items()
        }
        flat = [p for ps in split.values() for p in ps]
        stems = iter(self._stem_many(flat, stemmer))
        return {w: [next(stems) for _ in ps] for w, ps in split.items()}

    def _han_subwords(self, words: list[str]) -> dict[str, list[str]]:
        """The dictionary words inside each long Han word, as jieba's ``cut_for_search`` adds
        them (2- and 3-character ones): ``压缩文件`` also gives ``压缩, 文件``."""
        if not words:
            return {}
        parts = {
            w: [w[i : i + n] for n in (2, 3) if len(w) > n for i in range(len(w) - n + 1)]
            for w in words
        }
        cand = sorted({p for ps in parts.values() for p in ps})
        freqs = self._han_freqs(cand).tolist()
        known = {p for p, f in zip(cand, freqs, strict=True) if f > 0}
        out = {w: [p for p in ps if p in known] for w, ps in parts.items()}
        return {w: ps for w, ps in out.items() if ps}

    def _han_freqs(self, words: list[str]) -> np.ndarray:
        """jieba's frequency of each Han word, or of its Simplified form when that is higher
        (``han_traditional="simplified"``: ``資料夾`` is the dictionary's ``资料夹``)."""
        freqs = segmenter().freqs(words)
        if self.han_traditional != "simplified" or not words:
            return freqs
        simple = [to_simplified(w) for w in words]
        changed = [i for i, (w, s) in enumerate(zip(words, simple, strict=True)) if s != w]
        if changed:
            other = segmenter().freqs([simple[i] for i in changed])
            freqs[changed] = np.maximum(freqs[changed], other)
        return freqs

    def _cut_han(self, text: str) -> list[str]:
        """jieba's words of a Han run (the kernel port once compiled, else jieba itself)."""
        return segmenter().cut(text, hmm=self.hmm)

    def _spans_python(self, texts: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The kernel's raw spans with ``re`` and the jieba package (same tokens)."""
        dt = None  # jieba loads its dictionary (0.65 s) for the first Han run only
        local: dict[str, int] = {}
        ids: list[int] = []
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        setdefault = local.setdefault
        for i, text in enumerate(texts):
            mode = self.han_traditional if self.han_traditional and is_traditional(text) else None
            for m in _SPANS.finditer(text):
                seg, han, cjk, word = m.groups()
                if seg is not None:
                    ids.append(setdefault(seg, len(local)))
                elif han is not None and mode == "bigrams":
                    ids.extend(setdefault(c, len(local)) for c in han)
                elif han is not None:
                    dt = dt or jieba_tokenizer()
                    simplified = mode == "simplified"
                    words = dt.lcut(to_simplified(han) if simplified else han, HMM=self.hmm)
                    if simplified:  # the same spans of the text's own characters
                        ends = np.cumsum([len(w) for w in words]).tolist()
                        words = [han[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
                    ids.extend(setdefault(w, len(local)) for w in words)
                elif cjk is not None:
                    last = len(cjk) - 1
                    for k in range(last):
                        ids.append(setdefault(cjk[k], len(local)))
                        ids.append(setdefault(cjk[k : k + 2], len(local)))
                    ids.append(setdefault(cjk[last], len(local)))
                else:
                    ids.append(setdefault(word, len(local)))
            offsets[i + 1] = len(ids)
        return list(local), np.asarray(ids, dtype=np.int32), offsets

    def _spans(self, texts: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        # compiling in the background, or one query before numba has started
        if not kernels_for(lambda: _python_seconds(texts), wait=False):
            return self._spans_python(texts)
        from fastrag._kernels.mixed import mixed_spans  # lazy: numba

        joined, cps, doc_off = texts_to_codepoints(texts)
        has_han = _has_han(cps)
        seg = get_segmenter() if has_han else _no_segmenter()
        view, chars = cps, None
        if has_han and self.han_traditional == "simplified":
            # Traditional texts cut as their Simplified forms, spans read from the text itself
            view = segmentation_view(cps, doc_off, mixed_classes())
        elif has_han and self.han_traditional == "bigrams":
            chars = traditional_han(cps, doc_off, mixed_classes())
            if chars.size:  # as a rarer ideograph (unigrams and pairs), the pairs dropped below
                view = cps.copy()
                view[chars] = _CJK_RANGES[0][0]
        starts, lens, tok_off = mixed_spans(
            view,
            doc_off,
            mixed_classes(),
            seg.keys,
            seg.vals,
            seg.freq,
            seg.logp,
            seg.start_p,
            seg.trans_p,
            seg.emit_p,
            self.hmm,
        )
        if chars is not None and chars.size:
            starts, lens, tok_off = _drop_pairs(starts, lens, tok_off, chars, len(cps))
        ids, first = text_kernels().intern_spans(cps, starts, lens)
        return span_strings(joined, cps, starts[first], lens[first]), ids, tok_off

    def _bigrams(self, texts: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Each text's overlapping pairs of adjacent Han characters outside Japanese (a run
        of Han and kana, Thai, ... holding any kana: MeCab's words serve it better), as
        ``encode_chunk``. Only the texts holding a Han character are read again: in a log
        with a few such lines, the pass costs those lines, not the chunk."""
        which = [i for i, t in enumerate(texts) if _HAN_RUN.search(t)]
        if not which:
            return [], np.zeros(0, np.int32), np.zeros(len(texts) + 1, np.int64)
        if len(which) == len(texts):
            return self._text_bigrams(texts)
        vocab, ids, sub_off = self._text_bigrams([texts[i] for i in which])
        counts = np.zeros(len(texts), dtype=np.int64)
        counts[which] = np.diff(sub_off)
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return vocab, ids, offsets

    def _text_bigrams(self, texts: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        joined, cps, doc_off = texts_to_codepoints(texts)
        cls = mixed_classes()[cps]
        han, seg = cls == 3, cls == 4
        if seg.any():
            run = han | seg
            start = run.copy()
            start[1:] &= ~run[:-1]
            rid = np.cumsum(start) - 1
            with_seg = np.bincount(rid[seg], minlength=int(start.sum())) > 0
            han &= ~with_seg[np.maximum(rid, 0)]
        starts = np.flatnonzero(han[:-1] & han[1:])  # texts end in '\n': no pair spans two
        offsets = np.searchsorted(starts, doc_off).astype(np.int64)
        if not len(starts):
            return [], np.zeros(0, np.int32), offsets
        if kernels_for(lambda: 0.3e-6 * len(starts), wait=False):
            lens = np.full(len(starts), 2, dtype=np.int64)
            ids, first = text_kernels().intern_spans(cps, starts, lens)
            return span_strings(joined, cps, starts[first], lens[first]), ids, offsets
        local: dict[str, int] = {}
        ids = np.fromiter(
            (local.setdefault(joined[i : i + 2], len(local)) for i in starts.tolist()),
            dtype=np.int32,
            count=len(starts),
        )
        return list(local), ids, offsets

    def _latin_many(
        self, raws: list[str], base: list[tuple[str, ...] | None], language: str, query: bool
    ) -> list[tuple[str, ...] | None]:
        """The tokens of each raw span in a text of ``language`` (:mod:`fastrag.analysis.latin`):
        Latin-script words stopped and stemmed in that language, other spans as ``base``."""
        cache = self._lcache.get((language, query))
        if cache is None:
            cache = self._lcache[(language, query)] = {}
        missing = [i for i, r in enumerate(raws) if r not in cache]
        if missing:
            english = language == "english"
            stop = function_words(language) if self._lang_stop and not english else self.stopwords
            stemmer = language if self._lang_stem else self.stemmer
            words = [
                raws[i] for i in missing if _HAS_ALNUM.search(raws[i]) and _latin_word(raws[i])
            ]
            kept = [w for w in words if w not in stop]
            stems = dict(zip(kept, self._stem_many(kept, stemmer), strict=True))
            parts = self._compound_parts(kept, stop, stemmer) if query and self.compounds else {}
            new: dict[str, tuple[str, ...]] = {w: () for w in words if w in stop}
            for w, s in stems.items():
                new[w] = (s, *(p for p in parts.get(w, ()) if p != s))
            for i in missing:
                r = raws[i]
                if r not in new:
                    new[r] = (r,) if base[i] is None else base[i]
            if len(cache) + len(new) > QUERY_CACHE:
                # a fresh dict (a thread reading the old one is unaffected) with this call's spans
                new.update((r, cache[r]) for r in raws if r not in new)
                self._lcache[(language, query)] = cache = {}
            cache.update(new)
        return [cache[r] for r in raws]

    def _by_language(
        self,
        raw: list[str],
        ids: np.ndarray,
        offsets: np.ndarray,
        norm: list[tuple[str, ...] | None],
        query: bool,
    ) -> tuple[list[str], np.ndarray, list[tuple[str, ...] | None]] | None:
        """``(raw, ids, norm)`` with the spans of each text in a Latin-script language other
        than English given new ids whose tokens follow that language (a query of unclear
        language: each word's tokens in every candidate language, once each); None if no
        text changes."""
        found = text_languages(raw, ids, offsets)
        if found is None:
            return None
        lang, cands = found
        english = LANGUAGES.index("english")
        # a text mostly of other scripts (Han, kana, Cyrillic, ...) is English: its Latin
        # words are names and code; so is a query of unclear language with any such word, or
        # without function words and with ASCII letters only (English keywords, as before)
        lens = np.diff(offsets)
        text_of = np.repeat(np.arange(len(lang)), lens)
        maybe = lang != english if query else (lang >= 0) & (lang != english)
        if not maybe.any():
            return None
        # the script of the spans of the texts that may change (not of an English page's)
        used = _distinct(ids[maybe[text_of]], len(raw))[0].tolist()
        latin = np.ones(len(raw), dtype=bool)
        accented = np.zeros(len(raw), dtype=bool)
        memo = self._latin_memo
        if len(memo) > SPAN_CACHE:
            self._latin_memo = memo = {}
        for i in used:
            r = raw[i]
            flag = memo.get(r)
            if flag is None:
                flag = memo[r] = _latin_word(r)
            latin[i] = flag
        accented[used] = [not raw[i].isascii() for i in used]
        other = np.bincount(text_of, ~latin[ids], len(lang))
        lang = np.where(2 * other < lens, lang, english)
        if query:  # unclear: the candidates' bit mask, as a key above the language indexes
            # a tie among other languages, or no function word but an accented letter
            tie = (cands >> english) & 1 == 0
            unclear = (other == 0) & (tie | (np.bincount(text_of, accented[ids], len(lang)) > 0))
            key = np.where(lang >= 0, lang, np.where(unclear, len(LANGUAGES) + cands, english))
        else:  # a page of unclear language is English, as without per_language
            key = np.where(lang >= 0, lang, english)
        if bool((key == english).all()):
            return None
        raw, norm = list(raw), list(norm)
        ids = ids.astype(np.int32, copy=True)
        tok_key = key[text_of]
        for k in np.unique(key[key != english]).tolist():
            pos = np.flatnonzero(tok_key == k)
            uniq, inv = _distinct(ids[pos], len(raw))
            words = [raw[i] for i in uniq.tolist()]
            base = [norm[i] for i in uniq.tolist()]
            if k < len(LANGUAGES):
                new = self._latin_many(words, base, LANGUAGES[k], query)
            else:
                langs = [x for b, x in enumerate(LANGUAGES) if (k - len(LANGUAGES)) >> b & 1]
                each = [self._latin_many(words, base, x, query) for x in langs]
                # a stopword of any candidate is dropped; other words keep every variant once
                new = [
                    () if any(not ts for ts in alts) else tuple(dict.fromkeys(chain(*alts)))
                    for alts in zip(*each, strict=True)
                ]
            ids[pos] = len(raw) + inv
            raw.extend(words)
            norm.extend(new)
        return raw, ids, norm

    def _encode(self, texts: list[str], query: bool) -> tuple[list[str], np.ndarray, np.ndarray]:
        prepared = self._prepare(texts)
        raw, ids, offsets = self._spans(prepared)
        norm = self._query_many(raw) if query else self._memo_many(raw)
        relabelled = (
            self._by_language(raw, ids, offsets, norm, query)
            if self._lang_stem or self._lang_stop
            else None
        )
        if relabelled is None:
            out = expand_tokens(raw, ids, offsets, norm)
        else:
            out = first_occurrence(
                expand_tokens(relabelled[0], relabelled[1], offsets, relabelled[2])
            )
        if self.han_bigrams:
            out = append_tokens(out, self._bigrams(prepared))
        return out

    def encode_chunk(self, texts: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        return self._encode(texts, query=False)

    def encode_query_chunk(self, texts: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        return self._encode(texts, query=True)

    def _prepare(self, texts: list[str]) -> list[str]:
        prepared = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ConfigError(
                    f"text {i} is a {type(text).__name__}, not a str; analyzers take str"
                )
            prepared.append(text.lower() if self.lowercase else text)
        return prepared

    def __call__(self, text: str) -> list[str]:
        if not isinstance(text, str):
            raise ConfigError(f"analyzer {self.name!r} needs a str, got {type(text).__name__}")
        vocab, ids, _ = self.encode_chunk([text])
        return [vocab[i] for i in ids.tolist()]
