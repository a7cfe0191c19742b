"""Document: transform forms, laziness, lineage, parallel building, errors."""

from __future__ import annotations

import pytest

import fastrag as fr
from fastrag.errors import ConfigError
from fastrag.schema import DocNode, NodeWithScore
from fastrag.transforms.base import NodeTransform

TEXTS = ["alpha\nbeta\ngamma", "delta\n\nepsilon", "zeta"]


def split_lines(text: str) -> list[str]:
    return text.split("\n")


class LineSplitter(NodeTransform):
    def __init__(self, sep: str = "\n") -> None:
        self.sep = sep

    def transform(self, text):
        return text.split(self.sep)


class CallableClass:
    def __init__(self, upper: bool = False) -> None:
        self.upper = upper

    def __call__(self, text: str) -> list[str]:
        parts = text.split("\n")
        return [p.upper() for p in parts] if self.upper else parts


class SpanSplitter(NodeTransform):
    """Words with offsets (a transform that knows where its children are)."""

    def spans(self, text):
        out, start = [], None
        for i, ch in enumerate(text + " "):
            if ch.isspace():
                if start is not None:
                    out.append((start, i))
                start = None
            elif start is None:
                start = i
        return out


def node_to_nodes(node: DocNode) -> list:
    return [DocNode(text=p, metadata={"from": node.id}) for p in node.text.split("\n")] + ["tail"]


EXPECTED_LINES = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]


@pytest.mark.parametrize(
    "transform,kwargs",
    [
        (split_lines, {}),
        (lambda t: t.split("\n"), {}),
        (CallableClass, {}),
        (CallableClass(), {}),
        (LineSplitter, {"sep": "\n"}),
        (LineSplitter(), {}),
    ],
    ids=[
        "function",
        "lambda",
        "callable-class",
        "callable-instance",
        "nodetransform-class",
        "nodetransform-instance",
    ],
)
def test_every_transform_form(transform, kwargs):
    doc = fr.Document.from_texts(TEXTS)
    doc.create_node_group("line", transform=transform, **kwargs)
    assert [n.text for n in doc.group("line")] == EXPECTED_LINES  # empty "" dropped


def test_class_kwargs_reach_the_constructor():
    doc = fr.Document.from_texts(TEXTS)
    doc.create_node_group("line", transform=CallableClass, upper=True)
    assert [n.text for n in doc.group("line")][:2] == ["ALPHA", "BETA"]


def test_trans_node_function_gets_docnodes_and_may_return_both_kinds():
    doc = fr.Document.from_texts(["a\nb"], metadatas=[{"src": "x"}])
    doc.create_node_group("n", transform=node_to_nodes, trans_node=True)
    nodes = list(doc.group("n"))
    root_id = doc.group("root")[0].id
    assert [n.text for n in nodes] == ["a", "b", "tail"]
    assert nodes[0].metadata == {"src": "x", "from": root_id}  # parent metadata inherited
    assert nodes[2].metadata == {"src": "x"}


def test_spans_give_offsets_into_parent_text_with_repeats():
    doc = fr.Document.from_texts(["to be or not to be"])
    doc.create_node_group("w", transform=SpanSplitter)
    parent = doc.group("root")[0].text
    nodes = list(doc.group("w"))
    assert [n.text for n in nodes] == ["to", "be", "or", "not", "to", "be"]
    assert [(n.start, n.end) for n in nodes][-2:] == [(13, 15), (16, 18)]
    assert all(parent[n.start : n.end] == n.text for n in nodes)


def test_groups_are_lazy_built_once_and_transitively():
    calls = []

    def counting(text):
        calls.append(text)
        return text.split("\n")

    doc = fr.Document.from_texts(TEXTS)
    doc.create_node_group("line", transform=counting)
    doc.create_node_group("char", transform=lambda t: list(t[:2]), parent="line")
    assert calls == []  # registering runs nothing
    assert len(doc.group("char")) == 12
    assert len(calls) == 3  # parent built once, for all documents at once
    doc.group("line")
    doc.group("char")
    assert len(calls) == 3


def test_lineage_parent_children_root_and_find():
    doc = fr.Document.from_texts(TEXTS)
    doc.create_node_group("line", transform=split_lines)
    doc.create_node_group("char", transform=lambda t: list(t[:2]), parent="line")
    doc.create_node_group("side", transform=lambda t: [t[:3]])
    chars = list(doc.group("char"))
    assert chars[0].parent.text == "alpha"
    assert chars[0].root_node.text == TEXTS[0]
    assert [c.text for c in doc.group("line")[1].children["char"]] == ["b", "e"]
    # up: de-duplicated, in input order
    hits = [NodeWithScore(chars[6], 1.0), chars[0], chars[1]]
    assert [n.text for n in doc.find("root")(hits)] == [TEXTS[1], TEXTS[0]]
    assert [n.text for n in doc.find("line")(hits)] == ["delta", "alpha"]
    # down: all descendants, grouped by input node
    roots = list(doc.group("root"))
    assert [n.text for n in doc.find("char")([roots[2], roots[0]])] == [
        "z",
        "e",
        "a",
        "l",
        "b",
        "e",
        "g",
        "a",
    ]
    # across branches: up to the common ancestor, then down
    assert [n.text for n in doc.find("side")([chars[0]])] == ["alp"]
    assert [n.text for n in doc.find_parent("root")([chars[0]])] == [TEXTS[0]]
    with pytest.raises(KeyError, match="not a direct child"):
        roots[0].children["char"]


