"""Lineage: the nodes of one group related to nodes of another (ancestors or descendants),
found by joins on ``parent_id`` along the path through the groups' common ancestor."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from fastrag.errors import ConfigError
from fastrag.schema import ROOT_GROUP, DocNode, NodeWithScore

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.documents.document import Document


def finder(
    doc: Document, target: str
) -> Callable[[Iterable[DocNode | NodeWithScore]], list[DocNode]]:
    """``doc.find(target)``: see :meth:`Document.find`."""
    doc.check_group(target)

    def find(nodes: Iterable[DocNode | NodeWithScore]) -> list[DocNode]:
        out: list[DocNode] = []
        seen: set[str] = set()
        for src_group, ids in _by_group(nodes):
            rows = map_ids(doc, src_group, ids, target)
            tgt = doc.group(target)
            for r in rows:
                nid = tgt.ids[r]
                if nid not in seen:
                    seen.add(nid)
                    out.append(DocNode.from_row(tgt, int(r)))
        return out

    return find


def path_to_root(doc: Document, name: str) -> list[str]:
    path = [name]
    while path[-1] != ROOT_GROUP:
        path.append(doc.parent_of(path[-1]))
    return path


def map_ids(doc: Document, src: str, ids: list[str], target: str) -> np.ndarray:
    """Rows in ``target`` related to the nodes ``ids`` of group ``src``, input order."""
    up, down = path_to_root(doc, src), path_to_root(doc, target)
    common = next(g for g in up if g in down)
    # climb from src to the common ancestor: one parent_id lookup per level
    cur = list(ids)
    for name in up[: up.index(common)]:
        g = doc.group(name)
        rows = g.rows_of(cur)
        parents = g.table.column("parent_id").take(pa.array(rows[rows >= 0]))
        cur = parents.to_pylist()
    # descend from the common ancestor to target, keeping input order
    for name in reversed(down[: down.index(common)]):
        g = doc.group(name)
        rows = g.child_rows(list(dict.fromkeys(cur)))
        cur = [g.ids[r] for r in rows]
    tgt = doc.group(target)
    rows = tgt.rows_of(list(dict.fromkeys(cur)))
    return rows[rows >= 0]


def _by_group(nodes) -> list[tuple[str, list[str]]]:
    """Consecutive runs of input nodes by group, so mapping keeps the input order."""
    runs: list[tuple[str, list[str]]] = []
    for n in nodes:
        node = n.node if isinstance(n, NodeWithScore) else n
        if not isinstance(node, DocNode) or node.group is None:
            raise ConfigError(
                "find() takes nodes of this Document (DocNode or NodeWithScore); "
                f"got {type(n).__name__} without a group"
            )
        if runs and runs[-1][0] == node.group:
            runs[-1][1].append(node.id)
        else:
            runs.append((node.group, [node.id]))
    return runs
