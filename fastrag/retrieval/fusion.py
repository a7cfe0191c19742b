"""Fusion of several ranked hit lists over one group (``similarity="hybrid"``), on arrays.

Each path gives ``Hits``: ``rows [n_q, d]`` (-1 padded), ``scores`` and ``counts``. Fusion
works on all queries at once with NumPy (no per-hit Python objects):

* ``"rrf"``: reciprocal rank fusion, a row scores ``sum_i w_i / (rrf_k + rank_i)`` with
  ranks from 1 (Cormack et al. 2009), lists missing the row adding nothing;
* ``"relative"``: each list's scores min-max normalized per query to [0, 1] (a list whose
  scores are all equal gives 1), then ``sum_i w_i * norm_i`` (Weaviate's relative score
  fusion, LlamaIndex's ``relative_score``).

Ties go to the lower row, as everywhere in fastrag.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fastrag._checks import check_bool, check_choice, check_int, check_number
from fastrag._coldstart import kernels_for
from fastrag._lazy import kernels
from fastrag.errors import ConfigError
from fastrag.indexes.base import Hits

__all__ = [
    "DEFAULT_FUSION",
    "FUSIONS",
    "check_fusion",
    "coverage_weights",
    "default_weights",
    "fuse_and_cut",
    "fuse_hits",
    "fuse_topk_numpy",
]

FUSIONS = ("rrf", "relative")
_fusion_kernels = kernels("fusion")
# seconds per (list, query, hit) entry of the NumPy twin (CMRC dev, 2 lists x 50 hits: 0.33 us)
_TWIN_S_PER_ENTRY = 3.3e-7
#: ``similarity="hybrid"``'s defaults, chosen on CMRC dev (bench/bench_quality.py): relative
#: score fusion of the top 50 of each path; weights None = 0.6 for BM25 and 0.4 shared by the
#: embed keys (R@1 0.980-0.981 for BM25 weights 0.55-0.65 and depths 20-50; RRF 0.967-0.969)
#: ``coverage``: an embed key has no weight for a query its embedder cannot read (see
#: :func:`coverage_weights`; static tables' ``query_coverage``, other embedders read all)
DEFAULT_FUSION: dict = {
    "fusion": "relative",
    "weights": None,
    "rrf_k": 60.0,
    "depth": 50,
    "coverage": True,
}
BM25_SHARE = 0.6
#: the share of a query's tokens an embedder must read for its scores to count in ``hybrid``
READS_MIN = 0.5


def default_weights(n_dense: int, shares: Sequence[float | None] | None = None) -> list[float]:
    """BM25's weight, then each of ``n_dense`` embed keys' (summing to 1). A key's share of
    the vectors' part is its embedder's ``hybrid_share`` where it has one (``shares``; a
    static table: 0.2), else ``1 - BM25_SHARE``; BM25 has the rest."""
    shares = [None] * n_dense if shares is None else list(shares)
    dense = [(1.0 - BM25_SHARE if s is None else float(s)) / n_dense for s in shares]
    return [1.0 - sum(dense), *dense]


def check_fusion(params: dict, other: tuple[str, ...]) -> dict:
    """The fusion options in ``params`` (a Retriever's keyword arguments) with defaults."""
    opts = dict(DEFAULT_FUSION)
    for key in DEFAULT_FUSION:
        if key in params:
            opts[key] = params[key]
    opts["fusion"] = check_choice("fusion", opts["fusion"], FUSIONS)
    opts["rrf_k"] = check_number("rrf_k", opts["rrf_k"], min=0, note="usually 60")
    opts["depth"] = check_int(
        "depth", opts["depth"], min=1, note="hits taken from each path before fusing"
    )
    opts["coverage"] = check_bool("coverage", opts["coverage"])
    w = opts["weights"]
    if w is not None:
        if isinstance(w, (str, bytes)) or not isinstance(w, Sequence) or not w:
            raise ConfigError(
                f"weights must be a list of numbers (BM25's, then each embed key's), got {w!r}"
            )
        opts["weights"] = [check_number("weights[i]", x, min=0) for x in w]
    return opts


def _contributions(rows, scores, counts, method: str, weight, rrf_k: float):
    """``(query, row, contribution)`` of every valid hit of one list (``weight``: a number,
    or one per query; none for a query the list has no weight for)."""
    d = rows.shape[1]
    valid = np.arange(d)[None, :] < counts[:, None]
    # a list with no weight for a query brings it no candidates: otherwise they would tie at
    # 0 with the lowest hit of the other lists (0 after min-max) and could pass it
    valid &= (np.asarray(weight, dtype=np.float64) > 0).reshape(-1, 1)
    q, rank = np.nonzero(valid)
    if np.ndim(weight):
        weight = np.asarray(weight, dtype=np.float64)[q]
    if method == "rrf":
        contrib = weight / (rrf_k + rank + 1.0)
    else:
        s = scores.astype(np.float64)
        lo = np.where(valid, s, np.inf).min(axis=1)
        hi = np.where(valid, s, -np.inf).max(axis=1)
        span = hi - lo
        ok = span > 0
        norm = np.where(ok[:, None], (s - lo[:, None]) / np.where(ok, span, 1.0)[:, None], 1.0)
        contrib = weight * norm[valid]
    return q, rows[valid], contrib


def _weight(x, nq: int):
    if np.ndim(x) == 0:
        return float(x)
    a = np.asarray(x, dtype=np.float64)
    if a.shape != (nq,):
        raise ConfigError(f"a per-query weight needs one number per query ({nq}), got {a.shape}")
    return a


def coverage_weights(weights: Sequence[float], coverage: Sequence[np.ndarray | None]) -> list:
    """Per-query weights: an embed key whose embedder reads less than :data:`READS_MIN` of a
    query's tokens (``coverage``; None: all of them) gets no weight for that query, and each
    query's weights are rescaled to their original sum (a query no embedder reads is ranked
    by BM25 alone)."""
    if all(c is None for c in coverage):
        return list(weights)
    nq = len(next(c for c in coverage if c is not None))
    w = [np.full(nq, float(weights[0]))]
    for wi, c in zip(weights[1:], coverage, strict=True):
        reads = np.ones(nq) if c is None else (np.asarray(c) >= READS_MIN).astype(np.float64)
        w.append(float(wi) * reads)
    total = np.sum(w, axis=0)
    scale = np.where(total > 0, float(sum(weights)) / np.where(total > 0, total, 1.0), 0.0)
    return [x * scale for x in w]


def fuse_hits(
    results: Sequence[Hits],
    k: int,
    method: str = "rrf",
    weights: Sequence[float | np.ndarray] | None = None,
    rrf_k: float = 60.0,
) -> Hits:
    """The top ``k`` of each query after fusing ``results`` (one ``Hits`` per path; a
    path's weight is a number or an array of one per query)."""
    nq = results[0][0].shape[0]
    w = [1.0] * len(results) if weights is None else [_weight(x, nq) for x in weights]
    parts = [
        _contributions(r, s, c, method, wi, rrf_k) for (r, s, c), wi in zip(results, w, strict=True)
    ]
    q = np.concatenate([p[0] for p in parts]).astype(np.int64)
    row = np.concatenate([p[1] for p in parts]).astype(np.int64)
    contrib = np.concatenate([p[2] for p in parts]).astype(np.float64, copy=False)
    out_rows = np.full((nq, k), -1, dtype=np.int64)
    out_scores = np.zeros((nq, k), dtype=np.float32)
    counts = np.zeros(nq, dtype=np.int32)
    if not len(q):
        return out_rows, out_scores, counts
    fuse = (
        _fusion_kernels.fuse_topk
        if kernels_for(lambda: len(q) * _TWIN_S_PER_ENTRY)
        else fuse_topk_numpy
    )
    fuse(q, row, contrib, k, out_rows, out_scores, counts)
    return out_rows, out_scores, counts


def fuse_and_cut(
    results: Sequence[Hits],
    k: int,
    opts: dict,
    weights: Sequence[float | np.ndarray],
    cutoff: float | None,
) -> Hits:
    """:func:`fuse_hits` with ``opts`` (:func:`check_fusion`'s), hits whose fused score is
    below ``cutoff`` (None: none) dropped."""
    rows, scores, counts = fuse_hits(results, k, opts["fusion"], weights, opts["rrf_k"])
    if cutoff is not None:
        counts = np.minimum(counts, (scores >= cutoff).sum(axis=1).astype(np.int32))
        rows[np.arange(k)[None, :] >= counts[:, None]] = -1
    return rows, scores, counts


def fuse_topk_numpy(q, row, contrib, k, out_rows, out_scores, counts) -> None:
    """The NumPy twin of the ``fuse_topk`` kernel (the same floats): each (query ``q``,
    ``row``)'s ``contrib`` summed in entry order, each query's top ``k`` written best first,
    ties to the lower row."""
    nq = counts.shape[0]
    order = np.lexsort((row, q))
    q, row, contrib = q[order], row[order], contrib[order]
    first = np.ones(len(q), dtype=bool)
    first[1:] = (q[1:] != q[:-1]) | (row[1:] != row[:-1])
    starts = np.flatnonzero(first)
    fq, frow = q[starts], row[starts]
    fscore = np.add.reduceat(contrib, starts)
    order = np.lexsort((frow, -fscore, fq))
    fq, frow, fscore = fq[order], frow[order], fscore[order]
    qstart = np.searchsorted(fq, np.arange(nq))
    rank = np.arange(len(fq)) - qstart[fq]
    keep = rank < k
    out_rows[fq[keep], rank[keep]] = frow[keep]
    out_scores[fq[keep], rank[keep]] = fscore[keep]
    counts[:] = np.minimum(np.bincount(fq, minlength=nq), k)
