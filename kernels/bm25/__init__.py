"""BM25 kernels: index build from token ids and exact top-k scoring.

The public kernels, gathered from the modules that own them:

* :mod:`.build`: index layout, document frequencies, postings, BM25 weights (the idf and
  the variants' codes are ``fastrag.indexes.bm25.weights``, plain NumPy).
* :mod:`.heads`: rank directories and impact heads of terms in many documents.
* :mod:`.search`: one query and batches, the scoring strategies (design notes there),
  dense scores; :mod:`.maxscore` holds the ``touched`` and ``maxscore`` strategies.
* :mod:`.primitives`: CPU intrinsics, heap offers, galloping search, sorts.

numba checks a cached kernel against its own module's source only; this package drops its
cached kernels when any kernel source changes (``fastrag._kernels`` does it on import), so
callers compile again.
"""

from __future__ import annotations

from .._config import PARALLEL_MIN_QUERIES
from .build import build_postings, count_document_frequencies, weigh_postings
from .heads import build_head_rows, build_rank_rows
from .primitives import sort_rows
from .search import (
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
    "PARALLEL_MIN_QUERIES",
    "STRATEGY_AUTO",
    "STRATEGY_DENSE",
    "STRATEGY_MAXSCORE",
    "STRATEGY_TOUCHED",
    "build_head_rows",
    "build_postings",
    "build_rank_rows",
    "check_queries",
    "count_document_frequencies",
    "score_dense",
    "search_batch_parallel",
    "search_batch_serial",
    "search_one",
    "sort_rows",
    "weigh_postings",
]
