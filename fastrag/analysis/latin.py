"""The language of a Latin-script text by its function words, for the default analyzer's
per-text Snowball stemmer: English, French, Spanish, Portuguese, German, Italian or Dutch.

A text's words are counted against each language's list of common function words (a word
in k lists counts 1/k for each); the language with the most, strictly more than any other,
is the text's. A text without such evidence (a short query of content words, code, a log
line) is English in a page; a query without it is looked up in every candidate language
(see :class:`~fastrag.analysis.mixed.MixedAnalyzer`). The lists are the languages'
most frequent articles, prepositions, pronouns, conjunctions and auxiliaries; they are also
the stopwords of a text in that language.
"""

from __future__ import annotations

import functools
import hashlib
import json

import numpy as np

__all__ = ["LANGUAGES", "function_words", "rules_tag", "text_languages"]

_WORDS = {
    "english": """a no the and of to in is it that for with as on this are be by from how what when
        why do does can my not or which you your have has was will into after before only
        between without should there their they them its were been being an if i me we our
        more than then so""",
    "french": """de le la les des du une un et est dans pour avec sur pas qui que ce cette ces
        sont comment au aux par plus ne se son sa ses leur mais où ou entre avant après sans
        seulement quand pourquoi vous nous je il elle ils d l qu c n j être avoir peut faut
        fait tout tous même aussi lorsque dont sous chaque mon ma mes ton ta tes notre votre à""",
    "spanish": """a de el la los las le del una un y es en para con por que qué cómo como se no
        lo al su sus cuando sin más pero este esta estos estas entre antes después solo sólo muy hay
        puedo está están son ser cada también desde hasta otro otra mi mis tu usted dos""",
    "portuguese": """a de o os as do da dos das um uma e é em no na nos nas para por que como
        se não ao à às sua seu suas seus quando sem mais mas este esta isso isto entre antes
        depois só apenas está estão são ser cada também pelo pela você ou meu minha""",
    "german": """der die das und ist in den dem des ein eine einen einem einer mit für auf von
        zu nicht sich wie im auch es an werden wird oder wenn kann ich man nach vor ohne nur
        zwischen aus sie wir bei zum zur sind hat haben dass ob""",
    "italian": """a il lo la gli le i di del della dei delle un una e è in per con su che non
        come si da al alla nel nella quando senza più ma questo questa tra prima dopo solo
        sono essere ogni anche perché""",
    "dutch": """de het een en van is in op te dat die met voor niet zijn aan hoe wat wanneer
        als ook naar bij om er maar of uit kan ik je wordt worden deze dit""",
}
#: the languages, in bit order
LANGUAGES: tuple[str, ...] = tuple(_WORDS)
_ENGLISH = LANGUAGES.index("english")
_SHARE = 420


@functools.cache
def function_words(language: str) -> frozenset[str]:
    """The function words of ``language`` (one of :data:`LANGUAGES`)."""
    return frozenset(_WORDS[language].split())


#: bumped when the rule of :func:`text_languages` or its use in the analyzer changes
RULES_VERSION = 2


@functools.cache
def rules_tag() -> str:
    """Names the rules and word lists (in an analyzer's options: indexes built with other
    lists are rebuilt)."""
    lists = json.dumps(_WORDS, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return f"function-words-v{RULES_VERSION}:{hashlib.sha1(lists).hexdigest()[:12]}"


@functools.cache
def _votes() -> tuple[dict[str, int], np.ndarray]:
    """``(row of each function word, votes)``: ``votes[row, lang]`` is what the word gives
    each language (420 // k for a word in k lists: lcm(1..7), so ties are exact); row 0 is
    every other word."""
    rows: dict[str, int] = {}
    for lang in LANGUAGES:
        for w in sorted(function_words(lang)):
            rows.setdefault(w, len(rows) + 1)
    votes = np.zeros((len(rows) + 1, len(LANGUAGES)), dtype=np.int64)
    for bit, lang in enumerate(LANGUAGES):
        for w in function_words(lang):
            votes[rows[w], bit] = 1
    votes[1:] *= _SHARE // votes[1:].sum(axis=1, keepdims=True)
    votes.setflags(write=False)
    return rows, votes


def text_languages(
    raw: list[str], ids: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Per text (``ids[offsets[t]:offsets[t + 1]]`` index ``raw``, lowercased words),
    ``(language, candidates)``: the index in :data:`LANGUAGES` of the language with the most
    function words (strictly more than any other; a word in k lists counts 1/k for each),
    else -1, and the bit mask of the languages it could be (those tied at the top; every
    language for a text without function words); a text of function words only is English.
    None when every text is English."""
    rows, votes = _votes()
    n = len(offsets) - 1
    word_row = np.fromiter((rows.get(r, 0) for r in raw), dtype=np.int64, count=len(raw))
    tok = word_row[ids]
    pos = np.flatnonzero(tok)
    text = np.searchsorted(offsets, pos, side="right") - 1
    tok_votes = votes[tok[pos]]
    counts = np.zeros((n, len(LANGUAGES)), dtype=np.int64)
    for bit in range(len(LANGUAGES)):
        counts[:, bit] = np.bincount(text, tok_votes[:, bit], minlength=n).astype(np.int64)
    top = counts.max(axis=1)
    at_top = counts == top[:, None]
    lang = np.where(at_top.sum(axis=1) == 1, counts.argmax(axis=1), -1).astype(np.int8)
    # a text of function words only ("c", "a la", "the who") is English: its words are its
    # subject, not evidence (a search for the C language must keep "c")
    only = np.bincount(text, minlength=n) == np.diff(offsets)
    lang[only & (np.diff(offsets) > 0)] = _ENGLISH
    weights = np.left_shift(1, np.arange(len(LANGUAGES), dtype=np.int64))
    cands = (at_top * weights).sum(axis=1)
    if bool((lang == _ENGLISH).all()):
        return None
    return lang, cands
