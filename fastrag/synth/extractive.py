"""An answer without an LLM: the retrieved sentences that share the most terms with the query.
``fastrag ask``, the server's chat (``/v1/chat/completions`` and the chat page) and the MCP
``ask`` tool answer with :func:`extractive_text` when no LLM is configured."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from fastrag.analysis import get_analyzer
from fastrag.retrieval.present import snippet

__all__ = ["EXTRACTIVE_HEADING", "extractive_answer", "extractive_text"]

#: the first line of an extractive answer (what tells a reader no LLM wrote it)
EXTRACTIVE_HEADING = "Best-matching passages (extractive answer):"

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


def extractive_text(
    query: str,
    hits: Sequence[Any],
    similarity: str,
    label: Callable[[Any], str],
    max_sentences: int = 3,
) -> str:
    """The extractive answer to ``query`` from ``hits`` (non-empty, best first) as text:
    :data:`EXTRACTIVE_HEADING`, then one ``- sentence  [label]`` line per sentence of
    :func:`extractive_answer` (``label(hit)`` names its source; no sentence sharing a term:
    the best hit's first 300 characters). Terms come from ``similarity``'s analyzer when it
    is a BM25 one, else from ``bm25``'s."""
    if not hits:
        raise ValueError("extractive_text needs at least one hit")
    analyzer = get_analyzer(similarity if similarity.startswith("bm25") else "bm25")
    best = extractive_answer(query, hits, analyzer, max_sentences)
    lines = [EXTRACTIVE_HEADING]
    for sent, hit in best or [(snippet(hits[0].text, 300), hits[0])]:
        lines.append(f"- {sent}  [{label(hit)}]")
    return "\n".join(lines)
