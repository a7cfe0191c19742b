"""One record shape for a retrieved hit, wherever a user sees it: ``fastrag search`` / ``ask``
(hits files and tables), the server's chat sources and the MCP tools.

A record is ``id``, ``doc_id``, ``score`` (higher is better), ``path`` (the source file under
the ingested folder, else its file name), ``page`` and ``snippet``, plus, where asked for,
``text``, ``metadata`` (the node's metadata without ``abs_path``, and without ``file_path``
where that is absolute, as in stores written before issue 42: a server keeps its own absolute
paths to itself) and ``uri`` (the MCP resource of the whole document).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["SNIPPET_CHARS", "hit_label", "hit_path", "hit_record", "snippet"]

SNIPPET_CHARS = 240


def snippet(text: str, width: int = SNIPPET_CHARS) -> str:
    """``text`` on one line, cut to ``width`` characters (an ellipsis marks the cut)."""
    if width < 1:
        raise ValueError(f"snippet width must be >= 1, got {width}")
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def hit_path(hit: Any, source_path: Callable[[str], str]) -> str | None:
    """The hit's source file as users know it: ``file_path`` when it is relative (the path
    under the ingested folder, as readers set it), ``source_path(file_path)`` when it is
    absolute (e.g. ``Document.source_path``), else the file name, else None (text added
    without a file)."""
    meta = hit.metadata or {}
    file_path = meta.get("file_path")
    if isinstance(file_path, str) and file_path:
        return source_path(file_path) if os.path.isabs(file_path) else file_path
    name = meta.get("file_name")
    return name if isinstance(name, str) and name else None


def hit_record(
    hit: Any,
    source_path: Callable[[str], str],
    *,
    snippet_chars: int = SNIPPET_CHARS,
    text: bool = False,
    metadata: bool = False,
    uri: bool = False,
) -> dict[str, Any]:
    """The record of ``hit`` (a :class:`~fastrag.schema.NodeWithScore`-like object with ``id``,
    ``doc_id``, ``score``, ``text`` and ``metadata``); ``text``, ``metadata`` and ``uri`` add
    those fields."""
    meta = dict(hit.metadata or {})
    doc_id = getattr(hit, "doc_id", None)
    record: dict[str, Any] = {
        "id": hit.id,
        "doc_id": doc_id,
        "score": None if hit.score is None else float(hit.score),
        "path": hit_path(hit, source_path),
        "page": meta.get("page_label"),
        "snippet": snippet(hit.text, snippet_chars),
    }
    if text:
        record["text"] = hit.text
    if metadata:
        meta.pop("abs_path", None)
        if isinstance(meta.get("file_path"), str) and os.path.isabs(meta["file_path"]):
            meta.pop("file_path")
        record["metadata"] = meta
    if uri:
        record["uri"] = f"fastrag://doc/{doc_id}" if doc_id is not None else None
    return record


def hit_label(record: dict[str, Any]) -> str:
    """A record's source for a table: ``path`` (or ``doc_id``, or ``id``) and ``p.page``."""
    name = record.get("path") or record.get("doc_id") or record.get("id")
    page = record.get("page")
    return f"{name} p.{page}" if page is not None else str(name)
