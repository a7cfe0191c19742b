"""An answer without an LLM: the retrieved sentences that share the most terms with the query.
``fastrag ask``, the server's chat (``/v1/chat/completions`` and the chat page) and the MCP
``ask`` tool answer with :func:`extractive_text` when no LLM is configured."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from fastrag.analysis import get_analyzer
from fastrag.retrieval.present import snippet

__all__ = [
    "EXTRACTIVE_HEADING",
    "clean_sentence",
    "extractive_answer",
    "extractive_text",
    "sentence_spans",
]

#: the first line of an extractive answer (what tells a reader no LLM wrote it)
EXTRACTIVE_HEADING = "Best-matching passages (extractive answer):"

# Markdown lines that start a block of their own: headings, list items, quotes, table rows,
# code fences, HTML; a line of none of these continues the paragraph above (a hard wrap)
_BLOCK = re.compile(r"[ \t]*(?:#{1,6}\s|[-*+]\s|\d{1,3}[.)]\s|>|\||```|~~~|<[A-Za-z!/])")
_HEADING = re.compile(r"[ \t]*#{1,6}\s")
_FENCE = re.compile(r"[ \t]*(?:```|~~~)")
_RULE = re.compile(r"[ \t]*(?:[-*_=][ \t]*){3,}$|[ \t]*\|?[ \t:|-]*-{3}[ \t:|-]*$")
_HTML = re.compile(r"<[^>]*>")  # a line that is one HTML tag
_MARKER = re.compile(r"^(?:[-*+>]\s+|\d{1,3}[.)]\s+)+")
# a sentence ends at CJK end punctuation, or at Latin end punctuation before a space and a
# character that may start a sentence (not a lower-case letter); closing quotes stay with it
_CJK_END = re.compile(r"[。！？｡]+[”’」』）》\)\]]*|[!?！？]+(?=[\u3000-\u9fff\uac00-\ud7af])")
_LATIN_END = re.compile(r"[.!?…]+[\"'”’)\]*_`]*(?=\s+[^\sa-z])")
_ABBREVIATIONS = frozenset(
    "e.g i.e etc vs cf mr mrs ms dr st no fig al approx incl ca resp viz".split()
)
_CJK = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each whole sentence of ``text``, in order.

    Paragraphs end at blank lines and at lines that start a Markdown block; a single line
    break inside a paragraph is a hard wrap, not an end. Inside a paragraph a sentence ends at
    ``。！？`` or at ``. ! ? …`` followed by a space and no lower-case letter (``e.g. this``,
    ``v1.2``, ``tar.gz``, ``Dr. Smith`` and semicolons do not end one). Headings, code blocks,
    rules and table rows are not sentences and are left out; a list item is its own unit."""
    spans: list[tuple[int, int]] = []
    para: list[int] = []  # [start, end] of the paragraph being read
    fenced = False
    pos = 0
    for line in text.splitlines(keepends=True):
        start, pos = pos, pos + len(line)
        body = line.rstrip("\r\n")
        end = start + len(body)
        if _FENCE.match(body):
            fenced = not fenced
        block = fenced or _FENCE.match(body) or not body.strip() or _BLOCK.match(body)
        if block or _RULE.match(body):
            if para:
                spans += _split(text, *para)
            para = []
        if fenced or _FENCE.match(body) or _HEADING.match(body) or _RULE.match(body):
            continue
        if not body.strip() or body.strip()[0] == "|" or _HTML.fullmatch(body.strip()):
            continue
        if para:
            para[1] = end
        else:
            para = [start, end]
    if para:
        spans += _split(text, *para)
    return spans


def _split(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The sentences of the paragraph ``text[start:end]``."""
    cuts = [start]
    for pattern in (_CJK_END, _LATIN_END):
        for m in pattern.finditer(text, start, end):
            if pattern is _LATIN_END and m.group()[0] == ".":
                word = re.search(r"(\S+)$", text[cuts[0] : m.start()])
                w = word.group(1).lower().lstrip("(\"'“‘") if word else ""
                if w in _ABBREVIATIONS or (len(w) == 1 and w.isalpha()):
                    continue
            cuts.append(m.end())
    cuts = sorted(set(cuts)) + [end]
    out = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        seg = text[a:b]
        lead = len(seg) - len(seg.lstrip())
        if seg.strip():
            out.append((a + lead, a + len(seg.rstrip())))
    return out


def clean_sentence(raw: str) -> str:
    """A sentence as an answer shows it: on one line (a wrap between two CJK characters joins
    them without a space), without a leading list or quote marker."""
    lines = [ln.strip() for ln in raw.splitlines() if ln.strip()]
    out = lines[0] if lines else ""
    for ln in lines[1:]:
        out += ("" if _CJK.match(out[-1]) and _CJK.match(ln[0]) else " ") + ln
    return _MARKER.sub("", re.sub(r"[ \t]+", " ", out).strip())


def _passage(hit: Any) -> tuple[str, int, int]:
    """The text the hit's sentences come from and the hit's span in it: its parent's text
    around it when the hit is a chunk of it (so a sentence cut by the chunk's edge is read
    whole), else its own text."""
    node = getattr(hit, "node", hit)
    text = hit.text
    parent = getattr(node, "parent", None)
    if parent is None or not text:
        return text, 0, len(text)
    whole = parent.text
    start = getattr(node, "start", None)
    if start is None or whole[start : start + len(text)] != text:
        # a transform that records no offsets (a plain function): the chunk's place in its
        # parent, when it occurs there once
        start = whole.find(text)
        if start < 0 or whole.find(text, start + 1) >= 0:
            return text, 0, len(text)
    end = start + len(text)
    lo, hi = max(0, start - _CONTEXT), min(len(whole), end + _CONTEXT)
    return whole[lo:hi], start - lo, end - lo


_CONTEXT = 2000  # characters of the parent read on either side of a chunk


def extractive_answer(
    query: str,
    hits: Sequence[Any],
    analyzer: Callable[[str], Sequence[str]],
    max_sentences: int = 3,
) -> list[tuple[str, Any]]:
    """The whole sentences of ``hits`` (nodes with a ``text``) sharing the most query terms,
    as ``[(sentence, hit), ...]``, best first, at most ``max_sentences``, each sentence once.

    Sentences are cut by :func:`sentence_spans`; a hit that is a chunk of a larger text (its
    parent) gives the whole sentences it overlaps, also where its edges cut one. ``analyzer``
    turns a text into terms (a fastrag analyzer, e.g. ``get_analyzer("bm25")``). A sentence
    scores its number of shared terms over ``sqrt(1 + its distinct terms)``; ties keep the
    hits' order, then the sentences' order. Sentences sharing no term, and those of fewer
    than two distinct terms, are left out, so the list is empty when nothing matches.
    """
    terms = set(analyzer(query))
    scored, seen = [], set()
    for hi, hit in enumerate(hits):
        text, lo, hi_end = _passage(hit)
        for si, (a, b) in enumerate(sentence_spans(text)):
            if b <= lo or a >= hi_end:
                continue
            sent = clean_sentence(text[a:b])
            if sent in seen:
                continue
            seen.add(sent)
            words = set(analyzer(sent))
            overlap = len(terms.intersection(words))
            if overlap and len(words) >= 2:
                scored.append((-overlap / (1 + len(words)) ** 0.5, hi, si, sent, hit))
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
