"""``Query`` and the shared core of every LLM-driven query component.

A component (transformer, expander, multi-step loop) writes one async function for one query,
``_aone(query, call)``, where ``call(prompt)`` is its only way to the LLM. The base class runs
it over a batch: all queries at once, LLM calls bounded by one ``Semaphore(max_concurrency)``,
each query's calls and tokens counted in its own :class:`Usage` (the pipeline's trace reads
them), failures named by query index and component.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from fastrag._async import run_sync
from fastrag._checks import check_bool, check_int, check_list, check_str
from fastrag.errors import ConfigError
from fastrag.llms.base import BaseLLM
from fastrag.llms.resolve import resolve_llm
from fastrag.llms.usage import Usage
from fastrag.query.prompts import query_prompt
from fastrag.settings import Settings
from fastrag.synth.prompts import PromptTemplate, validate_language

__all__ = ["Query", "QueryComponent", "as_query", "as_queries"]

_ROLES = ("system", "user", "assistant", "tool")


def _message(i: int, m: Any) -> tuple[str, str]:
    if isinstance(m, Mapping):
        role, content = m.get("role"), m.get("content")
    elif isinstance(m, (tuple, list)) and len(m) == 2:
        role, content = m
    else:
        role = getattr(m, "role", None)
        content = getattr(m, "content", None)
        if role is None or content is None:
            raise ConfigError(
                f"history[{i}] must be a (role, content) pair or a {{'role', 'content'}} dict, "
                f"got {type(m).__name__}"
            )
    role = getattr(role, "value", role)  # str enums (LlamaIndex MessageRole)
    if not isinstance(role, str) or role.lower() not in _ROLES:
        raise ConfigError(f"history[{i}] role must be one of {_ROLES}, got {role!r}")
    if not isinstance(content, str):
        raise ConfigError(f"history[{i}] content must be a str, got {type(content).__name__}")
    return role.lower(), content


@dataclass(frozen=True)
class Query:
    """A query: its ``text``, the chat ``history`` before it (``(role, content)`` pairs) and a
    ``context`` dict (Spring AI's ``Query``; ``context["filter"]`` is a per-query metadata
    filter passed to every retriever). Immutable: :meth:`mutate` returns a changed copy."""

    text: str
    history: tuple[tuple[str, str], ...] = ()
    context: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_str("Query text", self.text, empty=True)
        if isinstance(self.history, (str, bytes)) or not isinstance(self.history, Sequence):
            raise ConfigError(
                f"history must be a list of (role, content) messages, got "
                f"{type(self.history).__name__}"
            )
        object.__setattr__(
            self, "history", tuple(_message(i, m) for i, m in enumerate(self.history))
        )
        if not isinstance(self.context, Mapping):
            raise ConfigError(f"context must be a dict, got {type(self.context).__name__}")
        object.__setattr__(self, "context", MappingProxyType(dict(self.context)))

    def mutate(self, **changes: Any) -> Query:
        """A copy with ``text``, ``history`` or ``context`` replaced."""
        unknown = set(changes) - {"text", "history", "context"}
        if unknown:
            raise ConfigError(f"Query.mutate got unknown field(s) {sorted(unknown)}")
        return Query(
            changes.get("text", self.text),
            changes.get("history", self.history),
            changes.get("context", self.context),
        )

    def history_text(self) -> str:
        """The history as ``role: content`` lines."""
        return "\n".join(f"{role}: {content}" for role, content in self.history)

    def __str__(self) -> str:
        return self.text

    def __hash__(self) -> int:
        return hash((self.text, self.history))


def as_query(q: Any, where: str = "query") -> Query:
    """A :class:`Query` from a Query, a str, or a LlamaIndex ``QueryBundle``."""
    if isinstance(q, Query):
        return q
    if isinstance(q, str):
        return Query(q)
    qs = getattr(q, "query_str", None)
    if isinstance(qs, str):
        return Query(qs)
    raise ConfigError(f"{where} must be a str or fastrag.Query, got {type(q).__name__}")


def as_queries(queries: Any) -> list[Query]:
    """A list of :class:`Query` from a list of str / Query (a bare str is refused)."""
    if isinstance(queries, (str, Query)):
        raise ConfigError("queries must be a list; for one query call the single-query method")
    check_list("queries", queries, "str or fastrag.Query")
    return [as_query(q, f"queries[{i}]") for i, q in enumerate(queries)]


_SEM: contextvars.ContextVar[asyncio.Semaphore | None] = contextvars.ContextVar(
    "fastrag_query_semaphore", default=None
)

Call = Callable[[str], Awaitable[str]]


def resolve_default_llm(llm: Any, owner: str, *, required: bool = True) -> BaseLLM | None:
    """The LLM to use: ``llm``, else ``fr.Settings.llm``; a ConfigError naming ``owner``
    when neither is set and one is ``required``."""
    if llm is None:
        llm = Settings.llm
    if llm is None:
        if not required:
            return None
        raise ConfigError(
            f"{owner} needs an LLM: pass llm=fr.OpenAILike(model, base_url=...) (or set "
            "fr.Settings.llm once)"
        )
    return resolve_llm(llm)


_LATIN_WORD = re.compile(r"[^\W\d_]+", re.ASCII)


def query_language(language: str, text: str) -> str:
    """ "en"/"zh" for ``language="auto"``: Chinese when CJK characters are at least half of the
    query's units (each CJK character one unit, each Latin word one unit), so
    "MIT OpenCourseWare是啥？" is Chinese and "What does 你好 mean?" English."""
    if language != "auto":
        return language
    n_cjk = sum(
        1
        for ch in text
        if 0x4E00 <= ord(ch) <= 0x9FFF
        or 0x3400 <= ord(ch) <= 0x4DBF
        or 0x20000 <= ord(ch) <= 0x2A6DF
    )
    n_words = len(_LATIN_WORD.findall(text))
    return "zh" if n_cjk and n_cjk >= n_words else "en"


class QueryComponent:
    """Base of LLM-driven query components: one async core per query, batches around it.

    Args:
        llm: a fastrag LLM, an object with async ``acomplete``, or a function
            ``prompt -> str``; None uses ``fr.Settings.llm``.
        prompt_template: replaces the default prompt (must keep its required variables).
        language: "en", "zh" or "auto" (by the query's script) for the default prompts.
        max_concurrency: LLM calls in flight at once, shared by all queries of a batch.
        llm_kwargs: keyword arguments for every LLM call (e.g. ``temperature=0.0``, which
            Spring AI recommends for query transformation).
    """

    stage: str = "query"

    def __init__(
        self,
        llm: Any = None,
        *,
        prompt_template: Any = None,
        language: str = "auto",
        max_concurrency: int = 16,
        llm_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.llm = resolve_default_llm(llm, type(self).__name__)
        self.language = validate_language(language)
        self.max_concurrency = check_int("max_concurrency", max_concurrency, min=1)
        if llm_kwargs is not None and not isinstance(llm_kwargs, dict):
            raise ConfigError(f"llm_kwargs must be a dict, got {type(llm_kwargs).__name__}")
        self.llm_kwargs = dict(llm_kwargs or {})
        self.prompt_template = prompt_template

    # -- prompts -------------------------------------------------------------------------------
    def _prompt(
        self, kind: str, query_text: str, custom: PromptTemplate | None = None
    ) -> PromptTemplate:
        if custom is not None:
            return custom
        return query_prompt(kind, query_language(self.language, query_text))

    # -- LLM calls -----------------------------------------------------------------------------
    def _caller(self, usage: Usage) -> Call:
        llm, kw = self.llm, self.llm_kwargs

        async def call(prompt: str) -> str:
            sem = _SEM.get()
            if sem is None:
                comp = await llm.acomplete_with_usage(prompt, **kw)
            else:
                async with sem:
                    comp = await llm.acomplete_with_usage(prompt, **kw)
            usage.record(comp)
            return comp.text

        return call

    async def _aone(self, query: Query, call: Call) -> Any:
        raise NotImplementedError

    async def _amap(
        self,
        fn: Callable[[int, Call], Awaitable[Any]],
        indices: Sequence[int],
        usages: Sequence[Usage],
        labels: Sequence[str] | None = None,
    ) -> list[Any]:
        """``fn(i, call)`` for every index at once (LLM calls under ``max_concurrency``, each
        counted in ``usages[i]``); returns results or exceptions (noted with the index)."""
        if not indices:
            return []
        token = _SEM.set(_SEM.get() or asyncio.Semaphore(self.max_concurrency))
        try:
            results = await asyncio.gather(
                *(fn(i, self._caller(usages[i])) for i in indices), return_exceptions=True
            )
        finally:
            _SEM.reset(token)
        for i, r in zip(indices, results, strict=True):
            if isinstance(r, BaseException) and not isinstance(r, Exception):
                raise r  # cancellation, KeyboardInterrupt
            if isinstance(r, Exception) and hasattr(r, "add_note"):
                what = f": {labels[i][:80]!r}" if labels is not None else ""
                r.add_note(
                    f"in {type(self).__name__} (stage {self.stage!r}), query index {i}{what}"
                )
        return list(results)

    async def arun_with_usage(self, queries: list[Query]) -> list[tuple[Any, Usage]]:
        """Run the component on every query concurrently: one ``(result or exception, usage)``
        pair per query (what :class:`~fastrag.RAGPipeline` runs a stage with)."""
        usages = [Usage() for _ in queries]
        results = await self._amap(
            lambda i, call: self._aone(queries[i], call),
            range(len(queries)),
            usages,
            [q.text for q in queries],
        )
        return list(zip(results, usages, strict=True))

    async def _abatch(self, queries: Any, return_exceptions: bool) -> list[Any]:
        qs = as_queries(queries)
        return_exceptions = check_bool("return_exceptions", return_exceptions)
        out = []
        for r, _u in await self.arun_with_usage(qs):
            if isinstance(r, Exception) and not return_exceptions:
                raise r
            out.append(r)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(llm={self.llm!r})"


def run(coro: Awaitable[Any]) -> Any:
    """Sync entry points share fastrag's background loop."""
    return run_sync(coro)  # type: ignore[arg-type]
