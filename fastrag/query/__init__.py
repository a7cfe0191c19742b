"""The query layer: ``Query``, query transformers, expanders, the multi-step strategy and the
contextual augmenter (Spring AI's modular RAG and LazyLLM's tutorial strategies), batch-first.
"""

from fastrag.llms.usage import Usage
from fastrag.query.augmenter import ContextualQueryAugmenter
from fastrag.query.base import Query, QueryComponent
from fastrag.query.expanders import MultiQueryExpander, QueryExpander, SubQuestionExpander
from fastrag.query.multistep import MultiStepQuery
from fastrag.query.prompts import QUERY_PROMPTS
from fastrag.query.transformers import (
    CompressionQueryTransformer,
    QueryTransformer,
    RewriteQueryTransformer,
    TranslationQueryTransformer,
)

__all__ = [
    "QUERY_PROMPTS",
    "CompressionQueryTransformer",
    "ContextualQueryAugmenter",
    "MultiQueryExpander",
    "MultiStepQuery",
    "Query",
    "QueryComponent",
    "QueryExpander",
    "QueryTransformer",
    "RewriteQueryTransformer",
    "SubQuestionExpander",
    "TranslationQueryTransformer",
    "Usage",
]
