"""ChatEngine and chat memories, on the real code path: a fastrag Retriever over a small corpus,
the pipeline, and ``fr.OpenAILike`` talking HTTP to the local OpenAI-compatible test server."""

from __future__ import annotations

import asyncio
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import fastrag as fr
from fastrag.analysis.tokens import count_tokens
from fastrag.chat import (
    ChatEngine,
    MessageWindowChatMemory,
    TokenWindowChatMemory,
    as_chat_engine,
)
from fastrag.errors import ConfigError

DOCS = [
    "Copenhagen is the capital of Denmark and its largest city.",
    "Aarhus is the second largest city of Denmark.",
    "Paris is the capital of France.",
    "BM25 ranks documents by term frequency and inverse document frequency.",
    "A secret code is a word that only its owner knows.",
]
STANDALONE = {"And the second largest one?": "What is the second largest city of Denmark?"}


def reply(messages: list[dict]) -> str:
    """The test model: condenses by table (else follow-up plus the first user message), and
    answers by echoing the query it was asked."""
    p = messages[-1]["content"]
    if "standalone query" in p:
        follow = re.search(r"Follow-up query:\n(.*)\n", p).group(1)
        first_user = re.search(r"^user: (.*)$", p, re.M).group(1)
        return STANDALONE.get(follow, f"{follow} (about: {first_user})")
    m = re.search(r"Query: (.*)\n", p)
    return f"Answer to: {m.group(1)}" if m else "OTHER"


class Recorder:
    """A fastrag Retriever that records every batch call it gets."""

    def __init__(self, inner: fr.Retriever) -> None:
        self.inner = inner
        self.calls: list[list[str]] = []
        self._lock = threading.Lock()

    def batch(self, texts, filter=None):
        with self._lock:
            self.calls.append(list(texts))
        return self.inner.batch(texts)


@pytest.fixture(scope="module")
def doc() -> fr.Document:
    return fr.Document.from_texts(DOCS)


@pytest.fixture
def server(openai_server):
    openai_server.reply = reply
    return openai_server


@pytest.fixture
def llm(server) -> fr.OpenAILike:
    return fr.OpenAILike("m", server.url, retry_backoff=0.01, timeout=10.0)


@pytest.fixture
def rec(doc) -> Recorder:
    return Recorder(fr.Retriever(doc, "root", "bm25", topk=1))


def make_pipe(rec, llm, streaming=False) -> fr.RAGPipeline:
    synth = fr.get_response_synthesizer("compact", llm=llm, streaming=streaming)
    return fr.RAGPipeline(rec, synthesizer=synth)


def chat_prompts(server) -> list[str]:
    return [
        r.body["messages"][-1]["content"]
        for r in server.requests
        if r.path == "/v1/chat/completions"
    ]


# -- the engine ---------------------------------------------------------------------------------
def test_second_turn_retrieves_the_condensed_question(server, llm, rec):
    pipe = make_pipe(rec, llm)
    engine = ChatEngine(pipe)
    r1 = engine.chat("What is the capital of Denmark?")
    assert r1.response == "Answer to: What is the capital of Denmark?"
    assert rec.calls == [["What is the capital of Denmark?"]]
    assert len(chat_prompts(server)) == 1  # no history: no condensing call

    r2 = engine.chat("And the second largest one?")
    condense, answer = chat_prompts(server)[1:]
    assert (
        "Conversation history:\nuser: What is the capital of Denmark?\n"
        "assistant: Answer to: What is the capital of Denmark?\n\n"
        "Follow-up query:\nAnd the second largest one?\n"
    ) in condense
    assert rec.calls[1] == ["What is the second largest city of Denmark?"]
    assert r2.source_nodes[0].text == DOCS[1]
    assert "Query: What is the second largest city of Denmark?\n" in answer
    assert r2.response == "Answer to: What is the second largest city of Denmark?"
    assert r2.metadata["session_id"] == "default"
    assert engine.history() == [
        ("user", "What is the capital of Denmark?"),
        ("assistant", "Answer to: What is the capital of Denmark?"),
        ("user", "And the second largest one?"),
        ("assistant", "Answer to: What is the second largest city of Denmark?"),
    ]
    assert pipe.query_transformers == []  # the user's pipeline is not modified
    engine.reset()
    assert engine.history() == [] and engine.memory.sessions() == []


