"""Node post-processors: callables on a list of ``NodeWithScore`` after retrieval.

Each is ``pp(nodes, query=None) -> list[NodeWithScore]`` with ``pp.batch(nodes_per_query,
queries=None)`` for many queries; the query is accepted (and ignored) by the ones that do not
need it, so a pipeline can call every step the same way. ``DocNode`` inputs are accepted
(as hits without a score). Inputs are never modified.

* :class:`SimilarityCutoff` -- drop hits scoring below a threshold.
* :class:`KeywordFilter` -- keep hits containing required keywords, drop excluded ones.
* :class:`Deduplicate` -- drop repeated nodes (by id) or repeated texts.
* :class:`LongContextReorder` -- best hits at both ends ("lost in the middle").
* :class:`TargetGroup` -- map hits to their ancestors/descendants in another node group
  (small-to-big retrieval), each keeping the best score of the hits that led to it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from fastrag._checks import check_choice, check_list, check_number, check_str, check_str_list
from fastrag.errors import ConfigError
from fastrag.schema import DocNode, NodeWithScore

__all__ = [
    "Deduplicate",
    "KeywordFilter",
    "LongContextReorder",
    "NodePostprocessor",
    "SimilarityCutoff",
    "TargetGroup",
    "as_hits",
]


def as_hits(nodes: Any, what: str = "nodes") -> list[NodeWithScore]:
    """``nodes`` as a list of ``NodeWithScore`` (a ``DocNode`` becomes a hit with score None)."""
    if isinstance(nodes, (str, bytes, NodeWithScore, DocNode)) or not isinstance(nodes, Iterable):
        raise ConfigError(
            f"{what} must be a list of NodeWithScore (or DocNode), got {type(nodes).__name__}"
        )
    out = []
    for i, h in enumerate(nodes):
        if isinstance(h, NodeWithScore):
            out.append(h)
        elif isinstance(h, DocNode):
            out.append(NodeWithScore(node=h, score=None))
        else:
            raise ConfigError(
                f"{what}[{i}] must be a NodeWithScore or DocNode, got {type(h).__name__}"
            )
    return out


def _score_array(hits: Sequence[NodeWithScore]) -> np.ndarray:
    """Scores as float64, None as NaN."""
    try:
        return np.array([h.score for h in hits], dtype=np.float64)
    except (TypeError, ValueError):
        return np.array(
            [h.score if isinstance(h.score, (int, float, np.number)) else np.nan for h in hits],
            dtype=np.float64,
        )


class NodePostprocessor:
    """Base: subclasses implement ``_process(hits, query)``; ``__call__`` and ``batch`` check
    the arguments."""

    def _process(self, hits: list[NodeWithScore], query: str | None) -> list[NodeWithScore]:
        raise NotImplementedError

    def __call__(
        self, nodes: Sequence[NodeWithScore], query: str | None = None
    ) -> list[NodeWithScore]:
        """Post-process one query's hits."""
        check_str("query", query, empty=True, none=True)
        return self._process(as_hits(nodes), query)

    def batch(
        self,
        nodes_per_query: Sequence[Sequence[NodeWithScore]],
        queries: Sequence[str] | None = None,
    ) -> list[list[NodeWithScore]]:
        """Post-process many queries' hits (``queries`` aligned with them, or None)."""
        check_list("nodes_per_query", nodes_per_query, "hit lists (one per query)")
        if queries is None:
            queries = [None] * len(nodes_per_query)
        elif isinstance(queries, str) or len(queries) != len(nodes_per_query):
            n = "a single str" if isinstance(queries, str) else f"{len(queries)} queries"
            raise ConfigError(
                f"got {n} for {len(nodes_per_query)} hit lists; give one query per hit list"
            )
        return [self(nodes, query=q) for nodes, q in zip(nodes_per_query, queries, strict=True)]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


