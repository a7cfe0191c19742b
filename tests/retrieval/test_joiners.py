"""Joiners: exact fused scores computed by hand, a plain-Python reference on random lists,
batch == single, ties, top-k and every error path."""

from __future__ import annotations

import random

import pytest
from reference import fusion_reference

from fastrag.errors import ConfigError
from fastrag.retrieval.joiners import (
    ConcatenationDocumentJoiner,
    ReciprocalRankFusionJoiner,
    WeightedScoreJoiner,
)
from fastrag.schema import DocNode, NodeWithScore

NODES = {name: DocNode(f"text of {name}", id=name) for name in "abcdefgh"}


def hits(*pairs):
    return [NodeWithScore(NODES[n], s) for n, s in pairs]


def ids_scores(result):
    return [(h.id, h.score) for h in result]


# BM25-like list and cosine-like list sharing "c"
BM25 = hits(("a", 12.0), ("b", 8.0), ("c", 4.0))
COS = hits(("c", 0.9), ("d", 0.7))


def test_concatenation_keeps_first_occurrence_and_its_score():
    out = ConcatenationDocumentJoiner()([BM25, COS])
    assert ids_scores(out) == [("a", 12.0), ("b", 8.0), ("c", 4.0), ("d", 0.7)]
    # new objects, same nodes; the inputs are untouched
    assert out[0] is not BM25[0] and out[0].node is BM25[0].node
    assert ids_scores(BM25) == [("a", 12.0), ("b", 8.0), ("c", 4.0)]


def test_concatenation_sorted_and_topk():
    out = ConcatenationDocumentJoiner(sort=True, topk=3)([COS, BM25])
    assert ids_scores(out) == [("a", 12.0), ("b", 8.0), ("c", 0.9)]
    unscored = [NodeWithScore(NODES["e"], None)]
    out = ConcatenationDocumentJoiner(sort=True)([unscored, COS])
    assert ids_scores(out) == [("c", 0.9), ("d", 0.7), ("e", None)]


def test_rrf_exact_scores_by_hand():
    out = ReciprocalRankFusionJoiner(k=60)([BM25, COS])
    expected = [
        ("c", 1 / 63 + 1 / 61),
        ("a", 1 / 61),
        ("b", 1 / 62),  # ties with d: b appears first
        ("d", 1 / 62),
    ]
    assert [h.id for h in out] == [e[0] for e in expected]
    assert [h.score for h in out] == pytest.approx([e[1] for e in expected], abs=0, rel=1e-15)


def test_rrf_weights_k_and_topk():
    out = ReciprocalRankFusionJoiner(k=1, weights=[2.0, 1.0], topk=2)([BM25, COS])
    # a: 2/2 = 1; c: 2/4 + 1/2 = 1; b: 2/3; d: 1/3  -> a and c tie at 1.0, a first
    assert ids_scores(out) == [("a", 1.0), ("c", 1.0)]


def test_rrf_ignores_scores_and_counts_a_repeat_in_one_list_once():
    lst = [
        NodeWithScore(NODES["a"], None),
        NodeWithScore(NODES["b"], None),
        NodeWithScore(NODES["a"], None),
    ]
    out = ReciprocalRankFusionJoiner(k=0)([lst])
    assert ids_scores(out) == [("a", 1.0), ("b", 0.5)]


def test_weighted_minmax_exact():
    out = WeightedScoreJoiner()([BM25, COS])
    # BM25 -> a 1, b 0.5, c 0 ; COS -> c 1, d 0 ; weights 1/2 each
    assert ids_scores(out) == [("a", 0.5), ("c", 0.5), ("b", 0.25), ("d", 0.0)]


def test_weighted_minmax_with_weights_rescaled():
    out = WeightedScoreJoiner(weights=[3, 1])([BM25, COS])
    # a .75, b .375, c 0*.75 + 1*.25 = .25, d 0
    assert ids_scores(out) == [("a", 0.75), ("b", 0.375), ("c", 0.25), ("d", 0.0)]


def test_weighted_zscore_exact():
    out = WeightedScoreJoiner(normalization="zscore")([BM25, COS])
    s1 = (32 / 3) ** 0.5  # population std of 12, 8, 4
    exp = {"a": 0.5 * 4 / s1, "b": 0.0, "c": 0.5 * (-4 / s1) + 0.5 * 1.0, "d": -0.5}
    assert [h.id for h in out] == ["a", "b", "c", "d"]  # c: -0.112 < b: 0
    assert [h.score for h in out] == pytest.approx([exp[h.id] for h in out], rel=1e-12)


def test_weighted_constant_list_maps_to_one_or_zero():
    flat = hits(("a", 3.0), ("b", 3.0))
    assert ids_scores(WeightedScoreJoiner()([flat])) == [("a", 1.0), ("b", 1.0)]
    assert ids_scores(WeightedScoreJoiner(normalization="zscore")([flat])) == [
        ("a", 0.0),
        ("b", 0.0),
    ]


def test_same_id_in_different_groups_are_different_nodes():
    # nodes of two groups may share an id string; the key is (group, id)
    class G:  # a stand-in group with just a name (DocNode views read .name)
        name = "g2"

    other = DocNode("x", id="a")
    other._group = G()
    out = ConcatenationDocumentJoiner()([hits(("a", 1.0)), [NodeWithScore(other, 2.0)]])
    assert [(h.node.group, h.id) for h in out] == [(None, "a"), ("g2", "a")]


