"""HNSW labels and group rows.

An HNSW index outlives changes of its group: rows are added and deleted by node id, so its
labels are recorded as node ids (None for a deleted label) and mapped to the rows of the
group's current table when the index is used.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class LabelledIndex:
    """An ANN index whose labels map to group rows (deleted labels map to -1)."""

    def __init__(self, index: Any, label_rows: np.ndarray) -> None:
        self.index = index
        self.label_rows = label_rows

    def search(
        self,
        queries: np.ndarray,
        k: int,
        *,
        mask: np.ndarray | None = None,
        cutoff: float | None = None,
        num_threads: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The index's top-k as group rows (``mask`` and the result by row, not label)."""
        label_mask = None
        if mask is not None:
            label_mask = np.zeros(len(self.label_rows), dtype=bool)
            live = self.label_rows >= 0
            label_mask[live] = mask[self.label_rows[live]]
        labels, scores, counts = self.index.search(queries, k, mask=label_mask, cutoff=cutoff)
        rows = np.where(labels >= 0, self.label_rows[np.maximum(labels, 0)], -1)
        return rows, scores, counts


def hnsw_label_problem(labels: list[str | None], alive: np.ndarray) -> str | None:
    """What is inconsistent between an HNSW index's live rows (``alive``, by row) and the node
    id recorded for each row (None for a deleted row, see ``DerivedData._build_hnsw``), or None."""
    named = np.fromiter((x is not None for x in labels), np.bool_, len(labels))
    if (
        len(alive) > len(labels)
        or not np.array_equal(named[: len(alive)], alive)
        or named[len(alive) :].any()
    ):
        return "its live rows and the node ids recorded for them disagree"
    if len(set(labels)) - (None in labels) != int(named.sum()):
        return "its node ids repeat"
    return None


def label_rows(labels: list[str | None], ids: list[str]) -> np.ndarray:
    """The group row of each label's node id (-1 for a deleted label or a node gone)."""
    row_of = {nid: r for r, nid in enumerate(ids)}
    return np.asarray([row_of.get(nid, -1) if nid else -1 for nid in labels], dtype=np.int64)
