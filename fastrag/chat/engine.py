"""``ChatEngine``: multi-turn chat over a :class:`~fastrag.RAGPipeline`, one memory per session.

LlamaIndex's ``condense_question`` chat engine and Spring AI's ``MessageChatMemoryAdvisor``
on fastrag's batch-first pipeline. A turn is a :class:`~fastrag.query.base.Query` whose
``history`` is the session's memory; a ``CompressionQueryTransformer`` (the pipeline's own,
or one the engine adds to its private copy) condenses history and follow-up into the
standalone question that is retrieved and answered. The answered turn is then appended to
the memory (a streamed answer when its stream ends; a failed turn is not remembered).

:meth:`ChatEngine.batch` answers turns of many sessions as one pipeline batch (one retrieval
call per retriever). Turns of one session depend on each other, so a session may appear
only once per batch.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from fastrag._async import iter_sync, run_sync, to_thread
from fastrag._checks import check_bool, check_choice, check_str, check_str_list
from fastrag.chat.memory import ChatMemory, MessageWindowChatMemory
from fastrag.documents.base import BaseDocument
from fastrag.errors import ConfigError
from fastrag.llms.base import BaseLLM, Completion
from fastrag.query.base import Query
from fastrag.query.transformers import CompressionQueryTransformer
from fastrag.rag import RAGPipeline
from fastrag.synth.response import Response

__all__ = ["CHAT_MODES", "ChatEngine", "as_chat_engine"]

CHAT_MODES = ("condense_question",)
_CHAT_KEYS = ("memory", "condense", "system_prompt", "chat_mode")


class _SystemPromptLLM(BaseLLM):
    """The answering LLM with the engine's system prompt on every call."""

    def __init__(self, inner: BaseLLM, system_prompt: str) -> None:
        self.inner = inner
        self.system_prompt = system_prompt
        self.model = getattr(inner, "model", "unknown")
        self.encoding = getattr(inner, "encoding", "cl100k_base")

    async def acomplete_with_usage(self, prompt: str, **kw: Any) -> Completion:
        kw.setdefault("system_prompt", self.system_prompt)
        return await self.inner.acomplete_with_usage(prompt, **kw)

    def astream_with_usage(self, prompt: str, **kw: Any) -> AsyncIterator[str | Completion]:
        kw.setdefault("system_prompt", self.system_prompt)
        return self.inner.astream_with_usage(prompt, **kw)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def __repr__(self) -> str:
        return repr(self.inner)


def _takes_system_prompt(llm: Any, where: str) -> None:
    if not hasattr(llm, "system_prompt"):
        raise ConfigError(
            f"system_prompt needs an LLM that takes a system message per call (such as "
            f"fr.OpenAILike); the {where} is {type(llm).__name__}. Put the instructions in the "
            "synthesizer's text_qa_template instead"
        )