def _random_lists(rng: random.Random):
    n_lists = rng.randint(1, 4)
    out = []
    for _ in range(n_lists):
        ids = rng.sample("abcdefgh", rng.randint(0, 6))
        if ids and rng.random() < 0.3:
            ids.append(ids[0])  # a repeat inside one list
        scores = sorted((round(rng.uniform(-5, 5), 3) for _ in ids), reverse=True)
        if rng.random() < 0.3 and ids:
            scores = [scores[0]] * len(ids)  # all equal
        out.append(list(zip(ids, scores, strict=True)))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_matches_reference_on_random_lists(seed):
    rng = random.Random(seed)
    raw = _random_lists(rng)
    lists = [hits(*lst) for lst in raw]
    weights = [rng.choice([0.5, 1.0, 2.0]) for _ in raw]
    cases = [
        (ReciprocalRankFusionJoiner(k=60), {"method": "rrf", "k": 60}),
        (
            ReciprocalRankFusionJoiner(k=2, weights=weights),
            {"method": "rrf", "k": 2, "weights": weights},
        ),
        (WeightedScoreJoiner(), {"method": "weighted"}),
        (
            WeightedScoreJoiner(weights=weights, normalization="zscore"),
            {"method": "weighted", "weights": weights, "normalization": "zscore"},
        ),
    ]
    for joiner, kw in cases:
        got = ids_scores(joiner(lists))
        ref = fusion_reference(raw, **kw)
        assert [g[0] for g in got] == [r[0] for r in ref], (joiner, raw)
        assert [g[1] for g in got] == pytest.approx([r[1] for r in ref], rel=1e-9, abs=1e-12)


def test_batch_equals_single_calls_and_keeps_queries_apart():
    rng = random.Random(7)
    per_query = [[hits(*lst) for lst in _random_lists(rng)] for _ in range(12)]
    per_query.append([])  # a query without any list
    per_query.append([[], []])  # a query whose lists are empty
    for joiner in (
        ReciprocalRankFusionJoiner(topk=3),
        WeightedScoreJoiner(topk=2),
        ConcatenationDocumentJoiner(),
        ConcatenationDocumentJoiner(sort=True),
    ):
        batched = joiner.batch(per_query)
        assert len(batched) == len(per_query)
        assert [ids_scores(b) for b in batched] == [ids_scores(joiner(q)) for q in per_query]
    assert ReciprocalRankFusionJoiner().batch([[], [[]]]) == [[], []]


def test_docnodes_are_accepted_as_unscored_hits():
    out = ReciprocalRankFusionJoiner(k=0)([[NODES["a"], NODES["b"]]])
    assert ids_scores(out) == [("a", 1.0), ("b", 0.5)]


# -- errors -------------------------------------------------------------------------------------
def test_argument_errors():
    with pytest.raises(ConfigError, match=r"topk must be None \(keep all\) or an int >= 1, got 0"):
        ReciprocalRankFusionJoiner(topk=0)
    with pytest.raises(ConfigError, match=r"k must be a finite number >= 0 .* got -1"):
        ReciprocalRankFusionJoiner(k=-1)
    with pytest.raises(ConfigError, match=r"normalization must be 'minmax' or 'zscore', got 'l2'"):
        WeightedScoreJoiner(normalization="l2")
    with pytest.raises(ConfigError, match=r"weights must be a non-empty list .* got \[-1, 2\]"):
        WeightedScoreJoiner(weights=[-1, 2])
    with pytest.raises(ConfigError, match=r"weights must be a list of numbers"):
        ReciprocalRankFusionJoiner(weights=["x"])
    with pytest.raises(ConfigError, match="sort must be True or False"):
        ConcatenationDocumentJoiner(sort="yes")


def test_input_errors():
    j = ReciprocalRankFusionJoiner()
    with pytest.raises(
        ConfigError,
        match=r"lists\[0\] must be a list of NodeWithScore .* "
        r"wrap a single list as \[hits\]",
    ):
        j(BM25)
    with pytest.raises(
        ConfigError,
        match=r"lists\[1\]\[0\] must be a NodeWithScore or DocNode, "
        r"got str",
    ):
        j([BM25, ["oops"]])
    with pytest.raises(ConfigError, match="lists must be a list of hit lists"):
        j("abc")
    with pytest.raises(ConfigError, match="per_query must be a list"):
        j.batch(None)
    with pytest.raises(ConfigError, match=r"3 weights for 2 hit lists \(query 0\)"):
        ReciprocalRankFusionJoiner(weights=[1, 1, 1])([BM25, COS])


def test_weighted_needs_finite_scores():
    bad = [NodeWithScore(NODES["a"], 1.0), NodeWithScore(NODES["b"], None)]
    with pytest.raises(
        ConfigError,
        match=r"lists\[1\]\[1\] \(node 'b'\) has score None; .*"
        r"use ReciprocalRankFusionJoiner",
    ):
        WeightedScoreJoiner()([BM25, bad])
    nan = [NodeWithScore(NODES["a"], float("nan"))]
    with pytest.raises(ConfigError, match=r"lists\[0\]\[0\] \(node 'a'\) has score nan"):
        WeightedScoreJoiner()([nan])
