"""The similarity registry: each name maps to its search path (a module of
:mod:`fastrag.retrieval.paths`) and that path's options, as data; user-registered scoring
functions and search paths join it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastrag._checks import check_choice
from fastrag.errors import ConfigError
from fastrag.retrieval.paths import (
    BM25Path,
    CustomPath,
    DensePath,
    FusedBM25Path,
    HybridPath,
    SearchPath,
    SparsePath,
)

__all__ = ["Similarity", "get_similarity", "known_similarities", "register_similarity"]


@dataclass(frozen=True)
class Similarity:
    """How a Retriever scores: ``path``, the search path class of its kind; ``mode`` is
    "text" (the path sees query strings and node texts) or "embedding" (vectors)."""

    name: str
    mode: str
    path: type[SearchPath]
    fn: Callable | None = None
    batch: bool = True
    analyzer: str | None = None  # analyzed paths: the analyzer's registry name
    metric: str | None = None  # dense: "cosine" | "dot"

    @property
    def kind(self) -> str:
        """The path's kind: "bm25", "dense", "sparse", "hybrid", "custom" or a registered one."""
        return self.path.kind

    @property
    def embedded(self) -> bool:
        """Whether it scores with the Document's embeddings."""
        return self.path.embedded or self.mode == "embedding"


_REGISTRY: dict[str, Similarity] = {
    "bm25": Similarity("bm25", "text", BM25Path, analyzer="bm25"),
    "bm25_english": Similarity("bm25_english", "text", BM25Path, analyzer="bm25_english"),
    "bm25_chinese": Similarity("bm25_chinese", "text", BM25Path, analyzer="bm25_chinese"),
    # LazyLLM's spelling of bm25_chinese
    "chinese_bm25": Similarity("chinese_bm25", "text", BM25Path, analyzer="bm25_chinese"),
    "bm25_cjk": Similarity("bm25_cjk", "text", BM25Path, analyzer="bm25_cjk"),
    "bm25_fused": Similarity("bm25_fused", "text", FusedBM25Path, analyzer="bm25"),
    "hybrid": Similarity("hybrid", "text", HybridPath, analyzer="bm25", metric="cosine"),
    "sparse": Similarity("sparse", "embedding", SparsePath),
    "cosine": Similarity("cosine", "embedding", DensePath, metric="cosine"),
    "dot": Similarity("dot", "embedding", DensePath, metric="dot"),
}

_BUILTIN = frozenset(_REGISTRY)


def register_similarity(
    func: Callable | None = None,
    *,
    name: str | None = None,
    mode: str = "text",
    batch: bool = True,
    path: type[SearchPath] | None = None,
    **options: Any,
) -> Any:
    """Register a scorer under ``name`` (default: the function's name); usable as a decorator.

    ``mode="text"``: ``fn(query: str, texts: list[str], **kw) -> list[float]`` with
    ``batch=True``, or ``fn(query: str, text: str, **kw) -> float`` with ``batch=False``.
    ``mode="embedding"``: ``fn(query_vec, node_vecs (n, dim), **kw) -> scores (n,)`` with
    ``batch=True``, or ``fn(query_vec, node_vec) -> float``. Higher scores are better.

    ``path``: register a whole search path instead of a function (a
    :class:`~fastrag.retrieval.paths.SearchPath` subclass: a new kind of similarity), under
    ``name``, with ``options`` (``analyzer=``, ``metric=``) as its registry row's.
    """
    check_choice("mode", mode, ("text", "embedding"))
    if path is not None:
        if func is not None or not isinstance(name, str) or not name:
            raise ConfigError(
                "register_similarity(path=...) registers a search path by name: pass name= "
                "and no function"
            )
        if not (isinstance(path, type) and issubclass(path, SearchPath)) or not path.kind:
            raise ConfigError(
                f"path must be a SearchPath subclass with a kind, got {path!r}; see "
                "fastrag.retrieval.paths.SearchPath"
            )
        _add(Similarity(name, mode, path, batch=batch, **options))
        return path
    if options:
        raise ConfigError(f"unknown options {sorted(options)}; they apply with path= only")

    def decorator(fn: Callable) -> Callable:
        if not callable(fn):
            raise ConfigError(f"similarity must be callable, got {type(fn).__name__}")
        _add(Similarity(name or fn.__name__, mode, CustomPath, fn=fn, batch=batch))
        return fn

    return decorator(func) if func is not None else decorator


def _add(sim: Similarity) -> None:
    if sim.name in _BUILTIN:
        raise ConfigError(f"{sim.name!r} is a built-in similarity; register under another name")
    _REGISTRY[sim.name] = sim


def get_similarity(name: str) -> Similarity:
    """The registry row of similarity ``name`` (ConfigError listing the known ones)."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"unknown similarity {name!r}; known: {sorted(_REGISTRY)}; register your own with "
            "fastrag.register_similarity"
        ) from None


def known_similarities() -> list[str]:
    """The registered similarity names, sorted."""
    return sorted(_REGISTRY)
