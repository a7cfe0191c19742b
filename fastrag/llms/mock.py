"""Deterministic LLM test doubles: :class:`MockLLM` and :class:`FunctionLLM`.

They stand in for a model's *content* only: the code path (async core, sync wrappers,
streaming, structured output, usage accounting) is the one real LLMs use. Both record every
call (thread- and loop-safe) and the peak number of concurrent calls, so tests can count
calls and check concurrency bounds; both report usage with tiktoken counts.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import math
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastrag.errors import ConfigError
from fastrag.llms.base import BaseLLM, Completion, LLMError, check_prompt

__all__ = ["FunctionLLM", "LLMCall", "MockLLM", "default_answer"]

Responder = str | Callable[[str], str | Awaitable[str]] | None

_CHUNK = re.compile(r"\s*\S+|\s+")
_MAX_CHUNK_CHARS = 16


@dataclass
class LLMCall:
    """One recorded call: the prompt, its keyword arguments, the answer and timing."""

    prompt: str
    kwargs: dict[str, Any]
    method: str  # "complete" | "stream" | "structured"
    response: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    started: float = 0.0  # time.perf_counter()
    ended: float | None = None
    error: str | None = None
    thread: str = field(default_factory=lambda: threading.current_thread().name)


def default_answer(prompt: str) -> str:
    """The deterministic default answer of :class:`MockLLM`: a hash of the prompt plus its
    last non-empty line (up to 60 characters)."""
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:8]
    lines = [ln.strip() for ln in prompt.splitlines() if ln.strip()]
    tail = lines[-1][:60] if lines else ""
    return f"Answer {digest}: {tail}" if tail else f"Answer {digest}."


def _check_nonneg(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigError(f"{name} must be a finite number >= 0 (seconds), got {value!r}")
    return float(value)


def _check_pos_int(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be None or an int >= 1, got {value!r}")
    return value


def _example_value(spec: Any, text: str) -> Any:
    if not isinstance(spec, dict):
        return text
    if spec.get("enum"):
        return spec["enum"][0]
    typ = spec.get("type", "string")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), "null")
    if typ == "object":
        return {k: _example_value(v, text) for k, v in (spec.get("properties") or {}).items()}
    return {
        "string": text,
        "boolean": True,
        "integer": 0,
        "number": 0.0,
        "array": [],
        "null": None,
    }.get(typ, text)


class MockLLM(BaseLLM):
    """A deterministic fake LLM.

    ``response``: None (answer with :func:`default_answer` of the prompt), a fixed string, or
    a callable ``fn(prompt) -> str`` (sync or async). ``latency`` seconds plus
    ``latency_per_token`` seconds per prompt token are slept (``asyncio.sleep``) before each
    answer. ``max_tokens`` truncates answers to that many tokens; ``answer_tokens`` pads or
    cuts the default answer to exactly that many tokens (benchmarks' fixed-length answers).
    ``token_counter(text) -> int`` replaces tiktoken for the reported usage and the
    per-token latency (e.g. ``lambda s: 0`` to keep tokenization out of a CPU benchmark;
    :meth:`count_tokens` stays tiktoken). ``supports_json_mode=True`` makes :meth:`astructured` skip the text-parsing path's prompt
    instruction. With ``response=None``, structured calls answer with an example object built
    from the schema (strings get the default answer, booleans ``true``).

    Records ``.prompts`` (list of str), ``.calls`` (list of :class:`LLMCall`),
    ``.in_flight`` and ``.max_in_flight`` (peak concurrent calls); :meth:`reset` clears them.
    """

    def __init__(
        self,
        response: Responder = None,
        latency: float = 0.0,
        latency_per_token: float = 0.0,
        max_tokens: int | None = None,
        *,
        answer_tokens: int | None = None,
        model: str = "mock",
        supports_json_mode: bool = False,
        encoding: str = "cl100k_base",
        token_counter: Callable[[str], int] | None = None,
    ) -> None:
        if token_counter is not None and not callable(token_counter):
            raise ConfigError(
                f"token_counter must be None (tiktoken) or a function text -> int, "
                f"got {type(token_counter).__name__}"
            )
        if response is not None and not isinstance(response, str) and not callable(response):
            raise ConfigError(
                f"response must be None, a str, or a function prompt -> str; "
                f"got {type(response).__name__}"
            )
        if not isinstance(model, str) or not model:
            raise ConfigError(f"model must be a non-empty str, got {model!r}")
        self.response = response
        self.latency = _check_nonneg("latency", latency)
        self.latency_per_token = _check_nonneg("latency_per_token", latency_per_token)
        self.max_tokens = _check_pos_int("max_tokens", max_tokens)
        self.answer_tokens = _check_pos_int("answer_tokens", answer_tokens)
        self.model = model
        self.supports_json_mode = bool(supports_json_mode)
        self.encoding = encoding
        self.token_counter = token_counter
        self._lock = threading.Lock()
        self.prompts: list[str] = []
        self.calls: list[LLMCall] = []
        self.in_flight = 0
        self.max_in_flight = 0

    # -- recording ------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget recorded prompts, calls and the in-flight peak."""
        with self._lock:
            self.prompts.clear()
            self.calls.clear()
            self.max_in_flight = self.in_flight

    @property
    def n_calls(self) -> int:
        return len(self.calls)

    @property
    def prompt_tokens(self) -> int:
        """Total prompt tokens over all recorded calls."""
        with self._lock:
            return sum(c.prompt_tokens for c in self.calls)

    @property
    def completion_tokens(self) -> int:
        """Total completion tokens over all recorded calls."""
        with self._lock:
            return sum(c.completion_tokens for c in self.calls)

    def _begin(self, prompt: str, kw: dict[str, Any], method: str) -> LLMCall:
        call = LLMCall(prompt=prompt, kwargs=dict(kw), method=method, started=time.perf_counter())
        with self._lock:
            self.prompts.append(prompt)
            self.calls.append(call)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        return call

    def _end(self, call: LLMCall) -> None:
        with self._lock:
            self.in_flight -= 1
            call.ended = time.perf_counter()

    def _usage_count(self, text: str) -> int:
        if self.token_counter is None:
            return self.count_tokens(text)
        n = self.token_counter(text)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(f"token_counter returned {n!r}; it must return an int >= 0")
        return n

    # -- answering ------------------------------------------------------------------------------
    def _shape(self, text: str, default: bool) -> str:
        from fastrag.analysis.tokens import get_encoding

        n = self.answer_tokens if default else None
        if self.max_tokens is not None:
            n = self.max_tokens if n is None else min(n, self.max_tokens)
        if n is None:
            return text
        enc = get_encoding(self.encoding)
        if default and self.answer_tokens is not None:
            # Pad with " a" (one cl100k token each) until long enough, then cut exactly.
            ids = enc.encode_ordinary(text)
            if len(ids) < n:
                text = text + " a" * (n - len(ids))
        ids = enc.encode_ordinary(text)
        return text if len(ids) <= n else enc.decode(ids[:n])

    async def _answer(self, prompt: str, kw: dict[str, Any]) -> str:
        resp = self.response
        if resp is None:
            return self._shape(default_answer(prompt), default=True)
        if isinstance(resp, str):
            return self._shape(resp, default=False)
        out = resp(prompt)
        if inspect.isawaitable(out):
            out = await out
        if not isinstance(out, str):
            raise LLMError(
                f"the response function returned {type(out).__name__}, expected str",
                request={"model": self.model, "prompt": prompt},
            )
        return self._shape(out, default=False)

    async def _run(
        self, prompt: str, kw: dict[str, Any], method: str
    ) -> tuple[LLMCall, Completion]:
        check_prompt(prompt)
        call = self._begin(prompt, kw, method)
        try:
            n_prompt = self._usage_count(prompt)
            call.prompt_tokens = n_prompt
            delay = self.latency + self.latency_per_token * n_prompt
            if delay > 0:
                await asyncio.sleep(delay)
            text = await self._answer(prompt, kw)
            call.response = text
            call.completion_tokens = self._usage_count(text)
            return call, Completion(text, n_prompt, call.completion_tokens)
        except BaseException as exc:
            call.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._end(call)

    async def acomplete_with_usage(self, prompt: str, **kw: Any) -> Completion:
        """Answer ``prompt`` after the simulated latency; usage counted with tiktoken."""
        _, comp = await self._run(prompt, kw, "complete")
        return comp

    async def astream_with_usage(self, prompt: str, **kw: Any) -> AsyncIterator[str | Completion]:
        """The answer in word-sized chunks (``"".join(chunks) == answer``), then the usage."""
        _, comp = await self._run(prompt, kw, "stream")
        for word in _CHUNK.findall(comp.text):
            for i in range(0, len(word), _MAX_CHUNK_CHARS):
                yield word[i : i + _MAX_CHUNK_CHARS]
                await asyncio.sleep(0)
        yield comp

    async def _astructured_text(self, prompt: str, schema: dict, **kw: Any) -> str:
        if self.response is None:
            call, comp = await self._run(prompt, kw, "structured")
            text = json.dumps(_example_value(schema, comp.text), ensure_ascii=False)
            call.response = text
            return text
        _, comp = await self._run(prompt, kw, "structured")
        return comp.text

    async def astructured(
        self, prompt: str, schema: dict, *, instruct: bool | None = None, **kw: Any
    ) -> dict:
        """Like :meth:`BaseLLM.astructured`; ``instruct`` defaults to ``not supports_json_mode``."""
        if instruct is None:
            instruct = not self.supports_json_mode
        return await super().astructured(prompt, schema, instruct=instruct, **kw)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, calls={len(self.calls)})"


