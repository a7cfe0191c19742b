"""``resolve_llm``: a :class:`~fastrag.llms.base.BaseLLM` from whatever the caller passed
(a fastrag LLM, a duck-typed object with an async ``acomplete``, or a plain function)."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any

from fastrag.errors import ConfigError
from fastrag.llms.base import BaseLLM, Completion, LLMError, check_prompt
from fastrag.llms.function import FunctionLLM

__all__ = ["resolve_llm"]


class _ProtocolLLM(BaseLLM):
    """Adapts a duck-typed LLM (``acomplete`` and maybe ``astream``) to :class:`BaseLLM`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model = str(getattr(inner, "model", type(inner).__name__))
        self.encoding = str(getattr(inner, "encoding", BaseLLM.encoding))

    async def acomplete_with_usage(self, prompt: str, **kw: Any) -> Completion:
        text = await self.inner.acomplete(check_prompt(prompt), **kw)
        if not isinstance(text, str):
            raise LLMError(
                f"{type(self.inner).__name__}.acomplete returned {type(text).__name__}, "
                "expected str",
                request={"model": self.model, "prompt": prompt},
            )
        return Completion(text, self.count_tokens(prompt), self.count_tokens(text))

    async def astream_with_usage(self, prompt: str, **kw: Any) -> AsyncIterator[str | Completion]:
        if not hasattr(self.inner, "astream"):
            async for item in super().astream_with_usage(prompt, **kw):
                yield item
            return
        parts: list[str] = []
        async for chunk in self.inner.astream(check_prompt(prompt), **kw):
            parts.append(chunk)
            yield chunk
        text = "".join(parts)
        yield Completion(text, self.count_tokens(prompt), self.count_tokens(text))


def resolve_llm(llm: Any) -> BaseLLM:
    """A :class:`BaseLLM` from an LLM, a duck-typed object with async ``acomplete``, or a
    function ``fn(prompt) -> str`` (sync or async; wrapped in ``FunctionLLM``)."""
    if isinstance(llm, BaseLLM):
        return llm
    if llm is None:
        raise ConfigError(
            "no LLM given; pass llm=OpenAILike(model, base_url) or llm=MockLLM() for tests"
        )
    acomplete = getattr(llm, "acomplete", None)
    if acomplete is not None and inspect.iscoroutinefunction(acomplete):
        return _ProtocolLLM(llm)
    if callable(llm):
        return FunctionLLM(llm)
    raise ConfigError(
        f"llm must be a fastrag LLM, an object with an async acomplete(prompt) method, or a "
        f"function prompt -> str; got {type(llm).__name__}"
    )
