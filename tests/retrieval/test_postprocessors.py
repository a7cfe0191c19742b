"""Post-processors: cut-off, keyword filter, de-duplication, long-context reorder (against
LlamaIndex's algorithm), target-group mapping with a fake Document."""

from __future__ import annotations

import pytest

from fastrag.errors import ConfigError
from fastrag.retrieval.postprocessors import (
    Deduplicate,
    KeywordFilter,
    LongContextReorder,
    SimilarityCutoff,
    TargetGroup,
)
from fastrag.schema import DocNode, NodeWithScore


def hit(text, score, id=None):
    return NodeWithScore(DocNode(text, id=id or text), score)


HITS = [
    hit("Sulfites preserve wine.", 0.9),
    hit("亚硫酸盐可以防止葡萄酒氧化。", 0.7),
    hit("Red wine and sulfites", 0.5),
    hit("Beer is brewed from barley.", 0.3),
    hit("no score here", None),
]


def texts(result):
    return [h.text for h in result]


def test_similarity_cutoff_keeps_ge_threshold_and_drops_unscored():
    out = SimilarityCutoff(0.5)(HITS)
    assert texts(out) == [HITS[0].text, HITS[1].text, HITS[2].text]
    assert out[0] is HITS[0]  # kept hits are passed through unchanged
    assert SimilarityCutoff(-1e9)(HITS)[-1].text == "Beer is brewed from barley."
    assert len(SimilarityCutoff(-1e9)(HITS)) == 4


def test_keyword_filter_any_all_exclude_case_and_chinese():
    assert texts(KeywordFilter(required=["SULFITES"])(HITS)) == [HITS[0].text, HITS[2].text]
    assert texts(KeywordFilter(required=["sulfites"], case_sensitive=True)(HITS)) == [HITS[2].text]
    assert texts(KeywordFilter(required=["wine", "red"], mode="all")(HITS)) == [HITS[2].text]
    assert texts(KeywordFilter(required=["wine", "barley"])(HITS)) == [
        HITS[0].text,
        HITS[2].text,
        HITS[3].text,
    ]
    assert texts(KeywordFilter(required=["葡萄酒"])(HITS)) == [HITS[1].text]
    assert texts(KeywordFilter(excluded=["wine", "葡萄"])(HITS)) == [HITS[3].text, HITS[4].text]
    assert texts(KeywordFilter(required=["wine"], excluded=["red"])(HITS)) == [HITS[0].text]
    # regex metacharacters are literal
    assert texts(KeywordFilter(required=["wine."])(HITS)) == [HITS[0].text]


def test_deduplicate_by_id_and_by_text():
    a1, a2 = hit("same text", 0.9, id="n1"), hit("same text", 0.8, id="n2")
    again = hit("same text", 0.1, id="n1")
    assert [h.id for h in Deduplicate()([a1, a2, again])] == ["n1", "n2"]
    assert [h.id for h in Deduplicate(by="text")([a1, a2, again])] == ["n1"]


def test_deduplicate_translations_by_metadata_key_or_callable():
    """One page in several languages collapses to its best hit; hits without the key stay."""

    def page(path, score, id):
        return NodeWithScore(
            DocNode("x", {"path": path, "page": path.split("/", 1)[-1]}, id=id), score
        )

    hits = [
        page("zh/cors.md", 0.9, "1"),
        page("en/cors.md", 0.8, "2"),
        page("en/auth.md", 0.7, "3"),
        NodeWithScore(DocNode("y", id="4"), 0.6),
        NodeWithScore(DocNode("z", id="5"), 0.5),
        page("fr/auth.md", 0.4, "6"),
    ]
    assert [h.id for h in Deduplicate(by="metadata", key="page")(hits)] == ["1", "3", "4", "5"]
    strip_lang = lambda h: h.metadata["path"].split("/", 1)[-1] if "path" in h.metadata else None  # noqa: E731
    assert [h.id for h in Deduplicate(by=strip_lang)(hits)] == ["1", "3", "4", "5"]
    assert [h.id for h in Deduplicate(by="metadata", key="path")(hits)] == [
        "1",
        "2",
        "3",
        "4",
        "5",
        "6",
    ]


def llama_index_long_context_reorder(nodes):
    """LlamaIndex's LongContextReorder, verbatim algorithm."""
    reordered = []
    ordered = sorted(nodes, key=lambda x: x.score if x.score is not None else 0)
    for i, node in enumerate(ordered):
        if i % 2 == 0:
            reordered.insert(0, node)
        else:
            reordered.append(node)
    return reordered


@pytest.mark.parametrize("n", range(9))
def test_long_context_reorder_matches_llama_index(n):
    nodes = [hit(f"t{i}", float(10 - i)) for i in range(n)]
    if n > 3:
        nodes[2] = NodeWithScore(nodes[2].node, None)  # unscored counts as 0
        nodes[3] = NodeWithScore(nodes[3].node, nodes[1].score)  # a tie
    out = LongContextReorder()(nodes)
    assert [h.text for h in out] == [h.text for h in llama_index_long_context_reorder(nodes)]


def test_long_context_reorder_puts_best_at_the_ends():
    nodes = [hit(f"t{i}", float(5 - i)) for i in range(5)]  # t0 best ... t4 worst
    assert texts(LongContextReorder()(nodes)) == ["t0", "t2", "t4", "t3", "t1"]