class SimilarityCutoff(NodePostprocessor):
    """Keep hits with ``score >= threshold`` (hits without a score are dropped)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = check_number("threshold", threshold, finite=False)

    def _process(self, hits: list[NodeWithScore], query: str | None) -> list[NodeWithScore]:
        keep = _score_array(hits) >= self.threshold  # NaN (no score) compares False
        return [h for h, k in zip(hits, keep.tolist(), strict=True) if k]


def _check_keywords(name: str, words: Any) -> list[str]:
    if words is None:
        return []
    if isinstance(words, str):
        words = [words]
    words = check_str_list(name, words)
    for w in words:
        if not w:
            raise ConfigError(f"{name} must hold non-empty strings, got {w!r}")
    return words


class KeywordFilter(NodePostprocessor):
    """Keep hits whose text contains the ``required`` keywords and none of the ``excluded``.

    Matching is by substring (works for Chinese, which has no spaces), case-insensitive
    unless ``case_sensitive=True``. ``mode="any"`` (default, as LlamaIndex and LazyLLM)
    keeps a hit containing at least one required keyword; ``mode="all"`` needs all of them.
    """

    def __init__(
        self,
        required: Sequence[str] | None = None,
        excluded: Sequence[str] | None = None,
        *,
        mode: str = "any",
        case_sensitive: bool = False,
    ) -> None:
        self.required = _check_keywords("required", required)
        self.excluded = _check_keywords("excluded", excluded)
        if not self.required and not self.excluded:
            raise ConfigError("KeywordFilter needs required=[...] or excluded=[...] keywords")
        check_choice("mode", mode, ("any", "all"))
        self.mode = mode
        self.case_sensitive = bool(case_sensitive)
        flags = 0 if self.case_sensitive else re.IGNORECASE

        def alt(words: list[str]) -> re.Pattern:
            return re.compile("|".join(map(re.escape, words)), flags)

        self._any_required = alt(self.required) if self.required else None
        self._excluded = alt(self.excluded) if self.excluded else None
        fold = (lambda s: s) if self.case_sensitive else str.casefold
        self._fold = fold
        self._required_folded = [fold(w) for w in self.required]

    def _keep(self, text: str) -> bool:
        if self._excluded is not None and self._excluded.search(text):
            return False
        if self._any_required is None:
            return True
        if self.mode == "any":
            return self._any_required.search(text) is not None
        t = self._fold(text)
        return all(w in t for w in self._required_folded)

    def _process(self, hits: list[NodeWithScore], query: str | None) -> list[NodeWithScore]:
        return [h for h in hits if self._keep(h.node.get_content())]


class Deduplicate(NodePostprocessor):
    """Drop repeated hits, keeping the first (the best, for a sorted list).

    ``by="id"``: the same node (group and id); ``by="text"``: the same text, e.g. one passage
    stored in two documents; ``by="metadata"`` with ``key="field"``: the same value of a
    metadata field (hits without it are all kept), e.g. one page in several languages;
    ``by=callable``: the same ``callable(hit)`` (None: kept), e.g. a path with its language
    folder left out, so translations of one page collapse to the best of them.
    """

    def __init__(
        self, by: str | Callable[[NodeWithScore], Any] = "id", key: str | None = None
    ) -> None:
        if not callable(by):
            check_choice("by", by, ("id", "text", "metadata"))
        if (by == "metadata") != (key is not None):
            raise ConfigError(
                "Deduplicate(by='metadata') needs key='field' (a metadata field "
                "name), and key= goes only with by='metadata'"
            )
        if key is not None:
            check_str("key", key)
        self.by = by
        self.key = key

    def _key(self, h: NodeWithScore) -> Any:
        if self.by == "id":
            return (h.node.group, h.node.id)
        if self.by == "text":
            return h.node.text
        if self.by == "metadata":
            value = h.metadata.get(self.key)
            return None if value is None else json.dumps(value, sort_keys=True, default=str)
        return self.by(h)

    def _process(self, hits: list[NodeWithScore], query: str | None) -> list[NodeWithScore]:
        seen: set = set()
        out = []
        for h in hits:
            k = self._key(h)
            if k is None:
                out.append(h)
            elif k not in seen:
                seen.add(k)
                out.append(h)
        return out


class LongContextReorder(NodePostprocessor):
    """Put the best hits at the start and the end, the weakest in the middle, since models
    use the middle of a long context least (Liu et al., "Lost in the Middle", 2023).

    Same order as LlamaIndex's ``LongContextReorder``: hits sorted by score ascending
    (stable; no score counts as 0) are placed alternately at the front and the back, so
    the two best hits end up at the two ends and the weakest in the middle.
    """

    def _process(self, hits: list[NodeWithScore], query: str | None) -> list[NodeWithScore]:
        n = len(hits)
        if n < 2:
            return list(hits)
        scores = np.nan_to_num(_score_array(hits), nan=0.0)
        asc = np.argsort(scores, kind="stable")
        i = np.arange(n)
        # ascending item i goes to the front (prepended) when i is even, else to the back
        n_front = (n + 1) // 2
        pos = np.where(i % 2 == 0, n_front - 1 - i // 2, n_front + i // 2)
        out: list[NodeWithScore | None] = [None] * n
        for k, p in zip(asc.tolist(), pos.tolist(), strict=True):
            out[p] = hits[k]
        return out  # type: ignore[return-value]


class TargetGroup(NodePostprocessor):
    """Map hits to their nodes in node group ``target`` (a parent/ancestor group or a child
    group): small-to-big retrieval, e.g. retrieve sentences and return their paragraphs.

    Uses ``doc.find(target)(nodes)``. Each target node appears once, scored with the best
    score of the hits that map to it, and the result is sorted by that score (descending,
    ties by first appearance; unscored last).
    """

    def __init__(self, doc: Any, target: str) -> None:
        if not callable(getattr(doc, "find", None)):
            raise ConfigError(
                f"doc must be a Document (with find(group)), got {type(doc).__name__}"
            )
        check_str("target", target, note="a node group name")
        self.doc = doc
        self.target = target
        self._find = doc.find(target)  # an unknown group fails here, naming the known ones

    def __repr__(self) -> str:
        return f"TargetGroup(target={self.target!r})"

    def _process(self, hits: list[NodeWithScore], query: str | None) -> list[NodeWithScore]:
        return self._map([hits])[0]

    def batch(
        self,
        nodes_per_query: Sequence[Sequence[NodeWithScore]],
        queries: Sequence[str] | None = None,
    ) -> list[list[NodeWithScore]]:
        check_list("nodes_per_query", nodes_per_query, "hit lists (one per query)")
        if queries is not None and (
            isinstance(queries, str) or len(queries) != len(nodes_per_query)
        ):
            raise ConfigError(
                f"queries must be None or one str per hit list ({len(nodes_per_query)})"
            )
        return self._map([as_hits(n) for n in nodes_per_query])

    def _map(self, per_query: list[list[NodeWithScore]]) -> list[list[NodeWithScore]]:
        # One find() per distinct source node (cached across the batch): find on the whole
        # list would lose which hit led to which target node, and with it the scores.
        cache: dict[tuple, list[DocNode]] = {}
        out = []
        for hits in per_query:
            best: dict[tuple, list] = {}  # key -> [node, best score, first appearance]
            for h in hits:
                src = (h.node.group, h.node.id)
                found = cache.get(src)
                if found is None:
                    found = cache[src] = list(self._find([h.node]))
                s = h.score
                for node in found:
                    if isinstance(node, NodeWithScore):
                        node = node.node
                    key = (node.group, node.id)
                    entry = best.get(key)
                    if entry is None:
                        best[key] = [node, s, len(best)]
                    elif s is not None and (entry[1] is None or s > entry[1]):
                        entry[1] = s
            entries = list(best.values())
            scores = np.array([-np.inf if e[1] is None else e[1] for e in entries], float)
            order = np.lexsort((np.arange(len(entries)), -scores)) if entries else []
            out.append(
                [
                    NodeWithScore(node=entries[i][0], score=entries[i][1])
                    for i in np.asarray(order).tolist()
                ]
            )
        return out
