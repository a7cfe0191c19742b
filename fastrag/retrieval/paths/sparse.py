"""The sparse path: learned sparse vectors (SPLADE-style ``{token: weight}``) of each embed
key, scored exactly by their dot product; several keys merge by score."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fastrag.indexes.base import Hits
from fastrag.retrieval.merge import merge_hits
from fastrag.retrieval.paths.base import SearchPath

__all__ = ["SparsePath"]


class SparsePath(SearchPath):
    """Dot products of sparse embeddings; the index is built in each process's memory."""

    kind = "sparse"
    embedded = True
    per_key_cutoff = True
    stored = False
    shard = None

    def prepare(self, doc: Any, group: Any) -> list[tuple[str, Any]]:
        """``(embed key, SparseIndex)`` of each embed key."""
        return [(key, doc.derived.sparse(group, key)) for key in self.state.embed_keys]

    def search(self, prepared: Any, queries: Sequence[str], k: int, mask: Any) -> Hits:
        st, results = self.state, []
        for key, index in prepared:
            rows, scores, counts = index.search(
                st.doc.embed_sparse_queries(queries, key),
                k,
                mask=mask,
                cutoff=st.cutoff_for(key),
                num_threads=st.num_threads,
            )
            results.append((rows, np.where(rows >= 0, scores, 0).astype(np.float32), counts))
        return results[0] if len(results) == 1 else merge_hits(results, k)
