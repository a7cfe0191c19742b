"""fastrag.eval metrics: hand-computed values, a numpy-vs-generic cross-check, a pure-Python
Levenshtein reference for context recall, and every argument error."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from reference import levenshtein_reference

from fastrag.errors import ConfigError
from fastrag.eval import (
    ContextRelevance,
    NonLLMContextRecall,
    context_recall,
    context_relevance,
    evaluate_retrieval,
    hit_rate,
    mrr,
    ndcg_at_k,
    recall_at_k,
)
from fastrag.schema import DocNode, NodeWithScore

L2 = math.log2

RET = [["a", "b", "c"], ["x", "y", "z"], ["q", "r", "g"]]
GOLD = ["b", "z", "nope"]


# -- id metrics: exact values -----------------------------------------------------------------
def test_single_gold_hand_values():
    assert hit_rate(RET, GOLD, k=1) == 0.0
    assert hit_rate(RET, GOLD, k=2) == pytest.approx(1 / 3)
    assert hit_rate(RET, GOLD, k=3) == pytest.approx(2 / 3)
    assert hit_rate(RET, GOLD) == pytest.approx(2 / 3)
    assert recall_at_k(RET, GOLD, 3) == pytest.approx(2 / 3)
    assert mrr(RET, GOLD) == pytest.approx((1 / 2 + 1 / 3 + 0) / 3)
    assert mrr(RET, GOLD, k=2) == pytest.approx((1 / 2) / 3)
    assert ndcg_at_k(RET, GOLD, 3) == pytest.approx((1 / L2(3) + 1 / L2(4)) / 3)
    assert ndcg_at_k(RET, GOLD, 1) == 0.0
    np.testing.assert_allclose(mrr(RET, GOLD, per_query=True), [0.5, 1 / 3, 0.0])
    per = hit_rate(RET, GOLD, k=3, per_query=True)
    assert per.dtype == np.float64 and per.tolist() == [1.0, 1.0, 0.0]


def test_multi_gold_hand_values():
    ret = [["a", "b", "c", "d"]]
    gold = [["b", "d", "e"]]
    assert recall_at_k(ret, gold, 2) == pytest.approx(1 / 3)
    assert recall_at_k(ret, gold, 4) == pytest.approx(2 / 3)
    assert hit_rate(ret, gold, k=1) == 0.0
    assert mrr(ret, gold) == 0.5
    ideal = 1 + 1 / L2(3) + 1 / L2(4)
    assert ndcg_at_k(ret, gold, 4) == pytest.approx((1 / L2(3) + 1 / L2(5)) / ideal)
    # the ideal at k=2 has only two slots
    assert ndcg_at_k(ret, gold, 2) == pytest.approx((1 / L2(3)) / (1 + 1 / L2(3)))


def test_ndcg_ideal_counts_relevant_beyond_the_retrieved_length():
    ret = [["a", "b"]]
    gold = [["a", "c", "d"]]
    expected = 1 / (1 + 1 / L2(3) + 1 / L2(4))
    assert ndcg_at_k(ret, gold, 5) == pytest.approx(expected)
    assert evaluate_retrieval(ret, gold, ks=(5,))["ndcg@5"] == pytest.approx(expected)
    assert ndcg_at_k(ret, gold, 1) == 1.0


def test_graded_gold_uses_linear_gains():
    ret = [["b", "a", "x"]]
    gold = [{"a": 3, "b": 1, "c": 0}]
    assert ndcg_at_k(ret, gold, 2) == pytest.approx((1 + 3 / L2(3)) / (3 + 1 / L2(3)))
    assert recall_at_k(ret, gold, 1) == 0.5  # c (grade 0) is not relevant
    assert mrr(ret, gold) == 1.0


def test_repeated_retrieved_id_counts_once():
    ret = [["a", "a", "b"]]
    gold = [["a", "b"]]
    assert recall_at_k(ret, gold, 2) == 0.5
    assert ndcg_at_k(ret, gold, 3) == pytest.approx((1 + 1 / L2(4)) / (1 + 1 / L2(3)))
    arr = np.array([[1, 1, 2]])
    assert hit_rate(arr, np.array([1]), k=3) == 1.0
    assert ndcg_at_k(arr, np.array([1]), 3) == 1.0


def test_ragged_and_empty_result_lists():
    ret = [["a"], []]
    gold = ["a", "b"]
    assert hit_rate(ret, gold, k=5) == 0.5
    assert mrr(ret, gold) == 0.5
    assert ndcg_at_k(ret, gold, 5) == 0.5
    assert evaluate_retrieval([[], []], gold, ks=(1,))["mrr"] == 0.0


def test_nodes_are_read_by_id():
    hits = [[NodeWithScore(DocNode("x", id="n1"), 1.0), NodeWithScore(DocNode("y", id="n2"), 0.5)]]
    assert mrr(hits, ["n2"]) == 0.5


def test_evaluate_retrieval_matches_single_metrics():
    out = evaluate_retrieval(RET, GOLD, ks=(3, 1))
    assert list(out) == [
        "n_queries",
        "hit_rate@1",
        "recall@1",
        "ndcg@1",
        "hit_rate@3",
        "recall@3",
        "ndcg@3",
        "mrr",
    ]
    assert out["n_queries"] == 3
    for k in (1, 3):
        assert out[f"hit_rate@{k}"] == hit_rate(RET, GOLD, k=k)
        assert out[f"recall@{k}"] == recall_at_k(RET, GOLD, k)
        assert out[f"ndcg@{k}"] == pytest.approx(ndcg_at_k(RET, GOLD, k))
    assert out["mrr"] == mrr(RET, GOLD)
    assert all(isinstance(v, float) for k, v in out.items() if k != "n_queries")


def test_numpy_fast_path_equals_generic_path():
    rng = np.random.default_rng(7)
    ret = np.stack([rng.permutation(40)[:10] for _ in range(200)])
    gold = rng.integers(0, 40, size=200)
    fast = evaluate_retrieval(ret, gold, ks=(1, 3, 5, 10))
    slow = evaluate_retrieval(
        [list(map(str, r)) for r in ret], [str(g) for g in gold], ks=(1, 3, 5, 10)
    )
    assert fast.keys() == slow.keys()
    for key in fast:
        assert fast[key] == pytest.approx(slow[key], abs=1e-12), key
    for k in (1, 5, 10):
        assert hit_rate(ret, gold, k=k) == pytest.approx(slow[f"hit_rate@{k}"])
        assert ndcg_at_k(ret, gold, k) == pytest.approx(slow[f"ndcg@{k}"])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: hit_rate([["a"]], ["a", "b"]), r"retrieved_ids has 1 queries but gold_ids has 2"),
        (lambda: hit_rate([], []), r"no queries"),
        (lambda: recall_at_k(RET, GOLD, 0), r"k must be an int >= 1 \(the rank cut-off\), got 0"),
        (lambda: ndcg_at_k(RET, GOLD, "3"), r"k must be an int >= 1 .*, got str '3'"),
        (lambda: mrr(RET, GOLD, k=True), r"k must be an int >= 1 .*, got bool True"),
        (lambda: mrr([["a"]], [[]]), r"gold_ids\[0\] is empty"),
        (lambda: mrr([["a"]], [None]), r"gold_ids\[0\] is None"),
        (lambda: mrr([["a"]], [{"a": 0}]), r"gold_ids\[0\] has no id with grade > 0"),
        (lambda: mrr([["a"]], [{"a": "high"}]), r"must be a number"),
        (lambda: mrr(["abc"], ["a"]), r"retrieved_ids\[0\] is a str; pass one list of ids"),
        (lambda: mrr("abc", "a"), r"retrieved_ids must be a list"),
        (lambda: evaluate_retrieval(RET, GOLD, ks=()), r"ks=\(\) must be a non-empty list"),
        (
            lambda: evaluate_retrieval(RET, GOLD, ks=(1, -2)),
            r"ks\[1\] must be an int >= 1 .*, got -2",
        ),
    ],
)
def test_id_metric_errors(call, match):
    with pytest.raises(ConfigError, match=match):
        call()


# -- context recall -----------------------------------------------------------------------------
def _ref_context_recall(ret, ref, th, binary):
    scores = []
    for r_list, g_list in zip(ret, ref, strict=True):
        g_list = [g_list] if isinstance(g_list, str) else g_list
        per = []
        for g in g_list:
            flags = [
                1
                - (
                    levenshtein_reference(g, r) / max(len(g), len(r))
                    if max(len(g), len(r))
                    else 0.0
                )
                > th
                for r in r_list
            ]
            if binary:
                per.append(1.0 if any(flags) else 0.0)
            else:
                per.append(sum(flags) / len(flags) if flags else 0.0)
        scores.append(sum(per) / len(per) if per else 0.0)
    return scores


def test_context_recall_hand_values():
    # lev(kitten, sitting) = 3 over max length 7: similarity 4/7 = 0.571
    assert context_recall([["kitten"]], [["sitting"]]) == 1.0
    assert context_recall([["kitten"]], [["sitting"]], threshold=0.6) == 0.0
    # binary=False: fraction of retrieved contexts similar to the reference
    assert context_recall([["kitten", "sitting", "zzz"]], ["sitting"], binary=False) == (
        pytest.approx(2 / 3)
    )
    # the threshold is strict: similarity 0.75 does not pass 0.75
    assert context_recall([["abcd"]], ["abce"], threshold=0.75) == 0.0
    assert context_recall([["abcd"]], ["abce"], threshold=0.74) == 1.0
    # two references, one retrieved
    np.testing.assert_allclose(
        context_recall([["雨天路滑", "x"], []], [["雨天路滑", "晴天出游"], ["y"]], per_query=True),
        [0.5, 0.0],
    )
    assert context_recall([[""]], [[""]]) == 1.0
    assert context_recall([["a"]], [[""]]) == 0.0
    assert context_recall([["a"]], [[]]) == 0.0
    nodes = [[NodeWithScore(DocNode("sitting", id="1"))]]
    assert context_recall(nodes, ["sitting"]) == 1.0


@pytest.mark.parametrize("th", [0.0, 0.3, 0.5, 0.8, 1.0])
@pytest.mark.parametrize("binary", [True, False])
def test_context_recall_equals_reference_on_random_strings(th, binary):
    rnd = random.Random(f"{th}-{binary}")
    alpha = "abcde甲乙"

    def s():
        return "".join(rnd.choice(alpha) for _ in range(rnd.randint(0, 14)))

    # 120 queries x 3 refs x 4 retrieved = 1,440 pairs: the parallel kernel runs
    ret = [[s() for _ in range(4)] for _ in range(120)]
    ref = [[s() for _ in range(rnd.randint(0, 3))] for _ in range(120)]
    for q in range(0, 120, 7):  # some exact and near-exact matches
        if ref[q]:
            ret[q][1] = ref[q][0]
            ret[q][2] = ref[q][0][:-1] + "z"
    got = context_recall(ret, ref, threshold=th, binary=binary, per_query=True)
    np.testing.assert_allclose(got, _ref_context_recall(ret, ref, th, binary), atol=1e-12)
    small = context_recall(ret[:5], ref[:5], threshold=th, binary=binary, per_query=True)
    np.testing.assert_allclose(small, _ref_context_recall(ret[:5], ref[:5], th, binary))


def test_context_recall_on_long_paragraphs():
    rnd = random.Random(3)
    base = "".join(rnd.choice("的一是在不了有和人这中大为上个国我以要他") for _ in range(400))
    edited = base[:100] + "变" * 150 + base[250:]  # 150 substitutions: similarity 0.625
    far = "".join(rnd.choice("的一是在不了有和人这中大为上个国我以要他") for _ in range(400))
    assert levenshtein_reference(base, edited) == 150
    assert context_recall([[edited]], [base]) == 1.0
    assert context_recall([[edited]], [base], threshold=0.63) == 0.0
    similarity = 1 - levenshtein_reference(base, far) / 400
    assert context_recall([[far]], [base]) == float(similarity > 0.5)


def test_context_recall_lazyllm_evaluator():
    data = [
        {"context_retrieved": ["kitten", "zzz"], "context_reference": ["sitting"]},
        {"context_retrieved": ["abc"], "context_reference": ["xyz"]},
    ]
    assert NonLLMContextRecall()(data) == 0.5
    assert NonLLMContextRecall(th=0.5, binary=False)(data) == 0.25
    with pytest.raises(ConfigError, match=r"data\[0\] lacks keys \['context_reference'\]"):
        NonLLMContextRecall()([{"context_retrieved": []}])
    with pytest.raises(ConfigError, match=r"threshold must be a number in \[0, 1\], got 1.5"):
        NonLLMContextRecall(th=1.5)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: context_recall([["a"]], ["a"], threshold=-0.1),
            r"threshold must be a number in \[0, 1\], got -0.1",
        ),
        (
            lambda: context_recall([["a"]], ["a"], threshold="x"),
            r"threshold must be .*, got str 'x'",
        ),
        (lambda: context_recall(["a"], ["a"]), r"retrieved_contexts\[0\] is a str"),
        (lambda: context_recall([[1]], ["a"]), r"retrieved_contexts\[0\]\[0\] is int"),
        (lambda: context_recall([["a"]], [[None]]), r"reference_contexts\[0\]\[0\] is NoneType"),
        (lambda: context_recall([["a"]], ["a", "b"]), r"has 1 queries but gold_ids has 2"),
    ],
)
def test_context_recall_errors(call, match):
    with pytest.raises(ConfigError, match=match):
        call()


# -- context relevance --------------------------------------------------------------------------
def test_context_relevance_hand_values():
    ret = [["Photosynthesis occurs in chloroplasts. It produces glucose."]]
    ref = [["Photosynthesis occurs in chloroplasts. It requires sunlight. It produces glucose."]]
    assert context_relevance(ret, ref, splitter=".") == 1.0
    assert context_relevance(ref, ret, splitter=".") == pytest.approx(2 / 3)
    # runs of the splitter are one break; empty sentences are dropped; sentences are stripped
    np.testing.assert_allclose(
        context_relevance(
            [["甲。乙。。丙", " 丁 "], ["无关。"], []],
            [["乙。丁。戊"], "有关", ["x"]],
            per_query=True,
        ),
        [0.5, 0.0, 0.0],
    )
    data = [{"context_retrieved": ["甲。乙"], "context_reference": ["乙"]}]
    assert ContextRelevance()(data) == 0.5
    with pytest.raises(ConfigError, match=r"splitter must be a non-empty str .*, got ''"):
        context_relevance([["a"]], ["a"], splitter="")
    with pytest.raises(ConfigError, match=r"takes a non-empty list of dicts"):
        ContextRelevance()([])
    with pytest.raises(ConfigError, match=r"data\[0\] is str, expected a dict"):
        ContextRelevance()(["x"])
