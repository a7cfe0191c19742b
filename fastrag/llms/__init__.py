"""LLMs: the :class:`BaseLLM` interface (async core, sync wrappers), an OpenAI-compatible
HTTP client (:class:`OpenAILike`), the function adapter (:class:`FunctionLLM`, what
``resolve_llm(fn)`` returns) and deterministic test doubles (:class:`MockLLM`).

Modules: ``base`` (interface, errors, JSON parsing), ``function`` (FunctionLLM),
``openai_like`` (HTTP client; loaded on first use of ``OpenAILike``, so code that never calls
an HTTP LLM does not import httpx), ``resolve`` (resolve_llm), ``usage`` (:class:`Usage`, the
meter of LLM calls and tokens), ``prompter`` (LazyLLM's ChatPrompter/AlpacaPrompter and
:class:`PromptedLLM`, what ``llm.prompt(...)`` returns); ``mock`` (test doubles) imports
them, never the reverse.
"""

from typing import Any

from fastrag.llms.base import (
    LLM,
    BaseLLM,
    Completion,
    LLMError,
    LLMProtocol,
    LLMTimeoutError,
    StructuredOutputError,
    check_schema,
    parse_json_object,
)
from fastrag.llms.function import FunctionLLM, LLMCall
from fastrag.llms.mock import MockLLM, default_answer
from fastrag.llms.prompter import AlpacaPrompter, ChatPrompter, PromptedLLM, Prompter
from fastrag.llms.resolve import resolve_llm
from fastrag.llms.usage import Usage

__all__ = [
    "LLM",
    "AlpacaPrompter",
    "BaseLLM",
    "ChatPrompter",
    "Completion",
    "FunctionLLM",
    "LLMCall",
    "LLMError",
    "LLMProtocol",
    "LLMTimeoutError",
    "MockLLM",
    "OpenAILike",
    "PromptedLLM",
    "Prompter",
    "StructuredOutputError",
    "Usage",
    "check_schema",
    "default_answer",
    "parse_json_object",
    "resolve_llm",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAILike":
        from fastrag.llms.openai_like import OpenAILike  # lazy: httpx, only for HTTP LLMs

        return OpenAILike
    raise AttributeError(f"module 'fastrag.llms' has no attribute {name!r}")
