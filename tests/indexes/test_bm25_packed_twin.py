"""The NumPy twin of the packed-postings decoder (``numpy_path.decode_terms``): the doc ids and
weights of the codec's kernel bit for bit, the same problem codes on damaged blocks, so a cold
process searches a packed index without numba and gets the kernels' answers."""

from __future__ import annotations

import numpy as np
import pytest
from fastrag._kernels.bm25 import codec as kc

import fastrag.indexes.bm25.index as index_mod
from fastrag.analysis import tokenize_corpus
from fastrag.datasets import load_cmrc2018_dev
from fastrag.errors import StoreError
from fastrag.indexes.bm25 import numpy_path
from fastrag.indexes.bm25.backend import NUMPY
from fastrag.indexes.bm25.index import BM25Index

METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]


def _zipf(n_docs=3000, n_vocab=8000, seed=1):
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 300, n_docs)
    offsets = np.zeros(n_docs + 1, np.int64)
    offsets[1:] = np.cumsum(lens)
    values = (rng.zipf(1.1, int(offsets[-1])) % n_vocab).astype(np.int32)
    return values, offsets, n_vocab


def _packed(index: BM25Index) -> BM25Index:
    arrays = {k: np.array(v) for k, v in index.to_arrays(packed=True).items()}
    for v in arrays.values():
        v.flags.writeable = False
    return BM25Index.from_arrays(arrays, index.meta(packed=True))


def _decode_both(pp, terms: np.ndarray, nnz: int):
    """(codes, indices, data) of the kernel and of the twin, decoding ``terms``."""
    a, w = pp.arrays, pp.weighing
    out = []
    for fn in (kc.decode_terms, numpy_path.decode_terms):
        indices = np.full(nnz, -7, np.int32)
        data = np.full(nnz, -7.0, np.float32)
        code = fn(
            a["term_block"],
            a["blk_last"],
            a["blk_word"],
            a["blk_dw"],
            a["blk_tw"],
            a["words"],
            a["indptr"],
            terms,
            a["doc_len"],
            *w,
            a["term_max"],
            indices,
            data,
        )
        out.append((tuple(int(c) for c in code), indices, data))
    return out


@pytest.fixture(scope="module")
def cmrc():
    squad = load_cmrc2018_dev()
    texts = list(dict.fromkeys(p["context"] for a in squad["data"] for p in a["paragraphs"]))
    tok = tokenize_corpus(texts, "bm25_chinese")
    return tok.values, tok.offsets, len(tok.vocab)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("corpus", ["zipf", "cmrc"])
def test_the_twin_decodes_every_term_as_the_kernel_does(method, corpus, cmrc):
    values, offsets, n_vocab = _zipf() if corpus == "zipf" else cmrc
    index = BM25Index.build(values, offsets, n_vocab, method=method)
    pp = _packed(index)._packed
    terms = np.arange(n_vocab, dtype=np.int64)
    (kc_code, kc_i, kc_d), (np_code, np_i, np_d) = _decode_both(pp, terms, int(index.indptr[-1]))
    assert kc_code == np_code == (-1, 0)
    assert numpy_path.BLOCK == kc.BLOCK
    np.testing.assert_array_equal(np_i, kc_i)
    np.testing.assert_array_equal(np_d.view(np.uint32), kc_d.view(np.uint32))
    np.testing.assert_array_equal(np_i, index.indices)  # and the uncompressed index's
    np.testing.assert_array_equal(np_d.view(np.uint32), index.data.view(np.uint32))
    widths = np.concatenate([pp.arrays["blk_dw"], pp.arrays["blk_tw"]])
    assert widths.min() == 0 and widths.max() >= 10  # widths 0 and wide ones both met


def test_every_width_and_block_edge_decodes_alike():
    rng = np.random.default_rng(0)
    lists = [([0], [1]), ([2**31 - 2], [70000]), ([], [])]
    for w in range(0, 31):
        gaps = np.full(300, 2**w if w else 1, np.int64)
        gaps[rng.integers(0, 300, 5)] = 1
        docs = np.cumsum(gaps) - 1
        docs = docs[docs < 2**31 - 1]
        lists.append((docs.tolist(), rng.integers(1, 2 ** min(w, 20) + 1, docs.size).tolist()))
    for n in (127, 128, 129, 255, 256, 257):
        lists.append((np.sort(rng.choice(10**6, n, replace=False)).tolist(), [1] * n))
    indptr = np.zeros(len(lists) + 1, np.int64)
    indptr[1:] = np.cumsum([len(d) for d, _ in lists])
    indices = np.array([x for d, _ in lists for x in d], np.int64)
    tf = np.array([x for _, f in lists for x in f], np.float32)
    enc = kc.encode_postings(indptr, indices, tf)
    doc_len = np.random.default_rng(1).integers(1, 50, 10**6).astype(np.uint32)
    n_vocab = len(lists)
    idf, base = np.linspace(0.5, 3.0, n_vocab), np.zeros(n_vocab)
    term_max = np.full(n_vocab, np.inf, np.float32)
    nnz = int(indptr[-1])
    codes = []
    for t in range(n_vocab):  # one term a call: doc ids past doc_len stop a call (problem 2)
        got = []
        for fn in (kc.decode_terms, numpy_path.decode_terms):
            ind, dat = np.zeros(nnz, np.int32), np.zeros(nnz, np.float32)
            code = fn(*enc, indptr, np.array([t], np.int64), doc_len, idf, base, 2,
                      20.0, 1.2, 0.75, 0.5, term_max, ind, dat)  # fmt: skip
            got.append((tuple(int(c) for c in code), ind, dat))
        (code_k, ind_k, dat_k), (code_n, ind_n, dat_n) = got
        assert code_k == code_n
        codes.append(code_n[1])
        np.testing.assert_array_equal(ind_n, ind_k)
        np.testing.assert_array_equal(dat_n.view(np.uint32), dat_k.view(np.uint32))
        lo, hi = indptr[t], indptr[t + 1]
        np.testing.assert_array_equal(ind_n[lo:hi], indices[lo:hi].astype(np.int32))
    assert codes.count(0) > 10 and codes.count(2) > 10  # both sound and out-of-range lists


