"""The similarity registry: built-in BM25 and dense similarities plus user-registered ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastrag._checks import check_choice
from fastrag.errors import ConfigError


@dataclass(frozen=True)
class Similarity:
    """How a Retriever scores: ``kind`` is "bm25", "dense", "hybrid" or "custom"; ``mode`` is "text"
    (the function sees query strings and node texts) or "embedding" (vectors)."""

    name: str
    mode: str
    kind: str  # "bm25", "dense", "sparse", "hybrid" (BM25 + dense, fused) or "custom"
    fn: Callable | None = None
    batch: bool = True
    analyzer: str | None = None  # bm25: the analyzer's registry name
    metric: str | None = None  # dense: "cosine" | "dot"


_REGISTRY: dict[str, Similarity] = {
    "bm25": Similarity("bm25", "text", "bm25", analyzer="bm25"),
    "bm25_english": Similarity("bm25_english", "text", "bm25", analyzer="bm25_english"),
    "bm25_chinese": Similarity("bm25_chinese", "text", "bm25", analyzer="bm25_chinese"),
    # LazyLLM's spelling of bm25_chinese
    "chinese_bm25": Similarity("chinese_bm25", "text", "bm25", analyzer="bm25_chinese"),
    "bm25_cjk": Similarity("bm25_cjk", "text", "bm25", analyzer="bm25_cjk"),
    "hybrid": Similarity("hybrid", "text", "hybrid", analyzer="bm25", metric="cosine"),
    "sparse": Similarity("sparse", "embedding", "sparse"),
    "cosine": Similarity("cosine", "embedding", "dense", metric="cosine"),
    "dot": Similarity("dot", "embedding", "dense", metric="dot"),
}

_BUILTIN = frozenset(_REGISTRY)


def register_similarity(
    func: Callable | None = None,
    *,
    name: str | None = None,
    mode: str = "text",
    batch: bool = True,
):
    """Register a scorer under ``name`` (default: the function's name); usable as a decorator.

    ``mode="text"``: ``fn(query: str, texts: list[str], **kw) -> list[float]`` with
    ``batch=True``, or ``fn(query: str, text: str, **kw) -> float`` with ``batch=False``.
    ``mode="embedding"``: ``fn(query_vec, node_vecs (n, dim), **kw) -> scores (n,)`` with
    ``batch=True``, or ``fn(query_vec, node_vec) -> float``. Higher scores are better.
    """
    check_choice("mode", mode, ("text", "embedding"))

    def decorator(fn: Callable) -> Callable:
        if not callable(fn):
            raise ConfigError(f"similarity must be callable, got {type(fn).__name__}")
        key = name or fn.__name__
        if key in _BUILTIN:
            raise ConfigError(f"{key!r} is a built-in similarity; register under another name")
        _REGISTRY[key] = Similarity(key, mode, "custom", fn=fn, batch=batch)
        return fn

    return decorator(func) if func is not None else decorator


def get_similarity(name: str) -> Similarity:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"unknown similarity {name!r}; known: {sorted(_REGISTRY)}; register your own with "
            "fastrag.register_similarity"
        ) from None


def known_similarities() -> list[str]:
    return sorted(_REGISTRY)
