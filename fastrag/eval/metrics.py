"""Retrieval metrics over batches of queries.

Id-based metrics (``hit_rate``, ``recall_at_k``, ``mrr``, ``ndcg_at_k``, ``evaluate_retrieval``)
take, per query, the ranked retrieved ids and the gold ids, and turn them once into a gain
matrix ``(n_queries, k)``; every metric is then a few numpy reductions over that matrix. Gold
may be one id per query, a list of ids per query (all relevant, grade 1), or a
``{id: grade}`` dict per query (graded relevance: nDCG uses the grades as linear gains, the
other metrics count grade > 0 as relevant). A retrieved id that repeats counts once, at its
first rank. A 2-D integer array of retrieved row ids with a 1-D array of gold rows takes a fully
vectorised path.

Text-based metrics follow LazyLLM's non-LLM evaluators (``lazyllm.tools.eval``):

* :func:`context_recall` (LazyLLM ``NonLLMContextRecall``, RAGAS's non-LLM context recall): a
  reference context counts as retrieved when some retrieved context has normalised Levenshtein
  similarity ``1 - distance / max(len)`` above ``threshold`` (0.5). With ``binary=True`` (the
  default) a query scores the fraction of its references that are retrieved; with
  ``binary=False`` each reference scores the fraction of retrieved contexts similar to it.
  The edit distance runs in numba kernels (``fastrag._kernels.edit``) over all
  (reference, retrieved) pairs at once (Myers/Hyyrö bit-parallel, 64 DP rows per machine
  word, early exit) after two lower bounds (length difference, bag distance) that rule out
  almost every unrelated pair cheaply;
  with ``binary=True`` a reference found verbatim skips its other pairs.
* :func:`context_relevance` (LazyLLM ``ContextRelevance``): retrieved and reference contexts are
  split into sentences at runs of ``splitter`` ("。"); a query scores the fraction of its
  retrieved sentences that occur among its reference sentences.

Every function returns the mean over queries as a float, or with ``per_query=True`` the
per-query values as a float64 array. Unlike LazyLLM, scores are not rounded to 4 digits.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from fastrag._checks import check_int, check_number, check_str
from fastrag._lazy import kernels
from fastrag.errors import ConfigError

# on first use: importing the metrics (every CLI command does) loads no numba
_edit = kernels("edit")
_config = kernels("_config")

__all__ = [
    "ContextRelevance",
    "NonLLMContextRecall",
    "context_recall",
    "context_relevance",
    "evaluate_retrieval",
    "hit_rate",
    "mrr",
    "ndcg_at_k",
    "recall_at_k",
]

GoldIds = Sequence[Hashable] | Sequence[Sequence[Hashable]] | Sequence[Mapping[Hashable, float]]


# -- gain matrix ------------------------------------------------------------------------------
def _check_k(k: Any, name: str = "k") -> int:
    return check_int(name, k, min=1, note="the rank cut-off")


def _as_id(x: Any) -> Any:
    # NodeWithScore / DocNode carry their id; anything else is the id itself.
    return x if isinstance(x, (str, int, np.integer)) else getattr(x, "id", x)


def _gold_grades(g: Any, i: int) -> dict:
    """One query's gold as ``{id: grade}`` with grade > 0."""
    if isinstance(g, Mapping):
        out = {}
        for key, grade in g.items():
            if isinstance(grade, bool) or not isinstance(grade, (int, float, np.number)):
                raise ConfigError(
                    f"gold_ids[{i}][{key!r}]={grade!r} must be a number (relevance grade)"
                )
            if grade > 0:
                out[key] = float(grade)
        if not out:
            raise ConfigError(
                f"gold_ids[{i}] has no id with grade > 0; drop queries without relevant documents"
            )
        return out
    if isinstance(g, (list, tuple, set, frozenset, np.ndarray)):
        if len(g) == 0:
            raise ConfigError(f"gold_ids[{i}] is empty; drop queries without relevant documents")
        return dict.fromkeys(g, 1.0)
    if g is None:
        raise ConfigError(f"gold_ids[{i}] is None; give the relevant id(s) of query {i}")
    return {g: 1.0}


