"""fastrag: throughput-first retrieval-augmented generation.

Public names are imported lazily (PEP 562), so ``import fastrag`` stays cheap and compiles
nothing; ``fastrag.X`` loads X's module on first access.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # data model
    "DocNode": "fastrag.schema",
    "NodeWithScore": "fastrag.schema",
    "FastragError": "fastrag.errors",
    "ConfigError": "fastrag.errors",
    # documents and transforms
    "Document": "fastrag.documents.document",
    "register_reader": "fastrag.documents.readers",
    "NodeTransform": "fastrag.transforms.base",
    "SentenceSplitter": "fastrag.transforms.sentence",
    "LineSplitter": "fastrag.transforms.simple",
    "ParagraphSplitter": "fastrag.transforms.simple",
    "LLMParser": "fastrag.transforms.llm_parser",
    # analysis
    "count_tokens": "fastrag.analysis.tokens",
    # indexes
    "FilterExpressionBuilder": "fastrag.indexes.filters",
    # retrieval
    "Retriever": "fastrag.retrieval.retriever",
    "register_similarity": "fastrag.retrieval.similarity",
    "ConcatenationDocumentJoiner": "fastrag.retrieval.joiners",
    "ReciprocalRankFusionJoiner": "fastrag.retrieval.joiners",
    "WeightedScoreJoiner": "fastrag.retrieval.joiners",
    "Reranker": "fastrag.retrieval.rerankers",
    "ModuleReranker": "fastrag.retrieval.rerankers",
    "OpenAIRerank": "fastrag.retrieval.online",
    "SimilarityCutoff": "fastrag.retrieval.postprocessors",
    "Deduplicate": "fastrag.retrieval.postprocessors",
    # embeddings
    "OpenAIEmbedding": "fastrag.embeddings",
    "SentenceTransformerEmbedding": "fastrag.embeddings",
    "MiniLMEmbedding": "fastrag.embeddings",
    "default_embedding": "fastrag.embeddings",
    # LLMs
    "OpenAILike": "fastrag.llms",
    "MockLLM": "fastrag.llms",
    "FunctionLLM": "fastrag.llms",
    # synthesis
    "PromptTemplate": "fastrag.synth",
    "Response": "fastrag.synth",
    "ResponseMode": "fastrag.synth",
    "BaseSynthesizer": "fastrag.synth",
    "get_response_synthesizer": "fastrag.synth",
    "TreeSummarize": "fastrag.synth",
    # query layer and pipeline
    "Query": "fastrag.query",
    "RewriteQueryTransformer": "fastrag.query",
    "CompressionQueryTransformer": "fastrag.query",
    "TranslationQueryTransformer": "fastrag.query",
    "MultiQueryExpander": "fastrag.query",
    "SubQuestionExpander": "fastrag.query",
    "MultiStepQuery": "fastrag.query",
    "ContextualQueryAugmenter": "fastrag.query",
    "RAGPipeline": "fastrag.rag",
    "ChatEngine": "fastrag.chat",
    "MessageWindowChatMemory": "fastrag.chat",
    "Settings": "fastrag.settings",
}
# LazyLLM's dataflow names, importable as ``fastrag.X`` so LazyLLM apps run with
# ``import fastrag as lazyllm`` (not listed in __all__; ``fastrag.pipeline`` is a callable
# module, see _SUBMODULES); their home is fastrag.flow / fastrag.llms / fastrag.serve
_LAZYLLM: dict[str, str] = {
    "parallel": "fastrag.flow.flows",
    "bind": "fastrag.flow.bind",
    "ChatPrompter": "fastrag.llms.prompter",
    "AlpacaPrompter": "fastrag.llms.prompter",
    "OnlineEmbeddingModuleBase": "fastrag.embeddings.online",
    "config": "fastrag.settings",
    "WebModule": "fastrag.serve.webmodule",
}
# names that left the front door: still importable for one release, with a
# DeprecationWarning naming their home
_MOVED: dict[str, str] = {
    "ReaderError": "fastrag.errors",
    "StoreError": "fastrag.errors",
    "MissingExtraError": "fastrag.errors",
    "NodeGroup": "fastrag.documents",
    "Store": "fastrag.documents",
    "ReadReport": "fastrag.documents",
    "TokenTextSplitter": "fastrag.transforms",
    "read_file": "fastrag.documents",
    "get_analyzer": "fastrag.analysis",
    "register_analyzer": "fastrag.analysis",
    "BM25Index": "fastrag.indexes",
    "FlatIndex": "fastrag.indexes",
    "HNSWIndex": "fastrag.indexes",
    "FilterSyntaxError": "fastrag.indexes",
    "parse_filter": "fastrag.indexes",
    "filter_mask": "fastrag.indexes",
    "register_reranker": "fastrag.retrieval",
    "KeywordFilter": "fastrag.retrieval",
    "LongContextReorder": "fastrag.retrieval",
    "TargetGroup": "fastrag.retrieval",
    "Embedder": "fastrag.embeddings",
    "BaseEmbedder": "fastrag.embeddings",
    "CallableEmbedding": "fastrag.embeddings",
    "E5SmallEmbedding": "fastrag.embeddings",
    "LLM": "fastrag.llms",
    "BaseLLM": "fastrag.llms",
    "Completion": "fastrag.llms",
    "LLMError": "fastrag.llms",
    "PromptHelper": "fastrag.synth",
    "Refine": "fastrag.synth",
    "CompactAndRefine": "fastrag.synth",
    "SimpleSummarize": "fastrag.synth",
    "Accumulate": "fastrag.synth",
    "CompactAndAccumulate": "fastrag.synth",
    "Generation": "fastrag.synth",
    "NoText": "fastrag.synth",
    "ContextOnly": "fastrag.synth",
    "QueryTransformer": "fastrag.query",
    "QueryExpander": "fastrag.query",
    "ChatMemory": "fastrag.chat",
    "TokenWindowChatMemory": "fastrag.chat",
    "load_cmrc2018_dev": "fastrag.datasets",
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
    "flow",
    "pipeline",
)

# ``fastrag.serve`` is a callable module: ``fr.serve(doc)`` runs the server (and
# ``fr.pipeline(...)``, another one, builds a dataflow pipeline)
__all__ = sorted([*_EXPORTS, "serve"]) + ["__version__"]


# other projects' names for ours (importable, not listed in __all__)
_ALIASES: dict[str, str] = {"Node": "DocNode"}

# LazyLLM's model classes, which fastrag does not carry over: what to use instead
_LAZYLLM_INSTEAD: dict[str, str] = {
    "OnlineChatModule": "fr.OpenAILike(model, base_url) (or fr.FunctionLLM(fn))",
    "OnlineEmbeddingModule": "fr.OpenAIEmbedding(base_url, model); for type='rerank', "
    "fr.OpenAIRerank(base_url, model)",
    "TrainableModule": "a served model: fr.OpenAILike(model, base_url) for chat, "
    "fr.OpenAIEmbedding(base_url, model) or fr.SentenceTransformerEmbedding(path) for "
    "embeddings, fr.OpenAIRerank(base_url, model) or model='cross-encoder:<dir>' for a reranker",
    "deploy": "a model served elsewhere (vLLM, TEI, ...) through fr.OpenAILike / "
    "fr.OpenAIEmbedding / fr.OpenAIRerank",
}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"fastrag.{name}")
    if name in _ALIASES:
        return __getattr__(_ALIASES[name])
    home = _MOVED.get(name)
    if home is not None:
        warnings.warn(
            f"fastrag.{name} is deprecated and leaves the top level in the next release; "
            f"import it from {home} (from {home} import {name})",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)
    module = _EXPORTS.get(name) or _LAZYLLM.get(name)
    if module is None:
        instead = _LAZYLLM_INSTEAD.get(name)
        if instead is not None:
            raise AttributeError(
                f"fastrag has no {name} (LazyLLM's); use {instead}: see docs/guide/migrating.md"
            )
        raise AttributeError(f"module 'fastrag' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
