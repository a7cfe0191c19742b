"""LazyLLM's ``OnlineEmbeddingModuleBase``: an embedding service of any request shape.

A subclass says how one text becomes the JSON body of a request (``_encapsulated_data``) and
how an answer gives its vector (``_parse_response``); fastrag posts one request per text to
``embed_url`` (at most ``max_concurrency`` in flight, retried like every fastrag client) and
validates each vector. The defaults speak OpenAI's ``/embeddings`` shape.
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
    check_headers,
    post_to_service,
)
from fastrag.embeddings.base import BaseEmbedder, EmbeddingServiceError, validate_embeddings
from fastrag.errors import ConfigError, EmbeddingError

__all__ = ["OnlineEmbeddingModuleBase"]


class OnlineEmbeddingModuleBase(BaseEmbedder, PooledClient):
    """A remote embedder whose request and answer shapes a subclass defines (LazyLLM's base
    class of the same name and arguments).

    Args:
        model_series: the platform's name (shown in :attr:`name` and errors).
        embed_url: the full URL each text is POSTed to.
        api_key: sent as ``Authorization: Bearer``; None or ``""`` sends none.
        embed_model_name: the model as the platform knows it (``self._embed_model_name``).
        return_trace: accepted for LazyLLM's signature; fastrag keeps no trace.
        max_concurrency: requests in flight at once. timeout: seconds per attempt.
        max_retries: retries after the first attempt. dim: the expected dimension (None:
            the first answer fixes it). headers: extra HTTP headers.
    """

    def __init__(
        self,
        model_series: str,
        embed_url: str,
        api_key: str | None,
        embed_model_name: str,
        return_trace: bool = False,
        *,
        max_concurrency: int = 8,
        timeout: float = 60.0,
        max_retries: int = 3,
        dim: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self._model_series = check_str("model_series", model_series, strip=True)
        url = check_str("embed_url", embed_url, strip=True, note="the service's full URL")
        if not url.startswith(("http://", "https://")):
            raise ConfigError(
                f"embed_url must be an http:// or https:// URL, got {url!r}; pass your "
                f"service's embedding endpoint, e.g. 'https://api.example.com/v1/embeddings'"
            )
        self._embed_url = url
        self._embed_model_name = check_str("embed_model_name", embed_model_name, strip=True)
        self.api_key = check_api_key(api_key or None)
        self.return_trace = bool(return_trace)
        self.max_concurrency = check_int("max_concurrency", max_concurrency, min=1)
        self.timeout = check_number("timeout", timeout, above=0, note="seconds")
        self.max_retries = check_int("max_retries", max_retries, min=0, fix="0 disables them")
        self.dim = check_int("dim", dim, min=1, none=True)
        self.headers = check_headers(headers)
        self.retry_backoff = 0.5
        self.retry_max_wait = 30.0
        self.name = f"{self._model_series}:{self._embed_model_name}"
        self._states = LoopClients()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, url={self._embed_url!r})"

    # -- the two hooks a subclass overrides ----------------------------------------------------
    def _encapsulated_data(self, text: str, **kwargs: Any) -> dict[str, Any]:
        """The JSON body for ``text`` (default: OpenAI's ``{"input", "model"}``)."""
        return {"input": text, "model": self._embed_model_name, **kwargs}

    def _parse_response(self, response: dict[str, Any]) -> list[float]:
        """The vector in one answer (default: OpenAI's ``data[0].embedding``)."""
        return response["data"][0]["embedding"]

    # -- requests -----------------------------------------------------------------------------
    async def _post_one(self, st: LoopState, text: str, i: int) -> Any:
        where = f"[{self.name}, url={self._embed_url!r}, text {i}]"
        resp = await post_to_service(
            self,
            st,
            self._embed_url,
            self._encapsulated_data(text),
            error=EmbeddingServiceError,
            who="embedding service",
            what="embedding",
            where=where,
        )
        try:
            answer = json.loads(resp.content)
        except ValueError:
            head = resp.content[:120].decode("utf-8", "replace")
            raise EmbeddingServiceError(
                f"the embedding service answered HTTP 200 with malformed JSON (body starts "
                f"{head!r}) {where}",
                status=200,
            ) from None
        try:
            return self._parse_response(answer)
        except (KeyError, IndexError, TypeError) as exc:
            raise EmbeddingError(
                f"{self.name}: _parse_response could not read the answer to text {i} "
                f"({type(exc).__name__}: {exc}); the answer starts "
                f"{json.dumps(answer)[:160]!r}: make _parse_response match the service",
                index=i,
                embedder=self.name,
            ) from None

    async def _aembed(self, texts: list[str], input_type: str) -> np.ndarray:
        st = await self._state()
        tasks = [asyncio.ensure_future(self._post_one(st, t, i)) for i, t in enumerate(texts)]
        try:
            rows = await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return validate_embeddings(rows, len(texts), self.dim, self.name, texts=texts)
