"""BM25Index and its numba kernels vs the slow reference in tests/reference.py (and bm25s)."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from reference import BM25Reference

from fastrag.errors import ConfigError, StoreError
from fastrag.indexes.bm25.index import BM25_METHODS, NO_LAZY, SEARCH_STRATEGIES, BM25Index
from fastrag.indexes.bm25.stats import BM25Stats

REL = 1e-5
CMRC = Path(__file__).resolve().parents[3] / "shared" / "data" / "cmrc2018_dev.json"


# ------------------------------------------------------------------------------------ helpers
def ragged(lists):
    offsets = np.zeros(len(lists) + 1, np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    values = np.array([t for x in lists for t in x], dtype=np.int32)
    return values, offsets


def random_corpus(seed, n_docs=300, n_vocab=70, max_len=40):
    rng = np.random.default_rng(seed)
    docs = [
        list(map(int, (rng.zipf(1.4, int(n)) - 1) % n_vocab))
        for n in rng.integers(0, max_len, n_docs)
    ]
    queries = [list(map(int, rng.integers(0, n_vocab, int(n)))) for n in rng.integers(0, 7, 50)]
    queries += [[], [3, 3, 3], [queries[0][0] if queries[0] else 1] * 2]
    return docs, queries


def assert_topk_equal(rows, scores, count, reference, query, k, mask=None, cutoff=None):
    """Our hits equal the reference top-k: same count; at each rank the row we return has the
    reference's score at that rank (so only exact-score ties may swap), rows unique and sorted
    best first with ties by row."""
    ref = reference.topk(query, k, mask, cutoff)
    assert count == len(ref), (query, count, len(ref))
    all_scores, _ = reference.scores(query)
    got = rows[:count].tolist()
    assert len(set(got)) == len(got)
    for i, (row, (_, ref_score)) in enumerate(zip(got, ref, strict=False)):
        assert all_scores[row] == pytest.approx(ref_score, rel=REL, abs=1e-6), (query, i)
        assert scores[i] == pytest.approx(ref_score, rel=REL, abs=1e-6), (query, i)
    for i in range(count - 1):
        assert (scores[i], -got[i]) > (scores[i + 1], -got[i + 1])
    assert (rows[count:] == -1).all()
    assert np.isneginf(scores[count:]).all()


def search_lists(index, queries, k, **kw):
    qv, qo = ragged(queries)
    return index.search_csr(qv, qo, k, **kw)


def char_bigrams(text):
    chars = [c for c in text.lower() if c.isalnum()]
    return chars + [a + b for a, b in pairwise(chars)]


@pytest.fixture(scope="module")
def cmrc():
    if CMRC.exists():
        raw = json.loads(CMRC.read_text(encoding="utf-8"))
    else:
        from fastrag.datasets import load_cmrc2018_dev

        raw = load_cmrc2018_dev()
    contexts, questions = [], []
    for art in raw["data"]:
        for para in art["paragraphs"]:
            if para["context"] not in contexts:
                contexts.append(para["context"])
            questions.extend(q["question"] for q in para["qas"])
    vocab: dict[str, int] = {}
    docs = [[vocab.setdefault(t, len(vocab)) for t in char_bigrams(c)] for c in contexts]
    qs = [[vocab[t] for t in char_bigrams(q) if t in vocab] for q in questions[::40]]
    return docs, qs, len(vocab)


# ------------------------------------------------------------------------ scores vs reference
@pytest.mark.parametrize("method", BM25_METHODS)
def test_every_variant_matches_reference_on_random_corpora(method):
    for seed in (0, 1):
        docs, queries = random_corpus(seed)
        values, offsets = ragged(docs)
        index = BM25Index.build(values, offsets, 70, method=method)
        reference = BM25Reference(docs, method)
        for q in queries[:12]:
            ref, _ = reference.scores(q)
            np.testing.assert_allclose(
                index.get_scores(np.array(q, np.int32)), ref, rtol=REL, atol=1e-6
            )
        for k in (1, 7, 400):
            rows, scores, counts = search_lists(index, queries, k)
            for i, q in enumerate(queries):
                assert_topk_equal(rows[i], scores[i], counts[i], reference, q, k)


@pytest.mark.parametrize("strategy", SEARCH_STRATEGIES)
@pytest.mark.parametrize("method", ["lucene", "bm25+"])
def test_every_strategy_gives_the_same_exact_top_k(method, strategy):
    docs, queries = random_corpus(2, n_docs=500, n_vocab=40, max_len=60)
    index = BM25Index.build(*ragged(docs), 40, method=method)
    rows, scores, counts = search_lists(index, queries, 5, strategy=strategy)
    reference = BM25Reference(docs, method)
    for i, q in enumerate(queries):
        assert_topk_equal(rows[i], scores[i], counts[i], reference, q, 5)


@pytest.mark.parametrize(
    ("k1", "b", "delta"), [(0.9, 0.4, 1.0), (2.0, 1.0, 0.25), (1.2, 0.0, 0.0), (0.0, 0.75, 0.5)]
)
def test_parameters_k1_b_delta_match_reference(k1, b, delta):
    docs, queries = random_corpus(3)
    for method in BM25_METHODS:
        index = BM25Index.build(*ragged(docs), 70, method=method, k1=k1, b=b, delta=delta)
        assert index.params == {"k1": k1, "b": b, "delta": delta}
        rows, scores, counts = search_lists(index, queries, 6)
        reference = BM25Reference(docs, method, k1, b, delta)
        for i, q in enumerate(queries):
            assert_topk_equal(rows[i], scores[i], counts[i], reference, q, 6)


def test_every_variant_matches_reference_on_cmrc(cmrc):
    docs, queries, n_vocab = cmrc
    for method in BM25_METHODS:
        index = BM25Index.build(*ragged(docs), n_vocab, method=method)
        reference = BM25Reference(docs, method)
        ref, _ = reference.scores(queries[0])
        np.testing.assert_allclose(
            index.get_scores(np.array(queries[0], np.int32)), ref, rtol=REL, atol=1e-6
        )
        rows, scores, counts = search_lists(index, queries, 5)
        for i, q in enumerate(queries):
            assert_topk_equal(rows[i], scores[i], counts[i], reference, q, 5)


def test_duplicate_query_tokens_count_once_per_occurrence():
    docs, _ = random_corpus(4)
    index = BM25Index.build(*ragged(docs), 70, method="bm25l")
    once = index.get_scores(np.array([5], np.int32))
    twice = index.get_scores(np.array([5, 5], np.int32))
    np.testing.assert_allclose(twice, 2 * once, rtol=REL)
    rows, scores, counts = search_lists(index, [[5, 7, 5]], 10)
    assert_topk_equal(rows[0], scores[0], counts[0], BM25Reference(docs, "bm25l"), [5, 7, 5], 10)


def test_lucene_scores_equal_bm25s():
    bm25s = pytest.importorskip("bm25s")
    docs, queries = random_corpus(5, n_docs=400)
    docs = [d for d in docs if d] + [[0]]
    vocab = {str(i): i for i in range(70)}
    ret = bm25s.BM25(method="lucene", backend="numpy")
    ret.index((docs, vocab), show_progress=False)
    index = BM25Index.build(*ragged(docs), 70)
    for q in queries:
        if not q:
            continue
        ours = index.get_scores(np.array(q, np.int32))
        np.testing.assert_allclose(ours, ret.get_scores_from_ids(q), rtol=REL, atol=1e-6)
        rows, scores, counts = index.search_csr(np.array(q, np.int32), np.array([0, len(q)]), 5)
        b_rows, b_scores = ret.retrieve([q], k=5, show_progress=False)
        n = int(counts[0])
        np.testing.assert_allclose(scores[0, :n], b_scores[0, :n], rtol=REL)
        # same rows, except that bm25s orders exact ties arbitrarily
        for r, br in zip(rows[0, :n], b_rows[0, :n], strict=False):
            assert r == br or ours[r] == ours[br]


# ------------------------------------------------------------------------------------- edges
def test_empty_and_unknown_only_queries_return_nothing():
    docs = [[0, 1], [1, 2], [2, 2, 3]]
    index = BM25Index.build(*ragged(docs), 10)  # ids 4..9 occur in no document
    rows, scores, counts = search_lists(index, [[], [7, 9], [7, 2]], 3)
    assert counts.tolist() == [0, 0, 2]
    assert (rows[:2] == -1).all() and np.isneginf(scores[:2]).all()
    assert rows[2, :2].tolist() == [2, 1]  # row 2 holds token 2 twice
    assert (index.get_scores(np.array([], np.int32)) == 0).all()
    empty = index.search_csr(np.zeros(0, np.int32), np.zeros(1, np.int64), 3)
    assert [a.shape for a in empty] == [(0, 3), (0, 3), (0,)]


def test_k_larger_than_the_corpus_returns_every_hit():
    docs = [[0], [1], [0, 1], [2]]
    index = BM25Index.build(*ragged(docs), 3)
    rows, scores, counts = search_lists(index, [[0, 1]], 10)
    assert rows.shape == (1, 10) and counts[0] == 3
    assert rows[0, :3].tolist() == [2, 0, 1] and (rows[0, 3:] == -1).all()
    assert scores[0, 1] == scores[0, 2] and np.isneginf(scores[0, 3:]).all()


def test_ties_break_by_row_order():
    docs = [[5, 6], [1, 2], [1, 2], [3], [1, 2], [2, 1]]
    for strategy in SEARCH_STRATEGIES:
        index = BM25Index.build(*ragged(docs), 7)
        rows, scores, counts = search_lists(index, [[1, 2], [2]], 3, strategy=strategy)
        assert rows[0].tolist() == [1, 2, 4] and scores[0, 0] == scores[0, 2]
        assert rows[1].tolist() == [1, 2, 4] and counts.tolist() == [3, 3]


def test_mask_and_cutoff_match_reference():
    docs, queries = random_corpus(6)
    index = BM25Index.build(*ragged(docs), 70)
    reference = BM25Reference(docs)
    mask = np.random.default_rng(0).random(len(docs)) < 0.5
    rows, scores, counts = search_lists(index, queries, 8, mask=mask)
    for i, q in enumerate(queries):
        assert_topk_equal(rows[i], scores[i], counts[i], reference, q, 8, mask=mask.tolist())
        assert mask[rows[i, : counts[i]]].all()
    rows, scores, counts = search_lists(index, queries, 8, mask=np.zeros(len(docs), bool))
    assert (counts == 0).all()
    rows, scores, counts = search_lists(index, queries, 8, cutoff=2.5)
    for i, q in enumerate(queries):
        assert_topk_equal(rows[i], scores[i], counts[i], reference, q, 8, cutoff=2.5)
        assert (scores[i, : counts[i]] >= 2.5).all()
    assert counts.sum() > 0


def test_robertson_terms_in_most_documents_weigh_nothing():
    docs = [[0, 1], [0], [0, 2], [3]]  # df(0) = 3 of 4: robertson idf clamps to 0
    index = BM25Index.build(*ragged(docs), 4, method="robertson")
    rows, scores, counts = search_lists(index, [[0], [0, 2]], 4)
    assert counts.tolist() == [0, 1] and rows[1, 0] == 2
    assert scores[1, 0] == pytest.approx(index.get_scores(np.array([2], np.int32))[2])


def test_batch_equals_single_queries_and_threads_agree():
    docs, queries = random_corpus(7, n_docs=600)
    index = BM25Index.build(*ragged(docs), 70)
    batch = search_lists(index, queries, 5, num_threads=2)
    serial = search_lists(index, queries, 5, num_threads=1)
    for a, b in zip(batch, serial, strict=False):
        np.testing.assert_array_equal(a, b)
    for i, q in enumerate(queries[:10]):
        one = search_lists(index, [q], 5)
        for a, b in zip(one, batch, strict=False):
            np.testing.assert_array_equal(a[0], b[i])


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a`` made read-only: the kernels get their inputs so from :class:`BM25Index`, and a
    writable one would compile the whole search kernel once more (about 25 s)."""
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("n_slots", [2, 3, 5])
@pytest.mark.parametrize("n_queries", [8, 9, 131, pytest.param(1030, marks=pytest.mark.slow)])
def test_parallel_slots_share_the_queries_dynamically(n_slots, n_queries):
    """Slots take runs of queries from an atomic counter: every query is answered exactly
    once, as the serial kernel answers it, whatever the slot count (even more slots than
    threads) and however the batch divides into runs."""
    from fastrag._kernels import bm25 as kb

    docs, queries = random_corpus(17, n_docs=500)
    index = BM25Index.build(*ragged(docs), 70)
    qv, qo = ragged([queries[i % len(queries)] for i in range(n_queries)])
    qv.flags.writeable = qo.flags.writeable = False  # as BM25Index.search_csr passes them
    serial = index.search_csr(qv, qo, 6, num_threads=1)
    n = index.n_docs
    rows = np.full((n_queries, 6), -7, np.int64)
    scores = np.full((n_queries, 6), 7.0, np.float32)
    counts = np.full(n_queries, -7, np.int32)
    no_heads = (
        np.full(0, -1, np.int32),
        np.zeros((0, 0), np.uint64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int32),
        np.zeros(0, np.float32),
    )
    scratch2 = (
        np.zeros((n_slots, n), np.float32),
        np.full((n_slots, n), -1, np.int32),
        np.empty((n_slots, n + 1), np.int32),
    )
    err = kb.search_batch_parallel(
        (NO_LAZY, index.indptr, index.indices, index.data, index.term_max, index.base_weights),
        no_heads,
        (qv, qo),
        6,
        (_frozen(np.zeros(0, np.bool_)), False, 0.0, False),
        (kb.STRATEGY_AUTO, 0),
        scratch2,
        (rows, scores, counts),
    )
    assert err == -1
    np.testing.assert_array_equal(rows, serial[0])
    np.testing.assert_array_equal(scores, serial[1])
    np.testing.assert_array_equal(counts, serial[2])