def _validate_batch(retrieved: Any, gold: Any) -> int:
    if isinstance(retrieved, (str, bytes)) or not hasattr(retrieved, "__len__"):
        raise ConfigError(
            f"retrieved_ids must be a list with one list of ids per query, "
            f"got {type(retrieved).__name__}"
        )
    if isinstance(gold, (str, bytes)) or not hasattr(gold, "__len__"):
        raise ConfigError(
            f"gold_ids must be a list with one entry per query, got {type(gold).__name__}"
        )
    if len(retrieved) != len(gold):
        raise ConfigError(
            f"retrieved_ids has {len(retrieved)} queries but gold_ids has {len(gold)}; "
            "pass one gold entry per query"
        )
    if len(retrieved) == 0:
        raise ConfigError("no queries: retrieved_ids and gold_ids are empty")
    return len(retrieved)


def _gain_matrix(retrieved: Any, gold: Any, depth: int | None, ideal_width: int = 0):
    """``(gain (n, K), ideal (n, W), n_rel (n,))``: the gain of each retrieved rank (first
    occurrence only; ``depth=None`` keeps every rank), the best ``W = ideal_width`` gold grades
    sorted (the ideal ranking for nDCG), and the number of relevant ids per query."""
    n = _validate_batch(retrieved, gold)
    if (
        isinstance(retrieved, np.ndarray)
        and retrieved.ndim == 2
        and retrieved.dtype.kind in "iu"
        and isinstance(gold, np.ndarray)
        and gold.ndim == 1
        and gold.dtype.kind in "iu"
    ):
        K = retrieved.shape[1] if depth is None else min(depth, retrieved.shape[1])
        hit = retrieved[:, :K] == gold[:, None]
        hit &= np.cumsum(hit, axis=1) == 1
        ideal = np.zeros((n, ideal_width), dtype=np.float64)
        if ideal_width:
            ideal[:, 0] = 1.0
        return hit.astype(np.float64), ideal, np.ones(n, dtype=np.int64)

    rows = []
    golds = []
    for i in range(n):
        row = retrieved[i]
        if isinstance(row, (str, bytes)) or not hasattr(row, "__len__"):
            raise ConfigError(
                f"retrieved_ids[{i}] is a {type(row).__name__}; pass one list of ids per query"
            )
        rows.append(row if depth is None else row[:depth])
        golds.append(_gold_grades(gold[i], i))
    K = max((len(r) for r in rows), default=0)
    gain = np.zeros((n, K), dtype=np.float64)
    ideal = np.zeros((n, ideal_width), dtype=np.float64)
    n_rel = np.empty(n, dtype=np.int64)
    for i, (row, g) in enumerate(zip(rows, golds, strict=True)):
        seen = set()
        for r, x in enumerate(row):
            x = _as_id(x)
            grade = g.get(x)
            if grade is not None and x not in seen:
                gain[i, r] = grade
                seen.add(x)
        n_rel[i] = len(g)
        if ideal_width:
            best = sorted(g.values(), reverse=True)[:ideal_width]
            ideal[i, : len(best)] = best
    return gain, ideal, n_rel


def _reduce(values: np.ndarray, per_query: bool) -> float | np.ndarray:
    return values if per_query else float(values.mean())


# -- id metrics -------------------------------------------------------------------------------
def hit_rate(
    retrieved_ids: Any, gold_ids: GoldIds, k: int | None = None, per_query: bool = False
) -> float | np.ndarray:
    """Fraction of queries with at least one relevant id in the top ``k`` (all ranks if None)."""
    if k is not None:
        _check_k(k)
    gain, _, _ = _gain_matrix(retrieved_ids, gold_ids, k)
    return _reduce((gain > 0).any(axis=1).astype(np.float64), per_query)


