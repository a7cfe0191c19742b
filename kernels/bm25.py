"""BM25 kernels: index build from token ids and exact top-k scoring.

The public kernels, gathered from the modules that own them:

* :mod:`.bm25_build`: index layout, document frequencies, postings, BM25 weights.
* :mod:`.bm25_heads`: rank directories and impact heads of terms in many documents.
* :mod:`.bm25_search`: one query and batches, the scoring strategies (design notes there),
  dense scores; :mod:`.bm25_maxscore` holds the ``touched`` and ``maxscore`` strategies.
* :mod:`.bm25_primitives`: CPU intrinsics, heap offers, galloping search, sorts.

numba checks a cached kernel against its own module's source only; the package drops every
cached kernel when any kernel source changes (:mod:`._fresh`), so callers compile again.
"""

from __future__ import annotations

from ._config import PARALLEL_MIN_QUERIES
from .bm25_build import (
    METHOD_CODES,
    base_weights_for,
    build_postings,
    count_document_frequencies,
    idf_weights,
    weigh_postings,
)
from .bm25_heads import build_head_rows, build_rank_rows
from .bm25_primitives import sort_rows
from .bm25_search import (
    STRATEGY_AUTO,
    STRATEGY_DENSE,
    STRATEGY_MAXSCORE,
    STRATEGY_TOUCHED,
    check_queries,
    score_dense,
    search_batch_parallel,
    search_batch_serial,
    search_one,
)

__all__ = [
    "METHOD_CODES",
    "PARALLEL_MIN_QUERIES",
    "STRATEGY_AUTO",
    "STRATEGY_DENSE",
    "STRATEGY_MAXSCORE",
    "STRATEGY_TOUCHED",
    "base_weights_for",
    "build_head_rows",
    "build_postings",
    "build_rank_rows",
    "check_queries",
    "count_document_frequencies",
    "idf_weights",
    "score_dense",
    "search_batch_parallel",
    "search_batch_serial",
    "search_one",
    "sort_rows",
    "weigh_postings",
]