def test_ids_are_deterministic():
    def build():
        doc = fr.Document.from_texts(TEXTS)
        doc.create_node_group("line", transform=split_lines)
        return doc.group("line").ids

    assert build() == build()
    assert len(set(build())) == 6


def test_from_texts_with_ids_and_metadata():
    doc = fr.Document.from_texts(
        ["x", "y"],
        metadatas=[{"a": 1}, {"a": 2}],
        ids=["d1", "d2"],
        global_metadata={"corpus": "t"},
    )
    roots = list(doc.group("root"))
    assert [r.id for r in roots] == ["d1", "d2"]
    assert roots[1].metadata == {"a": 2, "corpus": "t"}
    assert doc.group("root").metadata_table().column("a").to_pylist() == [1, 2]


def test_group_table_has_the_design_schema_and_views_are_light():
    doc = fr.Document.from_texts(TEXTS)
    doc.create_node_group("line", transform=split_lines)
    g = doc.group("line")
    assert g.table.column_names == ["id", "doc_id", "parent_id", "text", "start", "end", "metadata"]
    node = next(iter(g))
    assert node.__slots__ and not hasattr(node, "__dict__")
    assert node.group == "line" and node.doc_id == doc.group("root")[0].id


@pytest.mark.parametrize("workers", [1, 2])
def test_num_workers_output_identical(workers):
    texts = [f"line {i}\nsecond {i}\n" * (i % 4 + 1) for i in range(60)]
    base = fr.Document.from_texts(texts)
    base.create_node_group("line", transform=split_lines)
    par = fr.Document.from_texts(texts)
    par.create_node_group("line", transform=split_lines, num_workers=workers)  # processes
    unpicklable = fr.Document.from_texts(texts)
    unpicklable.create_node_group("line", transform=lambda t: t.split("\n"), num_workers=workers)
    expected = base.group("line").table
    assert par.group("line").table.equals(expected)
    assert unpicklable.group("line").table.equals(expected)  # threads


def test_builtin_groups_registered():
    doc = fr.Document.from_texts(["一句话。" * 400])
    assert {"CoarseChunk", "MediumChunk", "FineChunk"} <= set(doc.group_names)
    assert fr.Document.CoarseChunk == "CoarseChunk"
    fine = list(doc.group(fr.Document.FineChunk))
    root = doc.group("root")[0].text
    assert len(fine) > 1 and all(root[n.start : n.end] == n.text for n in fine)
    assert all(fr.count_tokens(n.text) <= 128 for n in fine)


# -- bad input -----------------------------------------------------------------------------
def test_registration_errors():
    doc = fr.Document.from_texts(TEXTS)
    doc.create_node_group("line", transform=split_lines)
    with pytest.raises(ConfigError, match="'line' already exists"):
        doc.create_node_group("line", transform=split_lines)
    with pytest.raises(ConfigError, match="'FineChunk' already exists"):
        doc.create_node_group("FineChunk", transform=split_lines)
    with pytest.raises(ConfigError, match="parent group 'nope' of 'x' is not registered"):
        doc.create_node_group("x", transform=split_lines, parent="nope")
    with pytest.raises(ConfigError, match="cannot be its own parent"):
        doc.create_node_group("y", transform=split_lines, parent="y")
    with pytest.raises(ConfigError, match="must be callable"):
        doc.create_node_group("z", transform="split")
    with pytest.raises(ConfigError, match="num_workers must be an int >= 0"):
        doc.create_node_group("w", transform=split_lines, num_workers=-1)
    with pytest.raises(ConfigError, match="cannot create transform LineSplitter"):
        doc.create_node_group("v", transform=LineSplitter, nonsense=1)
    with pytest.raises(ConfigError, match="unknown node group 'missing'.*known groups"):
        doc.group("missing")


def test_transform_returning_garbage_names_the_group():
    doc = fr.Document.from_texts(TEXTS)
    doc.create_node_group("bad", transform=lambda t: None)
    with pytest.raises(ConfigError, match="transform of group 'bad' returned NoneType"):
        doc.group("bad")
    doc.create_node_group("bad2", transform=lambda t: [object()])
    with pytest.raises(ConfigError, match="items must be str, DocNode, or a finite number"):
        doc.group("bad2")


def test_document_argument_errors():
    with pytest.raises(ConfigError, match="needs a path"):
        fr.Document()
    with pytest.raises(ConfigError, match="texts must be a list of strings"):
        fr.Document.from_texts("just one string")
    with pytest.raises(ConfigError, match=r"texts\[1\] is int"):
        fr.Document.from_texts(["a", 1])
    with pytest.raises(ConfigError, match="got 1 metadatas for 2 texts"):
        fr.Document.from_texts(["a", "b"], metadatas=[{}])
    with pytest.raises(ConfigError, match="ids must be unique"):
        fr.Document.from_texts(["a", "b"], ids=["x", "x"])
    with pytest.raises(ConfigError, match="on_error must be"):
        fr.Document.from_texts(["a"]).__class__(["x"], on_error="ignore")
    with pytest.raises(ConfigError, match="embed must be an Embedder"):
        fr.Document.from_texts(["a"], embed=42)
