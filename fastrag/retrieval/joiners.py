"""Document joiners: merge the hit lists of several retrievers (or queries) into one list.

Spring AI's ``DocumentJoiner`` step of modular RAG. Every joiner takes ``lists`` -- a list of
``NodeWithScore`` lists, one per retriever, each best first -- and returns one de-duplicated
list, best first; ``joiner.batch(per_query)`` does the same for many queries at once.

The work is done on arrays: each hit's node key ``(query, group, id)`` becomes an int code
once (a dict, codes in order of first appearance), then ranks, normalized scores and fused
sums are numpy expressions (``np.bincount`` per code) and one ``np.lexsort`` orders every
query's result. Ties are broken by first appearance (scanning the lists in order), so
results are reproducible. Inputs are never modified: joiners return new ``NodeWithScore``
objects holding the same nodes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastrag._checks import check_bool, check_choice, check_int, check_list, check_number
from fastrag.errors import ConfigError
from fastrag.schema import DocNode, NodeWithScore

__all__ = [
    "BaseDocumentJoiner",
    "ConcatenationDocumentJoiner",
    "ReciprocalRankFusionJoiner",
    "WeightedScoreJoiner",
]


def _check_topk(topk: Any) -> int | None:
    return check_int("topk", topk, min=1, none="keep all")


def _as_hit(h: Any, where: str) -> NodeWithScore:
    if isinstance(h, NodeWithScore):
        return h
    if isinstance(h, DocNode):
        return NodeWithScore(node=h, score=None)
    raise ConfigError(f"{where} must be a NodeWithScore or DocNode, got {type(h).__name__}")


class _Flat:
    """All hits of all queries as arrays. ``codes`` number distinct (query, node) pairs in
    order of first appearance; ``list_of`` is the global list index of each hit."""

    __slots__ = (
        "codes",
        "first",
        "hits",
        "keep",
        "list_of",
        "list_pos",
        "list_query",
        "n_codes",
        "n_lists",
        "n_queries",
        "rank",
    )

    def __init__(self, per_query: Sequence[Sequence[Sequence[Any]]]) -> None:
        hits: list[NodeWithScore] = []
        lens: list[int] = []
        list_query: list[int] = []
        list_pos: list[int] = []
        keys: list[tuple] = []
        for q, lists in enumerate(per_query):
            check_list(f"per_query[{q}]", lists, "hit lists (one per retriever)")
            for j, lst in enumerate(lists):
                if isinstance(lst, (NodeWithScore, DocNode)) or not isinstance(lst, Sequence):
                    raise ConfigError(
                        f"lists[{j}] must be a list of NodeWithScore (one retriever's hits), "
                        f"got {type(lst).__name__}; wrap a single list as [hits]"
                    )
                hs = [
                    h if isinstance(h, NodeWithScore) else _as_hit(h, f"lists[{j}][{i}]")
                    for i, h in enumerate(lst)
                ]
                hits.extend(hs)
                keys.extend([(q, h.node.group, h.node.id) for h in hs])
                lens.append(len(hs))
                list_query.append(q)
                list_pos.append(j)
        table: dict[tuple, int] = {}
        self.hits = hits
        self.codes = np.fromiter(
            (table.setdefault(k, len(table)) for k in keys), dtype=np.int64, count=len(keys)
        )
        self.n_codes = len(table)
        self.n_queries = len(per_query)
        self.n_lists = len(lens)
        lens_a = np.asarray(lens, dtype=np.int64)
        self.list_of = np.repeat(np.arange(self.n_lists, dtype=np.int64), lens_a)
        starts = np.concatenate(([0], np.cumsum(lens_a)[:-1])) if len(lens) else lens_a
        self.rank = np.arange(len(hits), dtype=np.int64) - np.repeat(starts, lens_a)
        self.list_query = np.asarray(list_query, dtype=np.int64)
        self.list_pos = np.asarray(list_pos, dtype=np.int64)
        # first hit of each code (codes are numbered in order of first appearance)
        _, self.first = np.unique(self.codes, return_index=True)
        # a node listed twice in one list counts once, at its first (best) position
        pair = self.list_of * max(self.n_codes, 1) + self.codes
        _, first_in_list = np.unique(pair, return_index=True)
        keep = np.zeros(len(hits), dtype=bool)
        keep[first_in_list] = True
        self.keep = keep

    def code_query(self) -> np.ndarray:
        return self.list_query[self.list_of[self.first]] if self.n_codes else np.zeros(0, np.int64)

    def scores(self) -> np.ndarray:
        """Scores of all hits as float64; raises on a missing or non-finite score."""
        try:
            out = np.array([h.score for h in self.hits], dtype=np.float64)  # None -> nan
        except (TypeError, ValueError):
            out = None
        bad = np.arange(len(self.hits)) if out is None else np.nonzero(~np.isfinite(out))[0]
        for i in bad.tolist():
            s = self.hits[i].score
            if out is None and isinstance(s, (int, float, np.number)) and math.isfinite(s):
                continue
            j = int(self.list_of[i])
            raise ConfigError(
                f"lists[{int(self.list_pos[j])}][{int(self.rank[i])}] (node "
                f"{self.hits[i].node.id!r}) has score {s!r}; score-based joining needs "
                f"finite scores (use ReciprocalRankFusionJoiner for unscored hits)"
            )
        return out

    def order(self, fused: np.ndarray, topk: int | None) -> list[np.ndarray]:
        """Per query, the codes sorted by fused score (desc), ties by first appearance."""
        cq = self.code_query()
        codes = np.arange(self.n_codes, dtype=np.int64)
        order = np.lexsort((codes, -fused, cq))
        counts = np.bincount(cq, minlength=self.n_queries)
        bounds = np.concatenate(([0], np.cumsum(counts)))
        out = []
        for q in range(self.n_queries):
            seg = order[bounds[q] : bounds[q + 1]]
            out.append(seg if topk is None else seg[:topk])
        return out


class BaseDocumentJoiner:
    """A joiner: ``joiner(lists)`` for one query, ``joiner.batch(per_query)`` for many."""

    def __init__(self, topk: int | None = None) -> None:
        self.topk = _check_topk(topk)

    def __call__(self, lists: Sequence[Sequence[NodeWithScore]]) -> list[NodeWithScore]:
        """Join one query's hit lists (one list per retriever) into one list, best first."""
        check_list("lists", lists, "hit lists (one per retriever)")
        return self.batch([lists])[0]

    def join(
        self, documents_for_query: Mapping[Any, Sequence[Sequence[NodeWithScore]]]
    ) -> list[NodeWithScore]:
        """Spring AI's ``join(Map<Query, List<List<Document>>>)``: the hit lists of every
        query (in the mapping's order) joined into one list."""
        if not isinstance(documents_for_query, Mapping):
            raise ConfigError(
                f"documents_for_query must be a mapping of queries to lists of "
                f"hit lists, got {type(documents_for_query).__name__}"
            )
        return self([lst for lists in documents_for_query.values() for lst in lists])

    def batch(
        self, per_query: Sequence[Sequence[Sequence[NodeWithScore]]]
    ) -> list[list[NodeWithScore]]:
        """Join many queries at once: ``per_query[q]`` is query q's list of hit lists."""
        check_list("per_query", per_query, "lists of hit lists (one item per query)")
        flat = _Flat(per_query)
        if flat.n_codes == 0:
            return [[] for _ in range(flat.n_queries)]
        fused = self._fuse(flat)
        first = flat.first.tolist()
        fused_l = fused.tolist()
        return [
            [NodeWithScore(node=flat.hits[first[c]].node, score=fused_l[c]) for c in seg.tolist()]
            for seg in flat.order(fused, self.topk)
        ]

    def _fuse(self, flat: _Flat) -> np.ndarray:
        raise NotImplementedError

    def _weights(self, flat: _Flat, weights: np.ndarray | None) -> np.ndarray:
        """Each hit's list weight (None: 1 for every list)."""
        if weights is None:
            return np.ones(len(flat.hits))
        n_per_query = np.bincount(flat.list_query, minlength=flat.n_queries)
        bad = np.nonzero(n_per_query != len(weights))[0]
        if len(bad):
            q = int(bad[0])
            raise ConfigError(
                f"{len(weights)} weights for {int(n_per_query[q])} hit lists (query {q}); "
                f"give one weight per retriever"
            )
        return weights[flat.list_pos[flat.list_of]]


