"""The hybrid path: BM25 and dense (each embed key) searched to ``depth``, then fused
(relative scores weighted, or reciprocal rank fusion); the cut-off applies to fused scores."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastrag.errors import ConfigError
from fastrag.indexes.base import Hits
from fastrag.indexes.bm25.args import check_bm25_params
from fastrag.retrieval.fusion import (
    DEFAULT_FUSION,
    check_fusion,
    coverage_weights,
    default_weights,
    fuse_and_cut,
)
from fastrag.retrieval.paths.base import PathState, SearchPath
from fastrag.retrieval.paths.bm25 import BM25_PARAMS, BM25Path
from fastrag.retrieval.paths.dense import HNSW_PARAMS, DensePath

__all__ = ["HybridPath"]


class HybridPath(SearchPath):
    """BM25 fused with cosine over the Document's embeddings (``fusion``, ``weights``,
    ``rrf_k``, ``depth``, ``coverage``, and the BM25 and HNSW parameters of its two paths)."""

    kind = "hybrid"
    analyzed = True
    embedded = True
    default_embedding = True
    hnsw = True
    shard = None
    param_names = BM25_PARAMS + HNSW_PARAMS + tuple(DEFAULT_FUSION)

    def __init__(self, state: PathState) -> None:
        super().__init__(state)
        self.fusion = check_fusion(dict(state.params), BM25_PARAMS + HNSW_PARAMS)
        weights, n_paths = self.fusion["weights"], 1 + len(state.embed_keys or ())
        if weights is not None and len(weights) != n_paths:
            raise ConfigError(
                f"weights has {len(weights)} numbers; hybrid fuses {n_paths} paths (BM25, "
                f"then embed keys {list(state.embed_keys or ())})"
            )
        self.bm25 = BM25Path(state)
        self.dense = DensePath(state)

    @classmethod
    def check(cls, params: Mapping[str, Any], similarity: str) -> dict[str, Any]:
        check_fusion(dict(params), BM25_PARAMS + HNSW_PARAMS)
        unknown = set(params) - set(cls.param_names)
        if unknown:
            raise ConfigError(
                f"unknown BM25 parameters {sorted(unknown)}; known: {list(BM25_PARAMS)}"
            )
        check_bm25_params(**{p: v for p, v in params.items() if p in BM25_PARAMS})
        return dict(params)

    def prepare(self, doc: Any, group: Any) -> tuple[Any, Any, int]:
        return self.bm25.prepare(doc, group), self.dense.prepare(doc, group), len(group)

    def lexicons(self, doc: Any, group: Any) -> list[tuple[Any, Any]]:
        return self.bm25.lexicons(doc, group)

    def _embedder(self, key: str) -> Any:
        """The embedder of ``key`` (None where the Document does not say)."""
        embedder = getattr(self.state.doc, "embedder", None)
        return embedder(key) if embedder else None

    def search(self, prepared: Any, queries: Sequence[str], k: int, mask: Any) -> Hits:
        bm25, dense, n = prepared
        opts = self.fusion
        depth = min(max(k, opts["depth"]), n)
        paths = [self.bm25.search(bm25, queries, depth, mask, fused=True)]
        paths += self.dense.search_each(dense, queries, depth, mask, fused=True)
        embedders = [self._embedder(key) for key, _ in dense]
        weights = opts["weights"] or default_weights(len(dense), [_share(e) for e in embedders])
        if opts["coverage"]:
            weights = coverage_weights(weights, [_coverage(e, queries) for e in embedders])
        return fuse_and_cut(paths, k, opts, weights, self.state.cutoff_for(None))


def _share(embedder: Any) -> float | None:
    """The embedder's ``hybrid_share`` (None when it has none)."""
    share = getattr(embedder, "hybrid_share", None)
    if share is None:
        return None
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise ConfigError(
            f"{type(embedder).__name__}.hybrid_share must be a number in (0, 1], got {share!r}"
        )
    return float(share)


def _coverage(embedder: Any, queries: Sequence[str]) -> np.ndarray | None:
    """How much of each query ``embedder`` reads (None: all of it)."""
    fn = getattr(embedder, "query_coverage", None)
    if not callable(fn):
        return None
    cov = np.asarray(fn(list(queries)), dtype=np.float64)
    if cov.shape != (len(queries),) or not np.isfinite(cov).all():
        raise ConfigError(
            f"{type(embedder).__name__}.query_coverage must give one finite number per query "
            f"({len(queries)}), got shape {cov.shape}"
        )
    return cov
