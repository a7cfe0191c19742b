"""An OpenAI-compatible chat-completions client (vLLM, Ollama, OpenAI, LM Studio, ...).

``POST {base_url}/chat/completions`` over ``httpx.AsyncClient`` with only the standard
fields: ``model``, ``messages``, ``temperature``, ``max_tokens``, ``stream``,
``stream_options``, ``response_format`` (plus whatever ``extra_body`` adds).

* One HTTP client per event loop and one concurrency limit for all of them (the sync
  wrappers all run on fastrag's shared background loop, so they share one pool). A client
  is closed when its loop shuts down (``asyncio.run`` finalizes it) or by :meth:`OpenAILike.aclose`.
* Retries: on HTTP 408/409/429/5xx, timeouts and connection errors, up to ``max_retries``
  times, waiting ``retry_backoff * 2**(attempt-1)`` seconds (times a jitter in [0.5, 1],
  capped at ``retry_max_wait``) or what ``Retry-After`` / ``retry-after-ms`` says. A stream is
  retried only before its first chunk arrived.
* Deadlines: ``timeout`` bounds each attempt as a whole, not each read (so a server trickling
  bytes cannot hold a call open): the whole answer must arrive within it; a stream must
  deliver its first token within it, then each next token within it. Timeouts are retried as
  in the openai client (``timeout`` per attempt, ``max_retries`` apart), and all attempts end
  within ``(max_retries + 1) * timeout`` of the first: no retry starts whose wait would pass it.
* Errors: :class:`~fastrag.llms.base.LLMError` (``LLMTimeoutError`` for timeouts) naming the
  model, URL, prompt head, last HTTP status and number of attempts.
* Cancellation propagates: cancelling a task closes its in-flight HTTP request.
"""

from __future__ import annotations

import asyncio
import json
import re
import weakref
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Literal

import httpx

from fastrag._checks import check_choice, check_int, check_number, check_str
from fastrag._http import (
    RETRY_STATUSES,
    Deadline,
    Failure,
    LoopClients,
    PooledClient,
    backoff_delay,
    check_api_key,
    check_base_url,
    check_headers,
    failure_summary,
    post_json,
    status_failure,
    within,
)
from fastrag.errors import ConfigError
from fastrag.llms.base import (
    BaseLLM,
    Completion,
    LLMError,
    LLMTimeoutError,
    check_prompt,
)

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Self

__all__ = ["RETRY_STATUSES", "OpenAILike"]

_CALL_KEYS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "user",
        "response_format",
        "extra_body",
        "timeout",
        "system_prompt",
    }
)
JsonMode = Literal["json_object", "json_schema"]
_URL_EXAMPLE = "'http://localhost:8000/v1' (vLLM) or 'http://localhost:11434/v1' (Ollama)"


def _schema_name(schema: dict) -> str:
    """A response_format name (OpenAI allows ``[a-zA-Z0-9_-]{1,64}``) from the schema title."""
    name = re.sub(r"[^a-zA-Z0-9_-]+", "_", str(schema.get("title") or "answer")).strip("_")
    return (name or "answer")[:64]


def _rejects_field(exc: LLMError, name: str) -> bool:
    """Whether ``exc`` is a 400/422 whose message names the request field ``name``."""
    return exc.status in (400, 422) and name in exc.message


