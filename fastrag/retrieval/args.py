"""The arguments of a :class:`~fastrag.Retriever` and of its calls, checked.

Positional arguments after ``similarity`` in fastrag's or LazyLLM's order; queries (``str``
or :class:`~fastrag.Query`, grouped by their filter); a filter given as a supplier; the hit
columns ``batch_arrow`` can add.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from fastrag.errors import ConfigError

_FASTRAG_ORDER = ("topk", "similarity_cut_off", "index", "filter")
_LAZYLLM_ORDER = ("similarity_cut_off", "index", "topk")


def positional_args(args: tuple, by_name: set[str]) -> dict[str, Any]:
    """Positional arguments after ``similarity``, by name. fastrag's order is (topk,
    similarity_cut_off, index, filter); LazyLLM's is (similarity_cut_off, index, topk), taken
    when the first one is a fraction or ``topk`` is also given by keyword, as in LazyLLM's
    ``Retriever(doc, "CoarseChunk", "bm25_chinese", 0.003, topk=3)``."""
    if not args:
        return {}
    first = args[0]
    lazyllm = "topk" in by_name or (isinstance(first, float) and not first.is_integer())
    order = _LAZYLLM_ORDER if lazyllm else _FASTRAG_ORDER
    if len(args) > len(order):
        raise ConfigError(
            f"Retriever got {len(args) + 3} positional arguments; pass the rest by keyword: "
            "Retriever(doc, group_name, similarity, topk=..., similarity_cut_off=..., "
            "index=..., filter=...)"
        )
    return dict(zip(order, args, strict=False))


#: The :class:`~fastrag.Query` context keys that carry a metadata filter (any case): fastrag's
#: and the values of Spring AI's constants (``QuestionAnswerAdvisor.FILTER_EXPRESSION``,
#: ``VectorStoreDocumentRetriever.FILTER_EXPRESSION``; here ``fr.RAGPipeline.FILTER_EXPRESSION``
#: and ``fr.Retriever.FILTER_EXPRESSION``).
FILTER_KEYS = (
    "filter",
    "filter_expression",
    "qa_filter_expression",
    "vector_store_filter_expression",
)


def context_filter(context: Mapping[str, Any], default: Any = None) -> Any:
    """The filter a query's ``context`` carries under one of :data:`FILTER_KEYS`, else
    ``default``. A key that names a filter but is none of them, or two keys with different
    filters, raise ConfigError (a filter is never dropped without a word)."""
    found: dict[str, Any] = {}
    for key, value in context.items():
        low = key.lower() if isinstance(key, str) else ""
        if low in FILTER_KEYS:
            found[key] = value
        elif "filter" in low:
            raise ConfigError(
                f"Query context key {key!r} is not a filter key, so its filter would be "
                f"ignored; put the filter under one of {list(FILTER_KEYS)} (Spring AI's "
                "FILTER_EXPRESSION: fr.RAGPipeline.FILTER_EXPRESSION or "
                "fr.Retriever.FILTER_EXPRESSION)"
            )
    if not found:
        return default
    values = list(found.values())
    if any(v is not values[0] and v != values[0] for v in values[1:]):
        raise ConfigError(f"Query context has two different filters {found!r}; give one filter key")
    return values[0]


def group_by_filter(queries: Sequence[Any], filter: Any) -> list[tuple[Any, list[int]]] | None:
    """``(filter, query indexes)`` groups when some queries are :class:`~fastrag.Query`
    objects (the filter of their context, see :func:`context_filter`, else ``filter``); None when
    all are str."""
    if isinstance(queries, (str, bytes)) or not any(is_query(q) for q in queries):
        return None
    groups: list[tuple[Any, list[int]]] = []
    for i, q in enumerate(queries):
        if is_query(q):
            flt = context_filter(q.context, filter)
        elif isinstance(q, str):
            flt = filter
        else:
            raise ConfigError(f"query {i} is a {type(q).__name__}; pass str or fastrag.Query")
        for g_flt, idx in groups:
            if g_flt is flt or g_flt == flt:
                idx.append(i)
                break
        else:
            groups.append((flt, [i]))
    return groups


def is_query(q: Any) -> bool:
    """A :class:`~fastrag.Query` or the like: a ``text`` str and a ``context`` mapping."""
    return (
        not isinstance(q, str)
        and isinstance(getattr(q, "text", None), str)
        and isinstance(getattr(q, "context", None), Mapping)
    )


def takes_no_arguments(fn: Any) -> bool:
    """Whether ``fn`` can be called with no arguments (a filter given as a supplier)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return not any(
        p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in params
    )


def check_queries(queries: Any) -> None:
    """ConfigError unless ``queries`` is a list (sequence) of strings."""
    if isinstance(queries, str) or not isinstance(queries, Sequence):
        raise ConfigError("queries must be a list of strings; for one query call ret(query)")
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise ConfigError(f"query {i} is {type(q).__name__}, expected str")


HIT_COLUMNS: tuple[str, ...] = ("text", "metadata")
"""Columns :meth:`Retriever.batch_arrow` adds on request."""


def check_columns(columns: Any) -> tuple[str, ...]:
    """``columns`` of :meth:`Retriever.batch_arrow`, checked against :data:`HIT_COLUMNS`."""
    if isinstance(columns, str) or not isinstance(columns, Sequence):
        raise ConfigError(
            f"columns must be a list of column names out of {list(HIT_COLUMNS)}, got {columns!r}"
        )
    bad = [c for c in columns if c not in HIT_COLUMNS]
    if bad:
        raise ConfigError(f"unknown hit column(s) {bad}; batch_arrow can add {list(HIT_COLUMNS)}")
    return tuple(columns)