def test_batch_and_query_passthrough():
    pp = SimilarityCutoff(0.6)
    assert [texts(r) for r in pp.batch([HITS, HITS[2:]])] == [[HITS[0].text, HITS[1].text], []]
    assert texts(pp(HITS, query="ignored")) == texts(pp(HITS))
    assert [texts(r) for r in pp.batch([HITS], ["q"])] == [[HITS[0].text, HITS[1].text]]


def test_docnodes_are_accepted():
    out = Deduplicate()([DocNode("x", id="1"), DocNode("y", id="1")])
    assert [(h.text, h.score) for h in out] == [("x", None)]


# -- TargetGroup with a fake Document ------------------------------------------------------------
class FakeDoc:
    """A Document stand-in: sentences s1..s4 belong to paragraphs p1/p2; find("paragraph")
    maps sentences to their paragraph, find("sentence") paragraphs to their sentences."""

    def __init__(self):
        self.parent = {"s1": "p1", "s2": "p1", "s3": "p2", "s4": "p2"}
        self.nodes = {i: DocNode(f"text {i}", id=i) for i in ["s1", "s2", "s3", "s4", "p1", "p2"]}
        self.calls = []

    def find(self, group):
        if group not in ("paragraph", "sentence"):
            raise ConfigError(f"unknown group {group!r}; groups: ['paragraph', 'sentence']")

        def run(nodes):
            self.calls.append([n.id for n in nodes])
            out = []
            for n in nodes:
                if group == "paragraph":
                    targets = [self.parent[n.id]]
                else:
                    targets = [s for s, p in self.parent.items() if p == n.id]
                for t in targets:
                    if self.nodes[t] not in out:
                        out.append(self.nodes[t])
            return out

        return run


def test_target_group_maps_to_parents_with_best_score():
    doc = FakeDoc()
    tg = TargetGroup(doc, "paragraph")
    src = [
        NodeWithScore(doc.nodes[i], s)
        for i, s in [("s3", 0.4), ("s1", 0.9), ("s4", 0.95), ("s2", 0.2)]
    ]
    out = tg(src)
    assert [(h.id, h.score) for h in out] == [("p2", 0.95), ("p1", 0.9)]
    assert doc.calls == [["s3"], ["s1"], ["s4"], ["s2"]]


def test_target_group_maps_to_children_and_batches_with_one_find_per_node():
    doc = FakeDoc()
    tg = TargetGroup(doc, "sentence")
    q1 = [NodeWithScore(doc.nodes["p2"], 2.0), NodeWithScore(doc.nodes["p1"], 1.0)]
    q2 = [NodeWithScore(doc.nodes["p1"], 5.0), NodeWithScore(doc.nodes["p1"], 7.0)]
    out = tg.batch([q1, q2, []])
    assert [[(h.id, h.score) for h in r] for r in out] == [
        [("s3", 2.0), ("s4", 2.0), ("s1", 1.0), ("s2", 1.0)],
        [("s1", 7.0), ("s2", 7.0)],
        [],
    ]
    assert doc.calls == [["p2"], ["p1"]]  # cached across the batch


def test_target_group_unscored_hits_sort_last():
    doc = FakeDoc()
    out = TargetGroup(doc, "paragraph")(
        [NodeWithScore(doc.nodes["s1"], None), NodeWithScore(doc.nodes["s3"], 0.1)]
    )
    assert [(h.id, h.score) for h in out] == [("p2", 0.1), ("p1", None)]


# -- errors -------------------------------------------------------------------------------------
def test_errors():
    with pytest.raises(ConfigError, match="threshold must be a number, got str 'x'"):
        SimilarityCutoff("x")
    with pytest.raises(ConfigError, match=r"KeywordFilter needs required=\[...\] or excluded"):
        KeywordFilter()
    with pytest.raises(ConfigError, match="required must hold non-empty strings, got ''"):
        KeywordFilter(required=[""])
    with pytest.raises(ConfigError, match="mode must be 'any' or 'all', got 'some'"):
        KeywordFilter(required=["a"], mode="some")
    with pytest.raises(ConfigError, match="by must be 'id', 'text' or 'metadata', got 'hash'"):
        Deduplicate(by="hash")
    with pytest.raises(ConfigError, match=r"Deduplicate\(by='metadata'\) needs key='field'"):
        Deduplicate(by="metadata")
    with pytest.raises(ConfigError, match="key= goes only with by='metadata'"):
        Deduplicate(by="text", key="page")
    with pytest.raises(ConfigError, match=r"nodes must be a list of NodeWithScore \(or DocNode\)"):
        Deduplicate()(HITS[0])
    with pytest.raises(
        ConfigError, match=r"nodes\[1\] must be a NodeWithScore or DocNode, got int"
    ):
        Deduplicate()([HITS[0], 3])
    with pytest.raises(ConfigError, match="query must be None or a str, got int"):
        Deduplicate()(HITS, query=3)
    with pytest.raises(ConfigError, match=r"got 1 queries for 2 hit lists"):
        Deduplicate().batch([HITS, HITS], ["q"])
    with pytest.raises(ConfigError, match=r"doc must be a Document \(with find\(group\)\)"):
        TargetGroup(object(), "paragraph")
    with pytest.raises(
        ConfigError, match=r"target must be a non-empty str \(a node group name\), got ''"
    ):
        TargetGroup(FakeDoc(), "")
    with pytest.raises(ConfigError, match=r"unknown group 'chapter'; groups:"):
        TargetGroup(FakeDoc(), "chapter")
