# ============================================================================================
# BM25 (owner: BM25 kernels helper). Slow, obvious twins of fastrag.indexes.bm25 / kernels.bm25.
# Formulas: Kamphuis et al., "Which BM25 do you mean?" (ECIR 2020), as bm25s 0.3.16 implements
# them: lucene, robertson, atire, bm25l, bm25+. A query token repeated in the query counts once
# per occurrence; bm25l/bm25+ add each query token's tf=0 weight to every document.
# ============================================================================================
import math as _bm25_math


def bm25_idf_reference(method: str, df: int, n_docs: int) -> float:
    """IDF of one term with document frequency ``df`` (0 when df == 0)."""
    if df == 0:
        return 0.0
    n = float(n_docs)
    if method == "lucene":
        return _bm25_math.log(1.0 + (n - df + 0.5) / (df + 0.5))
    if method == "robertson":
        return _bm25_math.log(max((n - df + 0.5) / (df + 0.5), 1.0))
    if method == "atire":
        return _bm25_math.log(n / df)
    if method == "bm25l":
        return _bm25_math.log((n + 1.0) / (df + 0.5))
    if method == "bm25+":
        return _bm25_math.log((n + 1.0) / df)
    raise ValueError(method)


def bm25_tfc_reference(
    method: str, tf: float, dl: float, avgdl: float, k1: float, b: float, delta: float
) -> float:
    """Term-frequency component of one term in one document."""
    if tf == 0:  # an absent term; its limit, also where a formula turns 0/0 (k1 = 0)
        if method == "bm25+":
            return delta
        if method == "bm25l":
            return (k1 + 1.0) * delta / (k1 + delta) if k1 + delta > 0 else 0.0
        return 0.0
    norm = 1.0 - b + b * dl / avgdl
    if method in ("lucene", "robertson"):
        return tf / (k1 * norm + tf)
    if method == "atire":
        return tf * (k1 + 1.0) / (tf + k1 * norm)
    if method == "bm25l":
        c = tf / norm
        return (k1 + 1.0) * (c + delta) / (k1 + c + delta)
    if method == "bm25+":
        return (k1 + 1.0) * tf / (k1 * norm + tf) + delta
    raise ValueError(method)


class BM25Reference:
    """Slow, obvious BM25 over ``docs`` (lists of token ids): per-document term counts and
    document frequencies are counted once; ``stats`` = (n_docs, n_tokens, df) overrides the
    corpus's own statistics (sharding)."""

    def __init__(
        self,
        docs: list[list[int]],
        method: str = "lucene",
        k1: float = 1.5,
        b: float = 0.75,
        delta: float = 0.5,
        stats: tuple[int, int, dict[int, int]] | None = None,
    ):
        self.method, self.k1, self.b, self.delta = method, k1, b, delta
        self.lengths = [len(d) for d in docs]
        self.counts: list[dict[int, int]] = []
        for d in docs:
            c: dict[int, int] = {}
            for t in d:
                c[t] = c.get(t, 0) + 1
            self.counts.append(c)
        if stats is None:
            df: dict[int, int] = {}
            for c in self.counts:
                for t in c:
                    df[t] = df.get(t, 0) + 1
            stats = (len(docs), sum(self.lengths), df)
        self.n_docs, n_tokens, self.df = stats
        avgdl = n_tokens / self.n_docs if self.n_docs else 0.0
        self.avgdl = avgdl if avgdl > 0 else 1.0

    def scores(self, query: list[int]) -> tuple[list[float], list[bool]]:
        """Full score of every document, and whether it is a hit (it contains a query term
        with a positive weight)."""
        m, k1, b, delta, avgdl = self.method, self.k1, self.b, self.delta, self.avgdl
        idf = {t: bm25_idf_reference(m, self.df.get(t, 0), self.n_docs) for t in set(query)}
        w0 = {t: idf[t] * bm25_tfc_reference(m, 0.0, avgdl, avgdl, k1, b, delta) for t in idf}
        scores, hits = [], []
        for c, dl in zip(self.counts, self.lengths, strict=True):
            s, hit = 0.0, False
            for t in query:
                tf = c.get(t, 0)
                if tf == 0:
                    s += w0[t]
                else:
                    w = idf[t] * bm25_tfc_reference(m, float(tf), float(dl), avgdl, k1, b, delta)
                    s += w
                    hit = hit or (w - w0[t]) > 0
            scores.append(s)
            hits.append(hit)
        return scores, hits

    def topk(
        self, query: list[int], k: int, mask: list[bool] | None = None, cutoff: float | None = None
    ) -> list[tuple[int, float]]:
        """Top-k ``(row, score)`` hits, best first, ties by row order; masked rows and scores
        below ``cutoff`` are left out."""
        scores, hits = self.scores(query)
        rows = [
            i
            for i in range(len(scores))
            if hits[i] and (mask is None or mask[i]) and (cutoff is None or scores[i] >= cutoff)
        ]
        rows.sort(key=lambda i: (-scores[i], i))
        return [(i, scores[i]) for i in rows[:k]]


def bm25_scores_reference(
    docs: list[list[int]],
    query: list[int],
    method: str = "lucene",
    k1: float = 1.5,
    b: float = 0.75,
    delta: float = 0.5,
    stats: tuple[int, int, dict[int, int]] | None = None,
) -> tuple[list[float], list[bool]]:
    """:meth:`BM25Reference.scores` of a one-off corpus."""
    return BM25Reference(docs, method, k1, b, delta, stats).scores(query)


