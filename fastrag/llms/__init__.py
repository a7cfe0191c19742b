"""LLMs: the :class:`BaseLLM` interface (async core, sync wrappers), an OpenAI-compatible
HTTP client (:class:`OpenAILike`) and deterministic test doubles (:class:`MockLLM`,
:class:`FunctionLLM`)."""

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
    resolve_llm,
)
from fastrag.llms.mock import FunctionLLM, LLMCall, MockLLM, default_answer
from fastrag.llms.openai_like import OpenAILike

__all__ = [
    "LLM",
    "BaseLLM",
    "Completion",
    "FunctionLLM",
    "LLMCall",
    "LLMError",
    "LLMProtocol",
    "LLMTimeoutError",
    "MockLLM",
    "OpenAILike",
    "StructuredOutputError",
    "check_schema",
    "default_answer",
    "parse_json_object",
    "resolve_llm",
]
