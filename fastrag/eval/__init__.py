"""Retrieval evaluation: id metrics (hit rate, recall@k, MRR, nDCG@k), LazyLLM's non-LLM
context recall and context relevance, and loaders for SQuAD-style files and BEIR folders.

``LLMContextRecall`` (LLM-judged recall) lives in :mod:`fastrag.eval.llm` and is imported on
first access, so ``import fastrag.eval`` never pulls in the LLM stack.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from fastrag.eval.loaders import (
    RetrievalDataset,
    load_beir,
    load_squad,
    normalize_paragraph,
    squad_questions,
)
from fastrag.eval.metrics import (
    ContextRelevance,
    NonLLMContextRecall,
    context_recall,
    context_relevance,
    evaluate_retrieval,
    hit_rate,
    mrr,
    ndcg_at_k,
    recall_at_k,
)

__all__ = [
    "ContextRelevance",
    "NonLLMContextRecall",
    "RetrievalDataset",
    "context_recall",
    "context_relevance",
    "evaluate_retrieval",
    "hit_rate",
    "load_beir",
    "load_squad",
    "mrr",
    "ndcg_at_k",
    "normalize_paragraph",
    "recall_at_k",
    "squad_questions",
]

_LAZY = {"LLMContextRecall": "fastrag.eval.llm"}
# listed for ``import *`` only once its module exists
__all__ += [name for name, mod in _LAZY.items() if importlib.util.find_spec(mod) is not None]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fastrag.eval' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
