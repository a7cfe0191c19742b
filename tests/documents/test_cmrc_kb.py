"""The LazyLLM-tutorial knowledge base built from the shared CMRC data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fastrag as fr

CMRC = Path(__file__).resolve().parents[3] / "shared" / "data" / "cmrc2018_dev.json"


@pytest.fixture(scope="module")
def squad():
    if CMRC.exists():
        return json.loads(CMRC.read_text("utf-8"))
    from fastrag.datasets import load_cmrc2018_dev

    return load_cmrc2018_dev()


def test_block_group_has_one_node_per_paragraph_and_maps_back_to_files(squad, tmp_path):
    from fastrag.datasets import build_squad_kb

    files = build_squad_kb(squad, tmp_path / "kb", per_file=10)
    contexts = list(dict.fromkeys(p["context"] for a in squad["data"] for p in a["paragraphs"]))
    assert len(contexts) == 848 and len(files) == 85
    doc = fr.Document(tmp_path / "kb")
    doc.create_node_group("block", transform=lambda t: t.split("\n"))
    blocks = list(doc.group("block"))
    assert len(blocks) == 848
    from fastrag.eval.loaders import normalize_paragraph

    assert [b.text for b in blocks] == [normalize_paragraph(c) for c in contexts]
    roots = doc.find("root")(blocks)
    assert len(roots) == 85
    # every block maps back to the file it was written to
    by_file = {Path(f).name: Path(f).read_text("utf-8").split("\n") for f in files}
    for b, r in zip(blocks[::37], doc.find("root")(blocks[::37]), strict=False):
        assert b.text in by_file[r.metadata["file_name"]]
        assert r.metadata["file_type"] == "txt" and r.metadata["file_size"] > 0
