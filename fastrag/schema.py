"""Nodes, scored nodes and the Arrow schema of a node group.

A node group is a ``pyarrow.Table`` with the columns of :data:`GROUP_SCHEMA` (plus one
``fixed_size_list<float32>`` column per embedding key once embedded, named ``_emb_<key>``).
``DocNode`` is either *free-standing* (text and metadata held in the object) or a light *view*
of one row of a group table: a view holds the group and the row number and reads columns on
access, so iterating a group never copies the table.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.documents.group import NodeGroup

ROOT_GROUP = "root"
#: Metadata flag of a QA-pair node (``LLMParser(task_type="qa")``; the answer is ``"answer"``)
QA_PAIR_KEY = "_qa_pair"
EMBEDDING_PREFIX = "_emb_"

GROUP_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("parent_id", pa.string()),  # null in the root group
        pa.field("text", pa.large_string(), nullable=False),
        pa.field("start", pa.int64()),  # offsets into the parent's text, null when unknown
        pa.field("end", pa.int64()),
        # JSON object, sorted keys: a root node's document metadata; any other node's own
        # metadata (what it adds to or changes in its document's), usually "{}"
        pa.field("metadata", pa.string(), nullable=False),
    ]
)


def node_id(*parts: object) -> str:
    """Deterministic 32-hex-digit id from its parts (same input, same id)."""
    key = "\x1f".join(map(str, parts)).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(key, digest_size=16).hexdigest()


def dump_metadata(metadata: Mapping[str, Any] | None) -> str:
    return json.dumps(dict(metadata or {}), ensure_ascii=False, sort_keys=True, default=str)


class DocNode:
    """One node: ``id``, ``text``, ``metadata`` and, for nodes of a Document, lineage.

    ``DocNode(text=..., metadata=None, id=None)`` makes a free-standing node (valid input to
    joiners, rerankers and synthesizers); nodes read from a group are views of its table.
    """

    __slots__ = ("_embedding", "_global", "_group", "_id", "_metadata", "_row", "_text")

    def __init__(
        self,
        text: str = "",
        metadata: Mapping[str, Any] | None = None,
        id: str | None = None,
        embedding: Mapping[str, Any] | None = None,
        *,
        content: str | None = None,
        global_metadata: Mapping[str, Any] | None = None,
    ) -> None:
        if content is not None:  # LazyLLM's name for the text
            if text:
                raise TypeError("DocNode got both text and content; pass one of them")
            text = content
        if not isinstance(text, str):
            raise TypeError(f"DocNode text must be str, got {type(text).__name__}")
        self._global = dict(global_metadata) if global_metadata else {}
        self._text = text
        self._metadata = dict(metadata) if metadata else {}
        self._id = id if id is not None else node_id("free", text)
        self._group: NodeGroup | None = None
        self._row = -1
        self._embedding = dict(embedding) if embedding else None

    @classmethod
    def from_row(cls, group: NodeGroup, row: int) -> DocNode:
        """A light view of row ``row`` of ``group``'s table (columns are read on access)."""
        node = cls.__new__(cls)
        node._group = group
        node._row = row
        node._id = None
        node._text = None
        node._metadata = None
        node._embedding = None
        node._global = None
        return node

    # -- columns -----------------------------------------------------------------------------
    def _col(self, name: str) -> Any:
        table, row = self._group.row_table(self._row)
        return table.column(name)[row].as_py()

    @property
    def id(self) -> str:
        if self._id is None:
            self._id = self._col("id")
        return self._id

    uid = id

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = self._col("text")
        return self._text

    @property
    def metadata(self) -> dict[str, Any]:
        """The node's metadata: its document's, updated by what the node itself carries."""
        if self._metadata is None:
            own = json.loads(self._col("metadata"))
            g = self._group
            if g.parent_name is None:
                self._metadata = own
            else:
                self._metadata = {**g.document.group(ROOT_GROUP).doc_metadata(self.doc_id), **own}
        return self._metadata

    @property
    def group(self) -> str | None:
        return self._group.name if self._group is not None else None

    @property
    def doc_id(self) -> str | None:
        return self._col("doc_id") if self._group is not None else None

    @property
    def parent_id(self) -> str | None:
        return self._col("parent_id") if self._group is not None else None

    @property
    def start(self) -> int | None:
        return self._col("start") if self._group is not None else None

    @property
    def end(self) -> int | None:
        return self._col("end") if self._group is not None else None

    @property
    def doc_path(self) -> str | None:
        root = self.root_node
        meta = root.metadata if root is not None else self.metadata
        return meta.get("abs_path") or meta.get("file_path")

    @property
    def embedding(self) -> dict[str, list[float]] | None:
        if self._group is not None and self._embedding is None:
            names = self._group.row_table(self._row)[0].column_names
            cols = [c for c in names if c.startswith(EMBEDDING_PREFIX)]
            if cols:
                self._embedding = {c[len(EMBEDDING_PREFIX) :]: self._col(c) for c in cols}
        return self._embedding

    # -- lineage -----------------------------------------------------------------------------
    @property
    def parent(self) -> DocNode | None:
        if self._group is None or self._group.parent_name is None:
            return None
        return self._group.document.group(self._group.parent_name).node_by_id(self.parent_id)

    @property
    def children(self) -> Mapping[str, list[DocNode]]:
        """``node.children[group]``: this node's nodes in a direct child group."""
        if self._group is None:
            return {}
        return _Children(self)

    @property
    def root_node(self) -> DocNode | None:
        if self._group is None:
            return None
        if self._group.parent_name is None:
            return self
        return self._group.document.group(ROOT_GROUP).node_by_id(self.doc_id)

    def get_text(self) -> str:
        return self.text

    @property
    def global_metadata(self) -> dict[str, Any]:
        """The metadata its Document gives every node (``Document(global_metadata=...)``)."""
        if self._global is None:
            self._global = dict(getattr(self._group.document, "global_metadata", None) or {})
        return dict(self._global)

    def get_content(self, metadata_mode: str | None = None) -> str:
        """What a prompt shows of the node: the text; with ``metadata_mode="all"`` the metadata
        lines first (LlamaIndex). A QA-pair node (``LLMParser(task_type="qa")``: the text is
        the question, ``metadata["answer"]`` the answer) shows both, as LazyLLM's QA nodes do:
        ``"query:\n<question>\nanswer\n<answer>"``; ``metadata_mode="none"``: the question."""
        if metadata_mode is None:
            meta = self.metadata
            if meta.get(QA_PAIR_KEY) and isinstance(meta.get("answer"), str):
                return f"query:\n{self.text}\nanswer\n{meta['answer']}"
            return self.text
        if metadata_mode in ("none", "NONE"):
            return self.text
        meta = "\n".join(f"{k}: {v}" for k, v in self.metadata.items())
        return f"{meta}\n\n{self.text}" if meta else self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DocNode) and (self.group, self.id) == (other.group, other.id)

    def __hash__(self) -> int:
        return hash((self.group, self.id))

    def __repr__(self) -> str:
        text = self.text
        short = text if len(text) <= 40 else text[:37] + "..."
        return f"DocNode(id={self.id!r}, group={self.group!r}, text={short!r})"


