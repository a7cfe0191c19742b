"""Packed BM25 indexes (``to_arrays(packed=True)``, fastrag/indexes/bm25/packed.py): the same
scores bit for bit, postings decoded block by block as searches reach them, damage refused."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fastrag.analysis import tokenize_corpus
from fastrag.datasets import load_cmrc2018_dev
from fastrag.errors import ConfigError, StoreError
from fastrag.indexes.bm25.index import BM25Index
from fastrag.indexes.bm25.stats import BM25Stats

METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]


@pytest.fixture(scope="module")
def cmrc():
    squad = load_cmrc2018_dev()
    texts = list(dict.fromkeys(p["context"] for a in squad["data"] for p in a["paragraphs"]))
    tok = tokenize_corpus(texts, "bm25_chinese")
    return tok.values, tok.offsets, len(tok.vocab)


def _zipf(n_docs=5000, n_vocab=20000, seed=1):
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 300, n_docs)
    offsets = np.zeros(n_docs + 1, np.int64)
    offsets[1:] = np.cumsum(lens)
    values = (rng.zipf(1.1, int(offsets[-1])) % n_vocab).astype(np.int32)
    return values, offsets, n_vocab


def _queries(values, offsets, n_q, seed=0):
    """Queries of 1-6 terms drawn from documents (so they match)."""
    rng = np.random.default_rng(seed)
    out, qo = [], [0]
    for d in rng.integers(0, offsets.shape[0] - 1, n_q):
        doc = values[offsets[d] : offsets[d + 1]]
        q = rng.choice(doc, min(len(doc), int(rng.integers(1, 7))), replace=False)
        out.append(q)
        qo.append(qo[-1] + len(q))
    return np.concatenate(out).astype(np.int32), np.array(qo, np.int64)


def _reload(index: BM25Index) -> BM25Index:
    arrays = {k: np.array(v) for k, v in index.to_arrays(packed=True).items()}
    for v in arrays.values():
        v.flags.writeable = False  # as memory-mapped files are
    return BM25Index.from_arrays(arrays, index.meta(packed=True))


def _same_results(a: BM25Index, b: BM25Index, qv, qo, **kw) -> None:
    for x, y in zip(a.search_csr(qv, qo, 10, **kw), b.search_csr(qv, qo, 10, **kw), strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8))


@pytest.mark.parametrize("method", METHODS)
def test_packed_index_scores_bit_identical_on_cmrc(cmrc, method):
    values, offsets, n_vocab = cmrc
    index = BM25Index.build(values, offsets, n_vocab, method=method)
    packed = _reload(index)
    qv, qo = _queries(values, offsets, 400)
    _same_results(index, packed, qv, qo)
    _same_results(index, packed, qv, qo, cutoff=1.0, num_threads=2)
    for q in range(5):
        t = qv[qo[q] : qo[q + 1]]
        got, want = packed.get_scores(t), index.get_scores(t)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    packed.check_postings()  # every term decoded: the arrays themselves, bit for bit
    np.testing.assert_array_equal(packed.indices, index.indices)
    np.testing.assert_array_equal(packed.data.view(np.uint32), index.data.view(np.uint32))


def test_packed_index_on_zipf_tokens_is_small_and_identical():
    values, offsets, n_vocab = _zipf()
    index = BM25Index.build(values, offsets, n_vocab)
    nnz = int(index.indptr[-1])
    # everything stored counts: skip entries, per-term and per-document arrays
    assert index.packed_nbytes() / nnz < 2.1
    assert index.nbytes / nnz > 8.0
    packed = _reload(index)
    qv, qo = _queries(values, offsets, 500, seed=3)
    _same_results(index, packed, qv, qo)
    assert packed.to_arrays(packed=True).keys() == index.to_arrays(packed=True).keys()
    # a packed index packs to the same bytes, and unpacks to the built arrays
    for name, arr in packed.to_arrays(packed=True).items():
        np.testing.assert_array_equal(arr, index.to_arrays(packed=True)[name])
    for name, arr in packed.to_arrays().items():
        np.testing.assert_array_equal(arr.view(np.uint8), index.to_arrays()[name].view(np.uint8))


def test_shards_with_global_statistics_pack_too():
    values, offsets, n_vocab = _zipf(2000, 5000, seed=4)
    whole = BM25Index.build(values, offsets, n_vocab)
    half = 1000
    stats = BM25Stats(whole.n_docs, whole.n_tokens, whole.stats.df)
    shard = BM25Index.build(
        values[offsets[half] :], offsets[half:] - offsets[half], n_vocab, stats=stats
    )
    packed = _reload(shard)
    assert "stats_df" in shard.to_arrays(packed=True)
    qv, qo = _queries(values, offsets, 300, seed=5)
    _same_results(shard, packed, qv, qo)


def _decoded_blocks(index: BM25Index, t: int) -> int:
    tb = index._packed.arrays["term_block"]
    return int(index._packed.ready[tb[t] : tb[t + 1]].sum())


def test_a_query_decodes_only_its_own_terms():
    values, offsets, n_vocab = _zipf()
    packed = _reload(BM25Index.build(values, offsets, n_vocab))
    assert not packed.data.any()  # nothing decoded on open
    packed.search_csr(np.array([3, 7], np.int32), np.array([0, 2]), 5)
    indptr = np.asarray(packed.indptr)
    decoded = np.flatnonzero(packed.data)
    terms = np.unique(np.searchsorted(indptr, decoded, side="right") - 1)
    assert terms.tolist() == [3, 7]
    ready = packed._packed.ready
    assert ready.sum() == _decoded_blocks(packed, 3) + _decoded_blocks(packed, 7) > 0


@pytest.mark.parametrize("n_docs", [5000, 70000])  # galloping search; rank directories
def test_a_probed_term_decodes_only_the_blocks_its_candidates_reach(n_docs):
    """A rare term admits the top rows; the common term is then only looked up for them (by
    galloping search, or by rank directory in a large index): most of its blocks stay packed,
    and every answer equals the unpacked index's bit for bit."""
    rng = np.random.default_rng(3)
    lens = rng.integers(3, 12, n_docs)
    offsets = np.zeros(n_docs + 1, np.int64)
    offsets[1:] = np.cumsum(lens)
    values = (rng.zipf(1.3, int(offsets[-1])) % 5000).astype(np.int32)
    index = BM25Index.build(values, offsets, 5000)
    packed = _reload(index)
    df = np.diff(np.asarray(index.indptr))
    common = int(np.argmax(df))
    rare = int(np.flatnonzero((df >= 3) & (df <= 8))[0])
    qv, qo = np.array([rare, common], np.int32), np.array([0, 2])
    hits = [i.search_csr(qv, qo, 2, strategy="maxscore") for i in (index, packed)]
    for x, y in zip(*hits, strict=True):
        np.testing.assert_array_equal(x, y)
    n_blocks = (int(df[common]) + 127) // 128
    assert n_blocks > 30
    assert 1 <= _decoded_blocks(packed, common) <= 2 * int(df[rare]) + 2
    qv, qo = _queries(values, offsets, 400, seed=2)
    for strategy in ("maxscore", "auto", "touched", "dense"):
        _same_results(index, packed, qv, qo, strategy=strategy)
        _same_results(index, packed, qv, qo, strategy=strategy, num_threads=2)


