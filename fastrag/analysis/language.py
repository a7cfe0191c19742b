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
import json
import lzma
import re
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastrag._cache import cache_root
from fastrag._derived import open_derived

__all__ = [
    "UNCERTAIN",
    "detect_language",
    "detect_text_language",
    "release_language_model",
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

# bumped when the derived model files change (part of their cache folder's name)
_MODEL_RECIPE = 2
_MODEL_ARRAYS = ("ptc", "pc", "nextmove", "nextmove_row", "out_feat")
_MODEL_FILES = (*(f"{n}.npy" for n in _MODEL_ARRAYS), "classes.json")
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


def release_language_model() -> None:
    """Drop this process's language model (its mapped pages: ~20 MiB after a few thousand
    texts); the next detection opens it again (milliseconds). For a one-shot process done
    reading, such as ``fastrag ingest`` once its files are read."""
    global _model
    with _model_lock:
        _model = None


def _derive_model(folder: Path) -> None:
    """py3langid's packaged model (an LZMA-packed ``.npz``) as one ``.npy`` per array."""
    from py3langid.langid import MODEL_DIR, MODEL_FILE  # lazy: its import

    with tempfile.TemporaryFile(suffix=".npz") as npz:
        with lzma.open(MODEL_DIR / MODEL_FILE) as packed:
            shutil.copyfileobj(packed, npz, length=1 << 20)
        npz.seek(0)
        with np.load(npz, allow_pickle=False) as data:  # zip members are CRC-checked
            for name in _MODEL_ARRAYS:
                np.save(folder / f"{name}.npy", data[name])
            classes = data["classes"].tolist()
    (folder / "classes.json").write_text(json.dumps(classes), "utf-8")


def _load_model(folder: Path, mmap_mode: str | None) -> Any:
    from py3langid.langid import LanguageIdentifier  # lazy: its import

    arrays = {n: np.load(folder / f"{n}.npy", mmap_mode=mmap_mode) for n in _MODEL_ARRAYS}
    # memoryviews index as fast as the stdlib arrays py3langid's byte loop expects
    return LanguageIdentifier(
        arrays["ptc"],
        np.array(arrays["pc"]),
        json.loads((folder / "classes.json").read_text("utf-8")),
        memoryview(arrays["nextmove"]),
        memoryview(arrays["out_feat"]),
        norm_probs=True,
        tk_row=memoryview(arrays["nextmove_row"]),
    )


def _load_identifier() -> Any:
    """py3langid's model, derived once per version into the cache folder as memory-mapped
    arrays: a process opens it in milliseconds and holds only the pages its texts touch
    (instead of its 65 MB)."""
    from py3langid import __version__  # lazy: its import

    folder = cache_root() / "langid" / f"py3langid-{__version__}-r{_MODEL_RECIPE}"
    model = open_derived(folder, _MODEL_FILES, _derive_model, _load_model, "language model")
    for old in folder.parent.glob("py3langid-*.npz"):  # the copy an older fastrag kept
        with contextlib.suppress(OSError):
            old.unlink()
    return model


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