def recall_at_k(
    retrieved_ids: Any, gold_ids: GoldIds, k: int, per_query: bool = False
) -> float | np.ndarray:
    """Mean over queries of |relevant ∩ top k| / |relevant|."""
    k = _check_k(k)
    gain, _, n_rel = _gain_matrix(retrieved_ids, gold_ids, k)
    return _reduce((gain > 0).sum(axis=1) / n_rel, per_query)


def mrr(
    retrieved_ids: Any, gold_ids: GoldIds, k: int | None = None, per_query: bool = False
) -> float | np.ndarray:
    """Mean reciprocal rank of the first relevant id (0 when none is in the top ``k``)."""
    if k is not None:
        _check_k(k)
    gain, _, _ = _gain_matrix(retrieved_ids, gold_ids, k)
    hit = gain > 0
    if hit.shape[1] == 0:
        return _reduce(np.zeros(hit.shape[0]), per_query)
    first = hit.argmax(axis=1)
    rr = np.where(hit.any(axis=1), 1.0 / (first + 1.0), 0.0)
    return _reduce(rr, per_query)


def ndcg_at_k(
    retrieved_ids: Any, gold_ids: GoldIds, k: int, per_query: bool = False
) -> float | np.ndarray:
    """nDCG@k with linear gains: ``sum(gain_r / log2(r + 1)) / ideal``, ranks ``r`` from 1."""
    k = _check_k(k)
    gain, ideal, _ = _gain_matrix(retrieved_ids, gold_ids, k, ideal_width=k)
    return _reduce(_ndcg(gain, ideal, k), per_query)


def _ndcg(gain: np.ndarray, ideal: np.ndarray, k: int) -> np.ndarray:
    disc = 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))
    kg, ki = min(k, gain.shape[1]), min(k, ideal.shape[1])
    dcg = gain[:, :kg] @ disc[:kg]
    idcg = ideal[:, :ki] @ disc[:ki]
    return np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg > 0)


def evaluate_retrieval(
    retrieved_ids: Any, gold_ids: GoldIds, ks: Sequence[int] = (1, 3, 5)
) -> dict[str, float]:
    """All id metrics in one pass: ``hit_rate@k``, ``recall@k``, ``ndcg@k`` for each k, ``mrr``
    (over every retrieved rank) and ``n_queries``."""
    if isinstance(ks, (int, np.integer)) and not isinstance(ks, bool):
        ks = (ks,)
    if not isinstance(ks, Sequence) or not ks:
        raise ConfigError(f"ks={ks!r} must be a non-empty list of rank cut-offs, e.g. (1, 3, 5)")
    ks = sorted({_check_k(k, f"ks[{i}]") for i, k in enumerate(ks)})
    gain, ideal_all, n_rel = _gain_matrix(retrieved_ids, gold_ids, None, ideal_width=ks[-1])
    hit = gain > 0
    n = hit.shape[0]
    out: dict[str, float] = {"n_queries": n}
    # ideal gains for cut-off k are the best min(k, n_rel) grades: ideal_all holds them sorted.
    for k in ks:
        h = hit[:, :k]
        out[f"hit_rate@{k}"] = float(h.any(axis=1).mean())
        out[f"recall@{k}"] = float((h.sum(axis=1) / n_rel).mean())
        out[f"ndcg@{k}"] = float(_ndcg(gain, ideal_all, k).mean())
    if hit.shape[1]:
        first = hit.argmax(axis=1)
        out["mrr"] = float(np.where(hit.any(axis=1), 1.0 / (first + 1.0), 0.0).mean())
    else:
        out["mrr"] = 0.0
    return out


# -- text metrics -----------------------------------------------------------------------------
def _text_batch(retrieved: Any, reference: Any, what: str) -> list[tuple[list[str], list[str]]]:
    n = _validate_batch(retrieved, reference)
    out = []
    for i in range(n):
        ret, ref = retrieved[i], reference[i]
        if isinstance(ret, str):
            raise ConfigError(
                f"retrieved_contexts[{i}] is a str; pass one list of contexts per query"
            )
        ret = [getattr(x, "text", x) for x in ret]
        ref = [ref] if isinstance(ref, str) else list(ref)
        for name, texts in (("retrieved_contexts", ret), ("reference_contexts", ref)):
            for j, t in enumerate(texts):
                if not isinstance(t, str):
                    raise ConfigError(
                        f"{name}[{i}][{j}] is {type(t).__name__}; {what} compares strings"
                    )
        out.append((ret, ref))
    return out


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.int32)


