"""The derived-data owner: incremental rebuilds equal clean builds."""

from __future__ import annotations

import numpy as np
import pytest

import fastrag as fr

WORDS = [f"w{i}" for i in range(60)]


def corpus(n, seed):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(1, 12)))) for _ in range(n)]


def ranked(doc, queries, method):
    ret = fr.Retriever(doc, "root", "bm25", topk=8, method=method)
    return [[(h.text, round(h.score, 5)) for h in hits] for hits in ret.batch(queries)]


@pytest.mark.parametrize("method", ["lucene", "bm25+"])
@pytest.mark.parametrize("with_store", [False, True])
def test_bm25_after_adds_and_deletes_equals_a_clean_build(tmp_path, method, with_store):
    queries = [" ".join(q) for q in np.random.default_rng(9).choice(WORDS, (30, 3))]
    doc = fr.Document.from_texts(corpus(200, 0), store=tmp_path / "st" if with_store else None)
    ranked(doc, queries, method)  # builds (and caches the tokens)
    rng = np.random.default_rng(1)
    for step in range(4):
        doc.add(corpus(15, 10 + step) + ["brandnewterm w1", "brandnewterm"])
        ids = doc.group("root").ids
        doc.delete([ids[i] for i in rng.choice(len(ids), 10, replace=False)])
        clean = fr.Document.from_texts([n.text for n in doc.group("root")])
        assert ranked(doc, queries + ["brandnewterm"], method) == ranked(
            clean, queries + ["brandnewterm"], method
        )
    assert doc.derived.builds["bm25"] == 5