def _check_weights(weights: Any) -> np.ndarray | None:
    if weights is None:
        return None
    try:
        w = np.asarray(list(weights), dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"weights must be a list of numbers, got {weights!r}") from None
    if w.ndim != 1 or len(w) == 0 or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ConfigError(
            f"weights must be a non-empty list of finite numbers >= 0 with a positive sum, "
            f"got {weights!r}"
        )
    return w


class ConcatenationDocumentJoiner(BaseDocumentJoiner):
    """Concatenate the lists; a node seen again is dropped (first occurrence wins, with its
    score as is). Order: concatenation order, or by score descending when ``sort=True``
    (Spring AI 1.0; stable, unscored hits last). Scores of different retrievers are on
    different scales, so sorting mixes them as they are.
    """

    def __init__(self, topk: int | None = None, sort: bool = False) -> None:
        super().__init__(topk)
        self.sort = check_bool("sort", sort)

    def batch(
        self, per_query: Sequence[Sequence[Sequence[NodeWithScore]]]
    ) -> list[list[NodeWithScore]]:
        check_list("per_query", per_query, "lists of hit lists (one item per query)")
        flat = _Flat(per_query)
        if flat.n_codes == 0:
            return [[] for _ in range(flat.n_queries)]
        if self.sort:
            key = np.array(
                [
                    -np.inf if (s := flat.hits[i].score) is None else float(s)
                    for i in flat.first.tolist()
                ]
            )
            segs = flat.order(key, self.topk)
        else:
            cq = flat.code_query()
            bounds = np.concatenate(([0], np.cumsum(np.bincount(cq, minlength=flat.n_queries))))
            segs = [np.arange(bounds[q], bounds[q + 1]) for q in range(flat.n_queries)]
            if self.topk is not None:
                segs = [s[: self.topk] for s in segs]
        first = flat.first.tolist()
        return [
            [
                NodeWithScore(node=(h := flat.hits[first[c]]).node, score=h.score)
                for c in seg.tolist()
            ]
            for seg in segs
        ]


