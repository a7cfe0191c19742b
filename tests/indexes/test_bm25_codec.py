"""Compressed BM25 postings (kernels/bm25/codec.py): lossless doc ids and term frequencies,
weights bit-identical to the uncompressed index."""

from __future__ import annotations

import numpy as np
import pytest
from fastrag._kernels.bm25 import build as kb
from fastrag._kernels.bm25 import codec as kc

from fastrag.analysis import tokenize_corpus
from fastrag.datasets import load_cmrc2018_dev
from fastrag.indexes.bm25 import weights as bm25_weights
from fastrag.indexes.bm25.index import BM25Index


def _csr(lists: list[tuple[list[int], list[int]]]):
    indptr = np.zeros(len(lists) + 1, np.int64)
    indptr[1:] = np.cumsum([len(d) for d, _ in lists])
    indices = np.array([x for d, _ in lists for x in d], np.int64)
    tf = np.array([x for _, f in lists for x in f], np.float32)
    return indptr, indices, tf


def _decode_all(enc, indptr):
    term_block, blk_last, blk_word, blk_dw, blk_tw, words = enc
    docs = np.empty(kc.BLOCK, np.int64)
    tfs = np.empty(kc.BLOCK, np.int64)
    out = []
    for t in range(indptr.shape[0] - 1):
        n_left = int(indptr[t + 1] - indptr[t])
        d_all, f_all = [], []
        for j in range(term_block[t], term_block[t + 1]):
            n = min(kc.BLOCK, n_left)
            kc.decode_block(
                blk_last, blk_word, blk_dw, blk_tw, words, j, j == term_block[t], n, docs, tfs
            )
            d_all += docs[:n].tolist()
            f_all += tfs[:n].tolist()
            n_left -= n
        out.append((d_all, f_all))
    return out


def test_round_trip_at_every_width_and_block_edge():
    rng = np.random.default_rng(0)
    lists = [([0], [1]), ([2**31 - 2], [70000]), ([], [])]  # 1 posting; widest values; empty
    for w in range(0, 31):  # every gap width: gaps of exactly 2**w - 1 extra, plus noise
        n = 300  # three blocks, the last partial
        gaps = np.full(n, 2**w if w else 1, np.int64)
        gaps[rng.integers(0, n, 5)] = 1
        docs = np.cumsum(gaps) - 1
        docs = docs[docs < 2**31 - 1]
        tfs = rng.integers(1, 2 ** min(w, 20) + 1, docs.shape[0])
        lists.append((docs.tolist(), tfs.tolist()))
    for n in (127, 128, 129, 255, 256, 257):  # block edges
        docs = np.sort(rng.choice(10**6, n, replace=False))
        lists.append((docs.tolist(), np.ones(n, np.int64).tolist()))
    lists.append(([5, 5 + 2**24 + 1, 5 + 2**25 + 7], [1, 2, 3]))  # gaps > 2^24
    indptr, indices, tf = _csr(lists)
    enc = kc.encode_postings(indptr, indices, tf)
    assert _decode_all(enc, indptr) == [(d, f) for d, f in lists]
    term_block, blk_last, *_ = enc
    assert term_block[-1] == sum((len(d) + kc.BLOCK - 1) // kc.BLOCK for d, _ in lists)
    # the skip entries are each block's last doc id
    j = term_block[3]  # a 300-posting list: blocks end at postings 127, 255, 299
    assert blk_last[j : j + 3].tolist() == [lists[3][0][127], lists[3][0][255], lists[3][0][-1]]


def test_all_gaps_one_and_tf_one_store_no_words():
    indptr, indices, tf = _csr([(list(range(256)), [1] * 256)])
    *_, words = kc.encode_postings(indptr, indices, tf)
    assert words.shape[0] == 1  # the pad word only
    assert _decode_all(kc.encode_postings(indptr, indices, tf), indptr)[0][0] == list(range(256))


@pytest.mark.parametrize(
    "lists",
    [[([3, 3], [1, 1])], [([4, 2], [1, 1])], [([1, 2], [0, 1])], [([1, 2], [1.5, 1])]],
)
def test_bad_postings_are_refused(lists):
    with pytest.raises(ValueError, match="ascend per term and tf be integers >= 1"):
        kc.encode_postings(*_csr(lists))


def _exact_check(values, offsets, n_vocab, method):
    index = BM25Index.build(values, offsets, n_vocab, method=method, k1=1.2, b=0.75)
    df, _ = kb.count_document_frequencies(values, offsets, n_vocab)
    indptr, indices, tf = kb.build_postings(values, offsets, n_vocab, df)
    enc = kc.encode_postings(indptr, indices, tf)
    idf = bm25_weights.idf_weights(method, df, offsets.shape[0] - 1)
    delta = index.params["delta"]
    base = bm25_weights.base_weights_for(method, idf, 1.2, delta)
    got_idx, got_w = kc.decode_postings(
        *enc,
        indptr,
        np.diff(offsets).astype(np.int64),
        idf,
        base,
        bm25_weights.METHOD_CODES[method],
        float(index.stats.avgdl),
        1.2,
        0.75,
        delta,
    )
    np.testing.assert_array_equal(np.asarray(index.indptr, np.int64), indptr)
    np.testing.assert_array_equal(got_idx, index.indices)
    # bit for bit: the float32 patterns
    np.testing.assert_array_equal(got_w.view(np.uint32), index.data.view(np.uint32))
    # block maxima: each block's largest decoded weight, never above the term's bound
    blk_max = kc.block_maxima(enc[0], indptr, got_w)
    term_block = enc[0]
    for t in np.flatnonzero(df)[:: max(1, len(df) // 500)]:
        for j in range(term_block[t], term_block[t + 1]):
            p0 = indptr[t] + (j - term_block[t]) * kc.BLOCK
            p1 = min(p0 + kc.BLOCK, indptr[t + 1])
            assert blk_max[j] == got_w[p0:p1].max() <= index.term_max[t]
    # one term through decode_term too
    t = int(np.argmax(df))
    out_d = np.empty(int(df[t]), np.int64)
    out_w = np.empty(int(df[t]), np.float32)
    kc.decode_term(
        *enc,
        t,
        int(df[t]),
        np.diff(offsets).astype(np.int64),
        idf[t],
        base[t],
        bm25_weights.METHOD_CODES[method],
        float(index.stats.avgdl),
        1.2,
        0.75,
        delta,
        out_d,
        out_w,
    )
    lo, hi = int(index.indptr[t]), int(index.indptr[t + 1])
    np.testing.assert_array_equal(out_w.view(np.uint32), index.data[lo:hi].view(np.uint32))
    return int(indptr[-1])


@pytest.fixture(scope="module")
def cmrc_tokens():
    squad = load_cmrc2018_dev()
    texts = list(dict.fromkeys(p["context"] for a in squad["data"] for p in a["paragraphs"]))
    return tokenize_corpus(texts, "bm25_chinese")


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_weights_are_bit_identical_to_the_stored_ones_on_real_text(method, cmrc_tokens):
    tok = cmrc_tokens
    n = _exact_check(tok.values, tok.offsets, len(tok.vocab), method)
    assert n > 100_000


def test_weights_are_bit_identical_on_zipf_tokens():
    rng = np.random.default_rng(1)
    n_docs, n_vocab = 5000, 20000
    lens = rng.integers(1, 300, n_docs)
    offsets = np.zeros(n_docs + 1, np.int64)
    offsets[1:] = np.cumsum(lens)
    values = (rng.zipf(1.1, int(offsets[-1])) % n_vocab).astype(np.int32)
    assert _exact_check(values, offsets, n_vocab, "lucene") > 500_000
