"""LazyLLM's prompters on fastrag's LLMs: ``llm.prompt(ChatPrompter(instruction, extra_keys))``.

A prompter turns one stage input (a str, or a dict such as ``{"query": q, "context_str": c}``)
into the one prompt string fastrag's LLMs take, as LazyLLM's prompters do: the instruction's
``{key}`` placeholders are filled from the dict, each extra key gets its own
``### key:`` section after the instruction, and the one key left over (the query) is the user's
input, on a line of its own after the instruction. :class:`PromptedLLM` (what
:meth:`BaseLLM.prompt <fastrag.llms.base.BaseLLM.prompt>` returns) is a callable stage of a
:func:`fastrag.pipeline`; its :meth:`PromptedLLM.abatch` runs every answer of a batch at once.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastrag._async import run_sync
from fastrag.errors import ConfigError

__all__ = ["AlpacaPrompter", "ChatPrompter", "PromptedLLM", "Prompter"]

_KEY = re.compile(r"\{(\w+)\}")
_EXTRA_HEAD = "Here are some extra messages you can referred to:\n\n"  # LazyLLM's wording
_ALPACA_HEAD = (
    "Below is an instruction that describes a task, paired with extra messages such as "
    "input that provides further context if possible. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\n"
)


def _extra_keys(extra_keys: Any) -> list[str]:
    if extra_keys is None:
        return []
    if isinstance(extra_keys, str):
        extra_keys = [extra_keys]
    if not isinstance(extra_keys, (list, tuple)) or not all(
        isinstance(k, str) and k.isidentifier() for k in extra_keys
    ):
        raise ConfigError(
            f"extra_keys must be a key name or a list of them, such as ['context_str'], "
            f"got {extra_keys!r}"
        )
    return list(extra_keys)


def _extra_block(keys: list[str]) -> str:
    if not keys:
        return ""
    return _EXTRA_HEAD + "".join(f"### {k}:\n{{{k}}}\n\n" for k in keys)


def _instruction_text(instruction: Any) -> str:
    if instruction is None:
        return ""
    if isinstance(instruction, Mapping):  # LazyLLM's {"system": ..., "user": ...}
        unknown = sorted(set(instruction) - {"system", "user"})
        if unknown:
            raise ConfigError(f"instruction dict takes the keys 'system' and 'user', got {unknown}")
        return "\n".join(str(instruction[k]) for k in ("system", "user") if instruction.get(k))
    if not isinstance(instruction, str):
        raise ConfigError(
            f"instruction must be a str (or a dict with 'system'/'user'), "
            f"got {type(instruction).__name__}"
        )
    return instruction


class Prompter:
    """Base of the prompters: a template with ``{key}`` slots; :meth:`generate_prompt`."""

    def __init__(self, template: str, *, leftover_input: bool) -> None:
        self.template = template
        self.keys = list(dict.fromkeys(_KEY.findall(template)))
        self.leftover_input = leftover_input

    def _split(self, value: Any) -> tuple[str, str]:
        """(the template filled in, the user's input left over)."""
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            if len(self.keys) == 1:
                return self.template.replace("{" + self.keys[0] + "}", str(value)), ""
            if self.keys:
                raise ConfigError(
                    f"the prompt has the slots {self.keys}; pass a dict with those keys "
                    f"(and the query), got a single {type(value).__name__}"
                )
            return self.template, str(value)
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"a prompted LLM takes a str or a dict such as {{'query': ..., "
                f"'context_str': ...}}, got {type(value).__name__}"
            )
        missing = [k for k in self.keys if k not in value]
        if missing:
            raise ConfigError(
                f"the input dict lacks the prompt's key(s) {missing} (it has {sorted(value)}); "
                f"add them, e.g. with a formatter stage returning dict({missing[0]}=...)"
            )
        rest = [k for k in value if k not in self.keys]
        if len(rest) > 1:
            raise ConfigError(
                f"the input dict has the keys {rest} beyond the prompt's {self.keys}; only one "
                f"(the query) may be left over: name the others in extra_keys"
            )
        filled = self.template
        for k in self.keys:
            filled = filled.replace("{" + k + "}", str(value[k]))
        return filled, (str(value[rest[0]]) if rest else "")

    def generate_prompt(self, value: Any) -> str:
        """The prompt string for one input (a str or a dict)."""
        raise NotImplementedError


