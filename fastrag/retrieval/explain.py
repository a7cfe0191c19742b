"""Why a query found nothing, said for people: what was wrong and what to do about it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc

from fastrag.analysis.language import UNCERTAIN, text_language

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.retrieval.retriever import Retriever

__all__ = ["uncertain_left_out", "why_no_hits"]

_HAN = re.compile("[\u3400-\u9fff]")
_LANGUAGE_NAMES = {
    "en": "English",
    "zh": "Chinese",
    "ja": "Japanese",
    "ko": "Korean",
    "ru": "Russian",
    "fr": "French",
    "de": "German",
    "es": "Spanish",
    "pt": "Portuguese",
    "it": "Italian",
    "nl": "Dutch",
    "el": "Greek",
    "ar": "Arabic",
}
_NAMES_LANGUAGE = re.compile(r"\blanguage\b")
# analyzers that keep a run of Chinese characters as one word (a question never matches)
_WORD_ANALYZERS = ("bm25_english",)


def _languages(group: Any) -> set[str]:
    meta = group.metadata_table()
    if "language" not in meta.column_names:
        return set()
    return {v for v in meta.column("language").unique().to_pylist() if isinstance(v, str)}


def _name(code: str) -> str:
    return _LANGUAGE_NAMES.get(code, code)


def why_no_hits(ret: Retriever, query: str, flt: Any = None, mask: Any = None) -> str:
    """A sentence saying why ``query`` got no hits from ``ret`` and how to fix it."""
    group = ret.doc.group(ret.group_name)
    where = f"group {ret.group_name!r}"
    if not isinstance(query, str) or not query.strip():
        return "the query is empty: type a question or a few keywords"
    if mask is not None and not mask.any():
        return (
            f"the filter {flt!r} matches none of the {len(group):,} nodes of {where}: "
            "loosen or drop the filter"
        )
    cut = ret.similarity_cut_off
    lexicons = ret.path.lexicons(ret.doc, group) if ret.sim.path.analyzed else []
    if lexicons:
        # bm25_fused searches two indexes: a term of either could have scored
        terms = [(analyzer.query_tokens(query), vocab) for analyzer, vocab in lexicons]
        if not any(ts for ts, _ in terms):
            names = " and the ".join(repr(a.name) for a, _ in lexicons)
            which = "analyzers drop" if len(lexicons) > 1 else "analyzer drops"
            return (
                f"the query has no indexable terms: the {names} {which} all of it "
                "(stopwords, punctuation, symbols); use content words"
            )
        if not any(t in vocab for ts, vocab in terms for t in ts):
            shown = ", ".join(dict.fromkeys(t for ts, _ in terms for t in ts[:8]))
            msg = f"none of the query's terms ({shown}) occurs in {where}"
            if _HAN.search(query) and ret.sim.analyzer in _WORD_ANALYZERS:
                return (
                    f"{msg}: similarity {ret.similarity!r} keeps a run of Chinese "
                    "characters as one word; search with similarity 'bm25' (the default, "
                    "any script) or 'bm25_chinese'"
                )
            held = _languages(group)  # the model loads (~0.7 s of CPU) only when needed
            asked, confidence = text_language(query) if held else (None, 0.0)
            if asked and confidence >= UNCERTAIN and asked not in held:
                return (
                    f"{msg}: the question is in {_name(asked)} and the documents are in "
                    f"{', '.join(sorted(_name(x) for x in held))}; ask in their language "
                    "or search with similarity 'hybrid' (multilingual embeddings match "
                    "across languages)"
                )
            return f"{msg}: try other words, or similarity 'hybrid' to match by meaning"
    if cut is not None:
        return (
            f"no node of {where} scored above similarity_cut_off={cut}: lower or drop the cut-off"
        )
    return f"no node of {where} matches the query"


def uncertain_left_out(meta: Any, mask: np.ndarray, flt: Any) -> str | None:
    """A warning when filter ``flt``, which tests ``language``, leaves out rows of ``meta``
    whose language is uncertain (``language_score`` below UNCERTAIN), with the fix; else
    None."""
    if "language_score" not in meta.column_names:
        return None
    names = list(flt) if isinstance(flt, Mapping) else [str(getattr(flt, "expression", flt))]
    if not any(isinstance(x, str) and _NAMES_LANGUAGE.search(x) for x in names):
        return None
    unsure = pc.fill_null(pc.less(meta.column("language_score"), UNCERTAIN), False)
    n = int(np.count_nonzero(np.asarray(unsure, dtype=bool) & ~mask))
    if not n:
        return None
    return (
        f"the filter {str(flt)!r} leaves out {n:,} node(s) whose language is uncertain "
        f"(language_score < {UNCERTAIN}); add || language_score < {UNCERTAIN} to keep them"
    )
