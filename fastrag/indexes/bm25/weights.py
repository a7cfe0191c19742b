"""BM25 term weights from corpus statistics (plain NumPy): the inverse document frequency and
the weight at tf = 0 of each variant, and the variants' codes as the kernels take them."""

from __future__ import annotations

import numpy as np

#: the ``method`` argument of ``fastrag._kernels.bm25.build.weigh_postings`` (and its twin)
METHOD_CODES = {"lucene": 0, "robertson": 1, "atire": 2, "bm25l": 3, "bm25+": 4}


def idf_weights(method: str, df: np.ndarray, n_docs: int) -> np.ndarray:
    """Inverse document frequency (float64 ``[n_vocab]``) of a BM25 variant; 0 where df = 0.

    lucene ``log(1 + (N - df + .5)/(df + .5))``, robertson ``log(max(1, (N - df + .5)/(df +
    .5)))``, atire ``log(N/df)``, bm25l ``log((N + 1)/(df + .5))``, bm25+ ``log((N + 1)/df)``."""
    dff = df.astype(np.float64)
    out = np.zeros(df.shape[0], np.float64)
    nz = df > 0
    d = dff[nz]
    n = float(n_docs)
    if method == "lucene":
        out[nz] = np.log1p((n - d + 0.5) / (d + 0.5))
    elif method == "robertson":
        out[nz] = np.log(np.maximum((n - d + 0.5) / (d + 0.5), 1.0))
    elif method == "atire":
        out[nz] = np.log(n / d)
    elif method == "bm25l":
        out[nz] = np.log((n + 1.0) / (d + 0.5))
    elif method == "bm25+":
        out[nz] = np.log((n + 1.0) / d)
    else:  # pragma: no cover - callers validate
        raise ValueError(method)
    return out


def base_weights_for(method: str, idf: np.ndarray, k1: float, delta: float) -> np.ndarray:
    """Per-term weight at tf = 0 (float64): ``idf * tfc(0)``; nonzero only for bm25l
    (``(k1+1) delta / (k1 + delta)``) and bm25+ (``delta``), independent of document length."""
    if method == "bm25l":
        denom = k1 + delta
        c0 = (k1 + 1.0) * delta / denom if denom > 0 else 0.0
        return idf * c0
    if method == "bm25+":
        return idf * delta
    return np.zeros(idf.shape[0], np.float64)
