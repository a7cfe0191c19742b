"""The fused BM25 path (``similarity="bm25_fused"``): the group searched by BM25 over two
analyzers' tokens, the Retriever's (``bm25``'s by default: stemmed, stopwords dropped, jieba
for Han) and ``bm25_cjk``'s (words as written, no stopwords, CJK bigrams), each to ``depth``,
then fused (relative scores, equal weights, as Elasticsearch's "most fields" over a stemmed
and an unstemmed field); the cut-off applies to fused scores."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from fastrag.analysis import get_analyzer
from fastrag.errors import ConfigError
from fastrag.indexes.base import Hits
from fastrag.indexes.bm25.args import check_bm25_params
from fastrag.retrieval.fusion import check_fusion, fuse_and_cut
from fastrag.retrieval.paths.base import PathState, SearchPath
from fastrag.retrieval.paths.bm25 import BM25_PARAMS, BM25Path

__all__ = ["FUSED_WITH", "FusedBM25Path"]

#: the analyzer whose BM25 ranking is fused with the Retriever's
FUSED_WITH = "bm25_cjk"
_FUSION_PARAMS = ("fusion", "weights", "rrf_k", "depth")
#: equal weights: the two rankings count alike (bench/bench_quality.py, docs/guide/languages.md)
_WEIGHTS = (0.5, 0.5)


@functools.lru_cache(maxsize=1)
def _second_analyzer() -> Any:
    return get_analyzer(FUSED_WITH)


def _fusion_options(params: Mapping[str, Any], similarity: str) -> dict[str, Any]:
    """The fusion options among ``params``, checked, with defaults."""
    opts = check_fusion(dict(params), BM25_PARAMS)
    if opts["weights"] is not None and len(opts["weights"]) != 2:
        raise ConfigError(
            f"weights has {len(opts['weights'])} numbers; {similarity!r} fuses 2 rankings "
            f"(the Retriever's analyzer's, then {FUSED_WITH!r}'s), e.g. weights=[0.5, 0.5]"
        )
    return opts


class FusedBM25Path(SearchPath):
    """BM25 over the Retriever's analyzer fused with BM25 over ``bm25_cjk`` (``fusion``,
    ``weights``: the first ranking's then the second's, ``rrf_k``, ``depth``, and the BM25
    parameters of both)."""

    kind = "bm25_fused"
    analyzed = True
    shard = None
    param_names = BM25_PARAMS + _FUSION_PARAMS

    def __init__(self, state: PathState) -> None:
        super().__init__(state)
        self.fusion = _fusion_options(state.params, state.similarity)
        self.first = BM25Path(state)
        self.second = BM25Path(replace(state, analyzer=_second_analyzer))

    @classmethod
    def check(cls, params: Mapping[str, Any], similarity: str) -> dict[str, Any]:
        params = super().check(params, similarity)
        _fusion_options(params, similarity)
        check_bm25_params(**{p: v for p, v in params.items() if p in BM25_PARAMS})
        return params

    def prepare(self, doc: Any, group: Any) -> tuple[Any, Any, int]:
        return self.first.prepare(doc, group), self.second.prepare(doc, group), len(group)

    def lexicons(self, doc: Any, group: Any) -> list[tuple[Any, Any]]:
        return self.first.lexicons(doc, group) + self.second.lexicons(doc, group)

    def store(self, doc: Any, group: Any) -> None:
        self.first.store(doc, group)
        self.second.store(doc, group)

    def search(self, prepared: Any, queries: Sequence[str], k: int, mask: Any) -> Hits:
        first, second, n = prepared
        opts = self.fusion
        depth = min(max(k, opts["depth"]), n)
        paths = [
            self.first.search(first, queries, depth, mask, fused=True),
            self.second.search(second, queries, depth, mask, fused=True),
        ]
        weights = opts["weights"] or list(_WEIGHTS)
        return fuse_and_cut(paths, k, opts, weights, self.state.cutoff_for(None))
