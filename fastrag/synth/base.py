"""``BaseSynthesizer``: nodes in, ``Response`` out; one async core, sync wrappers, batches.

Subclasses implement ``aget_response(query_str, text_chunks, **kw)`` (async, preferred) or
``get_response`` (sync) -- LlamaIndex's contract, so a custom synthesizer written for it runs
here with the import path changed. Everything else is shared:

* ``synthesize`` / ``asynthesize(query, nodes, **kw) -> Response``: nodes may be
  ``NodeWithScore``, ``DocNode`` or ``str``; extra keyword arguments fill template variables.
* Every LLM call goes through a metered wrapper around the user's LLM (``self._llm``, see
  :mod:`fastrag.synth.calls`): it holds a slot of the synthesizer's
  ``Semaphore(max_concurrency)`` (one per event loop, so all queries of a batch share it)
  and adds the call's usage to the *current query's* record.
* ``batch`` / ``abatch(queries, nodes_per_query)``: every query's call graph runs at once
  under that one limit; a failure or a cancellation cancels the in-flight calls.
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from fastrag._async import iter_sync, run_sync, to_thread
from fastrag._checks import check_int, check_list, check_str
from fastrag.errors import ConfigError
from fastrag.llms.base import BaseLLM
from fastrag.llms.resolve import resolve_llm
from fastrag.schema import DocNode, NodeWithScore
from fastrag.settings import Settings
from fastrag.synth.calls import (
    MeteredLLM,
    QueryRecord,
    current_record,
    gather_all,
    note,
    recording,
)
from fastrag.synth.packing import DEFAULT_CONTEXT_WINDOW, DEFAULT_NUM_OUTPUT, PromptHelper
from fastrag.synth.prompts import (
    TEMPLATE_KINDS,
    TEMPLATE_VARS,
    PromptTemplate,
    default_prompts,
    resolve_language,
    validate_language,
    validate_template,
)
from fastrag.synth.response import Response
from fastrag.synth.streams import aiter_sync, one_piece, text_pieces, to_sync

__all__ = [
    "DEFAULT_EMPTY_RESPONSE",
    "ON_EMPTY",
    "BaseSynthesizer",
    "prepare_nodes",
]

DEFAULT_EMPTY_RESPONSE = "Empty Response"
ON_EMPTY = ("respond", "generate", "raise")


def _add_note(exc: BaseException, text: str) -> None:
    if hasattr(exc, "add_note"):
        exc.add_note(text)


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
            raw = self._llm.inner if isinstance(self._llm, MeteredLLM) else llm
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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__init__
        if init is BaseSynthesizer.__init__ or getattr(init, "_fills_defaults", False):
            return

        @functools.wraps(init)
        def __init__(self: BaseSynthesizer, *args: Any, **kw: Any) -> None:
            init(self, *args, **kw)
            if "_templates" not in self.__dict__:
                # LlamaIndex's custom synthesizer sets its own attributes without calling
                # BaseSynthesizer.__init__: the other settings take their defaults
                mine = dict(self.__dict__)
                BaseSynthesizer.__init__(self, self.llm, mine.get("_streaming", False))
                self.__dict__.update(mine)

        __init__._fills_defaults = True  # type: ignore[attr-defined]
        cls.__init__ = __init__  # type: ignore[method-assign]

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
    def _llm(self) -> MeteredLLM | None:
        return self.__dict__.get("_metered")

    @_llm.setter
    def _llm(self, llm: Any) -> None:
        if llm is None:
            self.__dict__["_metered"] = None
            return
        if isinstance(llm, MeteredLLM):
            llm = llm.inner
        self.__dict__["_metered"] = MeteredLLM(resolve_llm(llm), self)

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

    def _require_llm(self) -> MeteredLLM:
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
        self._templates[name] = validate_template(name, value)

    def _template(self, name: str, lang: str) -> PromptTemplate:
        tmpl = self._templates.get(name)
        if tmpl is not None:
            return tmpl
        return default_prompts(lang)[TEMPLATE_KINDS[name]]  # type: ignore[return-value]

    def get_prompts(self) -> dict[str, PromptTemplate]:
        """The templates this synthesizer uses (defaults resolved for its language)."""
        lang = "en" if self.language == "auto" else self.language
        return {k: self._template(k, lang) for k in self._template_kinds}

    def update_prompts(self, prompts: dict[str, PromptTemplate | str]) -> None:
        """Replace templates by name (``text_qa_template``, ``refine_template``, ...)."""
        for name, value in prompts.items():
            if name not in TEMPLATE_VARS:
                raise ConfigError(f"unknown prompt {name!r}; known: {sorted(TEMPLATE_VARS)}")
            self._set_template(name, value)

    def _lang(self, query_str: str, chunks: Sequence[str]) -> str:
        return resolve_language(self.language, query_str, chunks[0] if chunks else "")

    def _check_vars(self, names: Iterable[str], lang: str, provided: dict[str, Any]) -> None:
        """Fail before any LLM call when a template variable has no value."""
        for name in names:
            tmpl = self._template(name, lang)
            auto = set(TEMPLATE_VARS.get(name, ())) | {"query_str"}
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
        return text_pieces(agen, fallback)

    # -- the contract --------------------------------------------------------------------------
    def get_response(self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any):
        """Answer ``query_str`` from ``text_chunks`` (sync; runs :meth:`aget_response`)."""
        result = run_sync(self._metered_call(query_str, text_chunks, response_kwargs))
        if hasattr(result, "__anext__"):
            return iter_sync(result)
        return result

    async def _metered_call(self, query_str, text_chunks, kw):
        with recording(current_record() or QueryRecord()):
            return await self.aget_response(query_str, text_chunks, **kw)

    async def aget_response(
        self, query_str: str, text_chunks: Sequence[str], **response_kwargs: Any
    ):
        """Answer ``query_str`` from ``text_chunks``: a str, or an async iterator of str when
        streaming. The default runs a subclass's sync :meth:`get_response` in a thread."""
        result = await to_thread(self.get_response, query_str, list(text_chunks), **response_kwargs)
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
        return to_sync(resp)

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
        record = QueryRecord()
        t0 = time.perf_counter()
        try:
            with recording(record):
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
        meta = {"response_mode": self.response_mode, "n_nodes": len(texts)}

        def finish(_text: str | None = None) -> None:
            meta.update(record.as_dict())
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
            resp = Response(None, sources, async_response_gen=aiter_sync(result), on_done=finish)
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
            return one_piece(self.empty_response) if self._streaming else self.empty_response
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
