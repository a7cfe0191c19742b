"""The one record shape of a retrieved hit (CLI hits files, chat sources, MCP tools)."""

from __future__ import annotations

import pytest

from fastrag.retrieval.present import hit_label, hit_path, hit_record, snippet
from fastrag.schema import DocNode, NodeWithScore


def _hit(text: str, **metadata) -> NodeWithScore:
    return NodeWithScore(DocNode(text=text, metadata=metadata), 1.25)


def test_record_fields_path_page_and_options():
    hit = _hit("a  b\nc " * 100, file_path="/srv/kb/en/a.md", file_name="a.md", page_label=3)
    rec = hit_record(hit, lambda p: p.removeprefix("/srv/kb/"), snippet_chars=10)
    assert list(rec) == ["id", "doc_id", "score", "path", "page", "snippet"]
    assert rec["id"] == hit.id and rec["score"] == 1.25
    assert (rec["path"], rec["page"], rec["snippet"]) == ("en/a.md", 3, "a b c a b…")
    full = hit_record(hit, str, text=True, metadata=True, uri=True)
    assert list(full)[6:] == ["text", "metadata", "uri"] and full["text"] == hit.text
    assert full["metadata"] == {"file_name": "a.md", "page_label": 3}  # no server path
    assert hit.metadata["file_path"] == "/srv/kb/en/a.md"  # the node's metadata untouched
    assert hit_label(rec) == "en/a.md p.3"


def test_a_hit_without_a_file_is_named_by_file_name_then_id():
    assert hit_path(_hit("x", file_name="notes"), str) == "notes"
    bare = _hit("x")
    rec = hit_record(bare, str)
    assert rec["path"] is None and rec["page"] is None and hit_label(rec) == bare.id
    assert hit_record(NodeWithScore(bare.node, None), str)["score"] is None


def test_snippet_flattens_and_refuses_a_bad_width():
    assert snippet("one\n two\tthree", 80) == "one two three"
    assert snippet("abcdef", 4) == "abc…" and len(snippet("x" * 500)) == 240
    with pytest.raises(ValueError, match="width must be >= 1"):
        snippet("x", 0)
