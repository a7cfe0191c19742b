"""A transform returning numbers (LazyLLM's ``sentence-len`` group) makes a metadata-only
group: nodes without text whose metadata ``value`` holds the number, with their lineage."""

from __future__ import annotations

import pytest

import fastrag as fr


def test_sentence_len_group_as_lazyllm_writes_it(tmp_path):
    texts = ["Stores are folders. Readers never block writers", "Fine"]
    doc = fr.Document.from_texts(texts, store=str(tmp_path / "s"))
    doc.create_node_group(name="sentence", transform=lambda d: d.split(". "))
    doc.create_node_group(name="sentence-len", transform=lambda s: len(s), parent="sentence")
    g = doc.group("sentence-len")
    nodes = g.nodes(range(len(g)))
    assert [n.metadata["value"] for n in nodes] == [18, 27, 4]
    assert [n.text for n in nodes] == ["", "", ""]
    assert [p.text for p in doc.find("sentence")(nodes)] == [
        "Stores are folders",
        "Readers never block writers",
        "Fine",
    ]
    again = fr.Document(store=str(tmp_path / "s"), mode="r")
    assert again.group("sentence-len").table.equals(g.table)  # stored as it was built
    assert [n.metadata["value"] for n in again.group("sentence-len").nodes([0, 1])] == [18, 27]


def test_values_that_cannot_be_kept_are_named():
    doc = fr.Document.from_texts(["a b"])
    with pytest.raises(fr.ConfigError, match=r"returned an item of type float \(not finite\)"):
        doc.create_node_group("bad", transform=lambda t: [float("nan")])
        len(doc.group("bad"))
    with pytest.raises(fr.ConfigError, match=r"returned an item of type set"):
        doc.create_node_group("worse", transform=lambda t: [{1}])
        len(doc.group("worse"))
