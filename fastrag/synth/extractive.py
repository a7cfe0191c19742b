"""An answer without an LLM: the retrieved sentences that share the most terms with the query
(``fastrag ask`` with no LLM configured)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["extractive_answer"]

# sentence ends (Latin and CJK punctuation) and line breaks
_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s*|\n+")


def extractive_answer(
    query: str,
    hits: Sequence[Any],
    analyzer: Callable[[str], Sequence[str]],
    max_sentences: int = 3,
) -> list[tuple[str, Any]]:
    """The sentences of ``hits`` (nodes with a ``text``) sharing the most query terms, as
    ``[(sentence, hit), ...]``, best first, at most ``max_sentences``.

    ``analyzer`` turns a text into terms (a fastrag analyzer, e.g. ``get_analyzer("bm25")``).
    A sentence scores its number of shared terms over ``sqrt(1 + its distinct terms)``; ties
    keep the hits' order, then the sentences' order. Sentences sharing no term are left out,
    so the list is empty when nothing matches.
    """
    terms = set(analyzer(query))
    scored = []
    for hi, hit in enumerate(hits):
        for si, sent in enumerate(_SENTENCE_END.split(hit.text)):
            sent = sent.strip()
            if len(sent) < 2:
                continue
            words = analyzer(sent)
            overlap = len(terms.intersection(words))
            if overlap:
                scored.append((-overlap / (1 + len(set(words))) ** 0.5, hi, si, sent, hit))
    scored.sort(key=lambda x: x[:3])
    return [(sent, hit) for *_, sent, hit in scored[:max_sentences]]
