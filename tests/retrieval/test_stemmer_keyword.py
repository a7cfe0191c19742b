"""Configuration errors raised when a Retriever is constructed rather than at the first query:
an unknown BM25 method or parameter, a group with no nodes."""

from __future__ import annotations

import numpy as np
import pytest

import fastrag as fr
from fastrag.errors import ConfigError

CORPUS = [
    "The runner runs every morning along the river",
    "She is walking her dogs in the park",
]


@pytest.fixture(scope="module")
def doc():
    return fr.Document.from_texts(CORPUS)


def test_unknown_bm25_method_fails_at_construction(doc, monkeypatch):
    def no_index(*a, **k):
        raise AssertionError("no index is built for a bad configuration")

    monkeypatch.setattr(doc.derived, "bm25", no_index)
    with pytest.raises(ConfigError, match=r"unknown BM25 method 'okapi2'; known methods: lucene, "
                                          r"robertson, atire, bm25l, bm25\+ \(pass method= one "
                                          r"of them; 'lucene' is the default\)"):
        fr.Retriever(doc, "root", "bm25", method="okapi2")
    with pytest.raises(ConfigError, match=r"unknown BM25 method 'okapi2'"):
        fr.Retriever(doc, "root", "bm25_chinese", method="okapi2")
    with pytest.raises(ConfigError, match=r"BM25 parameter b=2 must be within \[0, 1\]"):
        fr.Retriever(doc, "root", "bm25", b=2)


class TinyEmbedding:
    """Deterministic letter-count vectors (stands in for a model's content only)."""

    def embed(self, texts):
        out = np.ones((len(texts), 26), dtype=np.float32)
        for i, t in enumerate(texts):
            for c in t.lower():
                if "a" <= c <= "z":
                    out[i, ord(c) - 97] += 1
        return out


@pytest.mark.parametrize("similarity,index", [("bm25", "default"), ("bm25_chinese", "default"),
                                              ("cosine", "default"), ("cosine", "hnsw"),
                                              ("dot", "default")])
def test_empty_group_fails_at_construction(similarity, index):
    doc = fr.Document.from_texts(["alpha beta", "gamma"], embed=TinyEmbedding())
    doc.create_node_group("none", transform=lambda t: [])
    with pytest.raises(ConfigError, match=r"group 'none' has no nodes: its transform made none "
                                          r"from the Document's 2 root nodes; check the "
                                          r"transform given to create_node_group"):
        fr.Retriever(doc, "none", similarity, index=index)


def test_empty_folder_fails_at_construction(tmp_path):
    (tmp_path / "kb").mkdir()
    doc = fr.Document(tmp_path / "kb")
    with pytest.raises(ConfigError, match=r"group 'root' has no nodes: the Document holds no "
                                          r"documents \(its sources gave no text, e\.g\. the "
                                          r"source folder had no readable files\); add documents "
                                          r"with doc\.add\(\.\.\.\)"):
        fr.Retriever(doc, "root", "bm25")
    with pytest.raises(ConfigError, match=r"group 'CoarseChunk' has no nodes: the Document "
                                          r"holds no documents"):
        fr.Retriever(doc, "CoarseChunk")


def test_group_emptied_after_construction_fails_at_query(tmp_path):
    (tmp_path / "a.txt").write_text("the runner runs")
    doc = fr.Document(tmp_path / "a.txt")
    ret = fr.Retriever(doc, "root", "bm25")
    assert [h.text for h in ret("runner")] == ["the runner runs"]
    doc.delete(doc.group("root")[0].doc_id)
    with pytest.raises(ConfigError, match=r"group 'root' has no nodes: the Document holds no "
                                          r"documents"):
        ret("runner")
