"""``BaseSynthesizer``: nodes in, ``Response`` out; one async core, sync wrappers, batches.

Subclasses implement ``aget_response(query_str, text_chunks, **kw)`` (async, preferred) or
``get_response`` (sync) -- LlamaIndex's contract, so a custom synthesizer written for it runs
here with the import path changed. Everything else is shared:

* ``synthesize`` / ``asynthesize(query, nodes, **kw) -> Response``: nodes may be
  ``NodeWithScore``, ``DocNode`` or ``str``; extra keyword arguments fill template variables.
* Every LLM call goes through a metered wrapper around the user's LLM (``self._llm``): it
  holds a slot of the synthesizer's ``Semaphore(max_concurrency)`` (one per event loop, so
  all queries of a batch share it) and adds the call's usage to the *current query's*
  counters (a ``ContextVar``, so concurrent queries never mix their metadata).
* ``batch`` / ``abatch(queries, nodes_per_query)``: every query's call graph runs at once
  under that one limit; a failure or a cancellation cancels the in-flight calls.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastrag._async import iter_sync, run_sync
from fastrag._checks import check_int, check_list, check_str
from fastrag.errors import ConfigError
from fastrag.llms.base import BaseLLM, Completion
from fastrag.llms.resolve import resolve_llm
from fastrag.schema import DocNode, NodeWithScore
from fastrag.synth.packing import DEFAULT_CONTEXT_WINDOW, DEFAULT_NUM_OUTPUT, PromptHelper
from fastrag.synth.prompts import (
    PromptTemplate,
    adapt_template,
    as_template,
    default_prompts,
    resolve_language,
    validate_language,
)
from fastrag.synth.response import Response

__all__ = ["DEFAULT_EMPTY_RESPONSE", "ON_EMPTY", "BaseSynthesizer"]

DEFAULT_EMPTY_RESPONSE = "Empty Response"
ON_EMPTY = ("respond", "generate", "raise")

# Required variables of each template kind (the context variable must appear exactly once).
_REQUIRED = {
    "text_qa_template": ("context_str", "query_str"),
    "refine_template": ("context_msg", "existing_answer", "query_str"),
    "summary_template": ("context_str",),
    "simple_template": ("query_str",),
}
_CONTEXT_VAR = {
    "text_qa_template": "context_str",
    "refine_template": "context_msg",
    "summary_template": "context_str",
}
_KIND = {
    "text_qa_template": "text_qa",
    "refine_template": "refine",
    "summary_template": "summary",
    "simple_template": "simple",
}


def _refine_context_alias(tmpl: PromptTemplate) -> PromptTemplate:
    """A refine template written with ``{context_str}`` (as in LlamaIndex tutorials) reads as
    one with ``{context_msg}``; having both is ambiguous."""
    names = set(tmpl.free_vars)
    if "context_str" not in names:
        return tmpl
    if "context_msg" in names:
        raise ConfigError(
            "refine_template has both {context_msg} and {context_str}; use one of them for "
            "the new context"
        )
    return PromptTemplate(tmpl.template.replace("{context_str}", "{context_msg}"), **tmpl.kwargs)


# ----------------------------------------------------------------------------------------------
# Per-query accounting
# ----------------------------------------------------------------------------------------------


@dataclass
class _Usage:
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def add(self, prompt_tokens: int, completion_tokens: int) -> None:
        self.llm_calls += 1
        self.prompt_tokens += int(prompt_tokens)
        self.completion_tokens += int(completion_tokens)

    def as_dict(self) -> dict[str, Any]:
        return {
            "llm_calls": self.llm_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            **self.extra,
        }


_USAGE: contextvars.ContextVar[_Usage | None] = contextvars.ContextVar(
    "fastrag_synth_usage", default=None
)


def note(key: str, value: Any, *, add: bool = False) -> None:
    """Record a mode-specific fact in the current query's ``Response.metadata``."""
    usage = _USAGE.get()
    if usage is None:
        return
    if add:
        usage.extra[key] = usage.extra.get(key, 0) + value
    else:
        usage.extra[key] = value