def _similar(texts: list[str], left: np.ndarray, right: np.ndarray, threshold: float) -> np.ndarray:
    """For each pair, whether ``1 - lev(texts[l], texts[r]) / max(len) > threshold``."""
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    points = [_codepoints(t) for t in texts]
    values = np.concatenate(points) if offsets[-1] else np.zeros(0, np.int32)
    sorted_values = (
        np.concatenate([np.sort(p) for p in points]) if offsets[-1] else np.zeros(0, np.int32)
    )
    m = np.maximum(lengths[left], lengths[right]).astype(np.float64)
    # largest distance d that still passes 1 - d / m > threshold, tested with the same float
    # expression as the rule (floor((1 - threshold) * m) is off by at most one either way).
    safe = np.where(m > 0, m, 1.0)
    kmax = np.floor((1.0 - threshold) * safe) + 1.0
    for _ in range(3):
        kmax = np.where(1.0 - kmax / safe > threshold, kmax, kmax - 1.0)
    kmax = kmax.astype(np.int64)
    empty_pair = m == 0  # two empty strings: similarity 1
    kmax[empty_pair] = 0 if 1.0 > threshold else -1
    out = np.zeros(left.shape[0], dtype=np.bool_)
    if left.shape[0]:
        kernel = (
            _edit.pairs_within_parallel
            if left.shape[0] >= 64 * _config.PARALLEL_MIN_QUERIES
            else _edit.pairs_within_serial
        )
        kernel(values, sorted_values, offsets, left, right, kmax, out)
    return out


def context_recall(
    retrieved_contexts: Sequence[Sequence[str]],
    reference_contexts: Sequence[Sequence[str]] | Sequence[str],
    threshold: float = 0.5,
    binary: bool = True,
    per_query: bool = False,
) -> float | np.ndarray:
    """Non-LLM context recall (LazyLLM ``NonLLMContextRecall``, RAGAS non-LLM context recall).

    Per query: the mean over its reference contexts of, with ``binary=True``, 1 if some
    retrieved context has Levenshtein similarity > ``threshold`` to it (else 0), or with
    ``binary=False`` the fraction of retrieved contexts that do. A query with no references or
    no retrieved contexts scores 0. Retrieved items may be strings or nodes (their ``.text``).
    """
    check_number("threshold", threshold, min=0, max=1)
    batch = _text_batch(retrieved_contexts, reference_contexts, "context_recall")
    pos: dict[str, int] = {}
    left, right, owner_ref, exact = [], [], [], []
    n_refs = 0
    for ret, ref in batch:
        ret_idx = [pos.setdefault(t, len(pos)) for t in ret]
        ret_set = set(ret) if binary else ()
        for ref_text in ref:
            if ref_text in ret_set:  # binary: an exact copy decides it, skip the other pairs
                exact.append(n_refs)
            else:
                ri = pos.setdefault(ref_text, len(pos))
                for x in ret_idx:
                    left.append(ri)
                    right.append(x)
                    owner_ref.append(n_refs)
            n_refs += 1
    texts = list(pos)
    left_a = np.asarray(left, dtype=np.int64)
    right_a = np.asarray(right, dtype=np.int64)
    ok = _similar(texts, left_a, right_a, float(threshold))
    owner = np.asarray(owner_ref, dtype=np.int64)
    hits = np.bincount(owner, weights=ok.astype(np.float64), minlength=n_refs).astype(np.float64)
    if exact and 1.0 > threshold:  # identical texts have similarity 1
        hits[np.asarray(exact, dtype=np.int64)] += 1.0
    n_ret = np.fromiter((len(ret) for ret, _ in batch), dtype=np.float64, count=len(batch))
    n_ref = np.fromiter((len(ref) for _, ref in batch), dtype=np.int64, count=len(batch))
    ref_query = np.repeat(np.arange(len(batch)), n_ref)
    if binary:
        ref_score = (hits > 0).astype(np.float64)
    else:
        denom = np.where(n_ret[ref_query] > 0, n_ret[ref_query], 1.0)
        ref_score = hits / denom
    sums = np.bincount(ref_query, weights=ref_score, minlength=len(batch))
    scores = np.divide(sums, n_ref, out=np.zeros(len(batch)), where=n_ref > 0)
    return _reduce(scores, per_query)


