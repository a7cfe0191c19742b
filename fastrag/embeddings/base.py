"""The embedder interface and the checks every embedder's output goes through.

An embedder turns texts into a ``float32`` matrix of shape ``(n, dim)``. Models that embed
queries and documents differently (e5: ``"query: "`` / ``"passage: "`` prefixes) take an
``input_type``: :meth:`BaseEmbedder.embed` embeds passages (what a Document stores) and
:meth:`BaseEmbedder.embed_query` embeds queries. A concrete embedder implements one of
``_embed(texts, input_type)`` (sync models) or ``_aembed(texts, input_type)`` (I/O-bound
services); the other forms are derived, and :class:`BaseEmbedder` validates every result:
a wrong dimension, a NaN/inf or an empty vector raises
:class:`~fastrag.errors.EmbeddingError` naming the text's index (``.index``), so a caller
holding the node ids can name the node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from fastrag._async import run_sync, to_thread
from fastrag._checks import check_int, check_str, check_str_list
from fastrag.errors import ConfigError, EmbeddingError, FastragError

__all__ = [
    "INPUT_TYPES",
    "BaseEmbedder",
    "CallableEmbedding",
    "Embedder",
    "EmbeddingServiceError",
    "InputType",
    "as_embedder",
    "check_texts",
    "validate_embeddings",
]

InputType = Literal["passage", "query"]
INPUT_TYPES: tuple[str, ...] = ("passage", "query")
_TEXT_HEAD = 60


@runtime_checkable
class Embedder(Protocol):
    """Anything with ``name``, ``dim`` and ``embed(texts) -> float32 (n, dim)``."""

    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...

    async def aembed(self, texts: list[str]) -> np.ndarray: ...


class EmbeddingServiceError(FastragError, RuntimeError):
    """A remote embedding service failed (after retries). ``.status`` is the last HTTP status
    (None for timeouts and connection errors), ``.attempts`` the number of attempts."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int | None = None):
        self.status = status
        self.attempts = attempts
        super().__init__(message)


def _head(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= _TEXT_HEAD else flat[: _TEXT_HEAD - 3] + "..."


def check_texts(texts: Any, what: str = "texts") -> list[str]:
    """``texts`` as a list of str; a single str or a non-str item is a ConfigError."""
    if isinstance(texts, str):
        texts = _head(texts)  # an error: name the str shortened
    elif isinstance(texts, np.ndarray):
        texts = texts.tolist()
    return check_str_list(what, texts)


def check_input_type(input_type: Any) -> str:
    if input_type not in INPUT_TYPES:
        raise ConfigError(
            f"input_type must be 'passage' (documents) or 'query' (search queries), "
            f"got {input_type!r}"
        )
    return input_type


def validate_embeddings(
    vectors: Any,
    n: int,
    dim: int | None,
    name: str = "embedder",
    offset: int = 0,
    texts: Sequence[str] | None = None,
) -> np.ndarray:
    """Check an embedder's answer for ``n`` texts and return it as C-contiguous float32.

    Raises :class:`~fastrag.errors.EmbeddingError` for a ragged or wrongly shaped answer, a
    row whose length differs from ``dim`` (None: the first row fixes it), an empty vector, or
    NaN/inf, naming the index of the first bad text (``offset`` is added to it).
    """

    def fail(msg: str, i: int | None) -> EmbeddingError:
        where = ""
        if i is not None:
            where = f"text {i + offset}"
            if texts is not None and 0 <= i < len(texts):
                where += f" ({_head(texts[i])!r})"
            where += ": "
        return EmbeddingError(
            f"{name}: {where}{msg}", index=None if i is None else i + offset, embedder=name
        )

    if isinstance(vectors, np.ndarray) and vectors.dtype != object:
        arr = vectors
    else:
        rows = list(vectors)
        if len(rows) != n:
            raise fail(f"returned {len(rows)} vectors for {n} texts", None)
        lengths = [len(r) if hasattr(r, "__len__") else -1 for r in rows]
        want = dim if dim is not None else (lengths[0] if lengths else 0)
        for i, ln in enumerate(lengths):
            if ln == 0:
                raise fail("empty vector (length 0); the embedder returned nothing for it", i)
            if ln != want:
                raise fail(f"vector has dimension {ln}, expected {want}", i)
        try:
            arr = np.asarray(rows, dtype=np.float32).reshape(n, want)
        except (TypeError, ValueError) as exc:
            raise fail(f"vectors are not numeric ({exc})", None) from None
    if arr.ndim == 1 and n == 1 and arr.shape[0] > 0:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] != n:
        raise fail(
            f"returned an array of shape {arr.shape} for {n} texts; expected ({n}, dim)", None
        )
    if n and arr.shape[1] == 0:
        raise fail("empty vector (length 0); the embedder returned nothing for it", 0)
    if dim is not None and arr.shape[1] != dim:
        raise fail(f"vector has dimension {arr.shape[1]}, expected {dim}", 0)
    if arr.dtype != np.float32:
        if not np.issubdtype(arr.dtype, np.number):
            raise fail(f"vectors have dtype {arr.dtype}, expected float32", None)
        arr = arr.astype(np.float32)
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        kind = "NaN" if np.isnan(arr[i]).any() else "inf"
        raise fail(f"vector contains {kind}", i)
    return np.ascontiguousarray(arr)


