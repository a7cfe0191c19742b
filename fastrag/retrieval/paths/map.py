"""The map path (``index="map"``, as LazyLLM's): every node whose text, or ``map_key``
metadata, equals the query string, score 1; ``topk`` does not apply."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fastrag.indexes.base import Hits
from fastrag.retrieval.paths.base import SearchPath

__all__ = ["MapPath"]


class MapPath(SearchPath):
    """Exact string lookup in the group's key map (built once per group and key)."""

    kind = "map"
    shard = None

    def prepare(self, doc: Any, group: Any) -> dict[str, Any]:
        """The group's key map: key -> row ids."""
        return doc.derived.key_map(group, self.state.map_key)

    def search(self, prepared: Any, queries: Sequence[str], k: int, mask: Any) -> Hits:
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        scores = np.zeros((len(queries), k), dtype=np.float32)
        counts = np.zeros(len(queries), dtype=np.int32)
        for i, q in enumerate(queries):
            hit = np.asarray(prepared.get(q, ()), dtype=np.int64)
            if mask is not None and len(hit):
                hit = hit[mask[hit]]
            hit = hit[:k]
            rows[i, : len(hit)] = hit
            scores[i, : len(hit)] = 1.0
            counts[i] = len(hit)
        return rows, scores, counts
