"""The transform contract of node groups.

A transform turns one parent node into child nodes. The forms ``create_node_group`` accepts
(LazyLLM's tutorial): a function ``str -> list[str]``; a function ``DocNode -> list[DocNode|str]``
with ``trans_node=True``; a class with ``__call__``; a :class:`NodeTransform` subclass or
instance; a lambda. A transform that knows where each child sits in its parent's text
implements :meth:`NodeTransform.spans`; then children carry ``start``/``end`` offsets such that
``parent.text[start:end] == child.text``.
"""

from __future__ import annotations


class NodeTransform:
    """Base class of node transforms.

    Subclasses override :meth:`transform` (text-level, the common case) or :meth:`spans`
    (text-level with offsets; :meth:`transform` then follows from it). Set ``trans_node = True``
    on the class to receive the parent :class:`DocNode` instead of its text.
    """

    trans_node: bool = False
    #: whether :meth:`batch_spans` also takes a long text as a
    #: :class:`~fastrag.transforms.longtext.BufferText` (read a window at a time from its
    #: stored bytes) instead of a ``str``; a group's long parents then never become one str
    reads_long_texts: bool = False

    def __init__(self, num_workers: int = 0) -> None:
        # LazyLLM's NodeTransform(num_workers=...): groups are built by fastrag's own workers
        self.num_workers = num_workers

    def spans(self, text: str) -> list[tuple[int, int]]:
        """``(start, end)`` of each child in ``text``; only transforms that know offsets."""
        raise NotImplementedError

    def transform(self, node_or_text):
        """Children of one parent: a list of ``str`` (or ``DocNode`` with ``trans_node``)."""
        if type(self).spans is NodeTransform.spans:
            raise NotImplementedError(f"{type(self).__name__} must override transform() or spans()")
        return [node_or_text[s:e] for s, e in self.spans(node_or_text)]

    def __call__(self, node_or_text):
        if isinstance(node_or_text, str) and not type(self).__module__.startswith("fastrag."):
            node_or_text = NodeText(node_or_text)  # a user's transform may treat it as a node
        return self.transform(node_or_text)

    def identity(self) -> str:
        """A string that changes whenever the transform's output may change (for the store)."""
        params = {k: v for k, v in sorted(vars(self).items()) if not k.startswith("_")}
        return f"{type(self).__module__}.{type(self).__qualname__}({params!r})"

    def spec(self) -> dict | None:
        """``{"class", "params"}`` that rebuilds this transform when a store is re-opened
        (fastrag's own transforms), or None when it cannot be recorded."""
        return None

    def batch_spans(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Spans of many texts; override when a batch is cheaper than one call per text."""
        return [self.spans(t) for t in texts]

    def batch_transform(self, nodes_or_texts: list) -> list[list]:
        """Children of every parent of a group at once (one list per parent). Override it
        when one call for all parents pays (e.g. concurrent LLM calls): a group then calls
        it once instead of :meth:`transform` per parent."""
        return [self.transform(x) for x in nodes_or_texts]


def has_batch(transform: object) -> bool:
    return (
        isinstance(transform, NodeTransform)
        and type(transform).batch_transform is not NodeTransform.batch_transform
    )


def has_spans(transform: object) -> bool:
    return isinstance(transform, NodeTransform) and type(transform).spans is not NodeTransform.spans


class NodeText(str):
    """A parent's text as a user's :class:`NodeTransform` receives it: a ``str`` that also
    answers LazyLLM's node methods (``get_text()``, ``get_content()``, ``text``)."""

    __slots__ = ()

    @property
    def text(self) -> str:
        return str(self)

    def get_text(self, *args: object, **kwargs: object) -> str:
        return str(self)

    get_content = get_text