def _add_note(exc: BaseException, text: str) -> None:
    if hasattr(exc, "add_note"):
        exc.add_note(text)


# ----------------------------------------------------------------------------------------------
# The metered LLM wrapper
# ----------------------------------------------------------------------------------------------


class _MeteredLLM(BaseLLM):
    """Wraps the user's LLM: shared concurrency limit + per-query usage, nothing else."""

    def __init__(self, inner: BaseLLM, owner: BaseSynthesizer) -> None:
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
        usage = _USAGE.get()
        sem = self._sem()
        if sem is None:
            comp = await self.inner.acomplete_with_usage(prompt, **kw)
        else:
            async with sem:
                comp = await self.inner.acomplete_with_usage(prompt, **kw)
        if usage is not None:
            usage.add(comp.prompt_tokens, comp.completion_tokens)
        return comp

    def astream_with_usage(self, prompt: str, **kw: Any) -> AsyncIterator[str | Completion]:
        # The usage counters are captured now, in the caller's context: the generator body
        # may run later, in the context of whoever consumes the stream.
        return self._astream(prompt, _USAGE.get(), kw)

    async def _astream(
        self, prompt: str, usage: _Usage | None, kw: dict[str, Any]
    ) -> AsyncIterator[str | Completion]:
        sem = self._sem()
        if sem is not None:
            await sem.acquire()
        try:
            agen = self.inner.astream_with_usage(prompt, **kw)
            try:
                async for item in agen:
                    if isinstance(item, Completion) and usage is not None:
                        usage.add(item.prompt_tokens, item.completion_tokens)
                    yield item
            finally:
                aclose = getattr(agen, "aclose", None)
                if aclose is not None:
                    await aclose()
        finally:
            if sem is not None:
                sem.release()

    async def astructured(self, prompt: str, schema: dict, **kw: Any) -> dict:
        usage = _USAGE.get()
        sem = self._sem()
        if sem is None:
            result, comp = await self.inner.astructured_with_usage(prompt, schema, **kw)
        else:
            async with sem:
                result, comp = await self.inner.astructured_with_usage(prompt, schema, **kw)
        if usage is not None:  # what was sent, schema instruction included
            usage.add(comp.prompt_tokens, comp.completion_tokens)
        return result

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def __repr__(self) -> str:
        return repr(self.inner)


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


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


def _query_text(query: Any) -> str:
    if isinstance(query, str):
        return query
    qs = getattr(query, "query_str", None)  # LlamaIndex QueryBundle
    if isinstance(qs, str):
        return qs
    raise ConfigError(f"query must be a str, got {type(query).__name__}")


def _as_source(node: Any, i: int) -> tuple[str, Any]:
    if isinstance(node, NodeWithScore):
        return node.node.get_content(), node
    if isinstance(node, DocNode):
        return node.get_content(), NodeWithScore(node, None)
    if isinstance(node, str):
        return node, NodeWithScore(DocNode(node), None)
    get_content = getattr(node, "get_content", None)
    if callable(get_content):
        return str(get_content()), node
    raise ConfigError(
        f"nodes[{i}] is a {type(node).__name__}; pass NodeWithScore, DocNode or str items"
    )


def prepare_nodes(nodes: Any) -> tuple[list[str], list[Any]]:
    """Texts and source nodes (``NodeWithScore``) from a list of nodes."""
    if nodes is None or isinstance(nodes, (str, bytes, DocNode, NodeWithScore)):
        raise ConfigError(
            f"nodes must be a list of NodeWithScore, DocNode or str, got "
            f"{type(nodes).__name__}; wrap a single node in a list"
        )
    texts: list[str] = []
    sources: list[Any] = []
    for i, node in enumerate(nodes):
        t, s = _as_source(node, i)
        texts.append(t)
        sources.append(s)
    return texts, sources


# ----------------------------------------------------------------------------------------------
# BaseSynthesizer
# ----------------------------------------------------------------------------------------------