class ChatPrompter(Prompter):
    """LazyLLM's ``ChatPrompter(instruction, extra_keys)``: the instruction with its ``{key}``
    slots filled, one ``### key:`` section per extra key, then the query on its own line."""

    def __init__(
        self,
        instruction: str | Mapping[str, str] | None = None,
        extra_keys: str | Sequence[str] | None = None,
        show: bool = False,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise ConfigError(
                f"ChatPrompter does not take {sorted(kwargs)} in fastrag (tools and history "
                f"belong to chat engines: fastrag.ChatEngine); pass instruction and extra_keys"
            )
        text = _instruction_text(instruction)
        self.instruction = text
        self.extra_keys = _extra_keys(extra_keys)
        self.show = bool(show)
        template = f"{text}\n{_extra_block(self.extra_keys)}" if text else ""
        if not text and self.extra_keys:
            template = _extra_block(self.extra_keys)
        super().__init__(template, leftover_input=True)

    def generate_prompt(self, value: Any) -> str:
        filled, user = self._split(value)
        head = filled.rstrip("\n")
        return f"{head}\n{user}" if head and user else head or user

    def __repr__(self) -> str:
        return f"ChatPrompter(instruction={self.instruction!r}, extra_keys={self.extra_keys!r})"


class AlpacaPrompter(Prompter):
    """LazyLLM's ``AlpacaPrompter``: the Alpaca preamble, ``### Instruction:``, the extra
    keys' sections and ``### Response:``; every input key must be a slot or an extra key."""

    def __init__(
        self,
        instruction: str | Mapping[str, str] | None = None,
        extra_keys: str | Sequence[str] | None = None,
        show: bool = False,
    ) -> None:
        text = _instruction_text(instruction)
        self.instruction = text
        self.extra_keys = _extra_keys(extra_keys)
        self.show = bool(show)
        super().__init__(
            _ALPACA_HEAD + text + "\n\n" + _extra_block(self.extra_keys), leftover_input=False
        )

    def generate_prompt(self, value: Any) -> str:
        filled, user = self._split(value)
        if user:
            raise ConfigError(
                f"AlpacaPrompter takes every input as a slot of the instruction or an extra "
                f"key (as in LazyLLM); {user[:40]!r} has none: add '{{input}}' to the "
                f"instruction or use ChatPrompter"
            )
        return filled.rstrip("\n") + "\n\n### Response:\n"

    def __repr__(self) -> str:
        return f"AlpacaPrompter(instruction={self.instruction!r}, extra_keys={self.extra_keys!r})"


class PromptedLLM:
    """An LLM with a prompter: ``stage(value) -> str`` renders ``value`` with the prompter and
    asks the LLM; :meth:`abatch` answers a whole batch concurrently (the LLM's own
    ``max_concurrency`` bounds the requests in flight). ``.llm`` and ``.prompter`` are the
    parts; :meth:`prompt` / :meth:`share` make another stage on the same LLM."""

    def __init__(self, llm: Any, prompter: Prompter | None = None, **call_kwargs: Any) -> None:
        if not callable(getattr(llm, "acomplete", None)):
            raise ConfigError(
                f"a prompted LLM needs a fastrag LLM (with acomplete), got {type(llm).__name__}"
            )
        if prompter is not None and not isinstance(prompter, Prompter):
            if isinstance(prompter, (str, Mapping)):
                prompter = ChatPrompter(prompter)
            else:
                raise ConfigError(
                    f"prompt() takes a ChatPrompter, an AlpacaPrompter, an instruction str or "
                    f"None, got {type(prompter).__name__}"
                )
        self.llm = llm
        self.prompter = prompter
        self.call_kwargs = dict(call_kwargs)

    def render(self, value: Any) -> str:
        """The prompt string sent for ``value``."""
        if self.prompter is None:
            if not isinstance(value, str):
                raise ConfigError(
                    f"an LLM without a prompter takes a str, got {type(value).__name__}; "
                    f"use llm.prompt(ChatPrompter(instruction, extra_keys=[...])) for a dict"
                )
            return value
        return self.prompter.generate_prompt(value)

    async def acall(self, value: Any, **kw: Any) -> str:
        """Answer one input."""
        return await self.llm.acomplete(self.render(value), **{**self.call_kwargs, **kw})

    async def abatch(self, values: Sequence[Any], **kw: Any) -> list[str]:
        """Answer every input, all requests started at once."""
        prompts = [self.render(v) for v in values]  # a bad input fails before any request
        args = {**self.call_kwargs, **kw}
        return list(await asyncio.gather(*(self.llm.acomplete(p, **args) for p in prompts)))

    def __call__(self, value: Any, **kw: Any) -> str:
        return run_sync(self.acall(value, **kw))

    def batch(self, values: Sequence[Any], **kw: Any) -> list[str]:
        """Sync :meth:`abatch`."""
        return run_sync(self.abatch(list(values), **kw))

    def prompt(self, prompter: Prompter | str | None = None) -> PromptedLLM:
        """The same LLM with another prompter (a new stage; this one is unchanged)."""
        return PromptedLLM(self.llm, prompter, **self.call_kwargs)

    share = prompt  # LazyLLM's llm.share(prompter): one model, several prompts

    def __repr__(self) -> str:
        return f"PromptedLLM({self.llm!r}, {self.prompter!r})"
