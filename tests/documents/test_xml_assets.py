"""XML-based assets of documentation folders (SVG, draw.io, XLIFF) are read as the words a
person sees, never as markup; one without words is skipped with the reason."""

from __future__ import annotations

import base64
import zlib
from urllib.parse import quote

import pytest

import fastrag as fr
from fastrag.documents.readers import ReadReport, iter_source_files, read_file

SVG = """<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 40">
  <title>Upload flow</title>
  <desc>How a file travels from the browser to the store</desc>
  <path d="M0 0 L10 10" fill="none" stroke="#333"/>
  <g><text x="5" y="20">Browser <tspan font-weight="bold">sends</tspan> the file</text></g>
  <text x="5" y="30">上传文件</text>
</svg>
"""
MARKUP_ONLY = (
    '<svg xmlns="http://www.w3.org/2000/svg"><path d="M0 0 L1 1" fill="red" '
    'stroke="blue"/><rect width="5" height="5"/></svg>'
)
BOMB = (
    '<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "aaaaaaaaaa">'
    + "".join(
        f'<!ENTITY {c} "&{p};&{p};&{p};&{p};&{p};&{p};&{p};&{p};&{p};&{p};">'
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + ']><svg xmlns="http://www.w3.org/2000/svg"><text>&i;</text></svg>'
)

MODEL = (
    '<mxGraphModel><root><mxCell id="0"/><mxCell id="1" value="Retriever" vertex="1"/>'
    '<mxCell id="2" value="&lt;b&gt;BM25&lt;/b&gt; index" vertex="1"/>'
    '<mxCell id="3" edge="1"/></root></mxGraphModel>'
)


def _packed(xml: str) -> str:
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = deflate.compress(quote(xml, safe="").encode()) + deflate.flush()
    return base64.b64encode(raw).decode()


XLF = """<?xml version="1.0"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="zh">
  <file id="f"><unit id="u1"><segment><source>Upload a file</source>
  <target>上传文件</target></segment></unit></file>
</xliff>
"""


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "page.md").write_text("# Uploads\n\nHow to upload a file.\n")
    (tmp_path / "flow.svg").write_text(SVG)
    (tmp_path / "icon.svg").write_text(MARKUP_ONLY)
    (tmp_path / "broken.svg").write_text("<svg><text>unclosed")
    (tmp_path / "plain.drawio").write_text(f"<mxfile><diagram id='a'>{MODEL}</diagram></mxfile>")
    (tmp_path / "packed.drawio").write_text(
        f"<mxfile><diagram id='b'>{_packed(MODEL)}</diagram></mxfile>"
    )
    (tmp_path / "empty.drawio").write_text(
        "<mxfile><diagram><mxGraphModel><root><mxCell id='0'/></root></mxGraphModel></diagram>"
        "</mxfile>"
    )
    (tmp_path / "ui.xlf").write_text(XLF)
    return tmp_path


def test_svg_gives_its_title_desc_and_text_never_markup(folder):
    [(text, meta)] = read_file(folder / "flow.svg")
    assert text == (
        "Upload flow\nHow a file travels from the browser to the store\n"
        "Browser sends the file\n上传文件"
    )
    assert meta["title"] == "Upload flow" and meta["file_type"] == "svg"
    for markup in ("path", "fill", "stroke", "M0", "<", "svg"):
        assert markup not in text


def test_drawio_labels_plain_and_compressed_and_xliff_text(folder):
    assert read_file(folder / "plain.drawio")[0][0] == "Retriever\nBM25 index"
    assert read_file(folder / "packed.drawio")[0][0] == "Retriever\nBM25 index"
    [(text, meta)] = read_file(folder / "ui.xlf")
    assert text == "Upload a file\n上传文件"
    assert meta["source_language"] == "en" and meta["target_language"] == "zh"


def test_assets_without_words_are_skipped_with_the_reason(folder):
    report = ReadReport()
    read = {f.name: read_file(f, report=report) for f in iter_source_files(folder, report=report)}
    assert read["icon.svg"] == [] and read["empty.drawio"] == [] and read["broken.svg"] == []
    skipped = {(e.path.rsplit("/", 1)[-1], e.reason, e.detail) for e in report.skipped}
    assert skipped == {
        ("icon.svg", "no text", "SVG drawing without text"),
        ("empty.drawio", "no text", "diagram without labels"),
        ("broken.svg", "no text", "malformed SVG"),
    }
    assert report.failed == []
    assert report.reasons()[".svg"] == {"no text": 2}


def test_a_docs_folder_search_never_returns_drawing_markup(folder):
    """The issue's case: a folder with pages and drawings; a search for drawing markup finds
    nothing, a search for a drawing's words finds the drawing."""
    doc = fr.Document(str(folder))  # the default on_error="raise": skips are not errors
    texts = doc.group("root").texts()
    assert len(texts) == 5  # page, flow.svg, two drawio, xlf
    assert not any("stroke" in t or "fill=" in t for t in texts)
    ret = fr.Retriever(doc, "CoarseChunk", "bm25", topk=3)
    assert ret("fill path stroke") == []
    assert "Upload flow" in ret("browser sends the file")[0].text


def test_entity_expansion_is_refused_not_expanded(tmp_path):
    (tmp_path / "bomb.svg").write_text(BOMB)
    report = ReadReport()
    assert read_file(tmp_path / "bomb.svg", report=report) == []
    assert report.skipped[0].reason == "no text"