def test_threads_decoding_the_same_terms_get_the_same_answers():
    values, offsets, n_vocab = _zipf(8000, 20000, seed=6)
    index = BM25Index.build(values, offsets, n_vocab)
    qv, qo = _queries(values, offsets, 64, seed=7)
    want = index.search_csr(qv, qo, 10)
    for _ in range(3):
        packed = _reload(index)
        got = [None] * 8
        barrier = threading.Barrier(8)

        def run(i, packed=packed, got=got, barrier=barrier):
            barrier.wait()
            got[i] = packed.search_csr(qv, qo, 10)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for g in got:
            for x, y in zip(g, want, strict=True):
                np.testing.assert_array_equal(x, y)


def test_what_cannot_be_packed_says_why():
    values, offsets, n_vocab = _zipf(500, 2000)
    index = BM25Index.build(values, offsets, n_vocab)
    plain = BM25Index.from_arrays(index.to_arrays(), index.meta())
    with pytest.raises(ConfigError, match="no document lengths"):
        plain.to_arrays(packed=True)
    data = index.data.copy()
    data[5] = np.nextafter(data[5], np.float32(0))  # a weight no tf gives
    odd = BM25Index(
        indptr=index.indptr,
        indices=index.indices,
        data=data,
        term_max=index.term_max,
        stats=index.stats,
        n_docs=index.n_docs,
        n_tokens=index.n_tokens,
        method="lucene",
        k1=1.5,
        b=0.75,
        delta=0.5,
        external_stats=False,
        doc_len=np.diff(offsets).astype(np.uint32),
    )
    with pytest.raises(ConfigError, match="posting 5 .* cannot be packed"):
        odd.to_arrays(packed=True)


