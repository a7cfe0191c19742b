"""An OpenAI-compatible embeddings client (OpenAI, vLLM, Ollama, TEI, LM Studio, ...).

``POST {base_url}/embeddings`` over ``httpx.AsyncClient`` with ``model``, ``input`` (a list of
strings) and ``encoding_format="float"`` (plus ``dimensions`` when asked for).

* Texts are split into batches of ``batch_size``; up to ``max_concurrency`` batches are in
  flight at once (one client per event loop, one limit across them, as :class:`fastrag.OpenAILike`).
  Results come back in input order whatever order the server lists them in (``index``).
* Retries on HTTP 408/409/429/5xx, timeouts and connection errors, ``max_retries`` times, with
  exponential backoff or the server's ``Retry-After``; other statuses fail at once.
* ``timeout`` is a deadline per request attempt (one batch), not per read, and each batch's
  attempts end within ``(max_retries + 1) * timeout``: see :class:`fastrag.OpenAILike`.
* Every vector is checked: a wrong dimension, NaN/inf or an empty vector raises
  :class:`~fastrag.errors.EmbeddingError` naming the text's index.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np

from fastrag._checks import check_int, check_number, check_str
from fastrag._http import (
    LoopClients,
    LoopState,
    PooledClient,
    check_api_key,
    check_base_url,
    check_headers,
    post_to_service,
)
from fastrag.embeddings.base import (
    BaseEmbedder,
    EmbeddingServiceError,
    validate_embeddings,
)
from fastrag.errors import ConfigError, EmbeddingError

__all__ = ["OpenAIEmbedding"]


_URL_EXAMPLE = "'http://localhost:8000/v1' (vLLM) or 'https://api.openai.com/v1'"


class OpenAIEmbedding(BaseEmbedder, PooledClient):
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint.

    Args:
        base_url: API root, e.g. ``http://localhost:8000/v1``.
        model: model name as the server knows it.
        api_key: sent as ``Authorization: Bearer``; None sends no header (never read from env).
        batch_size: texts per request.
        max_concurrency: most requests in flight at once (across event loops and threads).
        dim: the expected dimension (None: the first answer fixes it); every vector is
            checked against it.
        timeout: seconds per attempt of one batch's request, as a deadline: the whole answer
            must arrive within it; a batch's attempts, retries and waits all end within
            ``(max_retries + 1) * timeout`` (waiting for a ``max_concurrency`` slot before the
            first attempt is not counted). A timeout raises :class:`EmbeddingServiceError`.
        max_retries: retries after the first attempt (0 = none); timeouts are retried too.
        dimensions: sent as ``dimensions`` (models that can shorten their vectors); implies
            ``dim`` when ``dim`` is None.
        query_prefix, passage_prefix: prepended to queries / passages (e5: ``"query: "``,
            ``"passage: "``).
        headers: extra HTTP headers. retry_backoff, retry_max_wait: first wait and cap (s).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        batch_size: int = 64,
        max_concurrency: int = 4,
        dim: int | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        *,
        dimensions: int | None = None,
        query_prefix: str = "",
        passage_prefix: str = "",
        headers: dict[str, str] | None = None,
        retry_backoff: float = 0.5,
        retry_max_wait: float = 30.0,
    ) -> None:
        super().__init__(query_prefix=query_prefix, passage_prefix=passage_prefix)
        self.base_url = check_base_url(base_url, "/embeddings", _URL_EXAMPLE)
        self.model = check_str(
            "model",
            model,
            strip=True,
            note="the served embedding model, e.g. 'text-embedding-3-small'",
        )
        self.api_key = check_api_key(api_key)
        self.batch_size = check_int("batch_size", batch_size, min=1, note="texts per request")
        self.max_concurrency = check_int(
            "max_concurrency",
            max_concurrency,
            min=1,
            fix="it bounds the requests in flight at once",
        )
        dim = check_int("dim", dim, min=1, none=True)
        dimensions = check_int("dimensions", dimensions, min=1, none=True)
        if dim is not None and dimensions is not None and dim != dimensions:
            raise ConfigError(
                f"dim={dim} contradicts dimensions={dimensions}; the server returns "
                f"`dimensions`-long vectors, so drop dim or make them equal"
            )
        self.dimensions = dimensions
        self.dim = dim if dim is not None else dimensions
        self.timeout = check_number("timeout", timeout, above=0, note="seconds")
        self.max_retries = check_int(
            "max_retries", max_retries, min=0, fix="use 0 to disable retries"
        )
        self.headers = check_headers(headers)
        self.retry_backoff = check_number("retry_backoff", retry_backoff, min=0, note="seconds")
        self.retry_max_wait = check_number("retry_max_wait", retry_max_wait, min=0, note="seconds")
        self.name = f"openai:{model}"
        self._states = LoopClients()

    @property
    def url(self) -> str:
        """The embeddings endpoint."""
        return f"{self.base_url}/embeddings"

    def __repr__(self) -> str:
        return f"OpenAIEmbedding(model={self.model!r}, base_url={self.base_url!r}, dim={self.dim})"

    # -- requests -----------------------------------------------------------------------------
    def _where(self, start: int, n: int) -> str:
        return f"[model={self.model!r}, url={self.url!r}, texts {start}..{start + n - 1}]"

    async def _post_batch(self, st: LoopState, texts: list[str], start: int) -> list[Any]:
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        resp = await post_to_service(
            self,
            st,
            self.url,
            body,
            error=EmbeddingServiceError,
            who="embedding server",
            what="embedding",
            where=self._where(start, len(texts)),
        )
        return self._parse(resp.content, texts, start)

    def _parse(self, content: bytes, texts: list[str], start: int) -> list[Any]:
        try:
            data = json.loads(content)
        except ValueError:
            head = content[:120].decode("utf-8", "replace")
            raise EmbeddingServiceError(
                f"the embedding server answered HTTP 200 with malformed JSON (body starts "
                f"{head!r}); is base_url an OpenAI-compatible API? "
                f"{self._where(start, len(texts))}",
                status=200,
            ) from None
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list) or len(items) != len(texts):
            got = len(items) if isinstance(items, list) else "no"
            raise EmbeddingError(
                f"{self.name}: the server returned {got} embeddings for {len(texts)} texts "
                f"{self._where(start, len(texts))}",
                embedder=self.name,
            )
        out: list[Any] = [None] * len(texts)
        for pos, item in enumerate(items):
            idx = item.get("index", pos) if isinstance(item, dict) else None
            if not isinstance(idx, int) or not 0 <= idx < len(texts) or out[idx] is not None:
                raise EmbeddingError(
                    f"{self.name}: data[{pos}] has a missing, duplicate or out-of-range index "
                    f"{idx!r} {self._where(start, len(texts))}",
                    embedder=self.name,
                )
            vec = item.get("embedding")
            if not isinstance(vec, list):
                raise EmbeddingError(
                    f"{self.name}: text {start + idx}: embedding is "
                    f"{type(vec).__name__}, expected a list of floats",
                    index=start + idx,
                    embedder=self.name,
                )
            out[idx] = vec
        return out

    async def _aembed(self, texts: list[str], input_type: str) -> np.ndarray:
        for i, t in enumerate(texts):
            if not t:
                raise ConfigError(
                    f"texts[{i}] is empty; OpenAI-compatible servers reject empty input "
                    f"(drop empty texts before embedding)"
                )
        st = await self._state()
        starts = range(0, len(texts), self.batch_size)
        tasks = [
            asyncio.ensure_future(self._post_batch(st, texts[s : s + self.batch_size], s))
            for s in starts
        ]
        try:
            batches = await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        # Check each batch against the dimension (the first answer fixes an unknown one).
        dim = self.dim
        parts = []
        for s, rows in zip(starts, batches, strict=True):
            arr = validate_embeddings(
                rows, len(rows), dim, self.name, offset=s, texts=texts[s : s + len(rows)]
            )
            dim = arr.shape[1]
            parts.append(arr)
        return np.concatenate(parts, axis=0)