def test_offsets_that_do_not_start_at_zero():
    docs, queries = random_corpus(8)
    values, offsets = ragged(docs)
    shifted = np.concatenate([np.array([9, 9, 9], np.int32), values])
    a = BM25Index.build(values, offsets, 70)
    b = BM25Index.build(shifted, offsets + 3, 70)
    qv, qo = ragged(queries)
    qv2 = np.concatenate([np.array([1, 2], np.int32), qv])
    for x, y in zip(a.search_csr(qv, qo, 4), b.search_csr(qv2, qo + 2, 4), strict=False):
        np.testing.assert_array_equal(x, y)


def test_round_trip_through_arrays_and_read_only_memory_maps(tmp_path):
    docs, queries = random_corpus(9)
    index = BM25Index.build(*ragged(docs), 70, method="atire", k1=1.2, b=0.7)
    expected = search_lists(index, queries, 6)
    arrays, meta = index.to_arrays(), index.meta()
    for name, arr in arrays.items():
        np.save(tmp_path / f"{name}.npy", arr)
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    loaded = {n: np.load(tmp_path / f"{n}.npy", mmap_mode="r") for n in arrays}
    again = BM25Index.from_arrays(loaded, json.loads((tmp_path / "meta.json").read_text()))
    assert again.meta() == meta and again.nbytes == index.nbytes
    assert not again.data.flags.writeable
    for a, b in zip(expected, search_lists(again, queries, 6), strict=False):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(
        index.get_scores(np.array([1, 2], np.int32)), again.get_scores(np.array([1, 2], np.int32))
    )


