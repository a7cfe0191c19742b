"""``OpenAIRerank``: a client for the ``/v1/rerank`` API that vLLM, Text Embeddings Inference,
Jina and Cohere-compatible servers expose (LazyLLM's online rerank module).

It is a reranker *model*: ``fr.Reranker("ModuleReranker", model=fr.OpenAIRerank(...),
topk=3)``. A batch sends every query's documents at once (requests in flight bounded by
``max_concurrency``; lists longer than ``max_documents_per_request`` are split and merged),
with the retries of the other HTTP clients (429 / 5xx / timeouts, ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import numpy as np

from fastrag._async import run_sync
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
from fastrag.errors import FastragError

__all__ = ["OpenAIRerank", "RerankServiceError"]

_URL_EXAMPLE = "http://localhost:8080/v1"


class RerankServiceError(FastragError, RuntimeError):
    """A rerank service failed (after retries) or answered something unusable. ``.status``
    is the last HTTP status (None for timeouts and connection errors)."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int | None = None):
        self.status = status
        self.attempts = attempts
        super().__init__(message)


class OpenAIRerank(PooledClient):
    """Scores (query, document) pairs with a served reranker.

    Args:
        base_url: the API root (``http://host:port/v1``); requests go to ``{base_url}/rerank``.
        model: the served reranker's name (e.g. ``"BAAI/bge-reranker-v2-m3"``).
        api_key: sent as ``Authorization: Bearer``; never shown in errors.
        max_documents_per_request: longer document lists are split into several requests.
        max_concurrency: requests in flight at once (across event loops and threads).
        timeout, max_retries, retry_backoff, retry_max_wait, headers: as ``fr.OpenAILike``.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        max_documents_per_request: int = 64,
        max_concurrency: int = 4,
        timeout: float = 60.0,
        max_retries: int = 3,
        headers: dict[str, str] | None = None,
        retry_backoff: float = 0.5,
        retry_max_wait: float = 30.0,
    ) -> None:
        self.base_url = check_base_url(base_url, "/rerank", _URL_EXAMPLE)
        self.model = check_str(
            "model", model, strip=True, note="the served reranker, e.g. 'BAAI/bge-reranker-v2-m3'"
        )
        self.api_key = check_api_key(api_key)
        self.max_documents_per_request = check_int(
            "max_documents_per_request", max_documents_per_request, min=1
        )
        self.max_concurrency = check_int("max_concurrency", max_concurrency, min=1)
        self.timeout = check_number("timeout", timeout, above=0, note="seconds")
        self.max_retries = check_int(
            "max_retries", max_retries, min=0, fix="use 0 to disable retries"
        )
        self.headers = check_headers(headers)
        self.retry_backoff = check_number("retry_backoff", retry_backoff, min=0)
        self.retry_max_wait = check_number("retry_max_wait", retry_max_wait, min=0)
        self.name = f"rerank:{self.model}"
        self._states = LoopClients()

    @property
    def url(self) -> str:
        """The rerank endpoint."""
        return f"{self.base_url}/rerank"

    def __repr__(self) -> str:
        return f"OpenAIRerank(model={self.model!r}, base_url={self.base_url!r})"

    # -- public ------------------------------------------------------------------------------
    def score(self, query: str, documents: list[str]) -> np.ndarray:
        """Relevance of each document to ``query`` (input order; higher is better)."""
        return self.score_batch([query], [documents])[0]

    def score_batch(self, queries: list[str], documents: list[list[str]]) -> list[np.ndarray]:
        """Scores for many queries at once (all requests concurrent)."""
        return run_sync(self.ascore_batch(queries, documents))

    async def ascore_batch(
        self, queries: list[str], documents: list[list[str]]
    ) -> list[np.ndarray]:
        """Async :meth:`score_batch`."""
        if len(queries) != len(documents):
            raise FastragError(f"{len(queries)} queries but {len(documents)} document lists")
        st = await self._state()
        step = self.max_documents_per_request
        jobs = [(q, s) for q, docs in enumerate(documents) for s in range(0, len(docs), step)]
        parts = await asyncio.gather(
            *(self._post(st, queries[q], documents[q][s : s + step], q, s) for q, s in jobs)
        )
        out = [np.zeros(len(d), dtype=np.float64) for d in documents]
        for (q, s), scores in zip(jobs, parts, strict=True):
            out[q][s : s + len(scores)] = scores
        return out

    # -- one request ---------------------------------------------------------------------------
    def _where(self, q: int, start: int, n: int) -> str:
        return (
            f"[model={self.model!r}, url={self.url!r}, query {q}, documents {start}.."
            f"{start + n - 1}]"
        )

    async def _post(
        self, st: LoopState, query: str, docs: list[str], q: int, start: int
    ) -> np.ndarray:
        where = self._where(q, start, len(docs))
        body: dict[str, Any] = {"model": self.model, "query": query, "documents": docs}
        resp = await post_to_service(
            self,
            st,
            self.url,
            body,
            error=RerankServiceError,
            who="rerank server",
            what="rerank",
            where=where,
        )
        return self._parse(resp.content, len(docs), where)

    @staticmethod
    def _parse(content: bytes, n: int, where: str) -> np.ndarray:
        try:
            data = json.loads(content)
        except (ValueError, RecursionError):  # RecursionError: nested too deep to read
            head = content[:120].decode("utf-8", "replace")
            raise RerankServiceError(
                f"the rerank server answered HTTP 200 with malformed JSON (body starts {head!r}); "
                f"is base_url a /v1/rerank API? {where}",
                status=200,
            ) from None
        items = data.get("results") if isinstance(data, dict) else data  # TEI: a bare list
        if not isinstance(items, list) or len(items) != n:
            got = len(items) if isinstance(items, list) else "no"
            raise RerankServiceError(
                f"the rerank server returned {got} results for {n} documents {where}", status=200
            )
        scores = np.full(n, np.nan)
        for item in items:
            idx = item.get("index") if isinstance(item, dict) else None
            val = item.get("relevance_score", item.get("score")) if isinstance(item, dict) else None
            if not isinstance(idx, int) or not 0 <= idx < n or not math.isnan(scores[idx]):
                raise RerankServiceError(
                    f"the rerank server returned a bad or repeated index "
                    f"{idx!r} for {n} documents {where}",
                    status=200,
                )
            if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
                raise RerankServiceError(
                    f"the rerank server returned score {val!r} for document "
                    f"{idx}; expected a finite number {where}",
                    status=200,
                )
            scores[idx] = float(val)
        return scores
