"""Recall@1/3/5 of the Chinese analyzers on CMRC 2018 dev (848 paragraphs, 3,219 questions)
with BM25 lucene (k1=1.5, b=0.75), scored by a small exact numpy BM25 (and, when it is
importable, fastrag's BM25Index, which must agree)."""

from __future__ import annotations

import numpy as np
import pytest

from fastrag.analysis import encode_queries, get_analyzer, tokenize_corpus

K1, B = 1.5, 0.75


def numpy_bm25_topk(tc, qv, qo, k=5):
    """Exact lucene BM25 top-k (ties by row order) with numpy: one sparse column per term."""
    n_docs, n_vocab = tc.n_docs, len(tc.vocab)
    doc = np.repeat(np.arange(n_docs), np.diff(tc.offsets))
    pair, tf = np.unique(tc.values.astype(np.int64) * n_docs + doc, return_counts=True)
    term, pdoc = pair // n_docs, pair % n_docs  # sorted by term, then doc
    df = np.bincount(term, minlength=n_vocab)
    idf = np.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
    dl = np.diff(tc.offsets).astype(np.float64)
    norm = K1 * (1.0 - B + B * dl / dl.mean())
    weight = idf[term] * tf / (tf + norm[pdoc])
    indptr = np.concatenate([[0], np.cumsum(df)])
    out = np.empty((len(qo) - 1, k), np.int64)
    rows = np.arange(n_docs)
    for i in range(len(qo) - 1):
        scores = np.zeros(n_docs)
        for t in qv[qo[i] : qo[i + 1]]:
            sl = slice(indptr[t], indptr[t + 1])
            scores[pdoc[sl]] += weight[sl]
        out[i] = np.lexsort((rows, -scores))[:k]
    return out


def recall_at(top, gold, ks=(1, 3, 5)):
    g = np.asarray(gold)[:, None]
    return [float((top[:, :k] == g).any(axis=1).mean()) for k in ks]


@pytest.fixture(scope="module")
def encoded(cmrc):
    contexts, questions, gold = cmrc
    out = {}
    for name, opts in (
        ("bm25_chinese", {}),
        ("bm25_chinese_plain", {"oov_chars": False}),
        ("bm25_cjk", {}),
    ):
        an = get_analyzer(name.replace("_plain", ""), **opts)
        tc = tokenize_corpus(contexts, an)
        qv, qo = encode_queries(questions, an, tc.vocab)
        out[name] = (tc, qv, qo, numpy_bm25_topk(tc, qv, qo))
    return out, gold


def test_bm25_chinese_default_recall(encoded):
    enc, gold = encoded
    r1, r3, r5 = recall_at(enc["bm25_chinese"][3], gold)
    # the bar (jieba + stopwords with bm25s): 0.965 / 0.989 / 0.991
    assert r1 >= 0.965 and r3 >= 0.989 and r5 >= 0.991
    assert (round(r1, 4), round(r3, 4), round(r5, 4)) == (0.9714, 0.9941, 0.9978)
    # plain jieba tokens (no OOV back-off) reproduce the bm25s reference setting
    assert [round(x, 4) for x in recall_at(enc["bm25_chinese_plain"][3], gold)] == [
        0.9643,
        0.9891,
        0.9913,
    ]


def test_bm25_cjk_recall(encoded):
    enc, gold = encoded
    tc = enc["bm25_cjk"][0]
    assert [round(x, 4) for x in recall_at(enc["bm25_cjk"][3], gold)] == [0.9612, 0.9935, 0.9972]
    # the uni+bigram index has several times the postings of the jieba one
    assert tc.n_tokens > 3 * enc["bm25_chinese"][0].n_tokens


@pytest.mark.slow  # every CMRC question against the reference: CI's full run
def test_fastrag_bm25_index_agrees(encoded):
    bm25 = pytest.importorskip("fastrag.indexes.bm25")
    enc, gold = encoded
    for name in ("bm25_chinese", "bm25_cjk"):
        tc, qv, qo, top = enc[name]
        index = bm25.BM25Index.build(tc.values, tc.offsets, len(tc.vocab), k1=K1, b=B)
        rows, _, _ = index.search_csr(qv, qo, 5)
        assert recall_at(rows, gold) == recall_at(top, gold)