def _sentences(paragraphs: list[str], pattern: re.Pattern) -> list[str]:
    out = []
    for p in paragraphs:
        out.extend(s.strip() for s in pattern.split(p) if s.strip())
    return out


def context_relevance(
    retrieved_contexts: Sequence[Sequence[str]],
    reference_contexts: Sequence[Sequence[str]] | Sequence[str],
    splitter: str = "。",
    per_query: bool = False,
) -> float | np.ndarray:
    """Sentence-level context relevance (LazyLLM ``ContextRelevance``).

    Retrieved and reference contexts are split into sentences at runs of ``splitter`` (use
    ``"."`` for English), stripped, empty ones dropped; a query scores the fraction of its
    retrieved sentences that equal one of its reference sentences (0 with no sentences).
    """
    check_str("splitter", splitter, note="such as '。' or '.'")
    pattern = re.compile(f"(?:{re.escape(splitter)})+")
    batch = _text_batch(retrieved_contexts, reference_contexts, "context_relevance")
    scores = np.zeros(len(batch))
    for i, (ret, ref) in enumerate(batch):
        sent = _sentences(ret, pattern)
        if sent:
            ref_set = set(_sentences(ref, pattern))
            scores[i] = sum(s in ref_set for s in sent) / len(sent)
    return _reduce(scores, per_query)


# -- LazyLLM-style evaluator objects ----------------------------------------------------------
class _RecordEvaluator:
    _keys = ("context_retrieved", "context_reference")

    def _columns(self, data: Sequence[Mapping]) -> tuple[list, list]:
        if isinstance(data, Mapping):
            data = [data]
        if not isinstance(data, Sequence) or not data:
            raise ConfigError(
                f"{type(self).__name__} takes a non-empty list of dicts with keys "
                f"{list(self._keys)}"
            )
        for i, item in enumerate(data):
            if not isinstance(item, Mapping):
                raise ConfigError(f"data[{i}] is {type(item).__name__}, expected a dict")
            missing = [k for k in self._keys if k not in item]
            if missing:
                raise ConfigError(f"data[{i}] lacks keys {missing}; needs {list(self._keys)}")
        return [d["context_retrieved"] for d in data], [d["context_reference"] for d in data]


class NonLLMContextRecall(_RecordEvaluator):
    """LazyLLM-compatible evaluator: ``NonLLMContextRecall(th=0.5, binary=True)(data)`` where
    ``data`` is a list of ``{"context_retrieved": [...], "context_reference": [...]}``; returns
    the mean :func:`context_recall`."""

    def __init__(self, th: float = 0.5, binary: bool = True) -> None:
        self.th = th
        self.binary = binary
        context_recall([[]], [[]], threshold=th)  # validates th

    def __call__(self, data: Sequence[Mapping]) -> float:
        ret, ref = self._columns(data)
        return context_recall(ret, ref, threshold=self.th, binary=self.binary)


class ContextRelevance(_RecordEvaluator):
    """LazyLLM-compatible evaluator: ``ContextRelevance(splitter="。")(data)``; returns the mean
    :func:`context_relevance`."""

    def __init__(self, splitter: str = "。") -> None:
        context_relevance([[]], [[]], splitter=splitter)  # validates splitter
        self.splitter = splitter

    def __call__(self, data: Sequence[Mapping]) -> float:
        ret, ref = self._columns(data)
        return context_relevance(ret, ref, splitter=self.splitter)