def test_shards_with_merged_stats_score_like_the_whole_corpus():
    docs, queries = random_corpus(10, n_docs=400)
    whole = BM25Index.build(*ragged(docs), 70, method="bm25+")
    parts = [docs[:150], docs[150:]]
    stats = BM25Stats.merge([BM25Stats.from_tokens(*ragged(p), 70) for p in parts])
    assert stats.n_docs == 400 and stats.df.tolist() == whole.stats.df.tolist()
    shards = [BM25Index.build(*ragged(p), 70, method="bm25+", stats=stats) for p in parts]
    for q in queries[:15]:
        qa = np.array(q, np.int32)
        joined = np.concatenate([s.get_scores(qa) for s in shards])
        np.testing.assert_allclose(joined, whole.get_scores(qa), rtol=REL)
    restored = BM25Index.from_arrays(shards[1].to_arrays(), shards[1].meta())
    np.testing.assert_array_equal(
        restored.get_scores(np.array([1, 4], np.int32)),
        shards[1].get_scores(np.array([1, 4], np.int32)),
    )


def test_index_statistics_and_sizes():
    docs = [[0, 1, 1], [1, 2], []]
    index = BM25Index.build(*ragged(docs), 4)
    assert (index.n_docs, index.n_vocab, index.n_tokens, index.method) == (3, 4, 5, "lucene")
    assert index.stats.df.tolist() == [1, 2, 1, 0] and index.stats.avgdl == pytest.approx(5 / 3)
    assert index.indptr.tolist() == [0, 1, 3, 4, 4] and index.indices.tolist() == [0, 0, 1, 1]
    assert index.nbytes == sum(a.nbytes for a in index.to_arrays().values())


