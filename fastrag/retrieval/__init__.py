"""Retrieval: the Retriever, the similarity registry, joiners, rerankers, postprocessors.

The names load on first access (``fastrag.retrieval.KeywordFilter``).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "Retriever": "fastrag.retrieval.retriever",
    "register_similarity": "fastrag.retrieval.similarity",
    "ConcatenationDocumentJoiner": "fastrag.retrieval.joiners",
    "ReciprocalRankFusionJoiner": "fastrag.retrieval.joiners",
    "WeightedScoreJoiner": "fastrag.retrieval.joiners",
    "Reranker": "fastrag.retrieval.rerankers",
    "ModuleReranker": "fastrag.retrieval.rerankers",
    "register_reranker": "fastrag.retrieval.rerankers",
    "OpenAIRerank": "fastrag.retrieval.online",
    "SimilarityCutoff": "fastrag.retrieval.postprocessors",
    "KeywordFilter": "fastrag.retrieval.postprocessors",
    "Deduplicate": "fastrag.retrieval.postprocessors",
    "LongContextReorder": "fastrag.retrieval.postprocessors",
    "TargetGroup": "fastrag.retrieval.postprocessors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fastrag.retrieval' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
