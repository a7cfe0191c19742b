"""The LLM interface: one async core per model, sync wrappers on top.

A concrete LLM implements :meth:`BaseLLM.acomplete_with_usage` (and, if it can stream,
:meth:`BaseLLM.astream_with_usage`); everything else -- ``acomplete``, ``astream``,
``astructured`` and the sync ``complete`` / ``stream`` / ``structured`` -- is derived.
Anything with an async ``acomplete(prompt, **kw) -> str`` satisfies :class:`LLMProtocol`;
:func:`fastrag.llms.resolve.resolve_llm` wraps such objects (or plain functions) into a
:class:`BaseLLM`.
"""

from __future__ import annotations

import abc
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from fastrag._async import iter_sync, run_sync
from fastrag._checks import check_str
from fastrag.analysis.tokens import count_tokens, count_tokens_batch
from fastrag.errors import ConfigError, FastragError
from fastrag.llms.prompter import PromptedLLM, Prompter

__all__ = [
    "LLM",
    "BaseLLM",
    "Completion",
    "LLMError",
    "LLMProtocol",
    "LLMTimeoutError",
    "StructuredOutputError",
    "check_prompt",
    "check_schema",
    "parse_json_object",
    "schema_instruction",
]

_PROMPT_HEAD = 80


@dataclass
class Completion:
    """One LLM answer with its token usage (as reported by the server, else counted)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    raw: dict | None = None
    finish_reason: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def prompt_head(prompt: str, n: int = _PROMPT_HEAD) -> str:
    """The first ``n`` characters of a prompt, one line, for error messages."""
    flat = " ".join(str(prompt).split())
    return flat if len(flat) <= n else flat[: n - 3] + "..."


class LLMError(FastragError, RuntimeError):
    """An LLM call failed (after retries). ``.request`` names it, ``.status`` is the last
    HTTP status (None for timeouts, connection errors and non-HTTP LLMs)."""

    def __init__(
        self,
        message: str,
        *,
        request: dict[str, Any] | None = None,
        status: int | None = None,
        attempts: int | None = None,
    ) -> None:
        self.request = dict(request or {})
        self.status = status
        self.attempts = attempts
        parts = [f"{k}={self.request[k]!r}" for k in ("model", "url") if self.request.get(k)]
        if "prompt" in self.request:
            parts.append(f"prompt={prompt_head(self.request['prompt'])!r}")
        if status is not None:
            parts.append(f"status={status}")
        if attempts is not None:
            parts.append(f"attempts={attempts}")
        self.message = message
        super().__init__(f"{message} [{', '.join(parts)}]" if parts else message)


class LLMTimeoutError(LLMError):
    """The LLM did not answer within the timeout (after retries)."""


class StructuredOutputError(LLMError, ValueError):
    """The LLM's answer is not a JSON object matching the requested schema."""


# ----------------------------------------------------------------------------------------------
# Tolerant JSON parsing for structured output
# ----------------------------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json|JSON|javascript)?\s*\n?(.*?)```", re.DOTALL)


def balanced_spans(text: str, open_ch: str = "{", close_ch: str = "}") -> Iterator[str]:
    """Every top-level ``open_ch ... close_ch`` substring (string-literal aware), in order."""
    depth, start, in_str, esc = 0, -1, False, False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"' and depth > 0:
            in_str = True
        elif ch == open_ch:
            if depth == 0:
                start = i
            depth += 1
        elif ch == close_ch and depth > 0:
            depth -= 1
            if depth == 0:
                yield text[start : i + 1]


def _loads_lenient(s: str) -> Any:
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        pass
    except RecursionError:
        raise ValueError("the JSON nests too deeply to read") from None
    # Trailing commas and Python literals, the two most common near-JSON slips.
    fixed = re.sub(r",\s*([}\]])", r"\1", s)
    fixed = re.sub(r"\bTrue\b", "true", re.sub(r"\bFalse\b", "false", fixed))
    fixed = re.sub(r"\bNone\b", "null", fixed)
    return json.loads(fixed)


def parse_json_object(text: str) -> dict:
    """The JSON object in an LLM answer: the whole text, a fenced code block, or the first
    balanced ``{...}`` in it; tolerates trailing commas and Python ``True/False/None``.
    Raises ``ValueError`` when there is none."""
    if not isinstance(text, str):
        raise TypeError(f"expected the LLM's text answer, got {type(text).__name__}")
    candidates = [text.strip()]
    candidates += [m.group(1).strip() for m in _FENCE.finditer(text)]
    candidates += list(balanced_spans(text))
    for cand in candidates:
        if not cand:
            continue
        try:
            value = _loads_lenient(cand)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(value, dict):
            return value
    raise ValueError(f"no JSON object found in the answer {prompt_head(text, 120)!r}")


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}
_TRUE = {"true", "yes", "y", "1"}
_FALSE = {"false", "no", "n", "0"}


