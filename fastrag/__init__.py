"""fastrag: throughput-first retrieval-augmented generation.

Public names are imported lazily (PEP 562), so ``import fastrag`` stays cheap and compiles
nothing; ``fastrag.X`` loads X's module on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # data model
    "DocNode": "fastrag.schema",
    "NodeWithScore": "fastrag.schema",
    "FastragError": "fastrag.errors",
    "ConfigError": "fastrag.errors",
    "ReaderError": "fastrag.errors",
    "StoreError": "fastrag.errors",
    "MissingExtraError": "fastrag.errors",
    # documents and transforms
    "Document": "fastrag.documents.document",
    "NodeGroup": "fastrag.documents.group",
    "Store": "fastrag.documents.store",
    "register_reader": "fastrag.documents.readers",
    "NodeTransform": "fastrag.transforms.base",
    "SentenceSplitter": "fastrag.transforms.sentence",
    "LineSplitter": "fastrag.transforms.simple",
    "ReadReport": "fastrag.documents.readers",
    "ParagraphSplitter": "fastrag.transforms.simple",
    "TokenTextSplitter": "fastrag.transforms.sentence",
    "LLMParser": "fastrag.transforms.llm_parser",
    "read_file": "fastrag.documents.readers",
    # analysis
    "count_tokens": "fastrag.analysis.tokens",
    "get_analyzer": "fastrag.analysis",
    "register_analyzer": "fastrag.analysis",
    # indexes
    "BM25Index": "fastrag.indexes.bm25",
    "FlatIndex": "fastrag.indexes.flat",
    "HNSWIndex": "fastrag.indexes.hnsw",
    "FilterExpressionBuilder": "fastrag.indexes.filters",
    "FilterSyntaxError": "fastrag.indexes.filters",
    "parse_filter": "fastrag.indexes.filters",
    "filter_mask": "fastrag.indexes.filters",
    # retrieval
    "Retriever": "fastrag.retrieval.retriever",
    "register_similarity": "fastrag.retrieval.similarity",
    "ConcatenationDocumentJoiner": "fastrag.retrieval.joiners",
    "ReciprocalRankFusionJoiner": "fastrag.retrieval.joiners",
    "WeightedScoreJoiner": "fastrag.retrieval.joiners",
    "Reranker": "fastrag.retrieval.rerankers",
    "ModuleReranker": "fastrag.retrieval.rerankers",
    "register_reranker": "fastrag.retrieval.rerankers",
    "OpenAIRerank": "fastrag.retrieval.online",
    "SimilarityCutoff": "fastrag.retrieval.postprocessors",
    "KeywordFilter": "fastrag.retrieval.postprocessors",
    "Deduplicate": "fastrag.retrieval.postprocessors",
    "LongContextReorder": "fastrag.retrieval.postprocessors",
    "TargetGroup": "fastrag.retrieval.postprocessors",
    # embeddings
    "Embedder": "fastrag.embeddings",
    "BaseEmbedder": "fastrag.embeddings",
    "CallableEmbedding": "fastrag.embeddings",
    "OpenAIEmbedding": "fastrag.embeddings",
    "SentenceTransformerEmbedding": "fastrag.embeddings",
    "E5SmallEmbedding": "fastrag.embeddings",
    "MiniLMEmbedding": "fastrag.embeddings",
    "default_embedding": "fastrag.embeddings",
    # LLMs
    "LLM": "fastrag.llms",
    "BaseLLM": "fastrag.llms",
    "Completion": "fastrag.llms",
    "LLMError": "fastrag.llms",
    "OpenAILike": "fastrag.llms",
    "MockLLM": "fastrag.llms",
    "FunctionLLM": "fastrag.llms",
    # synthesis
    "PromptTemplate": "fastrag.synth",
    "PromptHelper": "fastrag.synth",
    "Response": "fastrag.synth",
    "ResponseMode": "fastrag.synth",
    "BaseSynthesizer": "fastrag.synth",
    "get_response_synthesizer": "fastrag.synth",
    "Refine": "fastrag.synth",
    "CompactAndRefine": "fastrag.synth",
    "TreeSummarize": "fastrag.synth",
    "SimpleSummarize": "fastrag.synth",
    "Accumulate": "fastrag.synth",
    "CompactAndAccumulate": "fastrag.synth",
    "Generation": "fastrag.synth",
    "NoText": "fastrag.synth",
    "ContextOnly": "fastrag.synth",
    # query layer and pipeline
    "Query": "fastrag.query",
    "QueryTransformer": "fastrag.query",
    "RewriteQueryTransformer": "fastrag.query",
    "CompressionQueryTransformer": "fastrag.query",
    "TranslationQueryTransformer": "fastrag.query",
    "QueryExpander": "fastrag.query",
    "MultiQueryExpander": "fastrag.query",
    "SubQuestionExpander": "fastrag.query",
    "MultiStepQuery": "fastrag.query",
    "ContextualQueryAugmenter": "fastrag.query",
    "RAGPipeline": "fastrag.pipeline",
    "ChatEngine": "fastrag.chat",
    "ChatMemory": "fastrag.chat",
    "MessageWindowChatMemory": "fastrag.chat",
    "TokenWindowChatMemory": "fastrag.chat",
    "Settings": "fastrag.settings",
    # datasets
    "load_cmrc2018_dev": "fastrag.datasets",
    # serving (the [serve] extra; FastAPI loads on the first call)
    "create_app": "fastrag.serve",
}
_SUBMODULES = (
    "eval",
    "datasets",
    "llms",
    "embeddings",
    "synth",
    "analysis",
    "indexes",
    "retrieval",
    "documents",
    "transforms",
    "query",
    "serve",
    "ray",
)

# ``fastrag.serve`` is a callable module: ``fr.serve(doc)`` runs the server
__all__ = sorted([*_EXPORTS, "serve"]) + ["__version__"]


# other projects' names for ours (importable, not listed in __all__)
_ALIASES: dict[str, str] = {"Node": "DocNode"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"fastrag.{name}")
    if name in _ALIASES:
        return __getattr__(_ALIASES[name])
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fastrag' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
