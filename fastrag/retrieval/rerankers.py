"""Rerankers, LazyLLM style: ``Reranker(name, **kwargs)`` picks a registered reranker.

    reranker = Reranker("ModuleReranker", model="embedding-cosine", topk=3)
    hits = reranker(nodes, query="...")        # NodeWithScore list, reranker's scores, best first
    many = reranker.batch(nodes_per_query, queries)

``ModuleReranker`` scores every (query, node text) pair with ``model``:

* a callable ``model(query, texts) -> scores`` (one number per text, higher is better);
* ``"embedding-cosine"``: cosine between the query embedding and each text's embedding,
  from ``embed=`` (any embedder; default: :func:`fastrag.embeddings.default_embedding`);
* ``"cross-encoder:<path>"``: a sentence-transformers ``CrossEncoder`` loaded from a local
  directory (extra ``embed-st``).

Batch reranking embeds all distinct texts of all queries in one call (one ``predict`` call for
a cross-encoder). The returned hits carry the reranker's scores (new ``NodeWithScore``
objects; inputs are not modified). ``output_format="content"`` returns texts, ``"dict"``
dicts, and ``join=True`` (or a separator string) joins the texts into one string.

Custom rerankers register by name, as with LazyLLM's ``register_reranker``::

    @Reranker.register               # or @Reranker.register("MyName"), register(batch=True)
    def MyFilter(node, query, **kwargs):      # per node: return None/False to drop it,
        return "fastrag" in node.text         # True to keep, a number as its new score

    Reranker("MyFilter")(nodes, query="...")
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from fastrag._checks import check_choice, check_int, check_list, check_str, check_str_list
from fastrag.embeddings.base import as_embedder
from fastrag.embeddings.local import default_embedding
from fastrag.errors import ConfigError, missing_extra
from fastrag.retrieval.postprocessors import KeywordFilter as _KeywordFilter
from fastrag.retrieval.postprocessors import as_hits
from fastrag.schema import DocNode, NodeWithScore

__all__ = ["FunctionReranker", "ModuleReranker", "Reranker", "register_reranker"]

OUTPUT_FORMATS = (None, "content", "dict")
_BUILTIN = frozenset({"ModuleReranker", "KeywordFilter"})


def _check_topk(topk: Any) -> int | None:
    return check_int("topk", topk, min=1, none="keep all")


def _check_query(query: Any) -> str:
    return check_str("query", query, empty=True)


def _check_queries(nodes_per_query: Any, queries: Any) -> list[str]:
    check_list("nodes_per_query", nodes_per_query, "hit lists (one per query)")
    check_list("queries", queries, "str (one per hit list)")
    if len(queries) != len(nodes_per_query):
        raise ConfigError(
            f"got {len(queries)} queries for {len(nodes_per_query)} hit lists; give one query "
            f"per hit list"
        )
    return check_str_list("queries", queries)


def _node_dict(h: NodeWithScore) -> dict[str, Any]:
    n = h.node
    return {
        "id": n.id,
        "content": n.text,
        "text": n.text,
        "embedding": n.embedding or {},
        "metadata": n.metadata,
        "group": n.group,
        "score": h.score,
    }


class Reranker:
    """Base of all rerankers and the factory: ``Reranker(name, **kwargs)`` builds the
    reranker registered under ``name`` (default ``"ModuleReranker"``).

    Args common to all: ``output_format`` (None: hits; ``"content"``: texts; ``"dict"``:
    dicts with id, content (LazyLLM's name; also as text), embedding, metadata, group, score)
    and ``join`` (with ``"content"``: True joins the texts with ``""``, a str joins with that
    separator).
    """

    registered_reranker: ClassVar[dict[str, Any]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __new__(cls, name: str = "ModuleReranker", *args: Any, **kwargs: Any) -> Reranker:  # noqa: PYI034
        if cls is not Reranker:
            return super().__new__(cls)
        if not isinstance(name, str) or name not in cls.registered_reranker:
            raise ConfigError(
                f"unknown reranker {name!r}; registered: {sorted(cls.registered_reranker)} "
                f"(register your own with @Reranker.register)"
            )
        item = cls.registered_reranker[name]
        target = item if isinstance(item, type) else FunctionReranker
        return super().__new__(target)

    def __init__(
        self,
        name: str = "ModuleReranker",
        output_format: str | None = None,
        join: bool | str = False,
        **kwargs: Any,
    ) -> None:
        check_choice("output_format", output_format, OUTPUT_FORMATS)
        if join is True:
            join = ""
        if join is not False and not isinstance(join, str):
            raise ConfigError(f"join must be True, False or a separator str, got {join!r}")
        if isinstance(join, str) and output_format != "content":
            raise ConfigError(
                f"join={join!r} needs output_format='content' (only texts can be joined), "
                f"got output_format={output_format!r}"
            )
        self.name = name
        self.output_format = output_format
        self.join = join
        self.kwargs = kwargs

    # -- to implement ------------------------------------------------------------------------
    def forward(self, hits: list[NodeWithScore], query: str) -> list[NodeWithScore]:
        """Rerank one query's hits (already ``NodeWithScore``)."""
        raise NotImplementedError

    def forward_batch(
        self, hits_per_query: list[list[NodeWithScore]], queries: list[str]
    ) -> list[list[NodeWithScore]]:
        """Rerank many queries' hits; override to share work across queries."""
        return [self.forward(h, q) for h, q in zip(hits_per_query, queries, strict=True)]

    # -- public ------------------------------------------------------------------------------
    def __call__(self, nodes: Sequence[NodeWithScore | DocNode], query: str = "") -> Any:
        """Rerank ``nodes`` for ``query``; the result follows ``output_format`` / ``join``."""
        query = _check_query(query)
        return self._post_process(self.forward(as_hits(nodes), query))

    def batch(
        self, nodes_per_query: Sequence[Sequence[NodeWithScore | DocNode]], queries: Sequence[str]
    ) -> list[Any]:
        """Rerank many queries at once: ``nodes_per_query[i]`` for ``queries[i]``."""
        queries = _check_queries(nodes_per_query, queries)
        hits = [as_hits(n, f"nodes_per_query[{i}]") for i, n in enumerate(nodes_per_query)]
        return [self._post_process(r) for r in self.forward_batch(hits, queries)]

    def _post_process(self, hits: list[NodeWithScore]) -> Any:
        if self.output_format == "content":
            texts = [h.get_content() for h in hits]
            return self.join.join(texts) if isinstance(self.join, str) else texts
        if self.output_format == "dict":
            return [_node_dict(h) for h in hits]
        return hits

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    # -- registry ----------------------------------------------------------------------------
    @classmethod
    def register(cls, func: Any = None, *, name: str | None = None, batch: bool = False) -> Any:
        """Register a reranker under ``name`` (default: the function's or class's name).

        Usable as ``@Reranker.register``, ``@Reranker.register("Name")`` or
        ``@Reranker.register(batch=True)``. A class must subclass :class:`Reranker`. A
        function gets ``(node, query=..., **kwargs)`` per hit and returns None/False (drop),
        True (keep), a number (its new score; the result is then sorted by score) or a
        node; with ``batch=True`` it gets ``(nodes, query=..., **kwargs)`` and returns the
        new list of nodes, or one score per node.
        """
        if isinstance(func, str):
            name, func = func, None

        def decorator(obj: Any) -> Any:
            reg_name = name or getattr(obj, "__name__", None)
            if not isinstance(reg_name, str) or not reg_name:
                raise ConfigError(f"cannot name reranker {obj!r}; pass name='...'")
            if isinstance(obj, type):
                if not issubclass(obj, Reranker):
                    raise ConfigError(
                        f"a reranker class must subclass fastrag.Reranker, got {obj.__name__}"
                    )
                entry: Any = obj
            elif callable(obj):
                entry = (obj, bool(batch))
            else:
                raise ConfigError(f"can only register a function or class, got {obj!r}")
            with cls._lock:
                old = cls.registered_reranker.get(reg_name)
                if reg_name in _BUILTIN and old is not None and old is not entry:
                    raise ConfigError(
                        f"{reg_name!r} is a built-in reranker; register yours under another name"
                    )
                cls.registered_reranker[reg_name] = entry
            return obj

        return decorator(func) if func is not None else decorator


def register_reranker(func: Any = None, *, name: str | None = None, batch: bool = False) -> Any:
    """Module-level alias of :meth:`Reranker.register` (LazyLLM's ``register_reranker``)."""
    return Reranker.register(func, name=name, batch=batch)


def _sorted_topk(
    hits: list[NodeWithScore], scores: np.ndarray, topk: int | None
) -> list[NodeWithScore]:
    order = np.argsort(-scores, kind="stable")
    if topk is not None:
        order = order[:topk]
    return [NodeWithScore(node=hits[i].node, score=float(scores[i])) for i in order.tolist()]


class FunctionReranker(Reranker):
    """A registered function (see :meth:`Reranker.register`)."""

    def __init__(
        self, name: str, output_format: str | None = None, join: bool | str = False, **kwargs: Any
    ) -> None:
        super().__init__(name, output_format, join, **kwargs)
        self.func, self.is_batch = self.registered_reranker[name]

    def forward(self, hits: list[NodeWithScore], query: str) -> list[NodeWithScore]:
        if self.is_batch:
            result = self.func(list(hits), query=query, **self.kwargs)
            if result is None:
                return []
            result = list(result)
            if len(result) == len(hits) and all(
                isinstance(r, (int, float, np.number)) and not isinstance(r, bool) for r in result
            ):
                return self._scored(hits, result)
            return as_hits(result, f"{self.name} result")
        kept: list[NodeWithScore] = []
        scores: list[float] = []
        numeric = False
        for h in hits:
            r = self.func(h, query=query, **self.kwargs)
            if r is None or r is False:
                continue
            if r is True:
                kept.append(h)
                scores.append(h.score)
            elif isinstance(r, (int, float, np.number)):
                numeric = True
                kept.append(h)
                scores.append(float(r))
            elif isinstance(r, NodeWithScore):
                kept.append(r)
                scores.append(r.score)
            elif isinstance(r, DocNode):
                kept.append(NodeWithScore(node=r, score=h.score))
                scores.append(h.score)
            else:
                raise ConfigError(
                    f"reranker {self.name!r} returned {type(r).__name__} for a node; return "
                    f"None/False (drop), True (keep), a number (new score) or a node"
                )
        if not numeric:
            return kept
        return self._scored(kept, scores)

    def _scored(self, hits: list[NodeWithScore], scores: Sequence[Any]) -> list[NodeWithScore]:
        arr = np.array([np.nan if s is None else s for s in scores], dtype=np.float64)
        if not np.isfinite(arr).all():
            i = int(np.argmax(~np.isfinite(arr)))
            raise ConfigError(
                f"reranker {self.name!r} gave node {hits[i].node.id!r} the score "
                f"{scores[i]!r}; scores must be finite numbers"
            )
        return _sorted_topk(hits, arr, None)


class _Scorer:
    """Scores (query, texts) pairs for many queries at once."""

    name = "scorer"

    def score_batch(self, queries: list[str], texts: list[list[str]]) -> list[np.ndarray]:
        raise NotImplementedError


class _CallableScorer(_Scorer):
    def __init__(self, func: Callable[[str, list[str]], Any]) -> None:
        self.func = func
        self.name = getattr(func, "__name__", type(func).__name__)

    def score_batch(self, queries: list[str], texts: list[list[str]]) -> list[np.ndarray]:
        out = []
        for q, ts in zip(queries, texts, strict=True):
            if not ts:
                out.append(np.zeros(0))
                continue
            raw = self.func(q, ts)
            try:
                arr = np.asarray(raw, dtype=np.float64)
            except (TypeError, ValueError):
                arr = None
            if arr is None or arr.shape != (len(ts),):
                shape = None if arr is None else arr.shape
                raise ConfigError(
                    f"reranker model {self.name!r} must return one number per text "
                    f"({len(ts)} texts), got {type(raw).__name__} of shape {shape}"
                )
            if not np.isfinite(arr).all():
                i = int(np.argmax(~np.isfinite(arr)))
                raise ConfigError(
                    f"reranker model {self.name!r} returned a non-finite score {float(arr[i])!r} "
                    f"for text {i}"
                )
            out.append(arr)
        return out


class _EmbeddingCosineScorer(_Scorer):
    """Cosine between query and text embeddings; all distinct texts in one embed call."""

    def __init__(self, embed: Any) -> None:
        if embed is None:
            embed = default_embedding()
        self.embedder = as_embedder(embed)
        self.name = f"embedding-cosine({self.embedder.name})"

    @staticmethod
    def _unit(x: np.ndarray) -> np.ndarray:
        n = np.linalg.norm(x, axis=1, keepdims=True)
        return x / np.where(n > 0, n, 1.0)

    def score_batch(self, queries: list[str], texts: list[list[str]]) -> list[np.ndarray]:
        table: dict[str, int] = {}
        codes = [
            np.fromiter((table.setdefault(t, len(table)) for t in ts), np.int64, len(ts))
            for ts in texts
        ]
        if not table:
            return [np.zeros(0) for _ in texts]
        uniq = list(table)
        live = [i for i, ts in enumerate(texts) if ts]
        p = self._unit(self.embedder.embed(uniq).astype(np.float64))
        qv = self._unit(self.embedder.embed_query([queries[i] for i in live]).astype(np.float64))
        out = [np.zeros(0) for _ in texts]
        for row, i in enumerate(live):
            out[i] = p[codes[i]] @ qv[row]
        return out


class _CrossEncoderScorer(_Scorer):
    def __init__(self, path: str, device: str, batch_size: int) -> None:
        try:
            from sentence_transformers import CrossEncoder
        except ImportError:
            raise missing_extra(
                "sentence-transformers", "embed-st", "the cross-encoder reranker"
            ) from None
        path = os.path.expanduser(path)
        local = os.path.isdir(path)
        if not local and (path.startswith((".", os.sep)) or os.path.exists(path)):
            raise ConfigError(
                f"cross-encoder model path {path!r} is not a directory; pass the folder that "
                f"holds the model's config.json"
            )
        self.model = CrossEncoder(path, device=device, local_files_only=local)
        self.batch_size = batch_size
        self.name = f"cross-encoder:{path}"
        self._lock = threading.Lock()

    def score_batch(self, queries: list[str], texts: list[list[str]]) -> list[np.ndarray]:
        pairs = [(q, t) for q, ts in zip(queries, texts, strict=True) for t in ts]
        if not pairs:
            return [np.zeros(0) for _ in texts]
        with self._lock:
            raw = self.model.predict(
                pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
            )
        flat = np.asarray(raw, dtype=np.float64).reshape(len(pairs), -1)[:, -1]
        bounds = np.cumsum([0] + [len(ts) for ts in texts])
        return [flat[bounds[i] : bounds[i + 1]] for i in range(len(texts))]


class ModuleReranker(Reranker):
    """Rerank with a model scoring (query, text) pairs; keeps the best ``topk``.

    Args:
        model: a callable ``(query, texts) -> scores``, ``fr.OpenAIRerank(base_url, model)``
            (a served ``/v1/rerank`` API; any object with ``score_batch(queries, texts)``),
            ``"embedding-cosine"``, ``"cross-encoder:<local model dir>"`` or a local model
            directory.
        topk: hits to keep (None: all), best first; ties keep the input order.
        embed: the embedder for ``"embedding-cosine"`` (default: the offline default model).
        device, batch_size: for the cross-encoder.
        output_format, join: see :class:`Reranker`.
    """

    def __init__(
        self,
        name: str = "ModuleReranker",
        model: Any = None,
        topk: int | None = 3,
        output_format: str | None = None,
        join: bool | str = False,
        *,
        embed: Any = None,
        device: str = "cpu",
        batch_size: int = 32,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, output_format, join, **kwargs)
        if kwargs:
            raise ConfigError(
                f"unknown argument(s) {sorted(kwargs)} for ModuleReranker; known: model, topk, "
                f"output_format, join, embed, device, batch_size"
            )
        self.topk = _check_topk(topk)
        check_int("batch_size", batch_size, min=1)
        if embed is not None and model != "embedding-cosine":
            raise ConfigError("embed= is only used with model='embedding-cosine'")
        if callable(model):
            self.scorer: _Scorer = _CallableScorer(model)
        elif callable(getattr(model, "score_batch", None)):  # fr.OpenAIRerank or alike
            self.scorer = model
        elif model == "embedding-cosine":
            self.scorer = _EmbeddingCosineScorer(embed)
        elif (
            isinstance(model, str)
            and model.startswith("cross-encoder:")
            and model[len("cross-encoder:") :]
        ):
            self.scorer = _CrossEncoderScorer(model[len("cross-encoder:") :], device, batch_size)
        elif isinstance(model, str) and model and os.path.isdir(os.path.expanduser(model)):
            self.scorer = _CrossEncoderScorer(model, device, batch_size)  # a local model dir
        elif isinstance(model, str) and model:
            raise ConfigError(_unknown_model(model))
        else:
            raise ConfigError(
                f"model must be a callable (query, texts) -> scores, fr.OpenAIRerank(...), "
                f"'embedding-cosine', or 'cross-encoder:<local model dir>', got {model!r}"
            )
        self.model = model

    def __repr__(self) -> str:
        return f"ModuleReranker(model={self.scorer.name!r}, topk={self.topk})"

    def forward(self, hits: list[NodeWithScore], query: str) -> list[NodeWithScore]:
        return self.forward_batch([hits], [query])[0]

    def forward_batch(
        self, hits_per_query: list[list[NodeWithScore]], queries: list[str]
    ) -> list[list[NodeWithScore]]:
        texts = [[h.node.get_content() for h in hits] for hits in hits_per_query]
        scores = self.scorer.score_batch(queries, texts)
        return [
            _sorted_topk(hits, s, self.topk) for hits, s in zip(hits_per_query, scores, strict=True)
        ]


def _unknown_model(model: str) -> str:
    """Why a model string cannot be used, and the ways to point at the model."""
    if os.sep in model or model.startswith(("~", ".")):
        return (
            f"model={model!r}: no directory {os.path.expanduser(model)!r}; give the folder of "
            "a downloaded cross-encoder (with its config.json), e.g. model='/models/"
            "bge-reranker-large' (needs the [embed-st] extra: pip install "
            "'fastrag-engine[embed-st]')"
        )
    return (
        f"model={model!r} is a model name, and fastrag downloads no models: point it at the "
        f"model. A local copy: model='/path/to/{model}' (the folder of a cross-encoder, with "
        "its config.json; needs the [embed-st] extra: pip install 'fastrag-engine[embed-st]'). "
        f"A served one: model=fr.OpenAIRerank(base_url='http://host:port/v1', model={model!r}) "
        "for any OpenAI-compatible /v1/rerank endpoint (vLLM, TEI, Xinference, Jina, ...). Or "
        "model='embedding-cosine' to rerank by the embedder's cosine similarity"
    )


class KeywordFilterReranker(Reranker):
    """LazyLLM's ``Reranker("KeywordFilter", required_keys=[...], exclude_keys=[...])``:
    :class:`fastrag.retrieval.postprocessors.KeywordFilter` under the reranker interface
    (``language`` is accepted for compatibility; matching is by substring)."""

    def __init__(
        self,
        name: str = "KeywordFilter",
        required_keys: Sequence[str] | None = None,
        exclude_keys: Sequence[str] | None = None,
        language: str = "en",
        output_format: str | None = None,
        join: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, output_format, join)
        if kwargs:
            raise ConfigError(
                f"unknown argument(s) {sorted(kwargs)} for KeywordFilter; known: "
                f"required_keys, exclude_keys, language, output_format, join"
            )
        self._filter = _KeywordFilter(required=required_keys, excluded=exclude_keys)

    def forward(self, hits: list[NodeWithScore], query: str) -> list[NodeWithScore]:
        return self._filter(hits)


Reranker.register(ModuleReranker)
Reranker.register(KeywordFilterReranker, name="KeywordFilter")