# ------------------------------------------------------------------------------------ errors
def test_bad_arguments_raise_clear_errors():
    index = BM25Index.build(*ragged([[0, 1], [1]]), 2)
    qv, qo = np.array([0, 1], np.int32), np.array([0, 2])
    with pytest.raises(ConfigError, match=r"k must be an int >= 1 \(the number of hits.*got 0"):
        index.search_csr(qv, qo, 0)
    with pytest.raises(ConfigError, match=r"k must be an int >= 1 .*got float 2.0"):
        index.search_csr(qv, qo, 2.0)
    with pytest.raises(ConfigError, match=r"q_offsets spans \[0, 3\] but the values array has 2"):
        index.search_csr(qv, np.array([0, 3]), 1)
    with pytest.raises(ConfigError, match=r"q_offsets must be non-decreasing"):
        index.search_csr(qv, np.array([0, 2, 1]), 1)
    with pytest.raises(ConfigError, match=r"query token id 5 is outside the vocabulary \[0, 2\)"):
        index.search_csr(np.array([5], np.int32), np.array([0, 1]), 1)
    with pytest.raises(ConfigError, match=r"mask has 3 entries but the index has 2 rows"):
        index.search_csr(qv, qo, 1, mask=np.ones(3, bool))
    with pytest.raises(ConfigError, match=r"cutoff='x' must be a number"):
        index.search_csr(qv, qo, 1, cutoff="x")
    with pytest.raises(
        ConfigError, match=r"num_threads must be None \(numba's current setting\) or an int >= 1"
    ):
        index.search_csr(qv, qo, 1, num_threads=0)
    with pytest.raises(ConfigError, match=r"call search_csr\(q_values, q_offsets, k\)"):
        index.search(qv, qo)
    with pytest.raises(ConfigError, match=r"queries\[1\] must be a 1-D sequence of token ids"):
        index.search([[0], [0.5]], 1)
    with pytest.raises(ConfigError, match=r"queries must be a list of token-id lists"):
        index.search("hello", 1)
    with pytest.raises(ConfigError, match=r"unknown search strategy 'wand'; known strategies: "):
        index.search_csr(qv, qo, 1, strategy="wand")