class ChatEngine:
    """Chat with memory over a RAG pipeline (LlamaIndex ``chat_engine``, Spring AI
    ``ChatMemory`` advisor).

    Args:
        pipeline: the :class:`~fastrag.RAGPipeline` answering each turn (never modified: the
            engine works on a shallow copy that shares its retrievers and synthesizer).
        memory: a :class:`ChatMemory` (default: ``MessageWindowChatMemory(max_messages=20)``);
            may be shared by several engines and threads.
        condense: condense history + follow-up into a standalone question before retrieval
            (adds a ``CompressionQueryTransformer`` first unless the pipeline has one).
        llm: the LLM that condenses (default: the pipeline's LLM).
        system_prompt: a system message for every answering call (the condensing call does
            not get it); needs an LLM that takes one per call, such as ``fr.OpenAILike``.
    """

    def __init__(
        self,
        pipeline: RAGPipeline,
        memory: ChatMemory | None = None,
        condense: bool = True,
        llm: Any = None,
        system_prompt: str | None = None,
    ) -> None:
        if not isinstance(pipeline, RAGPipeline):
            raise ConfigError(
                f"pipeline must be a fr.RAGPipeline (e.g. doc.as_query_engine("
                f"...)), got {type(pipeline).__name__}"
            )
        if memory is None:
            memory = MessageWindowChatMemory()
        elif not isinstance(memory, ChatMemory):
            raise ConfigError(
                f"memory must be a fastrag ChatMemory (e.g. "
                f"MessageWindowChatMemory()), got {type(memory).__name__}"
            )
        self.pipeline = pipeline
        self.memory = memory
        self.condense = check_bool("condense", condense)
        self.system_prompt = check_str("system_prompt", system_prompt, none=True)
        pipe = copy.copy(pipeline)
        pipe.query_transformers = list(pipeline.query_transformers)
        if self.condense and not any(
            isinstance(t, CompressionQueryTransformer) for t in pipe.query_transformers
        ):
            cllm = llm if llm is not None else pipeline.llm
            if cllm is None:
                raise ConfigError(
                    "ChatEngine(condense=True) needs an LLM to condense the chat history into a "
                    "standalone question: pass llm=..., build the pipeline with llm=..., or "
                    "pass condense=False"
                )
            pipe.query_transformers.insert(0, CompressionQueryTransformer(cllm))
        if self.system_prompt:
            self._add_system_prompt(pipe, self.system_prompt)
        self._pipe = pipe
        self._stream_pipe = copy.copy(pipe)
        self._stream_pipe.streaming = True

    @classmethod
    def from_document(cls, doc: BaseDocument, **kw: Any) -> ChatEngine:
        """A ChatEngine over ``RAGPipeline.from_document(doc, ...)`` (``doc.as_chat_engine``):
        ``memory``, ``condense``, ``system_prompt``, ``chat_mode`` go to the engine, the rest
        (``llm`` too) to :meth:`RAGPipeline.from_document
        <fastrag.rag.RAGPipeline.from_document>`."""
        if not isinstance(doc, BaseDocument):
            raise ConfigError(f"doc must be a fr.Document, got {type(doc).__name__}")
        return as_chat_engine(doc, **kw)

    @staticmethod
    def _add_system_prompt(pipe: RAGPipeline, system_prompt: str) -> None:
        if pipe.synthesizer is None and pipe.llm is None:
            raise ConfigError("system_prompt needs a pipeline that answers with an LLM")
        if pipe.llm is not None:
            _takes_system_prompt(pipe.llm, "pipeline's llm")
            pipe.llm = _SystemPromptLLM(pipe.llm, system_prompt)
        if pipe.synthesizer is not None and pipe.synthesizer.llm is not None:
            _takes_system_prompt(pipe.synthesizer.llm, "synthesizer's llm")
            synth = copy.copy(pipe.synthesizer)  # pickle protocol: its own metered LLM
            synth.llm_kwargs = {**synth.llm_kwargs, "system_prompt": system_prompt}
            pipe.synthesizer = synth

    # -- one turn ------------------------------------------------------------------------------
    def chat(self, message: str, session_id: str = "default") -> Response:
        """Answer ``message`` in the conversation ``session_id`` and remember the turn."""
        return run_sync(self.achat(message, session_id))

    async def achat(
        self, message: str, session_id: str = "default", context: Mapping[str, Any] | None = None
    ) -> Response:
        """Async :meth:`chat`; ``context`` is the query's (``{"filter": ...}``)."""
        return (await self.abatch([message], [session_id], None if context is None else [context]))[
            0
        ]

    def stream_chat(self, message: str, session_id: str = "default") -> Response:
        """A streaming answer (``resp.response_gen``); the turn is remembered when the stream
        has been read to its end. A pipeline that cannot stream gives one piece."""
        inner = run_sync(self.astream_chat(message, session_id))
        out = Response(
            None,
            inner.source_nodes,
            inner.metadata,
            response_gen=iter_sync(inner.async_response_gen),
            on_done=lambda _t: out.metadata.update(inner.metadata),
        )
        return out

    async def astream_chat(
        self, message: str, session_id: str = "default", context: Mapping[str, Any] | None = None
    ) -> Response:
        """Async :meth:`stream_chat` (``resp.async_response_gen``)."""
        check_str("message", message)
        check_str("session_id", session_id)
        query = Query(
            message,
            history=await to_thread(self.memory.get, session_id),
            context=context or {},
        )
        r = await self._stream_pipe.aquery(query)
        meta = {**r.metadata, "session_id": session_id}

        async def pieces() -> AsyncIterator[str]:
            if r.is_streaming:
                async for piece in r.async_response_gen:
                    yield piece
            elif r.response:
                yield r.response

        def done(text: str) -> None:
            out.metadata.update(r.metadata)
            out.metadata["session_id"] = session_id
            self._remember(session_id, message, text)

        out = Response(None, r.source_nodes, meta, async_response_gen=pieces(), on_done=done)
        return out

    # -- many sessions -------------------------------------------------------------------------
    def batch(self, messages: Sequence[str], session_ids: Sequence[str]) -> list[Response]:
        """One turn in each of many sessions, answered as one pipeline batch (in order).
        A session may appear once per batch."""
        return run_sync(self.abatch(messages, session_ids))

    async def abatch(
        self,
        messages: Sequence[str],
        session_ids: Sequence[str],
        contexts: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Response]:
        """Async :meth:`batch`; ``contexts``: each query's context (``{"filter": ...}``)."""
        msgs = check_str_list("messages", messages)
        sids = check_str_list("session_ids", session_ids)
        if len(msgs) != len(sids):
            raise ConfigError(
                f"messages has {len(msgs)} items but session_ids has {len(sids)}; "
                "pass one session id per message"
            )
        first: dict[str, int] = {}
        for i, (m, sid) in enumerate(zip(msgs, sids, strict=True)):
            check_str(f"messages[{i}]", m)
            check_str(f"session_ids[{i}]", sid)
            if sid in first:
                raise ConfigError(
                    f"session {sid!r} appears twice in one batch (messages {first[sid]} and "
                    f"{i}); a turn needs the answer before it: send them in separate calls"
                )
            first[sid] = i
        histories = await to_thread(lambda: [self.memory.get(s) for s in sids])
        ctxs = list(contexts) if contexts is not None else [{}] * len(msgs)
        if len(ctxs) != len(msgs):
            raise ConfigError(f"contexts has {len(ctxs)} items for {len(msgs)} messages")
        queries = [
            Query(m, history=h, context=c or {})
            for m, h, c in zip(msgs, histories, ctxs, strict=True)
        ]
        responses = await self._pipe.abatch(queries)

        def remember() -> None:
            for m, sid, r in zip(msgs, sids, responses, strict=True):
                if "error" not in r.metadata:
                    self._remember(sid, m, r.response or "")

        await to_thread(remember)
        for sid, r in zip(sids, responses, strict=True):
            r.metadata["session_id"] = sid
        return responses

    # -- memory --------------------------------------------------------------------------------
    def _remember(self, session_id: str, message: str, answer: str) -> None:
        self.memory.extend(session_id, [("user", message), ("assistant", answer)])

    def history(self, session_id: str = "default") -> list[tuple[str, str]]:
        """The remembered messages of one session, oldest first."""
        return self.memory.get(session_id)

    def reset(self, session_id: str | None = None) -> None:
        """Forget one session's conversation (None: every session of this memory)."""
        self.memory.clear(session_id)

    def __repr__(self) -> str:
        return (
            f"ChatEngine(pipeline={self.pipeline!r}, memory={self.memory!r}, "
            f"condense={self.condense})"
        )


