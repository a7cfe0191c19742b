"""What the commands share: the usage error, opening a store and choosing a group (a hit is
shown by ``fastrag.retrieval.present``)."""

from __future__ import annotations

import sys
from pathlib import Path

from fastrag.documents.document import Document
from fastrag.documents.store import MANIFEST
from fastrag.errors import FastragError
from fastrag.retrieval.retriever import Retriever

__all__ = [
    "UsageError",
    "is_stored",
    "make_retriever",
    "open_store",
    "pick_group",
    "require_store",
]


class UsageError(FastragError):
    """A command-line mistake: printed as one line, exit status 2."""


def require_store(path: str | Path) -> Path:
    """``path`` as a Path, when it is a store (else a usage error saying how to make one)."""
    folder = Path(path)
    if not (folder / MANIFEST).is_file():
        raise UsageError(
            f"{path} is not a fastrag store (no {MANIFEST}); create one with "
            f"`fastrag ingest FILES --store {path}`"
        )
    return folder


def open_store(path: str) -> Document:
    """The Document of a store (its sources and groups), read-only: reading never changes a
    store (an index `fastrag ingest` did not build is built in memory)."""
    require_store(path)
    return Document(store=path, mode="r", show_progress=True)


def is_stored(doc: Document, name: str) -> bool:
    """Whether group ``name`` is in ``doc``'s store."""
    return doc.store is not None and name in doc.store.manifest["groups"]


def pick_group(doc: Document, name: str | None, quiet: bool = False) -> str:
    """``name``, or the last group the store holds (``root`` when it holds none)."""
    if name is not None:
        doc.check_group(name)
        return name
    built = [n for n in doc.group_names[1:] if is_stored(doc, n)]
    if not built:
        return "root"
    if len(built) > 1 and not quiet:
        print(
            f"searching group {built[-1]!r} (also in the store: "
            f"{', '.join(built[:-1])}; choose with --group)",
            file=sys.stderr,
        )
    return built[-1]


def make_retriever(
    doc: Document,
    group: str | None,
    similarity: str | None,
    topk: int,
    filter: str | None,
) -> Retriever:
    """The retriever of the query flags (``--group``, ``--similarity``, ``--filter``)."""
    return Retriever(doc, pick_group(doc, group), similarity or "bm25", topk=topk, filter=filter)
