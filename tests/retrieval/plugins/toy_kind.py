"""A toy kind of similarity, registered as a plugin would: one SearchPath subclass and one
registry row. A node's score is the number of distinct query words it contains."""

from __future__ import annotations

import numpy as np

import fastrag as fr
from fastrag.retrieval.paths import SearchPath
from fastrag.retrieval.paths.custom import topk_scores


def words(text: str) -> set[str]:
    return set(text.lower().split())


class ToyPath(SearchPath):
    kind = "toy"
    shard = "local"

    def prepare(self, doc, group):
        return [words(t) for t in group.texts()]

    def search(self, prepared, queries, k, mask):
        scores = np.array([[len(words(q) & w) for w in prepared] for q in queries], np.float64)
        scores[scores == 0] = -np.inf  # a node sharing no word is no hit
        return topk_scores(scores, k, mask, self.state.cutoff_for(None))


fr.register_similarity(name="toy", path=ToyPath)
