"""The contract every index keeps: :data:`Hits` (what a search answers), the :class:`Index`
protocol (how it is asked) and the checks of the arguments they share, each with one meaning.

``k`` is the hits per query (an int >= 1); ``mask`` a bool array with one flag per row (None:
all rows); ``cutoff`` the least score a hit keeps (None: no cutoff); ``num_threads`` the most
threads a search uses (None: numba's current setting; more than numba's pool runs on the pool).
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fastrag._checks import check_int
from fastrag.errors import ConfigError

__all__ = [
    "Hits",
    "Index",
    "check_cutoff",
    "check_k",
    "check_mask",
    "check_num_threads",
    "search_threads",
]

Hits = tuple[np.ndarray, np.ndarray, np.ndarray]
"""``(rows, scores, counts)`` of a batch of ``n_q`` queries: ``rows [n_q, k]`` int64 row ids,
best first, padded with -1; ``scores [n_q, k]`` float32, higher is better, padded with -inf;
``counts [n_q]`` int32, the real hits at the front of each row."""


@runtime_checkable
class Index(Protocol):
    """What BM25Index, FlatIndex, HNSWIndex and SparseIndex answer alike: a batch of queries
    (each index's own query type: token ids, vectors, weight dicts; one query is a batch of
    one) searched for the top ``k`` rows."""

    def search(
        self,
        queries: Any,
        k: int,
        *,
        mask: Any = None,
        cutoff: float | None = None,
        num_threads: int | None = None,
    ) -> Hits:
        """Top-``k`` rows of each query, best first (see :data:`Hits`)."""
        ...


def check_k(k: Any) -> int:
    """``k``, the hits per query, as an int >= 1."""
    return check_int("k", k, min=1, note="the number of hits per query")


def check_cutoff(cutoff: Any) -> float:
    """``cutoff`` as a float threshold (``-inf`` for None); hits need ``score >= cutoff``."""
    if cutoff is None:
        return -math.inf
    if isinstance(cutoff, bool) or not isinstance(cutoff, (int, float, np.number)):
        raise ConfigError(
            f"cutoff={cutoff!r} must be a number (the least score a hit keeps) or None"
        )
    if math.isnan(cutoff):
        raise ConfigError("cutoff=nan is not a threshold; pass a number or None")
    return float(cutoff)


def check_num_threads(num_threads: Any) -> int | None:
    """``num_threads`` as an int >= 1, or None for the default (numba's current setting)."""
    return check_int("num_threads", num_threads, min=1, none="numba's current setting")


def search_threads(num_threads: int | None) -> int:
    """The threads a numba search runs on for a checked ``num_threads``: numba's current
    setting for None, else ``num_threads`` capped at numba's pool (NUMBA_NUM_THREADS)."""
    import numba  # here: importing the contract loads no numba

    if num_threads is None:
        return int(numba.get_num_threads())
    return min(num_threads, int(numba.config.NUMBA_NUM_THREADS))


def check_mask(mask: Any, n: int, *, longer_ok: bool = False) -> np.ndarray | None:
    """``mask`` as a 1-D bool array of ``n`` flags, one per row (None stays None).

    With ``longer_ok`` a longer mask is cut to its first ``n`` flags (an index whose rows are
    a group's row ids takes the group's mask).
    """
    if mask is None:
        return None
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.ndim != 1:
        raise ConfigError(
            f"mask must be a 1-D boolean array (one flag per row), got dtype {mask.dtype} "
            f"and shape {mask.shape}"
        )
    if longer_ok:
        if mask.shape[0] < n:
            raise ConfigError(
                f"mask has {mask.shape[0]} entries but the index has rows up to "
                f"{n - 1}; build the mask over all rows of the group"
            )
        return mask[:n]
    if mask.shape[0] != n:
        raise ConfigError(
            f"mask has {mask.shape[0]} entries but the index has {n} rows; "
            "build the mask over the same rows as the index"
        )
    return mask