def as_chat_engine(pipeline: Any, **kw: Any) -> ChatEngine:
    """A :class:`ChatEngine` over a ``RAGPipeline`` or a ``Document`` (LlamaIndex's
    ``index.as_chat_engine(chat_mode="condense_question")``).

    Keyword arguments: ``memory``, ``condense``, ``llm``, ``system_prompt`` and ``chat_mode``
    (only ``"condense_question"``) go to the engine; for a Document, ``llm`` and the rest go
    to :meth:`RAGPipeline.from_document <fastrag.rag.RAGPipeline.from_document>`
    (``group_name``, ``similarity``, ``topk``, ...).
    """
    mode = kw.pop("chat_mode", "condense_question")
    check_choice("chat_mode", mode, CHAT_MODES)
    chat_kw = {k: kw.pop(k) for k in _CHAT_KEYS if k in kw}
    if not isinstance(pipeline, RAGPipeline):
        if not isinstance(pipeline, BaseDocument):
            raise ConfigError(
                f"as_chat_engine needs a fr.RAGPipeline or a fr.Document, got "
                f"{type(pipeline).__name__}"
            )
        pipeline = RAGPipeline.from_document(pipeline, **kw)
        kw = {"llm": kw["llm"]} if "llm" in kw else {}
    if set(kw) - {"llm"}:
        raise ConfigError(
            f"unknown keyword argument(s) {sorted(set(kw) - {'llm'})} for "
            f"as_chat_engine; allowed: {sorted(set(_CHAT_KEYS) | {'llm'})}"
        )
    return ChatEngine(pipeline, **chat_kw, **kw)