class ReciprocalRankFusionJoiner(BaseDocumentJoiner):
    """Reciprocal rank fusion (Cormack et al. 2009): a node's score is the sum over lists of
    ``weight / (k + rank)``, rank starting at 1; lists that miss the node add nothing.
    Only ranks matter, so scores on any scale (or None) fuse fine.

    Args:
        k: the smoothing constant (60 in the paper); larger flattens the rank curve.
        topk: keep the best ``topk`` (None: all).
        weights: one weight per list (None: 1 each).
    """

    def __init__(
        self, k: float = 60, topk: int | None = None, weights: Sequence[float] | None = None
    ) -> None:
        super().__init__(topk)
        self.k = check_number("k", k, min=0, note="usually 60")
        self.weights = _check_weights(weights)

    def _fuse(self, flat: _Flat) -> np.ndarray:
        contrib = self._weights(flat, self.weights) / (self.k + flat.rank + 1.0)
        return np.bincount(
            flat.codes[flat.keep], weights=contrib[flat.keep], minlength=flat.n_codes
        )


class WeightedScoreJoiner(BaseDocumentJoiner):
    """Relative score fusion: normalize each list's scores, then sum ``weight * score``
    per node (weights rescaled to sum to 1; a list missing the node adds 0).

    ``normalization="minmax"`` maps a list to [0, 1] (``(s - min) / (max - min)``; a list
    whose scores are all equal maps to 1); ``"zscore"`` to ``(s - mean) / std`` (population
    std; all equal maps to 0). Scores must be finite numbers.
    """

    NORMALIZATIONS = ("minmax", "zscore")

    def __init__(
        self,
        weights: Sequence[float] | None = None,
        normalization: str = "minmax",
        topk: int | None = None,
    ) -> None:
        super().__init__(topk)
        self.normalization = check_choice("normalization", normalization, self.NORMALIZATIONS)
        self.weights = _check_weights(weights)

    def _fuse(self, flat: _Flat) -> np.ndarray:
        s = flat.scores()
        keep = flat.keep
        lists, s = flat.list_of[keep], s[keep]
        n = flat.n_lists
        count = np.bincount(lists, minlength=n).astype(np.float64)
        if self.normalization == "minmax":
            lo = np.full(n, np.inf)
            hi = np.full(n, -np.inf)
            np.minimum.at(lo, lists, s)
            np.maximum.at(hi, lists, s)
            span = (hi - lo)[lists]
            norm = np.where(span > 0, (s - lo[lists]) / np.where(span > 0, span, 1.0), 1.0)
        else:
            safe = np.maximum(count, 1.0)
            mean = np.bincount(lists, weights=s, minlength=n) / safe
            dev = s - mean[lists]
            std = np.sqrt(np.bincount(lists, weights=dev * dev, minlength=n) / safe)[lists]
            norm = np.where(std > 0, dev / np.where(std > 0, std, 1.0), 0.0)
        w = self._weights(flat, self.weights)[keep]
        if self.weights is not None:
            w = w / self.weights.sum()
        else:
            n_lists_q = np.bincount(flat.list_query, minlength=flat.n_queries)
            w = w / n_lists_q[flat.list_query[lists]]
        return np.bincount(flat.codes[keep], weights=w * norm, minlength=flat.n_codes)
