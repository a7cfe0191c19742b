"""How a synthesizer's LLM calls run and are counted.

Every call goes through :class:`MeteredLLM`, a wrapper around the user's LLM: it holds a slot
of the synthesizer's ``Semaphore(max_concurrency)`` (one per event loop, so all queries of a
batch share it) and counts the call in the *current query's* :class:`QueryRecord` (a
``ContextVar``, so concurrent queries never mix their metadata). :func:`note` adds a
mode-specific fact to that record; :func:`gather_all` runs a query's calls at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fastrag.llms.base import BaseLLM, Completion
from fastrag.llms.usage import Usage

__all__ = ["MeteredLLM", "QueryRecord", "current_record", "gather_all", "note", "recording"]


@dataclass
class QueryRecord:
    """One query's LLM usage and the facts its response mode noted."""

    usage: Usage = field(default_factory=Usage)
    notes: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """``Response.metadata`` entries: the usage counts, then the notes."""
        return {**self.usage.as_dict(), **self.notes}


_RECORD: contextvars.ContextVar[QueryRecord | None] = contextvars.ContextVar(
    "fastrag_synth_usage", default=None
)


def current_record() -> QueryRecord | None:
    """The record of the query being synthesized in this context (None outside one)."""
    return _RECORD.get()


@contextmanager
def recording(record: QueryRecord) -> Iterator[QueryRecord]:
    """Make ``record`` the current query's record inside the ``with`` block."""
    token = _RECORD.set(record)
    try:
        yield record
    finally:
        _RECORD.reset(token)


def note(key: str, value: Any, *, add: bool = False) -> None:
    """Record a mode-specific fact in the current query's ``Response.metadata``."""
    record = _RECORD.get()
    if record is None:
        return
    if add:
        record.notes[key] = record.notes.get(key, 0) + value
    else:
        record.notes[key] = value


class MeteredLLM(BaseLLM):
    """Wraps the user's LLM: shared concurrency limit + per-query usage, nothing else.

    ``owner`` (held by a weak reference) is the synthesizer whose ``_semaphore()`` limits
    the calls.
    """

    def __init__(self, inner: BaseLLM, owner: Any) -> None:
        self.inner = inner
        self._owner = weakref.ref(owner)

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.inner.model

    @property
    def supports_json_mode(self) -> bool:  # type: ignore[override]
        return bool(getattr(self.inner, "supports_json_mode", False))

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "encoding", "cl100k_base")

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "_owner"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _sem(self) -> asyncio.Semaphore | None:
        owner = self._owner()
        return owner._semaphore() if owner is not None else None

    async def acomplete_with_usage(self, prompt: str, **kw: Any) -> Completion:
        record = _RECORD.get()
        sem = self._sem()
        if sem is None:
            comp = await self.inner.acomplete_with_usage(prompt, **kw)
        else:
            async with sem:
                comp = await self.inner.acomplete_with_usage(prompt, **kw)
        if record is not None:
            record.usage.record(comp)
        return comp

    def astream_with_usage(self, prompt: str, **kw: Any) -> AsyncIterator[str | Completion]:
        # The record is captured now, in the caller's context: the generator body may run
        # later, in the context of whoever consumes the stream.
        return self._astream(prompt, _RECORD.get(), kw)

    async def _astream(
        self, prompt: str, record: QueryRecord | None, kw: dict[str, Any]
    ) -> AsyncIterator[str | Completion]:
        sem = self._sem()
        if sem is not None:
            await sem.acquire()
        try:
            agen = self.inner.astream_with_usage(prompt, **kw)
            try:
                async for item in agen:
                    if isinstance(item, Completion) and record is not None:
                        record.usage.record(item)
                    yield item
            finally:
                aclose = getattr(agen, "aclose", None)
                if aclose is not None:
                    await aclose()
        finally:
            if sem is not None:
                sem.release()

    async def astructured(self, prompt: str, schema: dict, **kw: Any) -> dict:
        record = _RECORD.get()
        sem = self._sem()
        if sem is None:
            result, comp = await self.inner.astructured_with_usage(prompt, schema, **kw)
        else:
            async with sem:
                result, comp = await self.inner.astructured_with_usage(prompt, schema, **kw)
        if record is not None:  # what was sent, schema instruction included
            record.usage.record(comp)
        return result

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def __repr__(self) -> str:
        return repr(self.inner)


async def gather_all(aws: Iterable[Awaitable[Any]]) -> list[Any]:
    """``asyncio.gather`` that cancels the siblings when one fails or when it is cancelled."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    if not tasks:
        return []
    try:
        _done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    if pending:
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    first: BaseException | None = None
    for t in tasks:  # retrieve every failure (no "never retrieved" warnings), raise the first
        if t.done() and not t.cancelled():
            exc = t.exception()
            if exc is not None and first is None:
                first = exc
    if first is not None:
        raise first
    return [t.result() for t in tasks]