def _coerce(value: Any, typ: str) -> Any:
    """Coerce the usual LLM slips ("true" for true, "3" for 3); else return value unchanged."""
    if typ == "boolean" and isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    if typ in ("integer", "number") and isinstance(value, str):
        try:
            num = float(value.strip())
        except ValueError:
            return value
        if typ == "integer" and num.is_integer():
            return int(num)
        return num if typ == "number" else value
    if typ == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


def check_schema(obj: dict, schema: dict) -> dict:
    """Check (and lightly coerce) a parsed object against a flat JSON schema.

    Enforces ``required`` keys and the ``type`` of each listed property (string, boolean,
    integer, number, array, object, null, or a list of them). Returns a new dict; raises
    ``ValueError`` naming the offending key.
    """
    if not isinstance(obj, dict):
        raise TypeError(f"expected a JSON object, got {type(obj).__name__}")
    out = dict(obj)
    props = schema.get("properties") or {}
    for key in schema.get("required") or []:
        if key not in out:
            raise ValueError(f"missing required key {key!r} (got keys {sorted(out)})")
    for key, spec in props.items():
        if key not in out or not isinstance(spec, dict) or "type" not in spec:
            continue
        types = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
        value = out[key]
        for typ in types:
            cand = _coerce(value, typ)
            py = _TYPES.get(typ)
            if py is None:
                break  # unknown type name: do not judge
            if isinstance(cand, py) and not (
                typ in ("integer", "number") and isinstance(cand, bool)
            ):
                out[key] = cand
                break
        else:
            raise ValueError(
                f"key {key!r} should be of type {'/'.join(types)}, got {type(value).__name__} "
                f"{value!r}"
            )
    return out


def schema_instruction(schema: dict) -> str:
    """The sentence appended to a prompt to ask for JSON output matching ``schema``."""
    return (
        "\n\nRespond with only a JSON object (no prose, no code fence) that matches this "
        f"JSON schema:\n{json.dumps(schema, ensure_ascii=False)}"
    )


# ----------------------------------------------------------------------------------------------
# Base class and protocol
# ----------------------------------------------------------------------------------------------


def check_prompt(prompt: Any) -> str:
    """Validate a prompt argument (a string) and return it."""
    return check_str("prompt", prompt, empty=True, fix="format the template first")


def _check_schema_arg(schema: Any) -> dict:
    if not isinstance(schema, dict) or not schema:
        raise ConfigError(
            f"schema must be a non-empty JSON-schema dict such as "
            f"{{'type': 'object', 'properties': {{...}}}}, got {schema!r}"
        )
    return schema


@runtime_checkable
class LLMProtocol(Protocol):
    """Duck type of an LLM: anything with these methods works where fastrag wants an LLM."""

    async def acomplete(self, prompt: str, **kw: Any) -> str: ...

    def astream(self, prompt: str, **kw: Any) -> AsyncIterator[str]: ...


