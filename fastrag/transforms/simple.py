"""Splitters by a separator: lines and paragraphs (with offsets)."""

from __future__ import annotations

import re

from fastrag.transforms.base import NodeTransform


class LineSplitter(NodeTransform):
    """One child per line (``\\n``-separated; blank lines are left out)."""

    _SEP = re.compile(r"\n")

    def spans(self, text: str) -> list[tuple[int, int]]:
        out, start = [], 0
        for m in self._SEP.finditer(text):
            out.append((start, m.start()))
            start = m.end()
        out.append((start, len(text)))
        return out

    def spec(self) -> dict:
        return {"class": "LineSplitter", "params": {}}


class ParagraphSplitter(LineSplitter):
    """One child per paragraph (separated by a blank line, which may hold spaces)."""

    _SEP = re.compile(r"\n[ \t\r\f\v]*\n\s*")

    def spec(self) -> dict:
        return {"class": "ParagraphSplitter", "params": {}}