def test_bad_build_input_raises_clear_errors():
    values, offsets = ragged([[0, 1], [1]])
    with pytest.raises(
        ConfigError,
        match=r"unknown BM25 method 'okapi'; known methods: lucene, "
        r"robertson, atire, bm25l, bm25\+",
    ):
        BM25Index.build(values, offsets, 2, method="okapi")
    with pytest.raises(ConfigError, match=r"token id 7 at values\[1\] is outside the vocabulary"):
        BM25Index.build(np.array([0, 7, 1], np.int32), offsets, 2)
    with pytest.raises(ConfigError, match=r"token id -1 is outside the vocabulary"):
        BM25Index.build(np.array([0, -1, 1], np.int64), offsets, 2)
    with pytest.raises(ConfigError, match=r"offsets spans \[0, 9\]"):
        BM25Index.build(values, np.array([0, 2, 9]), 2)
    with pytest.raises(ConfigError, match=r"offsets needs at least 2 entries"):
        BM25Index.build(values, np.array([0]), 2)
    with pytest.raises(ConfigError, match=r"b=1.5 must be within \[0, 1\]"):
        BM25Index.build(values, offsets, 2, b=1.5)
    with pytest.raises(ConfigError, match=r"k1=-1 must be >= 0"):
        BM25Index.build(values, offsets, 2, k1=-1)
    with pytest.raises(ConfigError, match=r"n_vocab=0 must be an int in \[1, "):
        BM25Index.build(values, offsets, 0)
    with pytest.raises(ConfigError, match=r"values must hold integers; got dtype float64"):
        BM25Index.build(np.array([0.0, 1.0, 1.0]), offsets, 2)
    small = BM25Stats.from_tokens(np.array([0], np.int32), np.array([0, 1]), 2)
    with pytest.raises(ConfigError, match=r"stats do not cover this corpus"):
        BM25Index.build(values, offsets, 2, stats=small)
    with pytest.raises(ConfigError, match=r"one shared vocabulary; got n_vocab values \[2, 3\]"):
        BM25Stats.merge([small, BM25Stats.from_tokens(values, offsets, 3)])


