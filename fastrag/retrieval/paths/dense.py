"""The dense path: exact (FlatIndex) or HNSW top-k over the group's vectors of each embed key;
several keys merge by score."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastrag.indexes.base import Hits
from fastrag.retrieval.merge import merge_hits
from fastrag.retrieval.paths.base import SearchPath

__all__ = ["HNSW_PARAMS", "DensePath"]

HNSW_PARAMS = ("M", "ef_construction", "ef")


class DensePath(SearchPath):
    """Cosine or dot product over the Document's embeddings (``M``, ``ef_construction`` and
    ``ef`` with ``index="hnsw"``)."""

    kind = "dense"
    embedded = True
    hnsw = True
    per_key_cutoff = True
    shard = "vectors"
    param_names = HNSW_PARAMS

    def prepare(self, doc: Any, group: Any) -> list[tuple[str, Any]]:
        """``(embed key, index)`` of each embed key."""
        metric, st = self.state.sim.metric, self.state
        if st.index == "hnsw":
            hparams = {p: v for p, v in st.params.items() if p in HNSW_PARAMS}
            return [(key, doc.derived.hnsw(group, key, metric, hparams)) for key in st.embed_keys]
        return [(key, doc.derived.flat(group, key, metric)) for key in st.embed_keys]

    def search_each(
        self, prepared: list[tuple[str, Any]], queries: Sequence[str], k: int, mask: Any, *, fused
    ) -> list[Hits]:
        """The hits of each embed key (``fused``: no cut-off, hybrid cuts the fused scores)."""
        st = self.state
        return [
            index.search(
                st.doc.embed_queries(queries, key),
                k,
                mask=mask,
                cutoff=None if fused else st.cutoff_for(key),
                num_threads=st.num_threads,
            )
            for key, index in prepared
        ]

    def search(self, prepared: Any, queries: Sequence[str], k: int, mask: Any) -> Hits:
        results = self.search_each(prepared, queries, k, mask, fused=False)
        return results[0] if len(results) == 1 else merge_hits(results, k)
