"""fastrag's language detector before issue 42 (script ranges + function words), copied from
fastrag/analysis/language.py at commit 7e5a8b9 as the baseline of bench_language.py."""

from __future__ import annotations

import re

import numpy as np

_LATIN_WORD = re.compile(r"[A-Za-z\u00C0-\u024F]+")

# script ranges (code points, inclusive), counted over the text's first characters
_RANGES = {
    "kana": ((0x3040, 0x30FF), (0x31F0, 0x31FF)),
    "hangul": ((0xAC00, 0xD7AF), (0x1100, 0x11FF), (0x3130, 0x318F)),
    "han": ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF)),
    "cyrillic": ((0x0400, 0x04FF),),
    "greek": ((0x0370, 0x03FF),),
    "arabic": ((0x0600, 0x06FF),),
    "latin": ((0x41, 0x5A), (0x61, 0x7A), (0xC0, 0x24F)),
}

_EDGES = np.array(
    sorted(e for rs in _RANGES.values() for lo, hi in rs for e in (lo, hi + 1)), np.uint32
)
# interval i of searchsorted(_EDGES, cp, "right") -> script (odd intervals are inside a range)
_INTERVAL = {
    int(np.searchsorted(_EDGES, lo, "right")): name for name, rs in _RANGES.items() for lo, _ in rs
}

# the most frequent function words of each Latin-script language Snowball stems
_FUNCTION_WORDS = {
    "en": "the of and to in is that for it with as are on this be by you not or from",
    "fr": "le la les de des du et est un une que qui dans pour pas sur au avec ce",
    "de": "der die das und ist nicht mit den von zu ein eine auf für sich dem des im",
    "es": "el la los las de del y que en un una es por para con se no al lo",
    "pt": "o a os as de do da e que em um uma para com não é se na no por",
    "it": "il la le di del della e che in un una per con non è si da al gli",
    "nl": "de het een en van is dat op te in niet met voor zijn er aan ook",
}
_WORD_SETS = {lang: frozenset(words.split()) for lang, words in _FUNCTION_WORDS.items()}


def detect_text_language(text: str, sample: int = 2000) -> str | None:
    """The language of ``text`` as an ISO 639-1 code, by script and, for Latin script, by
    function words (en fr de es pt it nl; English when none decides): ``zh``, ``ja`` (any
    Kana), ``ko``, ``ru`` (Cyrillic), ``el``, ``ar``; None for text without letters (numbers,
    code symbols)."""
    head = text[:sample]
    cp = np.frombuffer(head.encode("utf-32-le", "surrogatepass"), np.uint32)
    per = np.bincount(np.searchsorted(_EDGES, cp, "right"), minlength=len(_EDGES) + 1)
    counts = dict.fromkeys(_RANGES, 0)
    for i, name in _INTERVAL.items():
        counts[name] += int(per[i])
    letters = sum(counts.values())
    if not letters:
        return None
    if counts["kana"] >= 0.05 * letters:
        return "ja"
    if counts["hangul"] >= 0.3 * letters:
        return "ko"
    words = _LATIN_WORD.findall(head, 0, 600)
    if counts["han"] and counts["han"] * len(head[:600]) >= len(words) * len(head):
        return "zh"
    script = max(("cyrillic", "greek", "arabic", "latin"), key=lambda k: counts[k])
    if script != "latin" and counts[script] > counts["latin"]:
        return {"cyrillic": "ru", "greek": "el", "arabic": "ar"}[script]
    lowered = [w.lower() for w in words]
    hits = {lang: sum(1 for w in lowered if w in ws) for lang, ws in _WORD_SETS.items()}
    best = max(hits, key=lambda lang: (hits[lang], lang == "en"))
    return best if hits[best] > hits["en"] else "en"
