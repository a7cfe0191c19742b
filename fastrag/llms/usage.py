"""``Usage``: LLM calls and tokens, the one meter every stage counts with.

Query components, synthesizers and the pipeline each keep one :class:`Usage` per query (and
stage); :meth:`Usage.record` counts one call from what the LLM reported, :meth:`Usage.add`
and :meth:`Usage.total` merge meters, :meth:`Usage.as_dict` is what ``Response.metadata``
shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["TokenCounts", "Usage"]


class TokenCounts(Protocol):
    """What one LLM call reports (a :class:`fastrag.llms.base.Completion`)."""

    prompt_tokens: int
    completion_tokens: int


@dataclass
class Usage:
    """LLM calls and tokens of one query in one stage (or a sum of such)."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def record(self, completion: TokenCounts) -> None:
        """Count one LLM call with the tokens it reported."""
        self.llm_calls += 1
        self.prompt_tokens += int(completion.prompt_tokens)
        self.completion_tokens += int(completion.completion_tokens)

    def add(self, other: Usage) -> None:
        """Add another meter's counts to this one."""
        self.llm_calls += other.llm_calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        out = Usage(self.llm_calls, self.prompt_tokens, self.completion_tokens)
        out.add(other)
        return out

    @classmethod
    def total(cls, usages: Iterable[Usage]) -> Usage:
        """The sum of many meters (an empty one for none)."""
        out = cls()
        for u in usages:
            out.add(u)
        return out

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> Usage:
        """The counts a ``Response.metadata`` dict carries (a missing key counts 0)."""
        return cls(
            metadata.get("llm_calls", 0),
            metadata.get("prompt_tokens", 0),
            metadata.get("completion_tokens", 0),
        )

    def as_dict(self) -> dict[str, int]:
        """``{"llm_calls", "prompt_tokens", "completion_tokens"}``."""
        return {
            "llm_calls": self.llm_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }
