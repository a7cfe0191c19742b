"""What every index's search answers: :data:`Hits`, declared once for the BM25, dense, sparse
and sharded indexes, the joiners and the merge of several lists."""

from __future__ import annotations

import numpy as np

__all__ = ["Hits"]

Hits = tuple[np.ndarray, np.ndarray, np.ndarray]
"""``(rows, scores, counts)`` of a batch of ``n_q`` queries: ``rows [n_q, k]`` int64 row ids,
best first, padded with -1; ``scores [n_q, k]`` float32, higher is better, padded with -inf;
``counts [n_q]`` int32, the real hits at the front of each row."""