def _damaged(index, edit):
    arrays = {k: np.array(v) for k, v in index.to_arrays(packed=True).items()}
    edit(arrays)
    return arrays, index.meta(packed=True)


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda a: a["blk_dw"].__setitem__(0, 33), "bit width is above 32"),
        (lambda a: a["blk_dw"].__setitem__(0, a["blk_dw"][0] + 1), "word offsets do not match"),
        (lambda a: a.__setitem__("words", a["words"][:-1]), "words holds"),
        (lambda a: a["doc_len"].__setitem__(0, a["doc_len"][0] + 1), "do not add up"),
        (lambda a: a.__setitem__("blk_last", a["blk_last"][:-1]), "blk_last is"),
        (lambda a: a.__setitem__("doc_len", a["doc_len"].astype(np.int64)), "doc_len is"),
    ],
)
def test_damaged_packed_arrays_are_refused_on_open(edit, words):
    values, offsets, n_vocab = _zipf(500, 2000)
    arrays, meta = _damaged(BM25Index.build(values, offsets, n_vocab), edit)
    with pytest.raises(StoreError, match=words):
        BM25Index.from_arrays(arrays, meta)


def test_damaged_blocks_are_refused_before_a_search_reads_them():
    values, offsets, n_vocab = _zipf(500, 2000)
    index = BM25Index.build(values, offsets, n_vocab)
    t = int(np.argmax(np.diff(index.indptr)))  # the longest list: several blocks

    def edit(a):
        tb = np.concatenate([[0], np.cumsum((np.diff(a["indptr"]) + 127) // 128)])
        a["blk_last"][tb[t]] += 1  # its first skip entry

    packed = BM25Index.from_arrays(*_damaged(index, edit))
    packed.search_csr(np.array([(t + 1) % n_vocab], np.int32), np.array([0, 1]), 5)  # other terms
    with pytest.raises(StoreError, match=f"term {t} do not decode to their skip entries"):
        packed.search_csr(np.array([t], np.int32), np.array([0, 1]), 5)


def test_from_postings_rejects_a_bad_term_map():
    from fastrag.indexes.bm25.packed import encode_corpus

    values, offsets, n_vocab = _zipf(300, 500)
    post = encode_corpus(values, offsets, n_vocab)
    stats = BM25Index.build(values, offsets, n_vocab).stats
    for bad in (np.arange(n_vocab - 1), np.zeros(n_vocab, np.int64), np.arange(n_vocab) + 1):
        with pytest.raises(ConfigError, match="to_global must map each"):
            BM25Index.from_postings(post, bad, n_vocab, stats)
    index = BM25Index.from_postings(post, np.arange(n_vocab), n_vocab, stats)
    want = BM25Index.build(values, offsets, n_vocab)
    qv, qo = _queries(values, offsets, 50)
    _same_results(index, want, qv, qo)


def test_decoded_postings_counts_the_blocks_searches_decoded():
    values, offsets, n_vocab = _zipf(3000, 8000, seed=4)
    index = BM25Index.build(values, offsets, n_vocab)
    assert index.decoded_postings == index.indptr[-1]
    packed = _reload(index)
    assert packed.decoded_postings == 0
    df = np.diff(np.asarray(index.indptr))
    t = int(np.flatnonzero(df > 300)[0])  # several blocks, the last one partial
    packed.search_csr(np.array([t], np.int32), np.array([0, 1]), 3, strategy="dense")
    assert packed.decoded_postings == df[t]
    packed.check_postings()
    assert packed.decoded_postings == index.indptr[-1]


def test_a_term_searched_again_is_decoded_whole():
    """The first call that holds a term decodes the blocks it reaches; the next call that holds
    it decodes it whole (then searched as fast as an index built in memory)."""
    rng = np.random.default_rng(3)
    lens = rng.integers(3, 12, 5000)
    offsets = np.zeros(5001, np.int64)
    offsets[1:] = np.cumsum(lens)
    values = (rng.zipf(1.3, int(offsets[-1])) % 5000).astype(np.int32)
    index = BM25Index.build(values, offsets, 5000)
    packed = _reload(index)
    df = np.diff(np.asarray(index.indptr))
    common = int(np.argmax(df))
    rare = int(np.flatnonzero((df >= 3) & (df <= 8))[0])
    qv, qo = np.array([rare, common], np.int32), np.array([0, 2])
    first = packed.search_csr(qv, qo, 2, strategy="maxscore")
    blocks = (int(df[common]) + 127) // 128
    assert _decoded_blocks(packed, common) < blocks
    again = packed.search_csr(qv, qo, 2, strategy="maxscore")
    assert _decoded_blocks(packed, common) == blocks
    assert packed._packed.term_ready[[rare, common]].all()
    for x, y, z in zip(first, again, index.search_csr(qv, qo, 2, strategy="maxscore"), strict=True):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    with pytest.raises(ConfigError):  # an id outside the vocabulary: named, not an IndexError
        packed.search_csr(np.array([rare, 5000], np.int32), np.array([0, 2]), 2)