class OpenAILike(BaseLLM, PooledClient):
    """An LLM served behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        model: model name as the server knows it.
        base_url: API root, e.g. ``http://localhost:8000/v1``.
        api_key: sent as ``Authorization: Bearer``; None sends no header (never read from env).
        timeout: seconds per attempt, as a deadline: the whole answer must arrive within it;
            a stream must send its first token within it, then each next token within it
            (so a long answer is fine while tokens keep coming; the caller's time between
            chunks is not counted). Retries and their waits fit in ``(max_retries + 1) *
            timeout`` from the first attempt's start (a stream: until its first token);
            waiting for a ``max_concurrency`` slot before it is not counted. A deadline hit
            raises :class:`LLMTimeoutError`.
        max_retries: retries after the first attempt (0 = no retry); timeouts are retried
            too, but never a stream that has already sent a chunk.
        max_concurrency: most requests in flight at once, for this client object across
            every event loop and thread that uses it (one limit protecting the endpoint).
        extra_body: extra JSON fields merged into every request body (last word).
        temperature, max_tokens: defaults for every call (None: server default).
        json_mode: how :meth:`astructured` asks for JSON: ``"json_object"`` (default;
            ``response_format={"type": "json_object"}``), ``"json_schema"`` (passes the
            schema), or None (plain text, parsed tolerantly).
        system_prompt: optional system message put before every prompt.
        headers: extra HTTP headers.
        retry_backoff, retry_max_wait: first backoff delay and cap for any one wait (s).
        stream_usage: ask streams for usage (``stream_options.include_usage``); when a
            server sends none, usage is counted with tiktoken.
        encoding: tiktoken encoding for counting (fallback usage, ``count_tokens``).

    Per-call keyword arguments: temperature, top_p, max_tokens, stop, seed,
    presence_penalty, frequency_penalty, logit_bias, user, response_format, extra_body,
    timeout, system_prompt.
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        max_concurrency: int = 16,
        extra_body: dict[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        json_mode: JsonMode | bool | None = "json_object",
        *,
        system_prompt: str | None = None,
        headers: dict[str, str] | None = None,
        retry_backoff: float = 0.5,
        retry_max_wait: float = 60.0,
        stream_usage: bool = True,
        encoding: str = "cl100k_base",
    ) -> None:
        self.model = check_str(
            "model", model, strip=True, note="the served model's name, e.g. 'qwen2.5:7b'"
        )
        self.base_url = check_base_url(base_url, "/chat/completions", _URL_EXAMPLE)
        self.api_key = check_api_key(api_key)
        self.timeout = check_number("timeout", timeout, above=0, note="seconds")
        self.max_retries = check_int(
            "max_retries", max_retries, min=0, fix="use 0 to disable retries"
        )
        self.max_concurrency = check_int(
            "max_concurrency",
            max_concurrency,
            min=1,
            fix="it bounds the requests in flight at once",
        )
        self.extra_body = self._check_extra_body(extra_body)
        self.temperature = self._check_temperature(temperature)
        self.max_tokens = check_int("max_tokens", max_tokens, min=1, none="the server's default")
        if json_mode is True:
            json_mode = "json_object"
        if json_mode is False:
            json_mode = None
        check_choice("json_mode", json_mode, ("json_object", "json_schema", None))
        self.json_mode: JsonMode | None = json_mode
        self.supports_json_mode = json_mode is not None
        self.system_prompt = check_str("system_prompt", system_prompt, empty=True, none=True)
        self.headers = check_headers(headers)
        self.retry_backoff = check_number("retry_backoff", retry_backoff, min=0, note="seconds")
        self.retry_max_wait = check_number("retry_max_wait", retry_max_wait, min=0, note="seconds")
        self.stream_usage = bool(stream_usage)
        self.encoding = check_str("encoding", encoding, note="a tiktoken encoding name")
        self._init_clients()

    def _init_clients(self) -> None:
        self._states = LoopClients()
        self._finalizer = weakref.finalize(self, self._states.close_all)
        self._finalizer.atexit = False

    # -- validation helpers ---------------------------------------------------------------------
    @staticmethod
    def _check_extra_body(extra_body: Any) -> dict[str, Any]:
        if extra_body is None:
            return {}
        if not isinstance(extra_body, dict):
            raise ConfigError(f"extra_body must be a dict of JSON fields, got {extra_body!r}")
        try:
            json.dumps(extra_body)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"extra_body must be JSON-serializable: {exc}") from None
        return dict(extra_body)

    @staticmethod
    def _check_temperature(t: Any) -> float | None:
        return check_number("temperature", t, min=0, max=2, none=True)

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (e.g. for worker processes): clients are per loop and made anew there."""
        state = self.__dict__.copy()
        for key in ("_states", "_finalizer"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_clients()

    @property
    def url(self) -> str:
        """The chat-completions endpoint."""
        return f"{self.base_url}/chat/completions"

    def __repr__(self) -> str:
        return f"OpenAILike(model={self.model!r}, base_url={self.base_url!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- request building ------------------------------------------------------------------------
    def _request_info(self, prompt: str) -> dict[str, Any]:
        return {"model": self.model, "url": self.url, "prompt": prompt}

    def _body(self, prompt: str, kw: dict[str, Any], stream: bool) -> tuple[dict, float]:
        check_prompt(prompt)
        unknown = sorted(set(kw) - _CALL_KEYS)
        if unknown:
            raise ConfigError(
                f"unknown keyword argument(s) {unknown} for OpenAILike; allowed: "
                f"{sorted(_CALL_KEYS)} (put other JSON fields in extra_body={{...}})"
            )
        system = kw.get("system_prompt", self.system_prompt)
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        temperature = self._check_temperature(kw.get("temperature", self.temperature))
        if temperature is not None:
            body["temperature"] = temperature
        max_tokens = kw.get("max_tokens", self.max_tokens)
        if max_tokens is not None:
            body["max_tokens"] = check_int("max_tokens", max_tokens, min=1, none=True)
        for key in (
            "top_p",
            "stop",
            "seed",
            "presence_penalty",
            "frequency_penalty",
            "logit_bias",
            "user",
            "response_format",
        ):
            if kw.get(key) is not None:
                body[key] = kw[key]
        if stream:
            body["stream"] = True
            if self.stream_usage:
                body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        body.update(self._check_extra_body(kw.get("extra_body")))
        timeout = kw.get("timeout")
        if timeout is None:
            timeout = self.timeout
        else:
            timeout = check_number("timeout", timeout, above=0, note="seconds")
        return body, timeout

    def _count_prompt(self, body: dict) -> int:
        return sum(self.count_tokens(m["content"]) for m in body["messages"])

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        return backoff_delay(
            attempt, retry_after, self.retry_backoff, self.retry_max_wait, retry_after_jitter=0.1
        )

    def _final_error(self, prompt: str, last: Failure, attempts: int) -> LLMError:
        cls = LLMTimeoutError if last.kind == "timeout" else LLMError
        return cls(
            failure_summary(last, attempts),
            request=self._request_info(prompt),
            status=last.status,
            attempts=attempts,
        )

    def _refuse(self, prompt: str) -> Callable[[str, int, int], LLMError]:
        """The error for a non-retryable HTTP status (see :func:`fastrag._http.status_failure`)."""

        def refuse(detail: str, status: int, attempt: int) -> LLMError:
            return LLMError(
                f"the server refused the request: {detail}",
                request=self._request_info(prompt),
                status=status,
                attempts=attempt,
            )

        return refuse

    # -- non-streaming ---------------------------------------------------------------------------
    def _parse_completion(self, data: Any, body: dict, prompt: str) -> Completion:
        try:
            choice = data["choices"][0]
            message = choice.get("message") or {}
            text = message.get("content") or ""
            if not isinstance(text, str):
                raise TypeError("content is not a string")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise LLMError(
                f"unexpected response shape ({type(exc).__name__}: {exc}); expected "
                f"choices[0].message.content; got {json.dumps(data)[:200]}",
                request=self._request_info(prompt),
                status=200,
            ) from None
        usage = data.get("usage") or {}
        p_tok, c_tok = usage.get("prompt_tokens"), usage.get("completion_tokens")
        return Completion(
            text=text,
            prompt_tokens=int(p_tok) if isinstance(p_tok, int) else self._count_prompt(body),
            completion_tokens=int(c_tok) if isinstance(c_tok, int) else self.count_tokens(text),
            raw=data,
            finish_reason=choice.get("finish_reason"),
        )

    def _decode_json(self, content: bytes, prompt: str) -> Any:
        try:
            return json.loads(content)
        except (ValueError, RecursionError):  # RecursionError: nested too deep to read
            head = content[:120].decode("utf-8", "replace")
            raise LLMError(
                f"the server answered HTTP 200 with malformed JSON (body starts {head!r}); "
                "is base_url an OpenAI-compatible API?",
                request=self._request_info(prompt),
                status=200,
            ) from None

    async def acomplete_with_usage(self, prompt: str, **kw: Any) -> Completion:
        """Answer ``prompt`` (one chat message) with retries; usage from the response."""
        body, timeout = self._body(prompt, kw, stream=False)
        resp = await post_json(
            await self._state(),
            self.url,
            body,
            timeout=timeout,
            max_retries=self.max_retries,
            backoff=self.retry_backoff,
            max_wait=self.retry_max_wait,
            retry_after_jitter=0.1,
            refuse=self._refuse(prompt),
            fail=lambda last, attempts: self._final_error(prompt, last, attempts),
        )
        return self._parse_completion(self._decode_json(resp.content, prompt), body, prompt)

    # -- streaming -------------------------------------------------------------------------------
    async def _sse_events(self, resp: httpx.Response, prompt: str) -> AsyncIterator[dict]:
        async for line in resp.aiter_lines():
            line = line.strip()
            if not line.startswith("data:"):
                continue  # blank separators, comments (":"), "event:" / "id:" fields
            data = line[5:].strip()
            if data == "[DONE]":
                return
            try:
                event = json.loads(data)
            except (ValueError, RecursionError):
                raise LLMError(
                    f"malformed JSON in the event stream: {data[:120]!r}",
                    request=self._request_info(prompt),
                    status=resp.status_code,
                ) from None
            if not isinstance(event, dict):
                raise LLMError(
                    f"unexpected stream event {data[:120]!r}",
                    request=self._request_info(prompt),
                    status=resp.status_code,
                )
            if event.get("error"):
                err = event["error"]
                msg = err.get("message", err) if isinstance(err, dict) else err
                raise LLMError(
                    f"the server reported an error mid-stream: {msg}",
                    request=self._request_info(prompt),
                    status=resp.status_code,
                )
            yield event

    async def astream_with_usage(self, prompt: str, **kw: Any) -> AsyncIterator[str | Completion]:
        """Stream the answer over SSE: text chunks, then a :class:`Completion` with usage.

        A server that rejects ``stream_options`` (HTTP 400/422 naming it) is asked again
        without it, and usage is then counted with tiktoken.
        """
        body, timeout = self._body(prompt, kw, stream=True)
        try:
            async for item in self._stream_attempts(body, timeout, prompt):
                yield item
        except LLMError as exc:
            if not _rejects_field(exc, "stream_options") or "stream_options" not in body:
                raise
            body = {k: v for k, v in body.items() if k != "stream_options"}
            async for item in self._stream_attempts(body, timeout, prompt):
                yield item

    async def _stream_attempts(
        self, body: dict, timeout: float, prompt: str
    ) -> AsyncIterator[str | Completion]:
        st = await self._state()
        loop = asyncio.get_running_loop()
        clock = Deadline(timeout, self.max_retries + 1)
        attempt = 0
        while True:
            attempt += 1
            parts: list[str] = []
            try:
                async with st.sem:
                    deadline = clock.start_attempt()  # for the first token
                    request = st.client.build_request("POST", self.url, json=body, timeout=timeout)
                    resp = await within(st.client.send(request, stream=True), deadline)
                    try:
                        if resp.status_code != 200:
                            content = await within(resp.aread(), deadline)
                            last = status_failure(
                                resp.status_code,
                                resp.headers,
                                content,
                                attempt,
                                self._refuse(prompt),
                            )
                        elif "text/event-stream" not in resp.headers.get(
                            "content-type", ""
                        ) and "json" in resp.headers.get("content-type", ""):
                            # A server that ignored stream=True: one whole JSON answer.
                            content = await within(resp.aread(), deadline)
                            comp = self._parse_completion(
                                self._decode_json(content, prompt), body, prompt
                            )
                            if comp.text:
                                yield comp.text
                            yield comp
                            return
                        else:
                            usage: dict = {}
                            finish = None
                            events = self._sse_events(resp, prompt)
                            try:
                                while True:
                                    event = await within(anext(events, None), deadline)
                                    if event is None:
                                        break
                                    if event.get("usage"):
                                        usage = event["usage"]
                                    for choice in (event.get("choices") or [])[:1]:
                                        delta = choice.get("delta") or {}
                                        piece = delta.get("content")
                                        if isinstance(piece, str) and piece:
                                            parts.append(piece)
                                            yield piece
                                            deadline = loop.time() + timeout  # the next token's
                                        finish = choice.get("finish_reason") or finish
                            finally:
                                await events.aclose()
                            text = "".join(parts)
                            p_tok, c_tok = (
                                usage.get("prompt_tokens"),
                                usage.get("completion_tokens"),
                            )
                            yield Completion(
                                text=text,
                                prompt_tokens=p_tok
                                if isinstance(p_tok, int)
                                else self._count_prompt(body),
                                completion_tokens=c_tok
                                if isinstance(c_tok, int)
                                else self.count_tokens(text),
                                raw={"usage": usage} if usage else None,
                                finish_reason=finish,
                            )
                            return
                    finally:
                        await resp.aclose()
            except (httpx.TransportError, asyncio.TimeoutError) as exc:
                waiting_for = "the next token" if parts else "the first token"
                last = Failure.from_transport(exc, timeout, waiting_for)
                if parts:  # chunks already delivered: a retry would repeat them
                    raise self._final_error(
                        prompt,
                        Failure(
                            last.kind,
                            f"stream broken after {len(parts)} chunk"
                            f"{'s' if len(parts) != 1 else ''}: "
                            f"{last.detail}",
                        ),
                        attempt,
                    ) from None
            if attempt == clock.attempts:
                break
            wait = self._delay(attempt, last.retry_after)
            if not await clock.wait(wait):
                last = last.not_retried(wait, clock)
                break
        raise self._final_error(prompt, last, attempt)

    # -- structured ------------------------------------------------------------------------------
    async def _astructured_completion(self, prompt: str, schema: dict, **kw: Any) -> Completion:
        if self.json_mode is not None and kw.get("response_format") is None:
            if self.json_mode == "json_object":
                kw["response_format"] = {"type": "json_object"}
            else:
                kw["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": _schema_name(schema), "schema": schema},
                }
            try:
                return await self.acomplete_with_usage(prompt, **kw)
            except LLMError as exc:
                if not _rejects_field(exc, "response_format"):
                    raise
                kw.pop("response_format")  # the server has no JSON mode: parse text instead
        return await self.acomplete_with_usage(prompt, **kw)