def bm25_topk_reference(
    docs: list[list[int]],
    query: list[int],
    k: int,
    method: str = "lucene",
    k1: float = 1.5,
    b: float = 0.75,
    delta: float = 0.5,
    mask: list[bool] | None = None,
    cutoff: float | None = None,
    stats: tuple[int, int, dict[int, int]] | None = None,
) -> list[tuple[int, float]]:
    """:meth:`BM25Reference.topk` of a one-off corpus."""
    return BM25Reference(docs, method, k1, b, delta, stats).topk(query, k, mask, cutoff)


# ============================================================================================
# Synthesis (fastrag.synth): prompt packing
# ============================================================================================


def min_ordered_packs_reference(sizes: list[int], sep: int, budget: int) -> int:
    """Fewest contiguous groups of ``sizes`` (in order) with ``sum + sep * (len - 1) <=
    budget`` each, by dynamic programming over all split points (every size <= budget)."""
    n = len(sizes)
    inf = float("inf")
    best = [0] + [inf] * n  # best[i]: fewest groups for the first i items
    for i in range(1, n + 1):
        total = 0
        for j in range(i - 1, -1, -1):  # group = items j .. i-1
            total += sizes[j] + (sep if j < i - 1 else 0)
            if total > budget:
                break
            best[i] = min(best[i], best[j] + 1)
    return int(best[n])


# ============================================================================================
# Retrieval (fastrag.retrieval.joiners): fusion of hit lists, plain Python
# ============================================================================================


def fusion_reference(
    lists: list[list[tuple[str, float | None]]],
    method: str,
    k: float = 60,
    weights: list[float] | None = None,
    normalization: str = "minmax",
) -> list[tuple[str, float]]:
    """Fuse hit lists of ``(node_id, score)`` pairs, best first, ties by first appearance.

    ``method``: "rrf" (sum of w / (k + rank), rank from 1) or "weighted" (per-list min-max
    or z-score normalized scores times weights rescaled to sum 1). A node repeated in one
    list counts at its first position only."""
    order: list[str] = []
    fused: dict[str, float] = {}
    w = list(weights) if weights is not None else [1.0] * len(lists)
    if method == "weighted":
        total = sum(w)
        w = [x / total for x in w]
    for li, lst in enumerate(lists):
        seen: list[str] = []
        uniq = []
        for nid, s in lst:
            if nid not in seen:
                seen.append(nid)
                uniq.append((nid, s))
        if method == "weighted":
            vals = [float(s) for _, s in uniq]
            if normalization == "minmax":
                lo, hi = (min(vals), max(vals)) if vals else (0.0, 0.0)
                norm = [(v - lo) / (hi - lo) if hi > lo else 1.0 for v in vals]
            else:
                mean = sum(vals) / len(vals) if vals else 0.0
                std = (sum((v - mean) ** 2 for v in vals) / len(vals)) ** 0.5 if vals else 0.0
                norm = [(v - mean) / std if std > 0 else 0.0 for v in vals]
        for pos, (nid, _) in enumerate(uniq):
            if nid not in fused:
                fused[nid] = 0.0
                order.append(nid)
            if method == "rrf":
                fused[nid] += w[li] / (k + pos + 1)
            else:
                fused[nid] += w[li] * norm[pos]
    for lst in lists:  # first appearance scanning the lists in order
        for nid, _ in lst:
            if nid not in order:
                order.append(nid)
    first = {nid: i for i, nid in enumerate(order)}
    return sorted(((nid, fused[nid]) for nid in order), key=lambda p: (-p[1], first[p[0]]))


# ============================================================================================
# Dense exact top-k (owner: dense indexes helper). Slow, obvious twin of fastrag.indexes.flat:
# float64 scores, cosine by normalising (zero vectors stay zero), candidates sorted by
# (-score, row), hits need score >= cutoff, padded with row -1 / score -inf to width k.
# ============================================================================================
def dense_topk_reference(vectors, queries, k: int, metric: str = "cosine", mask=None, cutoff=None):
    """Return ``(rows int64 (n_q, k), scores float64 (n_q, k), counts)`` by brute force."""
    import numpy as _np

    x = _np.asarray(vectors, _np.float64)
    q = _np.atleast_2d(_np.asarray(queries, _np.float64))
    if metric == "cosine":

        def _unit(a):
            norms = _np.sqrt((a * a).sum(axis=1, keepdims=True))
            return _np.divide(a, norms, out=_np.zeros_like(a), where=norms > 0)

        x, q = _unit(x), _unit(q)
    rows = _np.full((q.shape[0], k), -1, _np.int64)
    scores = _np.full((q.shape[0], k), -_np.inf)
    counts = _np.zeros(q.shape[0], _np.int64)
    full = q @ x.T
    for i in range(q.shape[0]):
        cand = []
        for r in range(x.shape[0]):
            if mask is not None and not mask[r]:
                continue
            s = float(full[i, r])
            if cutoff is not None and s < cutoff:
                continue
            cand.append((-s, r))
        cand.sort()
        for j, (neg, r) in enumerate(cand[:k]):
            rows[i, j] = r
            scores[i, j] = -neg
        counts[i] = min(k, len(cand))
    return rows, scores, counts


# ============================================================================================
# Edit distance (owner: house helper). Slow, obvious twins of fastrag._kernels.edit: the
# Wagner-Fischer DP over code points, and the bag distance (multiset difference).
# ============================================================================================
def levenshtein_reference(a, b) -> int:
    """Levenshtein distance of two sequences (str, or lists / arrays of code points)."""
    a, b = list(a), list(b)
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def bag_distance_reference(a, b) -> int:
    """max(len) minus the size of the multiset intersection: a lower bound of Levenshtein."""
    from collections import Counter as _Counter

    common = sum((_Counter(list(a)) & _Counter(list(b))).values())
    return max(len(a), len(b)) - common
