"""SparseIndex: exact top-k dot product over {token: weight} dicts, checked against a plain
Python reference (float64 sums in the query's token order, as the kernel documents), plus the
Arrow column helpers, persistence and the error messages."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest
from fastrag._kernels import sparse as kernels

from fastrag.errors import ConfigError, StoreError
from fastrag.indexes.sparse import (
    SparseIndex,
    dicts_from_column,
    sparse_column,
    sparse_type,
)


# ----------------------------------------------------------------------------- reference
def reference_search(docs, queries, k, mask=None, cutoff=None):
    """Slow, obvious top-k: per query, add float64 products token by token (query order)."""
    postings: dict[str, list[tuple[int, float]]] = {}
    for row, d in enumerate(docs):
        for tok, w in d.items():
            postings.setdefault(tok, []).append((row, float(np.float32(w))))
    nq = len(queries)
    rows = np.full((nq, k), -1, np.int64)
    scores = np.full((nq, k), -np.inf, np.float32)
    counts = np.zeros(nq, np.int32)
    for i, q in enumerate(queries):
        acc: dict[int, float] = {}
        for tok, qw in q.items():
            qw = float(np.float32(qw))
            for row, w in postings.get(tok, ()):
                acc[row] = acc.get(row, 0.0) + qw * w
        hits = []
        for row, s in acc.items():
            s32 = np.float32(s)
            if s32 == 0 or (mask is not None and not mask[row]):
                continue
            if cutoff is not None and not s32 >= cutoff:
                continue
            hits.append((s32, row))
        hits.sort(key=lambda h: (-h[0], h[1]))
        hits = hits[:k]
        counts[i] = len(hits)
        for j, (s, row) in enumerate(hits):
            rows[i, j] = row
            scores[i, j] = s
    return rows, scores, counts


def random_dicts(rng, n, vocab_size, mean_len, tokens=None, quantize=False):
    tokens = tokens or [f"t{j}" for j in range(vocab_size)]
    out = []
    for _ in range(n):
        m = int(rng.integers(0, 2 * mean_len + 1))
        picked = rng.choice(len(tokens), size=min(m, len(tokens)), replace=False)
        w = rng.random(len(picked)).astype(np.float32)
        if quantize:  # few distinct weights: many equal scores
            w = np.ceil(w * 4).astype(np.float32) / 4
        out.append({tokens[int(t)]: float(x) for t, x in zip(picked, w, strict=True)})
    return out


def assert_same(got, want):
    rows, scores, counts = got
    w_rows, w_scores, w_counts = want
    assert rows.dtype == np.int64 and scores.dtype == np.float32 and counts.dtype == np.int32
    np.testing.assert_array_equal(counts, w_counts)
    np.testing.assert_array_equal(rows, w_rows)
    np.testing.assert_array_equal(scores, w_scores)  # bit-equal: same summation order


# ----------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("n_docs,vocab_size,mean_len", [(1, 5, 3), (60, 25, 4), (1500, 400, 12)])
@pytest.mark.parametrize("nq", [1, 64])  # serial and parallel paths
def test_matches_reference(n_docs, vocab_size, mean_len, nq):
    rng = np.random.default_rng(n_docs * 7 + nq)
    docs = random_dicts(rng, n_docs, vocab_size, mean_len)
    queries = random_dicts(rng, nq, vocab_size + 5, 4)  # t{vocab_size}.. are unknown
    index = SparseIndex.from_dicts(docs)
    assert len(index) == n_docs
    for k in (1, 7, n_docs + 3):
        assert_same(index.search(queries, k), reference_search(docs, queries, k))


def test_ties_break_by_lower_row():
    rng = np.random.default_rng(3)
    docs = random_dicts(rng, 300, 6, 3, quantize=True)
    docs += [{"t0": 0.5, "t1": 0.25}] * 5  # identical documents: equal scores
    queries = random_dicts(rng, 40, 6, 3, quantize=True) + [{"t0": 1.0, "t1": 1.0}]
    index = SparseIndex.from_dicts(docs)
    want = reference_search(docs, queries, 25)
    _, scores, counts = want
    full = counts == 25
    assert (scores[full][:, 1:] == scores[full][:, :-1]).any()  # the data has ties
    assert_same(index.search(queries, 25), want)


def test_identical_docs_come_in_row_order():
    index = SparseIndex.from_dicts([{"a": 1.0}, {"b": 1.0}, {"a": 1.0}, {"a": 1.0}])
    rows, scores, counts = index.search([{"a": 2.0}], 2)
    assert rows.tolist() == [[0, 2]] and scores.tolist() == [[2.0, 2.0]]
    assert counts.tolist() == [2]


@pytest.mark.parametrize("nq", [1, 64])
def test_mask(nq):
    rng = np.random.default_rng(11)
    docs = random_dicts(rng, 400, 50, 6)
    queries = random_dicts(rng, nq, 50, 4)
    mask = rng.random(400) < 0.3
    index = SparseIndex.from_dicts(docs)
    assert_same(index.search(queries, 10, mask=mask), reference_search(docs, queries, 10, mask))
    none = index.search(queries, 10, mask=np.zeros(400, bool))
    assert (none[2] == 0).all() and (none[0] == -1).all()


@pytest.mark.parametrize("nq", [1, 64])
def test_cutoff(nq):
    rng = np.random.default_rng(12)
    docs = random_dicts(rng, 400, 50, 6)
    queries = random_dicts(rng, nq, 50, 4)
    index = SparseIndex.from_dicts(docs)
    for cut in (0.1, 0.5, 10.0):
        want = reference_search(docs, queries, 10, cutoff=cut)
        assert_same(index.search(queries, 10, cutoff=cut), want)
    got = index.search(queries, 10, cutoff=0.5)
    assert (got[1][got[0] >= 0] >= 0.5).all()


def test_empty_queries_unknown_tokens_and_empty_docs():
    docs = [{"a": 1.0, "b": 0.5}, {}, {"b": 2.0}]
    index = SparseIndex.from_dicts(docs)
    rows, scores, counts = index.search([{}, {"zzz": 3.0}, {"b": 1.0, "zzz": 9.0}], 4)
    assert counts.tolist() == [0, 0, 2]
    assert rows.tolist() == [[-1] * 4, [-1] * 4, [2, 0, -1, -1]]
    assert scores[0].tolist() == [-math.inf] * 4
    assert scores[2, :2].tolist() == [2.0, 0.5]
    assert_same(index.search([{"b": 1.0, "zzz": 9.0}], 4), index.search([{"b": 1.0}], 4))
    empty = SparseIndex.from_dicts([])
    assert len(empty) == 0
    assert empty.search([{"a": 1.0}] * 9, 2)[2].tolist() == [0] * 9


def test_zero_and_negative_scores():
    docs = [{"a": 1.0, "b": -1.0}, {"a": 0.0}, {"a": -2.0}, {"a": 0.5}]
    index = SparseIndex.from_dicts(docs)
    rows, scores, counts = index.search([{"a": 1.0, "b": 1.0}], 4)
    # doc 0 cancels to 0 and doc 1 has weight 0: touched but no hits
    assert rows.tolist() == [[3, 2, -1, -1]] and scores[0, :2].tolist() == [0.5, -2.0]
    assert counts.tolist() == [2]
    assert index.search([{"a": 0.0}], 4)[2].tolist() == [0]  # a zero query weight


def test_one_dict_is_a_batch_of_one_and_threads_do_not_change_results():
    rng = np.random.default_rng(5)
    docs = random_dicts(rng, 500, 60, 8)
    queries = random_dicts(rng, 64, 60, 5)
    index = SparseIndex.from_dicts(docs)
    rows, scores, counts = index.search(queries[0], 5)
    assert rows.shape == (1, 5) and scores.shape == (1, 5) and counts.shape == (1,)
    assert_same(index.search(queries, 5, num_threads=1), index.search(queries, 5))


def test_vocab_prefix_and_from_csr():
    docs = [{"b": 1.0, "c": 2.0}, {"a": 0.5, "b": 0.25}]
    index = SparseIndex.from_dicts(docs, vocab=["z", "a"])
    assert index.vocab == ["z", "a", "b", "c"]
    assert SparseIndex.from_dicts(docs).vocab == ["b", "c", "a"]
    csr = SparseIndex.from_csr(
        [0, 2, 4], np.array([2, 3, 1, 2]), [1.0, 2.0, 0.5, 0.25], ["z", "a", "b", "c"]
    )
    q = [{"b": 1.0, "a": 2.0}, {"c": 1.0}]
    assert_same(csr.search(q, 3), index.search(q, 3))
    assert_same(index.search_csr(*index.encode(q), 3), index.search(q, 3))


def test_build_postings_kernel():
    out_indptr = np.empty(4, np.int64)
    out_rows = np.empty(4, np.int32)
    out_w = np.empty(4, np.float32)
    bad = kernels.build_postings(
        3,
        np.array([0, 2, 4]),
        np.array([2, 0, 0, 1], np.int32),
        np.array([1, 2, 3, 4], np.float32),
        out_indptr,
        out_rows,
        out_w,
    )
    assert bad == -1
    assert out_indptr.tolist() == [0, 2, 3, 4]
    assert out_rows.tolist() == [0, 1, 1, 0] and out_w.tolist() == [2, 3, 4, 1]
    bad = kernels.build_postings(
        3,
        np.array([0, 2]),
        np.array([1, 3], np.int32),
        np.array([1, 2], np.float32),
        out_indptr,
        out_rows,
        out_w,
    )
    assert bad == 1


# ----------------------------------------------------------------------------- Arrow
def test_arrow_round_trip_is_exact():
    rng = np.random.default_rng(9)
    docs = random_dicts(rng, 200, 80, 6) + [{}, {"é中": 1.5, "": 0.25}]
    col = sparse_column(docs)
    assert col.type == sparse_type() == pa.map_(pa.string(), pa.float32())
    back = dicts_from_column(col)
    assert back == docs
    # byte-identical text: same keys in the same order, the same float values and types
    assert (
        json.dumps(back, ensure_ascii=False).encode()
        == json.dumps(docs, ensure_ascii=False).encode()
    )
    assert {type(w) for d in back for w in d.values()} == {float}
    assert dicts_from_column(col.slice(5, 20)) == docs[5:25]  # sliced: offsets not rebased
    chunked = pa.chunked_array([col.slice(0, 100), col.slice(100)])
    assert dicts_from_column(chunked) == docs
    with_null = pa.array([{"a": 1.0}, None, {"b": 2.0}], type=sparse_type())
    assert dicts_from_column(with_null) == [{"a": 1.0}, None, {"b": 2.0}]
    queries = random_dicts(rng, 16, 80, 4)
    assert_same(
        SparseIndex.from_column(chunked).search(queries, 8),
        SparseIndex.from_dicts(docs).search(queries, 8),
    )
    assert_same(
        SparseIndex.from_column(col.slice(5, 20)).search(queries, 8),
        SparseIndex.from_dicts(docs[5:25]).search(queries, 8),
    )


def test_to_from_arrays_round_trip(tmp_path):
    rng = np.random.default_rng(21)
    docs = random_dicts(rng, 700, 90, 7)
    queries = random_dicts(rng, 64, 95, 4)
    index = SparseIndex.from_dicts(docs)
    arrays, meta = index.to_arrays(), index.meta()
    for name, arr in arrays.items():
        np.save(tmp_path / f"{name}.npy", arr)
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    loaded = SparseIndex.from_arrays(
        {n: np.load(tmp_path / f"{n}.npy", mmap_mode="r") for n in arrays},
        json.loads((tmp_path / "meta.json").read_text()),
    )
    assert len(loaded) == 700 and loaded.vocab == index.vocab and loaded.nnz == index.nnz
    assert loaded.nbytes == index.nbytes == sum(a.nbytes for a in arrays.values())
    for name, arr in loaded.to_arrays().items():
        np.testing.assert_array_equal(arr, arrays[name])
    mask = rng.random(700) < 0.5
    for q in (queries, queries[:1]):
        assert_same(
            loaded.search(q, 9, mask=mask, cutoff=0.2), index.search(q, 9, mask=mask, cutoff=0.2)
        )


def test_from_arrays_refuses_damage():
    index = SparseIndex.from_dicts([{"a": 1.0}, {"b": 2.0, "a": 1.0}])
    arrays, meta = dict(index.to_arrays()), index.meta()
    with pytest.raises(StoreError, match="format None, expected 'fastrag.sparse/1'"):
        SparseIndex.from_arrays(arrays, {**meta, "format": None})
    with pytest.raises(StoreError, match=r"missing \['data'\]"):
        SparseIndex.from_arrays({k: v for k, v in arrays.items() if k != "data"}, meta)
    with pytest.raises(StoreError, match="do not match their meta"):
        SparseIndex.from_arrays({**arrays, "indices": arrays["indices"].astype(np.int64)}, meta)
    with pytest.raises(StoreError, match=r"outside \[0, 2\).*rebuild the index"):
        SparseIndex.from_arrays({**arrays, "indices": np.array([0, 5, 1], np.int32)}, meta)
    with pytest.raises(StoreError, match="vocab must be a list of str"):
        SparseIndex.from_arrays(arrays, {**meta, "vocab": 3})


# ----------------------------------------------------------------------------- errors
BAD_BUILDS = [
    ({"a": 1.0}, r"dicts must be a list of dicts \{token: weight\}, got one dict; wrap a single"),
    ("abc", r"dicts must be a list of dicts \{token: weight\}, got str"),
    ([{"a": 1.0}, [1, 2]], r"dicts\[1\] must be a dict \{token: weight\}, got list \[1, 2\]"),
    ([None], r"dicts\[0\] must be a dict \{token: weight\}, got NoneType None; use \{\}"),
    ([{5: 1.0}], r"dicts\[0\] key must be a str, got int 5; .*convert token ids with str\(id\)"),
    (
        [{"a": float("nan")}],
        r"dicts\[0\]\['a'\] must be a finite number \(the token's weight\), "
        r"got nan; check the embedder's sparse output",
    ),
    ([{}, {"b": 1.0, "a": math.inf}], r"dicts\[1\]\['a'\] must be a finite number .*got inf"),
    ([{"a": 1e39}], r"dicts\[0\]\['a'\] must be a finite number within float32 range .*1e\+39"),
    ([{"a": 10**400}], r"dicts\[0\]\['a'\] must be a finite number within float32 range"),
    ([{"a": "0.5"}], r"dicts\[0\]\['a'\] must be a finite number .*got str '0.5'"),
    ([{"a": True}], r"dicts\[0\]\['a'\] must be a finite number .*got bool True"),
]


@pytest.mark.parametrize("dicts,match", BAD_BUILDS)
def test_bad_dicts(dicts, match):
    with pytest.raises(ConfigError, match=match):
        SparseIndex.from_dicts(dicts)
    with pytest.raises(ConfigError, match=match):
        sparse_column(dicts)


def test_bad_search_arguments():
    index = SparseIndex.from_dicts([{"a": 1.0}, {"b": 2.0}, {"c": 1.0}])
    q = [{"a": 1.0}]
    cases = [
        (
            lambda: index.search(q, 0),
            r"k must be an int >= 1 \(the number of hits per query\), "
            "got 0",
        ),
        (lambda: index.search([{"a": math.nan}], 2), r"queries\[0\]\['a'\] must be a finite"),
        (lambda: index.search(["a"], 2), r"queries\[0\] must be a dict"),
        (
            lambda: index.search(q, 2, mask=[True, False]),
            "mask has 2 entries but the index has 3 rows",
        ),
        (lambda: index.search(q, 2, mask=np.ones(3)), "mask must be a 1-D boolean array"),
        (lambda: index.search(q, 2, cutoff=math.nan), "cutoff=nan is not a threshold"),
        (
            lambda: index.search(q, 2, num_threads=0),
            r"num_threads must be None .*or an int >= 1, got 0",
        ),
        (
            lambda: index.search_csr([0, 1], [3], [1.0], 2),
            r"q_indices must be dims in \[0, 3\) \(there are 3 dims of the index\), got 3",
        ),
        (
            lambda: index.search_csr([0, 2], [0], [1.0], 2),
            r"q_indptr must be non-decreasing offsets within \[0, 1\]",
        ),
        (
            lambda: index.search_csr([0, 1], [0], [math.inf], 2),
            r"q_data\[0\] must be a finite number within float32 range, got inf",
        ),
        (
            lambda: SparseIndex.from_dicts([{"a": 1.0}], vocab=["a", "a"]),
            "vocab must list each token once, got 'a' twice",
        ),
        (
            lambda: SparseIndex.from_csr([0, 1], [4], [1.0], ["a"]),
            r"indices must be dims in \[0, 1\) \(there are 1 vocab entries",
        ),
        (
            lambda: SparseIndex.from_column(pa.array([1, 2])),
            "column must be an Arrow map<string, float32> array .*got int64",
        ),
        (
            lambda: SparseIndex.from_column(pa.array([{"a": 1.0}, None], type=sparse_type())),
            r"column has 1 null rows \(first: row 1\); .*store \{\} for a text without tokens",
        ),
    ]
    for call, match in cases:
        with pytest.raises(ConfigError, match=match):
            call()


def test_retriever_similarity_sparse_through_a_document():
    """An embedder returning {token: weight} dicts (bge-m3's sparse output) behind
    ``similarity="sparse"``: exact dot products, best first, vectors kept in the group."""
    import fastrag as fr

    def sparse_embed(texts):
        return [{w: float(len(w)) for w in t.lower().split()} for t in texts]

    texts = ["red apple pie", "green apple", "blue sky", "apple apple tree"]
    doc = fr.Document.from_texts(texts, embed={"sparse": sparse_embed})
    ret = fr.Retriever(doc, "root", "sparse", topk=3, embed_keys=["sparse"])
    hits = ret("apple pie")
    want = sorted(
        (
            (
                sum(
                    5.0 * 5.0 if w == "apple" else 3.0 * 3.0 if w == "pie" else 0.0
                    for w in set(t.split())
                ),
                -i,
            )
            for i, t in enumerate(texts)
        ),
        reverse=True,
    )
    assert [h.text for h in hits] == [texts[-i] for s, i in want[:3] if s > 0]
    assert [h.score for h in hits] == [s for s, i in want[:3] if s > 0]
    assert "_sparse_sparse" in doc.group("root").table.column_names
    got = ret.batch(["blue", "nothing here"])
    assert [[(h.text, h.score) for h in hits] for hits in got] == [[("blue sky", 16.0)], []]
