"""Deterministic LLM test doubles: :class:`MockLLM` (and :class:`FunctionLLM`, re-exported).

They stand in for a model's *content* only: the code path (async core, sync wrappers,
streaming, structured output, usage accounting) is the one real LLMs use. ``MockLLM`` is a
:class:`~fastrag.llms.function.FunctionLLM` whose function is a canned answer. This module
is test support: production code never imports it (it imports production code).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastrag._checks import check_int
from fastrag.analysis.tokens import get_encoding
from fastrag.errors import ConfigError
from fastrag.llms.base import Completion
from fastrag.llms.function import FunctionLLM

__all__ = ["MockLLM", "default_answer"]

Responder = str | Callable[[str], str | Awaitable[str]] | None


def default_answer(prompt: str) -> str:
    """The deterministic default answer of :class:`MockLLM`: a hash of the prompt plus its
    last non-empty line (up to 60 characters)."""
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:8]
    lines = [ln.strip() for ln in prompt.splitlines() if ln.strip()]
    tail = lines[-1][:60] if lines else ""
    return f"Answer {digest}: {tail}" if tail else f"Answer {digest}."


def _fixed_answer(text: str, prompt: str) -> str:
    return text


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


class MockLLM(FunctionLLM):
    """A deterministic fake LLM.

    ``response``: None (answer with :func:`default_answer` of the prompt), a fixed string, or
    a callable ``fn(prompt) -> str`` (sync or async). ``latency`` seconds plus
    ``latency_per_token`` seconds per prompt token are slept (``asyncio.sleep``) before each
    answer. ``max_tokens`` truncates answers to that many tokens; ``answer_tokens`` pads or
    cuts the default answer to exactly that many tokens (benchmarks' fixed-length answers).
    ``token_counter(text) -> int`` replaces tiktoken for the reported usage and the
    per-token latency (e.g. ``lambda s: 0`` to keep tokenization out of a CPU benchmark;
    :meth:`count_tokens` stays tiktoken). ``supports_json_mode=True`` makes
    :meth:`astructured` skip the text-parsing path's prompt instruction. With
    ``response=None``, structured calls answer with an example object built from the schema
    (strings get the default answer, booleans ``true``).

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
        if response is None:
            fn: Callable[[str], Any] = default_answer
        elif isinstance(response, str):
            fn = functools.partial(_fixed_answer, response)
        elif callable(response):
            fn = response
        else:
            raise ConfigError(
                f"response must be None, a str, or a function prompt -> str; "
                f"got {type(response).__name__}"
            )
        super().__init__(
            fn,
            latency=latency,
            latency_per_token=latency_per_token,
            max_tokens=max_tokens,
            model=model,
            supports_json_mode=supports_json_mode,
            encoding=encoding,
            token_counter=token_counter,
        )
        self.response = response
        self.answer_tokens = check_int("answer_tokens", answer_tokens, min=1, none=True)

    def _shape(self, text: str) -> str:
        if self.response is not None or self.answer_tokens is None:
            return super()._shape(text)
        # The default answer, padded with " a" (one cl100k token each) then cut exactly.
        n = self.answer_tokens
        if self.max_tokens is not None:
            n = min(n, self.max_tokens)
        missing = n - len(get_encoding(self.encoding).encode_ordinary(text))
        if missing > 0:
            text = text + " a" * missing
        return self._cut(text, n)

    async def _astructured_completion(self, prompt: str, schema: dict, **kw: Any) -> Completion:
        if self.response is None:
            call, comp = await self._run(prompt, kw, "structured")
            text = json.dumps(_example_value(schema, comp.text), ensure_ascii=False)
            call.response = text
            call.completion_tokens = self._usage_count(text)
            return Completion(text, comp.prompt_tokens, call.completion_tokens)
        return await super()._astructured_completion(prompt, schema, **kw)
