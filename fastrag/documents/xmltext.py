"""The words of XML-based assets, never their markup.

Documentation folders carry drawings and translation files next to the pages. Read as plain
text their markup (``<path d="M0 0 L10 ...">``, ``fill``, ``stroke``) becomes chunks that match
queries about drawing and crowd out the pages. These readers keep what a person reads:

* ``.svg``: the text of ``<title>``, ``<desc>`` and ``<text>`` (with its ``<tspan>`` /
  ``<textPath>`` children), in document order;
* ``.drawio``: the labels (``value``) of the diagram cells, plain or in draw.io's compressed
  form (base64 of raw deflate of URL-encoded XML, inflated within the file's
  :class:`~fastrag.documents.inflate.InflateBudget`), HTML labels stripped to their words;
* ``.xlf`` / ``.xliff``: the ``<source>`` and ``<target>`` text of each translation unit.

A file with none of that is skipped, with the reason in the read report (:class:`NoText`).
Parsing uses the standard library's expat, which refuses entity expansion bombs.
"""

from __future__ import annotations

import base64
import html
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import unquote
from xml.etree import ElementTree

from fastrag.documents.decoding import BinaryContentError, decode_text
from fastrag.documents.inflate import InflateBudget

__all__ = ["XML_READERS", "NoText", "read_drawio", "read_svg", "read_xliff"]


class NoText(BinaryContentError):
    """An XML asset holds no text a person reads (a drawing without labels)."""


def _local(tag: object) -> str:
    """``{namespace}name`` -> ``name`` (comments and processing instructions: '')."""
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _parse(path: Path, kind: str, data: bytes | None = None) -> ElementTree.Element:
    text, _ = decode_text(path.read_bytes() if data is None else data, path)
    try:
        return ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise NoText(
            f"file {str(path)!r} is not well-formed {kind} ({exc}); it was not read "
            f"as text, so its markup does not become chunks",
            f"malformed {kind}",
        ) from None


def _words(parts: list[str]) -> str:
    lines = [" ".join(p.split()) for p in parts]
    return "\n".join(line for line in lines if line)


def _text_of(el: ElementTree.Element) -> str:
    return "".join(el.itertext())


def read_svg(path: Path) -> list[tuple[str, dict]]:
    """An SVG drawing's title, descriptions and text elements."""
    root = _parse(path, "SVG")
    parts: list[str] = []
    title = ""
    skip: set[int] = set()
    for el in root.iter():
        name = _local(el.tag)
        if id(el) in skip or name not in ("title", "desc", "text"):
            continue
        for sub in el.iter():  # a <text> holds <tspan>s: read once, with their parent
            skip.add(id(sub))
        words = " ".join(_text_of(el).split())
        if words:
            parts.append(words)
            if name == "title" and not title:
                title = words
    if not parts:
        raise NoText(
            f"file {str(path)!r} is an SVG drawing without title, desc or text "
            "elements: nothing a person reads",
            "SVG drawing without text",
        )
    return [(_words(parts), {"title": title} if title else {})]


def _drawio_diagrams(
    root: ElementTree.Element, budget: InflateBudget
) -> Iterator[ElementTree.Element]:
    """The ``mxGraphModel`` of every diagram page, inflating draw.io's packed form within
    ``budget`` (past it: :class:`~fastrag.documents.inflate.InflateLimitError`)."""
    if _local(root.tag) == "mxGraphModel":
        yield root
        return
    page = 0
    for diagram in root.iter():
        if _local(diagram.tag) != "diagram":
            continue
        page += 1
        models = [m for m in diagram if _local(m.tag) == "mxGraphModel"]
        if models:
            yield from models
            continue
        packed = "".join((diagram.text or "").split())
        if not packed:
            continue
        # a page that does not unpack is left out, as one without labels
        try:
            deflated = base64.b64decode(packed, validate=True)
        except ValueError:
            continue
        try:
            raw = budget.inflate(deflated, -15, f"diagram page {page}")
        except zlib.error:
            continue
        del deflated
        try:
            text = raw.decode("utf-8")
            del raw  # the page is held at most twice over: text and its unquoted form
            model = ElementTree.fromstring(unquote(text))
        except (UnicodeDecodeError, ElementTree.ParseError):
            continue
        del text
        yield model


def read_drawio(path: Path) -> list[tuple[str, dict]]:
    """A draw.io diagram's cell labels (every page)."""
    data = path.read_bytes()
    root = _parse(path, "draw.io XML", data)
    parts: list[str] = []
    for model in _drawio_diagrams(root, InflateBudget(path, len(data))):
        for cell in model.iter():
            value = cell.get("value") or cell.get("label") or ""
            if value:  # labels may be HTML: keep the words
                parts.append(html.unescape(re.sub(r"<[^>]*>", " ", value)))
    text = _words(parts)
    if not text:
        raise NoText(
            f"file {str(path)!r} is a draw.io diagram without labels: nothing a person reads",
            "diagram without labels",
        )
    return [(text, {})]


def read_xliff(path: Path) -> list[tuple[str, dict]]:
    """An XLIFF file's source and target text, one line each (1.2 and 2.x)."""
    root = _parse(path, "XLIFF")
    parts = [_text_of(el) for el in root.iter() if _local(el.tag) in ("source", "target")]
    text = _words(parts)
    if not text:
        raise NoText(
            f"file {str(path)!r} is an XLIFF file without source or target text",
            "XLIFF without text",
        )
    langs = {k: root.get(k) for k in ("srcLang", "trgLang") if root.get(k)}
    for el in root.iter():
        if _local(el.tag) == "file":
            for k, attr in (("srcLang", "source-language"), ("trgLang", "target-language")):
                if el.get(attr) and k not in langs:
                    langs[k] = el.get(attr)
    meta = {"source_language": langs["srcLang"]} if "srcLang" in langs else {}
    if "trgLang" in langs:
        meta["target_language"] = langs["trgLang"]
    return [(text, meta)]


XML_READERS: dict[str, Callable[[Path], list[tuple[str, dict]]]] = {
    ".svg": read_svg,
    ".drawio": read_drawio,
    ".xlf": read_xliff,
    ".xliff": read_xliff,
}
"""Readers of XML-based assets by extension (built in: a folder read uses them)."""
