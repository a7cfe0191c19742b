"""The custom path: a function registered with :func:`fastrag.register_similarity` scores
every node of the group (query strings and node texts, or query and node vectors per embed
key); the top-k of its scores, NaN never returned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastrag.errors import ConfigError
from fastrag.indexes.base import Hits
from fastrag.retrieval.merge import merge_hits
from fastrag.retrieval.paths.base import SearchPath

__all__ = ["CustomPath", "topk_scores"]


class CustomPath(SearchPath):
    """A registered scoring function; extra Retriever keywords are passed to it."""

    kind = "custom"
    per_key_cutoff = True

    @classmethod
    def check(cls, params: Mapping[str, Any], similarity: str) -> dict[str, Any]:
        return dict(params)  # the function's own keywords

    def search(self, prepared: Any, queries: Sequence[str], k: int, mask: Any) -> Hits:
        st, group = self.state, prepared
        fn, kw, sim = st.sim.fn, st.params, st.sim
        n = len(group)
        all_scores = np.empty((len(queries), n), dtype=np.float64)
        if sim.mode == "text":
            texts = group.texts()
            for i, q in enumerate(queries):
                s = fn(q, texts, **kw) if sim.batch else [fn(q, t, **kw) for t in texts]
                all_scores[i] = _scores_array(s, n, st.similarity)
            return topk_scores(all_scores, k, mask, st.cutoff_for(None))
        results = []
        for key in st.embed_keys:  # several keys merge as the built-in dense ones do
            vecs = st.doc.derived.vectors(group, key)
            qv = st.doc.embed_queries(queries, key)
            for i in range(len(queries)):
                s = fn(qv[i], vecs, **kw) if sim.batch else [fn(qv[i], v, **kw) for v in vecs]
                all_scores[i] = _scores_array(s, n, st.similarity)
            results.append(topk_scores(all_scores, k, mask, st.cutoff_for(key)))
        return results[0] if len(results) == 1 else merge_hits(results, k)


def _scores_array(s: Any, n: int, name: str) -> np.ndarray:
    arr = np.asarray(s, dtype=np.float64).reshape(-1)
    if arr.shape != (n,):
        raise ConfigError(f"similarity {name!r} returned {arr.shape[0]} scores for {n} nodes")
    return arr


def topk_scores(scores: np.ndarray, k: int, mask: np.ndarray | None, cutoff: float | None) -> Hits:
    """Top-k of a dense (n_q, n) score matrix: best first, ties by row; NaN never returned."""
    from fastrag._kernels.topk import topk_rows  # lazy: numba

    scores = np.array(scores, dtype=np.float32)
    if mask is not None:
        scores[:, ~mask] = -np.inf
    if cutoff is not None:
        scores[scores < cutoff] = -np.inf
    nq, n = scores.shape
    k = min(k, n)
    rows = np.empty((nq, k), dtype=np.int64)
    out = np.empty((nq, k), dtype=np.float32)
    counts = np.empty(nq, dtype=np.int32)
    topk_rows(scores, k, rows, out, counts)
    return rows, np.where(rows >= 0, out, 0).astype(np.float32), counts