@pytest.mark.parametrize("seed", range(12))
def test_damaged_blocks_give_the_kernels_problem_codes(seed):
    """Random damage to the stream, the skip entries or the bounds: the twin names the same
    first bad term and problem as the kernel (and, when it finds none, the same postings)."""
    values, offsets, n_vocab = _zipf(800, 1500, seed=seed)
    index = BM25Index.build(values, offsets, n_vocab)
    pp = _packed(index)._packed
    rng = np.random.default_rng(seed)
    a = {k: np.array(v) for k, v in pp.arrays.items()}
    part = ("words", "blk_last", "term_max")[seed % 3]
    for _ in range(1 + seed):
        i = int(rng.integers(0, a[part].shape[0]))
        if part == "term_max":
            a[part][i] = np.float32(a[part][i] * 0.5)
        else:
            a[part][i] ^= a[part].dtype.type(1 << int(rng.integers(0, 20)))
    pp.arrays = a
    terms = np.arange(n_vocab, dtype=np.int64)
    (kc_code, kc_i, kc_d), (np_code, np_i, np_d) = _decode_both(pp, terms, int(index.indptr[-1]))
    assert np_code == kc_code
    if kc_code[0] == -1:
        np.testing.assert_array_equal(np_i, kc_i)
        np.testing.assert_array_equal(np_d.view(np.uint32), kc_d.view(np.uint32))


def test_a_cold_search_of_a_packed_index_decodes_in_numpy(monkeypatch):
    """A process that chose the NumPy path (small work, kernels not started) decodes a packed
    index's query terms with the twin, never the kernel, and answers as the kernels do."""
    values, offsets, n_vocab = _zipf()
    monkeypatch.setattr(index_mod, "RANK_MIN_DOCS", 1000)  # common terms get rank directories
    index = BM25Index.build(values, offsets, n_vocab)
    rng = np.random.default_rng(3)
    qv = rng.integers(0, 300, 40).astype(np.int32)
    qv[::4] = np.argsort(-np.diff(index.indptr))[:10]  # each query holds a common term
    qo = np.arange(0, 41, 4, dtype=np.int64)
    want = _packed(index).search_csr(qv, qo, 10)
    cold = _packed(index)
    assert cold._rank_pending[qv[::4]].all()
    real_backend = index_mod.backend
    with monkeypatch.context() as m:
        # small work goes to NumPy; asked without an estimate, the kernels are there
        m.setattr(index_mod, "backend", lambda e=None: NUMPY if e is not None else real_backend())
        calls = []
        for name in ("decode_terms", "decode_term_checked"):
            real = getattr(kc, name)
            m.setattr(kc, name, lambda *a, real=real, name=name: calls.append(name) or real(*a))
        got = cold.search_csr(qv, qo, 10)
    assert calls == []  # no kernel: the twin decoded, no rank directory was built
    assert cold._rank_pending[qv[::4]].all()
    for x, y in zip(got, want, strict=True):
        np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8))
    # a damaged term is refused on the NumPy path too
    monkeypatch.setattr(index_mod, "backend", lambda estimate=None: NUMPY)
    broken = _packed(index)
    t = int(np.argmax(np.diff(index.indptr)))
    a = dict(broken._packed.arrays)
    a["blk_last"] = a["blk_last"].copy()
    a["blk_last"][a["term_block"][t]] += 1
    broken._packed.arrays = a
    with pytest.raises(StoreError, match=f"term {t} do not decode to their skip entries"):
        broken.search_csr(np.array([t], np.int32), np.array([0, 1]), 5)


def test_the_numpy_paths_estimate_counts_the_postings_left_to_decode(monkeypatch):
    """A packed index's cold estimate adds decoding the query terms not decoded yet (so a
    query over long lists goes to the kernels), and drops it once they are decoded."""
    values, offsets, n_vocab = _zipf()
    plain = BM25Index.build(values, offsets, n_vocab)
    packed = _packed(plain)
    df = np.diff(plain.indptr)
    qv = np.argsort(-df)[:3].astype(np.int32)  # the three longest lists
    postings = int(df[qv].sum())
    assert postings > 3000
    extra = packed._numpy_seconds(qv, 1) - plain._numpy_seconds(qv, 1)
    assert extra == pytest.approx(3 * 1.5e-4 + postings * 1e-7)
    monkeypatch.setattr(index_mod, "backend", lambda estimate=None: NUMPY)
    packed.search_csr(qv, np.array([0, 3]), 5)  # decodes them (in NumPy)
    assert packed._numpy_seconds(qv, 1) == plain._numpy_seconds(qv, 1)
