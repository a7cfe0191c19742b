"""``FunctionLLM``: an LLM whose answer is a Python function of the prompt.

It is what :func:`~fastrag.llms.resolve.resolve_llm` wraps a plain ``fn(prompt) -> str``
in, and the base of the test doubles in :mod:`fastrag.llms.mock`. The code path is the one
every LLM uses (async core, sync wrappers, streaming, structured output, usage accounting).
Every call is recorded (thread- and loop-safe) with the peak number of concurrent calls, so
callers can count calls and check concurrency bounds; usage is counted with tiktoken (or
``token_counter``).
"""

from __future__ import annotations

import asyncio
import inspect
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastrag._async import to_thread
from fastrag._checks import check_int, check_number, check_str
from fastrag.analysis.tokens import get_encoding
from fastrag.errors import ConfigError
from fastrag.llms.base import BaseLLM, Completion, LLMError, check_prompt

__all__ = ["FunctionLLM", "LLMCall"]

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


class FunctionLLM(BaseLLM):
    """An LLM whose answer is ``fn(prompt)`` (sync or async function returning str).

    ``latency`` seconds plus ``latency_per_token`` seconds per prompt token are slept
    (``asyncio.sleep``) before each answer; ``max_tokens`` truncates answers to that many
    tokens. A sync ``fn`` runs in a worker thread (never on the event loop's thread, so it may
    call fastrag's sync API and concurrent calls overlap); ``to_thread=False`` calls it on the
    loop instead (for a trivial ``fn``: no thread hop). ``token_counter(text) -> int`` replaces
    tiktoken for the reported usage and the per-token latency (:meth:`count_tokens` stays
    tiktoken). ``supports_json_mode=True`` makes :meth:`astructured` skip the text-parsing
    path's prompt instruction.

    Records ``.prompts`` (list of str), ``.calls`` (list of :class:`LLMCall`),
    ``.in_flight`` and ``.max_in_flight`` (peak concurrent calls); :meth:`reset` clears them.
    """

    def __init__(
        self,
        fn: Callable[[str], str | Awaitable[str]],
        *,
        latency: float = 0.0,
        latency_per_token: float = 0.0,
        max_tokens: int | None = None,
        to_thread: bool = True,
        model: str = "function",
        supports_json_mode: bool = False,
        encoding: str = "cl100k_base",
        token_counter: Callable[[str], int] | None = None,
    ) -> None:
        if not callable(fn):
            raise ConfigError(
                f"FunctionLLM needs a function prompt -> str, got {type(fn).__name__}"
            )
        if token_counter is not None and not callable(token_counter):
            raise ConfigError(
                f"token_counter must be None (tiktoken) or a function text -> int, "
                f"got {type(token_counter).__name__}"
            )
        self.fn = fn
        self.to_thread = bool(to_thread)
        self.latency = check_number("latency", latency, min=0, note="seconds")
        self.latency_per_token = check_number(
            "latency_per_token", latency_per_token, min=0, note="seconds"
        )
        self.max_tokens = check_int("max_tokens", max_tokens, min=1, none=True)
        self.model = check_str("model", model)
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
    def _cut(self, text: str, n: int | None) -> str:
        """``text`` cut to at most ``n`` tokens (None: unchanged)."""
        if n is None:
            return text
        enc = get_encoding(self.encoding)
        ids = enc.encode_ordinary(text)
        return text if len(ids) <= n else enc.decode(ids[:n])

    def _shape(self, text: str) -> str:
        """The answer as returned: ``fn``'s text cut to ``max_tokens``."""
        return self._cut(text, self.max_tokens)

    async def _answer(self, prompt: str, kw: dict[str, Any]) -> str:
        fn = self.fn
        if self.to_thread and not inspect.iscoroutinefunction(fn):
            out: Any = await to_thread(fn, prompt)
        else:
            out = fn(prompt)
        if inspect.isawaitable(out):
            out = await out
        if not isinstance(out, str):
            raise LLMError(
                f"the response function returned {type(out).__name__}, expected str",
                request={"model": self.model, "prompt": prompt},
            )
        return self._shape(out)

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

    async def _astructured_completion(self, prompt: str, schema: dict, **kw: Any) -> Completion:
        _, comp = await self._run(prompt, kw, "structured")
        return comp

    async def astructured(
        self, prompt: str, schema: dict, *, instruct: bool | None = None, **kw: Any
    ) -> dict:
        """Like :meth:`BaseLLM.astructured`; ``instruct`` defaults to ``not supports_json_mode``."""
        return (await self.astructured_with_usage(prompt, schema, instruct=instruct, **kw))[0]

    async def astructured_with_usage(
        self, prompt: str, schema: dict, *, instruct: bool | None = None, **kw: Any
    ) -> tuple[dict, Completion]:
        if instruct is None:
            instruct = not self.supports_json_mode
        return await super().astructured_with_usage(prompt, schema, instruct=instruct, **kw)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, calls={len(self.calls)})"
