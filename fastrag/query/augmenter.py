"""``ContextualQueryAugmenter``: puts the retrieved documents into the query (Spring AI).

With documents, the query becomes the prompt template filled with ``{context}`` (the formatted
documents) and ``{query}``. With none, ``allow_empty_context=False`` (the default) turns the
query into an instruction to the model not to answer and to say so; ``True`` passes the query
through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastrag._checks import check_bool
from fastrag.errors import ConfigError
from fastrag.query.base import Query, as_query, query_language
from fastrag.query.prompts import check_template, query_prompt
from fastrag.retrieval.postprocessors import as_hits
from fastrag.schema import DocNode, NodeWithScore
from fastrag.synth.prompts import validate_language

__all__ = ["ContextualQueryAugmenter", "default_document_formatter"]


def _docs(documents: Any) -> list[NodeWithScore]:
    if isinstance(documents, (str, bytes)):
        raise ConfigError("documents must be a list of nodes (or str), not a single str")
    items = [DocNode(d) if isinstance(d, str) else d for d in documents]
    return as_hits(items, "documents")


def default_document_formatter(documents: Sequence[NodeWithScore]) -> str:
    """Each document's content, one per line (Spring AI's default)."""
    return "\n".join(d.get_content() for d in documents)


class ContextualQueryAugmenter:
    """Augments a query with the content of retrieved documents.

    Args:
        prompt_template: a template with ``{query}`` and ``{context}`` (Spring AI's ``<query>``
            and ``<context>``).
        empty_context_prompt_template: the prompt when no document was retrieved and empty
            context is not allowed (may use ``{query}``).
        allow_empty_context: with no documents, pass the query through unchanged.
        document_formatter: ``documents -> str`` (default: contents joined by newlines).
        language: "en", "zh" or "auto" (by the query's script) for the default templates.
    """

    def __init__(
        self,
        prompt_template: Any = None,
        empty_context_prompt_template: Any = None,
        allow_empty_context: bool = False,
        document_formatter: Callable[[list[NodeWithScore]], str] | None = None,
        language: str = "auto",
    ) -> None:
        self.prompt_template = check_template(prompt_template, "augment")
        self.empty_context_prompt_template = check_template(
            empty_context_prompt_template, "augment_empty", "empty_context_prompt_template"
        )
        self.allow_empty_context = check_bool("allow_empty_context", allow_empty_context)
        if document_formatter is not None and not callable(document_formatter):
            raise ConfigError(
                f"document_formatter must be a function documents -> str, got "
                f"{type(document_formatter).__name__}"
            )
        self.document_formatter = document_formatter or default_document_formatter
        self.language = validate_language(language)

    def _template(self, kind: str, query: Query):
        custom = self.prompt_template if kind == "augment" else self.empty_context_prompt_template
        if custom is not None:
            return custom
        return query_prompt(kind, query_language(self.language, query.text))

    def context(self, documents: Sequence[Any]) -> str:
        """The formatted context of ``documents``."""
        text = self.document_formatter(_docs(documents))
        if not isinstance(text, str):
            raise ConfigError(f"document_formatter returned {type(text).__name__}, expected a str")
        return text

    def augment(self, query: Query | str, documents: Sequence[Any]) -> Query:
        """The augmented query (its text is the prompt to send to the model)."""
        q = as_query(query)
        docs = _docs(documents)
        if not docs:
            if self.allow_empty_context:
                return q
            return q.mutate(text=self._template("augment_empty", q).format(query=q.text))
        return q.mutate(
            text=self._template("augment", q).format(query=q.text, context=self.context(docs))
        )

    __call__ = augment

    def batch(
        self, queries: Sequence[Query | str], documents_per_query: Sequence[Sequence[Any]]
    ) -> list[Query]:
        """Augment many queries (one document list per query)."""
        if len(queries) != len(documents_per_query):
            raise ConfigError(
                f"{len(queries)} queries but {len(documents_per_query)} document lists; pass "
                "one list per query"
            )
        return [self.augment(q, d) for q, d in zip(queries, documents_per_query, strict=True)]

    def __repr__(self) -> str:
        return f"ContextualQueryAugmenter(allow_empty_context={self.allow_empty_context})"