class BaseSynthesizer:
    """Turns a query and nodes into a :class:`Response`.

    Args:
        llm: a fastrag LLM, any object with async ``acomplete(prompt) -> str``, or a function
            ``prompt -> str``. Optional for modes that never call it (no_text, context_only).
        streaming: return streaming responses (``resp.response_gen`` / ``async_response_gen``).
        prompt_helper: the :class:`PromptHelper` to pack with; else one is built from
            ``context_window`` / ``num_output`` / ``tokenizer`` (defaults: the LLM's
            ``context_window`` / ``num_output`` attributes, else 3900 / 256, cl100k_base).
        max_concurrency: LLM calls in flight at once, shared by all queries of a batch; None:
            the mode's default (256 where a query's calls are independent: accumulate,
            compact_accumulate, tree_summarize; else 16). The endpoint is protected by the
            LLM client's own ``max_concurrency`` (``OpenAILike``: 16 by default), which holds
            across everything that uses the client.
        language: "en", "zh" or "auto" (pick per query) for the default templates.
        empty_response: the answer when there is nothing to answer from.
        on_empty: with no nodes, "respond" (``empty_response``, no LLM call), "generate" (ask
            the LLM the bare query with ``simple_template``) or "raise".
        llm_kwargs: keyword arguments passed to every LLM call (e.g. temperature).
        show_progress: progress bar in ``batch`` (None: for 64+ queries on a terminal).
        verbose: print packing decisions.
    """

    response_mode: str = "custom"
    _template_kinds: tuple[str, ...] = ()
    default_concurrency: int = 16

    def __init__(
        self,
        llm: Any = None,
        streaming: bool = False,
        *,
        prompt_helper: PromptHelper | None = None,
        context_window: int | None = None,
        num_output: int | None = None,
        tokenizer: Any = None,
        max_concurrency: int | None = None,
        language: str = "en",
        empty_response: str = DEFAULT_EMPTY_RESPONSE,
        on_empty: str = "respond",
        llm_kwargs: dict[str, Any] | None = None,
        show_progress: bool | None = None,
        verbose: bool = False,
        simple_template: PromptTemplate | str | None = None,
        **unused: Any,
    ) -> None:
        cls = type(self)
        if (
            cls.get_response is BaseSynthesizer.get_response
            and cls.aget_response is BaseSynthesizer.aget_response
        ):
            raise TypeError(
                f"{cls.__name__} must implement aget_response(query_str, text_chunks, **kw) "
                "(async) or get_response (sync)"
            )
        if unused:
            raise ConfigError(
                f"unexpected argument(s) {sorted(unused)} for {cls.__name__}; see "
                "help(fastrag.get_response_synthesizer) for the accepted ones"
            )
        if llm is None:
            from fastrag.settings import Settings

            llm = Settings.llm
        self._llm = llm
        self._streaming = bool(streaming)
        if max_concurrency is None:
            max_concurrency = type(self).default_concurrency
        self.max_concurrency = check_int("max_concurrency", max_concurrency, min=1)
        self.language = validate_language(language)
        self.empty_response = check_str("empty_response", empty_response, empty=True)
        if on_empty not in ON_EMPTY:
            raise ConfigError(f"on_empty={on_empty!r} is not one of {ON_EMPTY}")
        self.on_empty = on_empty
        if llm_kwargs is not None and not isinstance(llm_kwargs, dict):
            raise ConfigError(f"llm_kwargs must be a dict, got {type(llm_kwargs).__name__}")
        self.llm_kwargs = dict(llm_kwargs or {})
        self.show_progress = show_progress
        self.verbose = bool(verbose)
        if prompt_helper is not None:
            if not isinstance(prompt_helper, PromptHelper):
                raise ConfigError(
                    f"prompt_helper must be a fastrag PromptHelper, got "
                    f"{type(prompt_helper).__name__}"
                )
            self._prompt_helper = prompt_helper
        else:
            raw = self._llm.inner if isinstance(self._llm, _MeteredLLM) else llm
            cw = context_window or getattr(raw, "context_window", None) or DEFAULT_CONTEXT_WINDOW
            no = num_output or getattr(raw, "num_output", None) or DEFAULT_NUM_OUTPUT
            if tokenizer is not None:
                helper = PromptHelper(context_window=cw, num_output=no, tokenizer=tokenizer)
            else:
                try:  # the LLM's own encoding when it is available offline
                    helper = PromptHelper(
                        context_window=cw,
                        num_output=no,
                        tokenizer=getattr(raw, "encoding", None) or "cl100k_base",
                    )
                except ConfigError:
                    helper = PromptHelper(context_window=cw, num_output=no)
            self._prompt_helper = helper
        self._templates: dict[str, PromptTemplate | None] = {}
        self._set_template("simple_template", simple_template)
        self._sems: weakref.WeakKeyDictionary[Any, asyncio.Semaphore] = weakref.WeakKeyDictionary()

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (worker processes, Ray actors): the per-loop semaphores and the metered
        wrapper (it refers back to this object) are made anew on unpickling."""
        state = self.__dict__.copy()
        state.pop("_sems", None)
        metered = state.pop("_metered", None)
        state["_user_llm"] = metered.inner if metered is not None else None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        llm = state.pop("_user_llm", None)
        self.__dict__.update(state)
        self._sems = weakref.WeakKeyDictionary()
        self._llm = llm

    # -- the LLM -------------------------------------------------------------------------------
    @property
    def _llm(self) -> _MeteredLLM | None:
        return self.__dict__.get("_metered")

    @_llm.setter
    def _llm(self, llm: Any) -> None:
        if llm is None:
            self.__dict__["_metered"] = None
            return
        if isinstance(llm, _MeteredLLM):
            llm = llm.inner
        self.__dict__["_metered"] = _MeteredLLM(resolve_llm(llm), self)

    @property
    def llm(self) -> BaseLLM | None:
        """The user's LLM (as resolved: duck-typed objects and functions are wrapped)."""
        m = self._llm
        return m.inner if m is not None else None

    @property
    def streaming(self) -> bool:
        return self._streaming

    @property
    def prompt_helper(self) -> PromptHelper:
        return self._prompt_helper

    def _require_llm(self) -> _MeteredLLM:
        llm = self._llm
        if llm is None:
            raise ConfigError(
                f"{type(self).__name__} (response_mode={self.response_mode!r}) needs an LLM; "
                "pass llm=OpenAILike(...) (or llm=MockLLM() in tests)"
            )
        return llm

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._sems.get(loop)
        if sem is None:
            sem = self._sems[loop] = asyncio.Semaphore(self.max_concurrency)
        return sem

    # -- templates -----------------------------------------------------------------------------
    def _set_template(self, name: str, value: Any) -> None:
        tmpl = as_template(value, name)
        if tmpl is not None:
            ctx = "context_msg" if name == "refine_template" else "context_str"
            tmpl = adapt_template(
                tmpl,
                {"query": "query_str", "context": ctx, "question_answer_context": ctx},
                "query_str" if "query_str" in _REQUIRED[name] else None,
            )
        if tmpl is not None and name == "refine_template":
            tmpl = _refine_context_alias(tmpl)
        if tmpl is not None:
            present = set(tmpl.free_vars)
            missing = [v for v in _REQUIRED[name] if v not in present]
            if missing:
                shown = ["{" + v + "}" for v in missing]
                if name == "refine_template" and "context_msg" in missing:
                    shown[missing.index("context_msg")] = "{context_msg} (or {context_str})"
                raise ConfigError(
                    f"{name} is missing required variable(s) "
                    f"{', '.join(shown)}; it has "
                    f"{['{' + v + '}' for v in tmpl.template_vars]}"
                )
            cvar = _CONTEXT_VAR.get(name)
            if cvar is not None and tmpl.template.count("{" + cvar + "}") != 1:
                raise ConfigError(
                    f"{name} must contain {{{cvar}}} exactly once, found "
                    f"{tmpl.template.count('{' + cvar + '}')}"
                )
        self._templates[name] = tmpl

    def _template(self, name: str, lang: str) -> PromptTemplate:
        tmpl = self._templates.get(name)
        if tmpl is not None:
            return tmpl
        return default_prompts(lang)[_KIND[name]]  # type: ignore[return-value]

    def get_prompts(self) -> dict[str, PromptTemplate]:
        """The templates this synthesizer uses (defaults resolved for its language)."""
        lang = "en" if self.language == "auto" else self.language
        return {k: self._template(k, lang) for k in self._template_kinds}

    def update_prompts(self, prompts: dict[str, PromptTemplate | str]) -> None:
        """Replace templates by name (``text_qa_template``, ``refine_template``, ...)."""
        for name, value in prompts.items():
            if name not in _REQUIRED:
                raise ConfigError(f"unknown prompt {name!r}; known: {sorted(_REQUIRED)}")
            self._set_template(name, value)

    def _lang(self, query_str: str, chunks: Sequence[str]) -> str:
        return resolve_language(self.language, query_str, chunks[0] if chunks else "")

    def _check_vars(self, names: Iterable[str], lang: str, provided: dict[str, Any]) -> None:
        """Fail before any LLM call when a template variable has no value."""
        for name in names:
            tmpl = self._template(name, lang)
            auto = set(_REQUIRED.get(name, ())) | {"query_str"}
            missing = [v for v in tmpl.free_vars if v not in auto and v not in provided]
            if missing:
                raise ConfigError(
                    f"{name} variable(s) {', '.join(missing)} have no value; pass them as "
                    f"keyword arguments, e.g. synthesize(query, nodes, {missing[0]}=...)"
                )

    def _single_template_setup(
        self, kind: str, query_str: str, text_chunks: Sequence[str], response_kwargs: dict
    ) -> tuple[PromptTemplate, dict[str, Any], int]:
        """Template ``kind`` in the query's language, its values, and the context token budget
        (the common start of every mode that fills one ``context_str`` per call)."""
        lang = self._lang(query_str, text_chunks)
        self._check_vars(self._template_kinds, lang, response_kwargs)
        tmpl = self._template(kind, lang)
        vals = {**response_kwargs, "query_str": query_str}
        return tmpl, vals, self._prompt_helper.budget(self._overhead(tmpl, "context_str", vals))

    def _overhead(self, tmpl: PromptTemplate, context_var: str, values: dict[str, Any]) -> int:
        """Tokens of a filled template without its context slot (sum of its parts)."""
        vals = dict(values)
        vals[context_var] = ""
        helper = self._prompt_helper
        return sum(helper.count(p) for p in tmpl.parts(vals) if p)

    def _overhead_bytes(
        self, tmpl: PromptTemplate, context_var: str, values: dict[str, Any]
    ) -> int:
        """UTF-8 bytes of a filled template without its context slot: an upper bound on its
        tokens (every token is at least one byte), computed without tokenizing."""
        vals = dict(values)
        vals[context_var] = ""
        return sum(len(p.encode("utf-8")) for p in tmpl.parts(vals))

    # -- LLM calls (for subclasses) ------------------------------------------------------------
    async def _apredict(self, prompt: str) -> str:
        """One LLM call through the metered wrapper; returns the answer text."""
        comp = await self._require_llm().acomplete_with_usage(prompt, **self.llm_kwargs)
        return comp.text

    def _astream_text(self, prompt: str, fallback: str | None = None) -> AsyncIterator[str]:
        """Stream one LLM call's text; if it streams nothing but blanks, yield ``fallback``."""
        agen = self._require_llm().astream_with_usage(prompt, **self.llm_kwargs)
        return _text_pieces(agen, fallback)

    # -- the contract --------------------------------------------------------------------------
    def get_response(self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any):
        """Answer ``query_str`` from ``text_chunks`` (sync; runs :meth:`aget_response`)."""
        result = run_sync(self._metered_call(query_str, text_chunks, response_kwargs))
        if hasattr(result, "__anext__"):
            return iter_sync(result)
        return result

    async def _metered_call(self, query_str, text_chunks, kw):
        token = _USAGE.set(_USAGE.get() or _Usage())
        try:
            return await self.aget_response(query_str, text_chunks, **kw)
        finally:
            _USAGE.reset(token)

    async def aget_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ):
        """Answer ``query_str`` from ``text_chunks``: a str, or an async iterator of str when
        streaming. The default runs a subclass's sync :meth:`get_response` in a thread."""
        result = await asyncio.to_thread(
            self.get_response, query_str, list(text_chunks), **response_kwargs
        )
        return result

    # -- synthesize ----------------------------------------------------------------------------
    def synthesize(
        self,
        query: Any,
        nodes: Sequence[Any],
        additional_source_nodes: Sequence[Any] | None = None,
        **response_kwargs: Any,
    ) -> Response:
        """Answer ``query`` from ``nodes``; see :meth:`asynthesize`."""
        resp = run_sync(self.asynthesize(query, nodes, additional_source_nodes, **response_kwargs))
        return _to_sync(resp)

    async def asynthesize(
        self,
        query: Any,
        nodes: Sequence[Any],
        additional_source_nodes: Sequence[Any] | None = None,
        **response_kwargs: Any,
    ) -> Response:
        """Answer ``query`` from ``nodes`` (``NodeWithScore``, ``DocNode`` or ``str``).

        Extra keyword arguments fill template variables (``tone_name="..."``). Metadata:
        ``llm_calls``, ``prompt_tokens``, ``completion_tokens``, ``seconds``, ``response_mode``.
        """
        query_str = _query_text(query)
        texts, sources = prepare_nodes(nodes)
        if additional_source_nodes:
            sources += prepare_nodes(additional_source_nodes)[1]
        usage = _Usage()
        token = _USAGE.set(usage)
        t0 = time.perf_counter()
        try:
            if any(t.strip() for t in texts):
                result = await self.aget_response(query_str, texts, **response_kwargs)
            else:
                result = await self._aempty(query_str, response_kwargs)
        except Exception as exc:
            _add_note(
                exc,
                f"while synthesizing query {query_str[:80]!r} "
                f"(response_mode={self.response_mode!r}, {len(texts)} nodes)",
            )
            raise
        finally:
            _USAGE.reset(token)
        meta = {"response_mode": self.response_mode, "n_nodes": len(texts)}

        def finish(_text: str | None = None) -> None:
            meta.update(usage.as_dict())
            meta["seconds"] = time.perf_counter() - t0
            resp.metadata.update(meta)

        if isinstance(result, str) or result is None:
            resp = Response(result if result is not None else "", sources)
            finish()
            return resp
        if hasattr(result, "__anext__"):
            resp = Response(None, sources, async_response_gen=result, on_done=finish)
            finish()  # provisional: completed when the stream is consumed
            return resp
        if hasattr(result, "__next__"):  # a custom sync get_response returned a generator
            resp = Response(None, sources, async_response_gen=_aiter_sync(result), on_done=finish)
            finish()
            return resp
        raise ConfigError(
            f"{type(self).__name__}.aget_response returned {type(result).__name__}; "
            "return a str (or an async iterator of str when streaming)"
        )

    async def _aempty(self, query_str: str, kw: dict[str, Any]) -> Any:
        """The no-context answer path (see ``on_empty``)."""
        note("empty_context", True)
        if self.on_empty == "raise":
            raise ConfigError(
                f"no context to answer {query_str[:80]!r} from: the node list is empty (or "
                "all blank); retrieve nodes first or build the synthesizer with "
                "on_empty='respond' or 'generate'"
            )
        if self.on_empty == "respond":
            return _one_piece(self.empty_response) if self._streaming else self.empty_response
        lang = self._lang(query_str, ())
        self._check_vars(("simple_template",), lang, kw)
        prompt = self._template("simple_template", lang).format(query_str=query_str, **kw)
        if self._streaming:
            return self._astream_text(prompt, self.empty_response)
        text = await self._apredict(prompt)
        return text if text.strip() else self.empty_response

    # -- batch ---------------------------------------------------------------------------------
    def batch(
        self,
        queries: Sequence[Any],
        nodes_per_query: Sequence[Sequence[Any]],
        *,
        show_progress: bool | None = None,
        return_exceptions: bool = False,
        **response_kwargs: Any,
    ) -> list[Response]:
        """Synthesize many queries at once; see :meth:`abatch`."""
        return run_sync(
            self.abatch(
                queries,
                nodes_per_query,
                show_progress=show_progress,
                return_exceptions=return_exceptions,
                **response_kwargs,
            )
        )

    async def abatch(
        self,
        queries: Sequence[Any],
        nodes_per_query: Sequence[Sequence[Any]],
        *,
        show_progress: bool | None = None,
        return_exceptions: bool = False,
        **response_kwargs: Any,
    ) -> list[Response]:
        """All queries' call graphs run concurrently under one ``max_concurrency`` limit.

        Returns complete (non-streaming) responses in query order. On the first failure the
        other queries are cancelled and the error is raised (naming the query index), unless
        ``return_exceptions=True`` puts exceptions in the result list instead. Cancelling
        the batch cancels every in-flight LLM call.
        """
        check_list("queries", queries, "str")
        check_list("nodes_per_query", nodes_per_query, "node lists (one per query)")
        if len(queries) != len(nodes_per_query):
            raise ConfigError(
                f"{len(queries)} queries but {len(nodes_per_query)} node lists; pass one "
                "node list per query (the same list repeated is fine)"
            )
        for i, q in enumerate(queries):
            try:
                _query_text(q)
            except ConfigError:
                raise ConfigError(f"queries[{i}] must be a str, got {type(q).__name__}") from None
        n = len(queries)
        if n == 0:
            return []
        show = self.show_progress if show_progress is None else show_progress
        disable: bool | None = (None if n >= 64 else True) if show is None else not show
        from tqdm.auto import tqdm

        bar = tqdm(total=n, desc=f"synthesize ({self.response_mode})", disable=disable)

        async def one(i: int) -> Response:
            try:
                resp = await self.asynthesize(queries[i], nodes_per_query[i], **response_kwargs)
                if resp.is_streaming:
                    await resp.aget_response()
                    resp._agen = None
                return resp
            except Exception as exc:
                _add_note(exc, f"in batch query index {i}")
                raise
            finally:
                bar.update(1)

        tasks = [asyncio.ensure_future(one(i)) for i in range(n)]
        try:
            if return_exceptions:
                return list(await asyncio.gather(*tasks, return_exceptions=True))
            return await gather_all(tasks)
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            bar.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(llm={self.llm!r}, streaming={self._streaming}, "
            f"max_concurrency={self.max_concurrency})"
        )


