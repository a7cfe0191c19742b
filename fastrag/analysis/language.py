"""The language of a corpus sample (:func:`detect_language`: "zh" or "en") and of one text
(:func:`text_language`: an ISO 639-1 code and its probability, stored as documents'
``language`` and ``language_score`` metadata).

One text's language comes from py3langid (a maintained fork of langid.py; BSD-3; its model,
4.6 MB, ships in the wheel and covers 97 languages), after code spans, fenced blocks, URLs and
``{{placeholders}}`` are taken out (shortcuts by script, kana -> ja and Hangul -> ko, were
measured and left out: no fewer errors, no less CPU). On 4,186 documents in 35 languages
(``bench/bench_language.py``) it errs on 0.02% of whole documents (py3langid on the raw
text: 0.19%) and 0.17% of their first 200 characters; the script and function-word rules it
replaced erred on 55% (they knew 13 languages; 4.5% on the eight of issue 42).
"""

from __future__ import annotations

import contextlib
import logging
import lzma
import os
import re
import shutil
import tempfile
import threading
import zipfile
from array import array
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from fastrag._cache import cache_root

__all__ = [
    "UNCERTAIN",
    "detect_language",
    "detect_text_language",
    "text_language",
    "texts_languages",
]

# below this probability a document's language is a guess: filters keep such documents when
# asked to (``language == 'ko' || language_score < 0.5``); docs/guide/languages.md
UNCERTAIN = 0.5

_LATIN_WORD = re.compile(r"[A-Za-z\u00C0-\u024F]+")
_CJK = re.compile(r"[\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF]")


def detect_language(texts: Sequence[str], sample: int = 400) -> str:
    """ "zh" when CJK characters outnumber Latin words in an even sample of ``texts``, else
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


# taken out before detection: fenced code blocks, code spans, URLs, {{placeholders}}
_NOT_PROSE = re.compile(r"```.*?(?:```|$)|`[^`\n]*`|<?https?://[^\s>]+>?|\{\{.*?\}\}", re.S)
_LETTER = re.compile(r"[^\W\d_]")
# the model's labels for varieties filters know by their language: Wu and Cantonese (which it
# says for Chinese in traditional characters), Moroccan and Egyptian Arabic, southern Uzbek
_FOLD = {"wuu": "zh", "yue": "zh", "ary": "ar", "arz": "ar", "uzs": "uz"}
_NOT_LANGUAGE = "zxx"  # the model's label for code and symbols

_log = logging.getLogger("fastrag")
_model = None
_model_lock = threading.Lock()


def _identifier():
    """py3langid's identifier with probabilities, loaded once per process."""
    global _model
    if _model is None:
        with _model_lock:
            if _model is None:
                _model = _load_identifier()
    return _model


def _load_identifier() -> Any:
    """From the unpacked copy of py3langid's model in the cache folder (0.27 s of CPU instead
    of 0.9 s: its LZMA is undone once per install), written there first if missing; from
    the packaged model itself when the copy cannot be written or read."""
    from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier  # lazy: its import

    path = cache_root() / "langid" / f"py3langid-{version('py3langid')}.npz"
    try:
        if not path.exists():
            _unpack(MODEL_DIR / MODEL_FILE, path)
        with np.load(path, allow_pickle=False) as data:  # zip members are CRC-checked
            parts = (
                data["ptc"],
                data["pc"],
                data["classes"].tolist(),
                _uint_array(data["nextmove"]),
                data["out_feat"].tolist(),
            )
            row = _uint_array(data["nextmove_row"])
        return LanguageIdentifier(*parts, norm_probs=True, tk_row=row)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        _log.debug("fastrag: py3langid's model loads from its package (%s)", exc)
        if not isinstance(exc, OSError):  # a damaged copy: the next process writes it again
            with contextlib.suppress(OSError):
                path.unlink()
        return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def _unpack(src: Path, dest: Path) -> None:
    """``src`` (an ``.npz.xz``) decompressed to ``dest``, atomically (a reader sees the whole
    file or none)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out, lzma.open(src) as packed:
            shutil.copyfileobj(packed, out, length=1 << 20)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _uint_array(arr: np.ndarray) -> array:
    """An unsigned NumPy array as a stdlib ``array`` (what py3langid's byte loop indexes)."""
    out = array({2: "H", 4: "I", 8: "L"}[arr.dtype.itemsize])
    out.frombytes(np.ascontiguousarray(arr).tobytes())
    return out


def text_language(text: str, sample: int = 4000) -> tuple[str | None, float]:
    """The language of ``text`` as an ISO 639-1 code (``zh`` for any Chinese, ``no``/``nn``
    for Norwegian, a 3-letter code where none exists) and its probability in [0, 1], read from
    its first ``sample`` characters of prose (code and URLs taken out); ``(None, 0.0)`` for
    text without letters. Below :data:`UNCERTAIN` the code is a guess."""
    raw = text[: 2 * sample]
    head = _NOT_PROSE.sub(" ", raw)[:sample]
    if not _LETTER.search(head):  # only code: its comments and names are all there is
        head = raw[:sample]
        if not _LETTER.search(head):
            return None, 0.0
    probs: dict[str, float] = {}
    for lang, p in _identifier().rank(head):
        lang = _FOLD.get(lang, lang)
        probs[lang] = probs.get(lang, 0.0) + p
    probs.pop(_NOT_LANGUAGE, None)
    best = max(probs, key=probs.__getitem__)
    return best, round(min(probs[best], 1.0), 4)


def detect_text_language(text: str, sample: int = 4000) -> str | None:
    """The language code of :func:`text_language` (None for text without letters)."""
    return text_language(text, sample)[0]


def texts_languages(texts: Sequence[str], sample: int = 64) -> list[tuple[str | None, float]]:
    """:func:`text_language` of each text. Of more than ``sample`` texts (a JSONL or CSV
    file's records) an evenly spaced ``sample`` is detected first: when it agrees on one
    language with confidence, the others get that language and the sample's lowest
    probability; otherwise every text is detected."""
    if len(texts) <= sample:
        return [text_language(t) for t in texts]
    picks = np.linspace(0, len(texts) - 1, sample).round().astype(np.int64).tolist()
    seen = {i: text_language(texts[i]) for i in picks}
    codes = {code for code, _ in seen.values()}
    low = min(p for _, p in seen.values())
    if len(codes) != 1 or None in codes or low < UNCERTAIN:
        return [seen[i] if i in seen else text_language(t) for i, t in enumerate(texts)]
    shared = (codes.pop(), low)
    return [seen.get(i, shared) for i in range(len(texts))]