def test_sessions_are_isolated(server, llm, rec):
    engine = ChatEngine(make_pipe(rec, llm))
    engine.chat("What is the capital of France?", "a")
    engine.chat("What is BM25?", "b")
    engine.chat("Tell me more", "b")
    condense = chat_prompts(server)[-2]
    assert "BM25" in condense and "France" not in condense
    assert rec.calls[-1] == ["Tell me more (about: What is BM25?)"]
    assert [m for _, m in engine.history("a")] == [
        "What is the capital of France?",
        "Answer to: What is the capital of France?",
    ]
    assert len(engine.history("b")) == 4
    engine.reset("b")
    assert engine.memory.sessions() == ["a"]


def test_async_chat_and_pipeline_transformer_reused(server, llm, rec):
    own = fr.CompressionQueryTransformer(llm)
    pipe = fr.RAGPipeline(
        rec, query_transformers=[own], synthesizer=fr.get_response_synthesizer("compact", llm=llm)
    )
    engine = as_chat_engine(pipe, chat_mode="condense_question")

    async def talk():
        await engine.achat("What is the capital of Denmark?", "s")
        return await engine.achat("And the second largest one?", "s")

    r = asyncio.run(talk())
    assert r.response == "Answer to: What is the second largest city of Denmark?"
    assert rec.calls[-1] == ["What is the second largest city of Denmark?"]
    assert len(chat_prompts(server)) == 3  # answer; condense + answer: no second condenser
    assert pipe.query_transformers == [own]


def test_batch_is_one_retrieval_call(server, llm, rec):
    pipe = make_pipe(rec, llm)
    engine = ChatEngine(pipe)
    sids = ["x", "y", "z"]
    engine.batch(
        ["What is the capital of Denmark?", "What is the capital of France?", "What is BM25?"], sids
    )
    assert len(rec.calls) == 1 and pipe.retrievers[0].calls == 1
    out = engine.batch(["Tell me more"] * 3, sids)
    assert len(rec.calls) == 2 and pipe.retrievers[0].calls == 2
    assert rec.calls[1] == [
        "Tell me more (about: What is the capital of Denmark?)",
        "Tell me more (about: What is the capital of France?)",
        "Tell me more (about: What is BM25?)",
    ]
    assert [r.metadata["session_id"] for r in out] == sids
    assert all(len(engine.history(s)) == 4 for s in sids)


def test_batch_refuses_a_session_twice(server, llm, rec):
    engine = ChatEngine(make_pipe(rec, llm))
    with pytest.raises(
        ConfigError,
        match=r"session 'a' appears twice in one batch "
        r"\(messages 0 and 2\)",
    ):
        engine.batch(["q1", "q2", "q3"], ["a", "b", "a"])
    with pytest.raises(ConfigError, match="messages has 2 items but session_ids has 1"):
        engine.batch(["q1", "q2"], ["a"])
    assert rec.calls == [] and engine.memory.sessions() == []


def test_threads_on_separate_sessions_do_not_cross_talk(server, llm, rec):
    engine = ChatEngine(make_pipe(rec, llm), memory=MessageWindowChatMemory(10))

    def talk(i: int) -> str:
        engine.chat(f"My code is C{i}", f"s{i}")
        return engine.chat("What is my code?", f"s{i}").response

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(talk, range(8)))
    for i, a in enumerate(answers):
        assert a == f"Answer to: What is my code? (about: My code is C{i})"
        hist = engine.history(f"s{i}")
        assert [m for r, m in hist if r == "user"] == [f"My code is C{i}", "What is my code?"]
        assert all(f"C{j}" not in m for _, m in hist for j in range(8) if j != i)
    assert sorted(engine.memory.sessions()) == [f"s{i}" for i in range(8)]


def test_stream_chat_remembers_the_streamed_answer(server, llm, rec):
    engine = ChatEngine(make_pipe(rec, llm, streaming=True))
    r = engine.stream_chat("What is the capital of Denmark?")
    assert engine.history() == []  # nothing remembered before the stream is read
    pieces = list(r.response_gen)
    assert len(pieces) > 1
    assert "".join(pieces) == r.response == "Answer to: What is the capital of Denmark?"
    assert engine.history()[-1] == ("assistant", r.response)
    assert server.requests[-1].body.get("stream") is True


