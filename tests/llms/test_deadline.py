"""``timeout=`` is a deadline for the OpenAI-compatible clients, not a per-read limit.

A real server on 127.0.0.1 answers 200 and then trickles its body one byte every 0.5 s, so
no single read ever waits ``timeout``; the call must still end within its deadline. What the
deadline means (see ``fastrag._http``): each attempt has ``timeout`` s from sending the
request to the last byte (streams: to the first token, then between tokens), timeouts are
retried ``max_retries`` times, and the whole call ends within ``(max_retries + 1) * timeout``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import select
import socket
import threading
import time

import pytest
from wallclock import below

from fastrag.embeddings import EmbeddingServiceError, OpenAIEmbedding
from fastrag.llms import LLMError, LLMTimeoutError, OpenAILike
from fastrag.retrieval.online import OpenAIRerank, RerankServiceError

TIMEOUT = 1.0
MARGIN = 0.75  # scheduling slack on a busy machine; the trickle alone would last 8 s
HINT = "pass a larger timeout="

_COMPLETION = json.dumps(
    {"choices": [{"message": {"role": "assistant", "content": "never finished"}}]}
).encode()
_EMBEDDING = json.dumps({"data": [{"index": 0, "embedding": [0.1] * 64}]}).encode()
_RERANK = json.dumps({"results": [{"index": 0, "relevance_score": 0.5}]}).encode()


def _event(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"delta": {"content": text}}]}).encode() + b"\n\n"


class TrickleServer:
    """Answers every request with HTTP 200 and ``head`` at once, then ``body`` (repeated) one
    byte every ``interval`` s, for ``limit`` s; counts connections and client hang-ups."""

    def __init__(
        self,
        body: bytes,
        *,
        head: bytes = b"",
        content_type: str = "application/json",
        interval: float = 0.5,
        limit: float = 8.0,
    ) -> None:
        self.body, self.head, self.content_type = body, head, content_type
        self.interval, self.limit = interval, limit
        self.connections = 0
        self.hangups = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"

    def __enter__(self) -> TrickleServer:
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sock.close()
        self._acceptor.join(5)
        for t in self._threads:
            t.join(5)

    def wait_hangups(self, n: int, within: float = 3.0) -> bool:
        end = time.monotonic() + within
        while self.hangups < n and time.monotonic() < end:
            time.sleep(0.02)
        return self.hangups >= n

    def _accept(self) -> None:
        while not self._stop.is_set():
            readable, _, _ = select.select([self._sock], [], [], 0.05)
            if not readable:
                continue
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        header = (
            f"HTTP/1.1 200 OK\r\nContent-Type: {self.content_type}\r\nConnection: close\r\n\r\n"
        ).encode()
        end = time.monotonic() + self.limit
        with conn:
            try:
                self._read_request(conn)
                conn.sendall(header + self.head)
                for byte in itertools.cycle(self.body):
                    if self._stop.is_set() or time.monotonic() >= end:
                        return
                    readable, _, _ = select.select([conn], [], [], self.interval)
                    if readable and not conn.recv(1024):
                        raise ConnectionAbortedError  # the client closed the connection
                    conn.sendall(bytes([byte]))
            except OSError:  # closed, or reset (a close with unread data sends RST)
                with self._lock:
                    self.hangups += 1

    @staticmethod
    def _recv(conn: socket.socket) -> bytes:
        data = conn.recv(65536)
        if not data:
            raise ConnectionAbortedError
        return data

    @classmethod
    def _read_request(cls, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += cls._recv(conn)
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += cls._recv(conn)


def _fails_in_time(call, error: type[Exception], *, attempts: int) -> tuple[Exception, float]:
    """Run ``call``; it must raise ``error`` within ``attempts * TIMEOUT`` (plus slack)."""
    t0 = time.perf_counter()
    with pytest.raises(error) as info:
        call()
    elapsed = time.perf_counter() - t0
    below(elapsed, attempts * TIMEOUT + MARGIN, "the failing call")
    return info.value, elapsed


# -- non-streaming ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_llm_complete_trickle_ends_at_the_deadline_after_each_attempt(mode):
    with TrickleServer(_COMPLETION) as server:
        llm = OpenAILike("m", server.url, timeout=TIMEOUT, max_retries=1, retry_backoff=0.01)
        call = (
            (lambda: llm.complete("hi"))
            if mode == "sync"
            else lambda: asyncio.run(llm.acomplete("hi"))
        )
        err, elapsed = _fails_in_time(call, LLMTimeoutError, attempts=2)
        assert elapsed >= 2 * TIMEOUT - 0.1  # each attempt had its own timeout
        assert server.connections == 2 and err.attempts == 2 and err.status is None
        msg = str(err)
        assert "after 2 attempts" in msg and "no answer within timeout=1 s" in msg
        assert "whole response" in msg and HINT in msg
        assert server.wait_hangups(2)  # both requests were closed, none left hanging


def test_embedding_trickle_ends_at_the_deadline():
    with TrickleServer(_EMBEDDING) as server:
        emb = OpenAIEmbedding(server.url, "e", timeout=TIMEOUT, max_retries=0)
        err, _ = _fails_in_time(lambda: emb.embed(["a text"]), EmbeddingServiceError, attempts=1)
        assert server.connections == 1 and err.attempts == 1 and err.status is None
        assert "no answer within timeout=1 s" in str(err) and HINT in str(err)
        assert server.wait_hangups(1)


def test_rerank_trickle_ends_at_the_deadline():
    with TrickleServer(_RERANK) as server:
        rr = OpenAIRerank(server.url, "r", timeout=TIMEOUT, max_retries=1, retry_backoff=0.01)
        err, _ = _fails_in_time(lambda: rr.score("q", ["d"]), RerankServiceError, attempts=2)
        assert server.connections == 2 and err.attempts == 2 and err.status is None
        assert "after 2 attempts" in str(err) and "no answer within timeout=1 s" in str(err)
        assert HINT in str(err)
        assert server.wait_hangups(2)


# -- streaming --------------------------------------------------------------------------------
def test_llm_stream_trickle_before_the_first_token_is_retried_then_ends():
    with TrickleServer(_event("Hello"), content_type="text/event-stream") as server:
        llm = OpenAILike("m", server.url, timeout=TIMEOUT, max_retries=1, retry_backoff=0.01)
        got: list[str] = []
        err, _ = _fails_in_time(lambda: got.extend(llm.stream("hi")), LLMTimeoutError, attempts=2)
        assert got == [] and server.connections == 2 and err.attempts == 2
        assert "no answer within timeout=1 s (waiting for the first token)" in str(err)
        assert HINT in str(err)
        assert server.wait_hangups(2)


def test_llm_stream_trickle_after_a_token_ends_without_a_retry():
    with TrickleServer(
        _event(" world"), head=_event("Hello"), content_type="text/event-stream"
    ) as server:
        llm = OpenAILike("m", server.url, timeout=TIMEOUT, max_retries=3, retry_backoff=0.01)
        got: list[str] = []
        err, _ = _fails_in_time(lambda: got.extend(llm.stream("hi")), LLMTimeoutError, attempts=1)
        assert got == ["Hello"]  # delivered chunks are never repeated by a retry
        assert server.connections == 1 and err.attempts == 1
        assert "stream broken after 1 chunk: no answer within timeout=1 s" in str(err)
        assert "waiting for the next token" in str(err) and HINT in str(err)
        assert server.wait_hangups(1)


# -- retries against the call's deadline --------------------------------------------------------
def test_no_retry_is_started_past_the_calls_deadline(openai_server):
    openai_server.script(["retry-after:5"])  # the whole call may take 2 * TIMEOUT
    llm = OpenAILike("m", openai_server.url, timeout=TIMEOUT, max_retries=1)
    t0 = time.perf_counter()
    with pytest.raises(LLMError, match=r"HTTP 429.*not retried: waiting 5(\.\d+)? s") as info:
        llm.complete("hi")
    below(time.perf_counter() - t0, MARGIN, "giving up")  # at once, not after sleeping 5 s
    assert len(openai_server.requests) == 1 and info.value.attempts == 1
    assert "the call's deadline (2 attempts x timeout=1 s); raise timeout=" in str(info.value)


# -- a healthy server is unaffected -------------------------------------------------------------
def test_a_fast_server_answers_every_client_with_the_same_timeout(openai_server):
    llm = OpenAILike("test-model", openai_server.url, timeout=TIMEOUT)
    assert llm.complete("hi") == "Echo: hi"
    assert "".join(llm.stream("a b c")) == "Echo: a b c"
    emb = OpenAIEmbedding(openai_server.url, "e", dim=openai_server.dim, timeout=TIMEOUT)
    assert emb.embed(["x", "y"]).shape == (2, openai_server.dim)
    rr = OpenAIRerank(openai_server.url, "r", timeout=TIMEOUT)
    scores = rr.score("bm25 ranking", ["bm25 ranking", "cats"])
    assert scores[0] > scores[1]
    assert len(openai_server.requests) == 4


def test_a_stream_longer_than_the_timeout_is_fine_while_tokens_keep_coming(openai_server):
    openai_server.chunk_delay = 0.3  # 5 tokens 0.3 s apart: ~1.5 s in all
    llm = OpenAILike("test-model", openai_server.url, timeout=TIMEOUT, max_retries=0)
    t0 = time.perf_counter()
    assert "".join(llm.stream("a b c d")) == "Echo: a b c d"
    assert time.perf_counter() - t0 > TIMEOUT
    assert len(openai_server.requests) == 1