class BaseEmbedder:
    """Base class: argument checks, prefixes, sync/async plumbing and output validation.

    Subclasses set ``name`` and ``dim`` (``dim`` may stay None until the first answer fixes
    it) and implement ``_embed`` or ``_aembed``. ``query_prefix`` / ``passage_prefix`` are
    prepended to texts of that input type (for models that need them, e.g. e5 served over
    HTTP); models that handle prefixes themselves leave them empty.
    """

    name: str = "embedder"
    dim: int | None = None
    #: texts a Document hands over per call while it indexes (None: ``batch_size``); models
    #: that sort by length or spread batches over workers take more per call
    texts_per_call: int | None = None

    def __init__(self, *, query_prefix: str = "", passage_prefix: str = "") -> None:
        for arg, value in (("query_prefix", query_prefix), ("passage_prefix", passage_prefix)):
            check_str(arg, value, empty=True, note="'' for none")
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix

    # -- to implement (one of the two) ---------------------------------------------------------
    def _embed(self, texts: list[str], input_type: str) -> Any:
        if type(self)._aembed is BaseEmbedder._aembed:
            raise NotImplementedError(
                f"{type(self).__name__} implements neither _embed nor _aembed"
            )
        return run_sync(self._aembed(texts, input_type))

    async def _aembed(self, texts: list[str], input_type: str) -> Any:
        if type(self)._embed is BaseEmbedder._embed:
            raise NotImplementedError(
                f"{type(self).__name__} implements neither _embed nor _aembed"
            )
        return await to_thread(self._embed, texts, input_type)

    # -- public --------------------------------------------------------------------------------
    def _prepare(self, texts: Any, input_type: Any) -> tuple[list[str], list[str], str]:
        texts = check_texts(texts)
        input_type = check_input_type(input_type)
        prefix = self.query_prefix if input_type == "query" else self.passage_prefix
        sent = [prefix + t for t in texts] if prefix else texts
        return texts, sent, input_type

    def _finish(self, vectors: Any, texts: list[str]) -> np.ndarray:
        arr = validate_embeddings(vectors, len(texts), self.dim, self.name, texts=texts)
        if self.dim is None and len(texts):
            self.dim = int(arr.shape[1])
        return arr

    def _empty(self) -> np.ndarray:
        return np.zeros((0, self.dim or 0), dtype=np.float32)

    def embed(self, texts: list[str], input_type: InputType = "passage") -> np.ndarray:
        """Embed ``texts`` (documents by default) -> float32 array ``(len(texts), dim)``."""
        texts, sent, input_type = self._prepare(texts, input_type)
        if not texts:
            return self._empty()
        return self._finish(self._embed(sent, input_type), texts)

    async def aembed(self, texts: list[str], input_type: InputType = "passage") -> np.ndarray:
        """Async :meth:`embed`."""
        texts, sent, input_type = self._prepare(texts, input_type)
        if not texts:
            return self._empty()
        return self._finish(await self._aembed(sent, input_type), texts)

    def embed_query(self, texts: str | list[str]) -> np.ndarray:
        """Embed search queries: one str -> ``(dim,)``, a list -> ``(n, dim)``."""
        if isinstance(texts, str):
            return self.embed([texts], input_type="query")[0]
        return self.embed(texts, input_type="query")

    async def aembed_query(self, texts: str | list[str]) -> np.ndarray:
        """Async :meth:`embed_query`."""
        if isinstance(texts, str):
            return (await self.aembed([texts], input_type="query"))[0]
        return await self.aembed(texts, input_type="query")

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Embed a list of search queries -> ``(n, dim)`` (one batched call)."""
        return self.embed(texts, input_type="query")

    async def aembed_queries(self, texts: list[str]) -> np.ndarray:
        """Async :meth:`embed_queries`."""
        return await self.aembed(texts, input_type="query")

    def __call__(self, texts: str | list[str]) -> np.ndarray:
        """Embed documents; one str gives one ``(dim,)`` vector (LazyLLM's ``embed("text")``)."""
        if isinstance(texts, str):
            return self.embed([texts])[0]
        return self.embed(texts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim!r})"


class CallableEmbedding(BaseEmbedder):
    """Wrap a user's function ``func(texts) -> array (n, dim)`` (or ``func(texts,
    input_type)`` when ``takes_input_type=True``) as a validated embedder."""

    def __init__(
        self,
        func: Callable[..., Any],
        dim: int | None = None,
        name: str | None = None,
        *,
        takes_input_type: bool = False,
        query_prefix: str = "",
        passage_prefix: str = "",
    ) -> None:
        if not callable(func):
            raise ConfigError(f"func must be callable texts -> vectors, got {func!r}")
        dim = check_int("dim", dim, min=1, none="inferred")
        check_str("name", name, none=True)
        super().__init__(query_prefix=query_prefix, passage_prefix=passage_prefix)
        self.func = func
        self.dim = dim
        self.name = name or getattr(func, "__name__", type(func).__name__)
        self.takes_input_type = bool(takes_input_type)

    def _embed(self, texts: list[str], input_type: str) -> Any:
        if self.takes_input_type:
            return self.func(texts, input_type)
        return self.func(texts)


def as_embedder(obj: Any) -> BaseEmbedder:
    """A :class:`BaseEmbedder` for ``obj``: itself if it is one; any other object with
    ``embed(texts)`` (and optionally ``dim``, ``name``) or a plain function ``texts ->
    vectors`` is wrapped in :class:`CallableEmbedding`, which validates its answers and adds
    ``aembed`` / ``embed_query``."""
    if isinstance(obj, BaseEmbedder):
        return obj
    if callable(getattr(obj, "embed", None)):
        dim = getattr(obj, "dim", None)
        dim = dim if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 else None
        name = getattr(obj, "name", None)
        return CallableEmbedding(
            obj.embed, dim=dim, name=name if isinstance(name, str) and name else type(obj).__name__
        )
    if callable(obj):
        return CallableEmbedding(obj)
    raise ConfigError(
        f"expected an embedder (with name, dim and embed(texts)) or a function texts -> "
        f"vectors, got {type(obj).__name__}"
    )