class _Children(Mapping):
    __slots__ = ("_node",)

    def __init__(self, node: DocNode) -> None:
        self._node = node

    def _names(self) -> list[str]:
        g = self._node._group
        return g.document.child_group_names(g.name)

    def __getitem__(self, name: str) -> list[DocNode]:
        g = self._node._group
        if name not in self._names():
            raise KeyError(
                f"group {name!r} is not a direct child of {g.name!r}; children: {self._names()}"
            )
        return g.document.group(name).nodes_with_parents([self._node.id])

    def __iter__(self):
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


@dataclass(eq=False)
class NodeWithScore:
    """A node and its score (higher is better).

    Two are equal, and hash alike, when they hold the same node (same group and id) whatever
    their scores, as LazyLLM's nodes compare by id: ``set().update(hits_a, hits_b)`` keeps a
    node found by two retrievers once. Compare ``(h.id, h.score)`` to tell scores apart.
    """

    node: DocNode
    score: float | None = None

    @property
    def id(self) -> str:
        return self.node.id

    @property
    def text(self) -> str:
        return self.node.text

    @property
    def metadata(self) -> dict[str, Any]:
        return self.node.metadata

    def get_content(self, metadata_mode: str | None = None) -> str:
        return self.node.get_content(metadata_mode)

    def get_text(self) -> str:
        return self.node.text

    # LazyLLM code walks lineage on the hit itself (small-to-big: ``hit.parent``).
    @property
    def parent(self) -> DocNode | None:
        return self.node.parent

    @property
    def children(self) -> Mapping[str, list[DocNode]]:
        return self.node.children

    @property
    def root_node(self) -> DocNode | None:
        return self.node.root_node

    @property
    def group(self) -> str | None:
        return self.node.group

    @property
    def doc_id(self) -> str | None:
        return self.node.doc_id

    @property
    def parent_id(self) -> str | None:
        return self.node.parent_id

    @property
    def doc_path(self) -> str | None:
        return self.node.doc_path

    @property
    def embedding(self) -> dict[str, list[float]] | None:
        return self.node.embedding

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NodeWithScore):
            return NotImplemented
        return self.node == other.node

    def __hash__(self) -> int:
        return hash(self.node)

    def __repr__(self) -> str:
        return f"NodeWithScore(score={self.score!r}, node={self.node!r})"