def test_corrupt_persisted_index_raises_store_error():
    index = BM25Index.build(*ragged([[0, 1], [1]]), 2)
    arrays, meta = index.to_arrays(), index.meta()
    with pytest.raises(StoreError, match=r"format 'old/0', expected 'fastrag.bm25/1'"):
        BM25Index.from_arrays(arrays, {**meta, "format": "old/0"})
    with pytest.raises(StoreError, match=r"missing \['data'\]"):
        BM25Index.from_arrays({n: a for n, a in arrays.items() if n != "data"}, meta)
    with pytest.raises(StoreError, match=r"do not match their meta"):
        BM25Index.from_arrays({**arrays, "data": arrays["data"][:-1]}, meta)


@pytest.mark.parametrize(
    "damage, match",
    [
        (lambda a: a["indptr"].__setitem__(2, a["indptr"][1] - 1), "indptr decreases"),
        (lambda a: a["indptr"].__setitem__(0, 1), r"indptr\[0\]=1"),
    ],
)
def test_loader_rejects_offsets_a_kernel_would_leave_the_arrays_with(damage, match):
    index = BM25Index.build(np.array([0, 1, 2, 1, 2, 2, 0, 3], np.int32), np.array([0, 3, 6, 8]), 4)
    arrays = {k: np.array(v) for k, v in index.to_arrays().items()}
    damage(arrays)
    with pytest.raises(StoreError, match=match):
        BM25Index.from_arrays(arrays, index.meta())


def test_a_negative_weight_under_a_positive_bound_is_caught_before_pruning():
    # the prune pass compares the bits of partial sums, which order like the sums only when
    # no weight of a term with a positive bound is negative: loaded postings are checked
    index = BM25Index.build(np.array([0, 1, 2, 1, 2, 2, 0, 3], np.int32), np.array([0, 3, 6, 8]), 4)
    arrays = {k: np.array(v) for k, v in index.to_arrays().items()}
    assert arrays["term_max"][1] > 0
    arrays["data"][arrays["indptr"][1]] = -0.5  # term 1's first posting
    loaded = BM25Index.from_arrays(arrays, index.meta())
    with pytest.raises(StoreError, match=r"negative in a term with a positive bound"):
        loaded.search_csr(np.array([1], np.int32), np.array([0, 1]), 2)


@pytest.mark.parametrize("bad_id", [10**6, 3, -2])
def test_doc_ids_are_checked_per_term_before_a_kernel_reads_them(bad_id):
    index = BM25Index.build(np.array([0, 1, 2, 1, 2, 2, 0, 3], np.int32), np.array([0, 3, 6, 8]), 4)
    arrays = {k: np.array(v) for k, v in index.to_arrays().items()}
    arrays["indices"][3] = bad_id  # term 1's second posting
    loaded = BM25Index.from_arrays(arrays, index.meta())  # offsets are fine: loads
    ok = np.array([3], np.int32), np.array([0, 1])
    np.testing.assert_array_equal(loaded.search_csr(*ok, 2)[0], index.search_csr(*ok, 2)[0])
    for call in (
        lambda: loaded.search_csr(np.array([3, 1], np.int32), np.array([0, 2]), 2),
        lambda: loaded.get_scores(np.array([1], np.int32)),
    ):
        with pytest.raises(
            StoreError,
            match=r"doc ids outside \[0, 3\) in the postings of "
            r"terms \[1\]",
        ):
            call()
    intact = BM25Index.from_arrays(index.to_arrays(), index.meta())
    intact.search_csr(np.arange(4, dtype=np.int32), np.array([0, 4]), 2)
    assert intact._unchecked is None  # every term checked once, then no more work