class FunctionLLM(MockLLM):
    """An LLM whose answer is ``fn(prompt)`` (sync or async function returning str).

    Same recording, latency and usage accounting as :class:`MockLLM`. ``to_thread=True`` runs
    a blocking sync ``fn`` in a worker thread so concurrent calls overlap.
    """

    def __init__(
        self,
        fn: Callable[[str], str | Awaitable[str]],
        *,
        latency: float = 0.0,
        latency_per_token: float = 0.0,
        max_tokens: int | None = None,
        to_thread: bool = False,
        model: str = "function",
        supports_json_mode: bool = False,
        encoding: str = "cl100k_base",
        token_counter: Callable[[str], int] | None = None,
    ) -> None:
        if not callable(fn):
            raise ConfigError(
                f"FunctionLLM needs a function prompt -> str, got {type(fn).__name__}"
            )
        self.fn = fn
        self.to_thread = bool(to_thread)
        if self.to_thread and not inspect.iscoroutinefunction(fn):

            async def _threaded(prompt: str) -> str:
                return await asyncio.to_thread(fn, prompt)

            responder: Responder = _threaded
        else:
            responder = fn
        super().__init__(
            responder,
            latency=latency,
            latency_per_token=latency_per_token,
            max_tokens=max_tokens,
            model=model,
            supports_json_mode=supports_json_mode,
            encoding=encoding,
            token_counter=token_counter,
        )