def test_astream_chat_on_a_non_streaming_augmenter_pipeline(server, llm, rec):
    engine = ChatEngine(fr.RAGPipeline(rec, llm=llm))  # the engine's stream copy streams

    async def talk():
        await engine.achat("What is the capital of Denmark?")
        r = await engine.astream_chat("And the second largest one?")
        return r, [p async for p in r.async_response_gen]

    r, pieces = asyncio.run(talk())
    assert len(pieces) > 1 and "".join(pieces) == r.response
    assert r.response == "Answer to: What is the second largest city of Denmark?"
    assert engine.history()[-2:] == [
        ("user", "And the second largest one?"),
        ("assistant", r.response),
    ]
    assert rec.calls[-1] == ["What is the second largest city of Denmark?"]


def test_system_prompt_reaches_answers_only(server, llm, rec, doc):
    engine = as_chat_engine(doc, llm=llm, topk=1, system_prompt="Be brief.")
    engine.chat("What is the capital of Denmark?")
    engine.chat("And the second largest one?")
    bodies = [r.body for r in server.requests]
    systems = [
        b["messages"][0]["content"] if b["messages"][0]["role"] == "system" else None
        for b in bodies
    ]
    assert systems == ["Be brief.", None, "Be brief."]  # answer, condense, answer
    with pytest.raises(ConfigError, match="chat_mode"):
        as_chat_engine(doc, llm=llm, chat_mode="react")


def test_condense_needs_an_llm(rec):
    with pytest.raises(ConfigError, match="condense=True.* needs an LLM"):
        ChatEngine(fr.RAGPipeline(rec))
    with pytest.raises(ConfigError, match="memory must be a fastrag ChatMemory"):
        ChatEngine(fr.RAGPipeline(rec), memory={}, condense=False)


# -- memories -----------------------------------------------------------------------------------
def test_message_window_keeps_the_last_messages_and_system():
    mem = MessageWindowChatMemory(max_messages=3)
    mem.add("s", "system", "You are terse.")
    for i in range(5):
        mem.add("s", "user" if i % 2 == 0 else "assistant", f"m{i}")
    assert mem.get("s") == [("system", "You are terse."), ("assistant", "m3"), ("user", "m4")]
    assert mem.get("other") == []
    with pytest.raises(ConfigError, match="role must be one of"):
        mem.add("s", "robot", "x")


def test_engine_window_keeps_the_last_turns(server, llm, rec):
    engine = ChatEngine(make_pipe(rec, llm), memory=MessageWindowChatMemory(max_messages=4))
    for q in ("What is BM25?", "What is the capital of France?", "What is Aarhus?"):
        engine.chat(q)
    assert [m for _, m in engine.history()] == [
        "What is the capital of France?",
        "Answer to: What is the capital of France? (about: What is BM25?)",
        "What is Aarhus?",
        "Answer to: What is Aarhus? (about: What is BM25?)",
    ]  # turn 3 saw turns 1 and 2


def test_token_window():
    texts = ["one two three four", "five six", "seven eight nine", "ten"]
    sizes = [count_tokens(t) for t in texts]
    limit = sizes[2] + sizes[3]
    mem = TokenWindowChatMemory(max_tokens=limit)
    for t in texts:
        mem.add("s", "user", t)
    assert mem.get("s") == [("user", "seven eight nine"), ("user", "ten")]
    mem.add("s", "user", "x " * (limit + 5))  # longer than the window alone: nothing kept
    assert mem.get("s") == []


def test_document_and_pipeline_as_chat_engine(server, llm, doc, tmp_path):
    """LlamaIndex's shapes: ``doc.as_chat_engine(chat_mode="condense_question")`` and
    ``pipeline.as_chat_engine(memory=...)``, both remembering the conversation."""
    engine = doc.as_chat_engine(chat_mode="condense_question", llm=llm, topk=2)
    first = engine.chat("What is the capital of Denmark?", session_id="s")
    assert first.response and len(engine.history("s")) == 2
    memory = fr.MessageWindowChatMemory(max_messages=4, path=tmp_path / "chat.sqlite3")
    pipe = fr.RAGPipeline(fr.Retriever(doc, "root", "bm25", topk=2), llm=llm)
    other = pipe.as_chat_engine(memory=memory)
    other.chat("What is the capital of Denmark?", session_id="s")
    assert fr.MessageWindowChatMemory(path=tmp_path / "chat.sqlite3").get("s") == memory.get("s")