class BaseLLM(abc.ABC):
    """Base class of fastrag LLMs. Subclasses implement :meth:`acomplete_with_usage`.

    Attributes: ``model`` (name), ``supports_json_mode`` (the backend can be asked for JSON
    directly), ``encoding`` (tiktoken encoding for :meth:`count_tokens`).
    """

    model: str = "unknown"
    supports_json_mode: bool = False
    encoding: str = "cl100k_base"

    # -- the async core ---------------------------------------------------------------------
    @abc.abstractmethod
    async def acomplete_with_usage(self, prompt: str, **kw: Any) -> Completion:
        """Answer ``prompt``; return the text with its token usage."""

    async def acomplete(self, prompt: str, **kw: Any) -> str:
        """Answer ``prompt`` with text."""
        return (await self.acomplete_with_usage(prompt, **kw)).text

    async def astream_with_usage(self, prompt: str, **kw: Any) -> AsyncIterator[str | Completion]:
        """Yield the answer as text chunks (``str``), then one final :class:`Completion`
        holding the full text and usage. Default: the chunks of an overridden
        :meth:`astream` (usage counted with tiktoken), else one chunk from
        ``acomplete_with_usage``; streaming backends override this."""
        if type(self).astream is not BaseLLM.astream:
            parts: list[str] = []
            async for chunk in self.astream(prompt, **kw):
                parts.append(chunk)
                yield chunk
            text = "".join(parts)
            yield Completion(text, self.count_tokens(prompt), self.count_tokens(text))
            return
        comp = await self.acomplete_with_usage(prompt, **kw)
        if comp.text:
            yield comp.text
        yield comp

    async def astream(self, prompt: str, **kw: Any) -> AsyncIterator[str]:
        """Yield the answer as text chunks (an async generator: ``async for c in ...``)."""
        agen = self.astream_with_usage(prompt, **kw)
        try:
            async for item in agen:
                if isinstance(item, str):
                    yield item
        finally:
            await agen.aclose()

    async def astructured(
        self, prompt: str, schema: dict, *, instruct: bool = True, **kw: Any
    ) -> dict:
        """Answer ``prompt`` with a JSON object matching ``schema`` (a flat JSON schema).

        Uses the backend's JSON mode where ``supports_json_mode``, and parses the text answer
        tolerantly (code fences, surrounding prose) otherwise. ``instruct=True`` appends a
        sentence with the schema to the prompt. Raises :class:`StructuredOutputError`.
        """
        return (await self.astructured_with_usage(prompt, schema, instruct=instruct, **kw))[0]

    async def astructured_with_usage(
        self, prompt: str, schema: dict, *, instruct: bool = True, **kw: Any
    ) -> tuple[dict, Completion]:
        """:meth:`astructured` plus the call's :class:`Completion`: its usage counts what was
        sent (the schema instruction included), as the server reported it where it does."""
        check_prompt(prompt)
        _check_schema_arg(schema)
        full = prompt + schema_instruction(schema) if instruct else prompt
        comp = await self._astructured_completion(full, schema, **kw)
        try:
            return check_schema(parse_json_object(comp.text), schema), comp
        except (ValueError, TypeError) as exc:
            raise StructuredOutputError(
                f"the LLM's answer is not a JSON object matching the schema: {exc}",
                request={"model": self.model, "prompt": prompt},
            ) from None

    async def _astructured_completion(self, prompt: str, schema: dict, **kw: Any) -> Completion:
        """The raw answer to a structured request with its usage; JSON-mode backends override
        this (or :meth:`_astructured_text`, whose usage is then counted with tiktoken)."""
        if type(self)._astructured_text is not BaseLLM._astructured_text:
            text = await self._astructured_text(prompt, schema, **kw)
            return Completion(text, self.count_tokens(prompt), self.count_tokens(text))
        return await self.acomplete_with_usage(prompt, **kw)

    async def _astructured_text(self, prompt: str, schema: dict, **kw: Any) -> str:
        """Text answer for a structured request."""
        return (await self.acomplete_with_usage(prompt, **kw)).text

    # -- sync wrappers ------------------------------------------------------------------------
    def complete_with_usage(self, prompt: str, **kw: Any) -> Completion:
        """Sync :meth:`acomplete_with_usage` (works inside a running event loop too)."""
        return run_sync(self.acomplete_with_usage(prompt, **kw))

    def complete(self, prompt: str, **kw: Any) -> str:
        """Sync :meth:`acomplete` (works inside a running event loop too)."""
        return run_sync(self.acomplete(prompt, **kw))

    def stream(self, prompt: str, **kw: Any) -> Iterator[str]:
        """Sync :meth:`astream`: an iterator of text chunks."""
        return iter_sync(self.astream(prompt, **kw))

    def structured(self, prompt: str, schema: dict, **kw: Any) -> dict:
        """Sync :meth:`astructured`."""
        return run_sync(self.astructured(prompt, schema, **kw))

    # -- LazyLLM's prompted stage -------------------------------------------------------------
    def prompt(self, prompter: Prompter | str | None = None, **kw: Any) -> BaseLLM:
        """Set this LLM's prompter, as LazyLLM's ``llm.prompt(ChatPrompter(...))`` does, and
        return the LLM: called as a function (``llm(value)``) or as a :func:`fastrag.pipeline`
        stage it renders a str or a dict with the prompter; ``kw`` go to every such call.
        fastrag's own pipelines and synthesizers send their prompts as before (the prompter
        is not used there). :meth:`share` gives another prompter without changing this one."""
        self.__dict__["_lazyllm_stage"] = PromptedLLM(self, prompter, **kw)
        return self

    def share(self, prompter: Prompter | str | None = None, **kw: Any) -> PromptedLLM:
        """LazyLLM's ``llm.share(prompter)``: a stage on this same LLM with its own prompter;
        this LLM's own prompter (:meth:`prompt`) is unchanged."""
        return PromptedLLM(self, prompter, **kw)

    def stage(self) -> PromptedLLM:
        """This LLM as a callable stage: its prompter from :meth:`prompt`, or none (the stage
        then takes a prompt str)."""
        return self.__dict__.get("_lazyllm_stage") or PromptedLLM(self)

    def __call__(self, value: Any, **kw: Any) -> str:
        """LazyLLM's ``llm(value)``: ``value`` (a str, or a dict for a prompter with extra
        keys) rendered with this LLM's prompter and answered."""
        return self.stage()(value, **kw)

    # -- tokens ---------------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` with this LLM's tiktoken encoding."""
        return count_tokens(text, self.encoding)

    def count_tokens_batch(self, texts: list[str]) -> list[int]:
        """Token counts of many texts in one tiktoken call."""
        return count_tokens_batch(texts, self.encoding)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"


LLM = BaseLLM