# ----------------------------------------------------------------------------------------------
# Stream plumbing
# ----------------------------------------------------------------------------------------------


async def _text_pieces(
    agen: AsyncIterator[str | Completion], fallback: str | None
) -> AsyncIterator[str]:
    """Text chunks of a usage stream; ``fallback`` replaces an all-blank answer."""
    held: list[str] = []  # blank pieces held back until real text arrives
    seen_text = False
    try:
        async for item in agen:
            if isinstance(item, Completion):
                continue
            if seen_text:
                yield item
            elif item.strip():
                seen_text = True
                for h in held:
                    yield h
                held.clear()
                yield item
            else:
                held.append(item)
    finally:
        aclose = getattr(agen, "aclose", None)
        if aclose is not None:
            await aclose()
    if not seen_text:
        if fallback is not None:
            yield fallback
        else:
            for h in held:
                yield h


async def _one_piece(text: str) -> AsyncIterator[str]:
    yield text


async def _aiter_sync(it: Any) -> AsyncIterator[str]:
    for piece in it:
        yield piece


def _to_sync(resp: Response) -> Response:
    """A sync-streaming copy of an async-streaming response (same metadata dict)."""
    if resp._agen is None:
        return resp
    out = Response(
        None,
        resp.source_nodes,
        None,
        response_gen=iter_sync(resp._agen),
        on_done=resp._on_done,
    )
    out.metadata = resp.metadata
    # the on_done hook updates the async response's metadata dict, shared with ``out``
    return out
