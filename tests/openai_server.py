"""A local OpenAI-compatible HTTP server for tests (stdlib only, plus numpy and fastrag's
tiktoken counting). It speaks real HTTP on 127.0.0.1, so clients are tested end to end.

Usage::

    from openai_server import OpenAIServer          # tests/ is on sys.path via conftest.py

    with OpenAIServer(dim=16) as server:            # or the `openai_server` pytest fixture
        llm = OpenAILike("test-model", base_url=server.url)   # server.url = http://127.0.0.1:PORT/v1
        server.script(["429", "ok"])                # behaviours of the next requests, in order
        ...
        assert len(server.requests) == 2            # log of received requests

Endpoints
    POST /v1/chat/completions   non-stream JSON, or SSE when ``"stream": true`` (chunked
                                transfer, one ``data:`` event per word, a final usage event when
                                ``stream_options.include_usage`` is true, then ``data: [DONE]``).
                                ``max_tokens`` truncates the reply (finish_reason "length").
    POST /v1/embeddings         ``input``: str, list of str, list of token ids, or list of such
                                lists; ``encoding_format`` "float" (default) or "base64" (little-
                                endian float32); ``dimensions`` overrides ``dim``. Vectors are
                                :meth:`OpenAIServer.embedding` (hash-seeded, float32, unit norm);
                                ``usage.prompt_tokens`` = ``total_tokens`` = tiktoken count.
    POST /v1/rerank             ``{"model", "query", "documents", "top_n"?}`` -> Cohere / Jina /
                                vLLM shape ``{"results": [{"index", "relevance_score"}]}`` best
                                first (``rerank_format = "tei"``: a bare list of ``{"index",
                                "score"}``); scores are :meth:`OpenAIServer.rerank_score`;
                                ``max_inputs`` caps the documents per request (400 beyond).
    GET  /v1/models             one model, ``server.model``.

Behaviours (``server.script([...])``; each request to a POST endpoint takes the next one; when
the script is exhausted every request gets ``"ok"``):
    "ok"               normal answer
    "<status>"         e.g. "429", "500", "503", "400": that status with an OpenAI error body
    "<status>:M"       that status with error message M (e.g. "400:response_format unknown")
    "retry-after:S"    429 with header ``Retry-After: S`` (S seconds, may be fractional)
    "slow:S"           wait S seconds, then answer normally; gives up early (and counts a
                       disconnect) if the client closes the connection
    "stall:S"          streams: send the first chunk, then wait S seconds before the rest
                       (non-stream: same as "slow:S")
    "malformed"        200 with a body that is not JSON (streams: a broken ``data:`` event)
    "drop"             close the connection without any response
    "no-usage"         answer without the ``usage`` field (streams: no usage event)
    "shuffle"          embeddings: ``data`` items in reverse order (``index`` stays correct)
    "error-event"      streams: one chunk, then ``data: {"error": {...}}``
    "text:T"           answer with the text T (chat) instead of the reply

Settings (plain attributes, change any time): ``dim`` (embedding size), ``model``,
``api_key`` (if set, requests need ``Authorization: Bearer <key>``, else 401), ``reply``
(None: :meth:`default_reply`; a str; or a function ``messages -> str``), ``usage`` (None:
tiktoken counts; or ``(prompt_tokens, completion_tokens)`` to report instead),
``max_inputs`` (embeddings: more inputs per request get 400), ``chunk_delay`` (seconds
between stream events).

Observations: ``requests`` (list of :class:`RecordedRequest`: path, body, headers,
behaviour, status, started, ended, disconnected), ``in_flight``, ``max_in_flight``,
``disconnects``; :meth:`reset` clears them and the script; :meth:`wait_for` polls a condition.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import select
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["OpenAIServer", "RecordedRequest"]

_BEHAVIOUR = re.compile(
    r"^(ok|\d{3}(:.*)?|malformed|drop|no-usage|shuffle|error-event|"
    r"(retry-after|slow|stall):\d+(\.\d*)?|text:.*)$",
    re.DOTALL,
)
_WORDS = re.compile(r"\s*\S+|\s+")


def _count(text: str) -> int:
    from fastrag.analysis.tokens import count_tokens

    return count_tokens(text)


@dataclass
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    body: Any  # parsed JSON, or None
    headers: dict[str, str]  # lower-case names
    behaviour: str
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    status: int | None = None
    disconnected: bool = False


class _Stop(Exception):
    """The client went away (or the server is stopping): abandon this request."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms stalls
    timeout = 10  # idle keep-alive connections end after this
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- helpers -------------------------------------------------------------------------------
    @property
    def owner(self) -> OpenAIServer:
        return self.server.owner

    def _wait(self, seconds: float) -> None:
        """Sleep, but raise _Stop as soon as the client disconnects or the server stops."""
        end = time.monotonic() + seconds
        while True:
            rem = end - time.monotonic()
            if rem <= 0:
                return
            if self.owner._stopping.is_set():
                raise _Stop
            readable, _, _ = select.select([self.connection], [], [], min(rem, 0.02))
            if readable:
                try:
                    peek = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    raise _Stop from None
                if not peek:
                    raise _Stop
                time.sleep(min(rem, 0.02))

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(obj).encode(), "application/json", headers)

    def _send_bytes(
        self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        rec = getattr(self, "_rec", None)
        if rec is not None:
            rec.status = status
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        kind = {429: "rate_limit_exceeded", 401: "invalid_api_key"}.get(status, "server_error")
        self._send_json(
            status, {"error": {"message": message, "type": kind, "code": status}}, headers
        )

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, obj: Any) -> None:
        payload = obj if isinstance(obj, str) else json.dumps(obj)
        self._chunk(f"data: {payload}\n\n".encode())

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # -- dispatch ------------------------------------------------------------------------------
    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [{"id": self.owner.model, "object": "model", "owned_by": "test"}],
                },
            )
        else:
            self._error(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        owner = self.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        rec = RecordedRequest(
            method="POST",
            path=self.path,
            body=body,
            headers={k.lower(): v for k, v in self.headers.items()},
            behaviour=owner._next_behaviour(),
        )
        with owner._lock:
            owner.requests.append(rec)
            owner.in_flight += 1
            owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
        try:
            self._rec = rec  # _send_bytes records the status before the client can read it
            rec.status = self._handle(rec, raw)
        except (_Stop, BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            rec.disconnected = True
            with owner._lock:
                owner.disconnects += 1
            self.close_connection = True
        finally:
            rec.ended = time.monotonic()
            with owner._lock:
                owner.in_flight -= 1

    def _handle(self, rec: RecordedRequest, raw: bytes) -> int | None:
        owner, b = self.owner, rec.behaviour
        path = rec.path.split("?")[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/v1/embeddings", "/v1/rerank"):
            self._error(404, f"no route POST {rec.path}")
            return 404
        if (
            owner.api_key is not None
            and rec.headers.get("authorization") != f"Bearer {owner.api_key}"
        ):
            self._error(401, "Incorrect API key provided")
            return 401
        if rec.body is None or not isinstance(rec.body, dict):
            self._error(400, f"request body is not a JSON object: {raw[:80]!r}")
            return 400
        if b == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        if re.match(r"\d{3}(:|$)", b):
            code, _, message = b.partition(":")
            self._error(int(code), message or f"scripted error {code}")
            return int(code)
        if b.startswith("retry-after:"):
            self._error(429, "rate limited (scripted)", {"Retry-After": b.split(":", 1)[1]})
            return 429
        stream = bool(rec.body.get("stream")) and path.endswith("chat/completions")
        if b.startswith("slow:") or (b.startswith("stall:") and not stream):
            self._wait(float(b.split(":", 1)[1]))
        if path.endswith("/embeddings"):
            return self._embeddings(rec)
        if path.endswith("/rerank"):
            return self._rerank(rec)
        return self._chat(rec, stream)

    # -- chat ----------------------------------------------------------------------------------
    def _chat(self, rec: RecordedRequest, stream: bool) -> int:
        owner, body, b = self.owner, rec.body, rec.behaviour
        messages = body.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages)
        ):
            self._error(400, "'messages' must be a non-empty list of {role, content}")
            return 400
        if b.startswith("text:"):
            reply = b[5:]
        elif owner.reply is None:
            reply = OpenAIServer.default_reply(messages)
        elif isinstance(owner.reply, str):
            reply = owner.reply
        else:
            reply = owner.reply(messages)
        finish = "stop"
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, int) and max_tokens > 0:
            from fastrag.analysis.tokens import get_encoding

            enc = get_encoding()
            ids = enc.encode_ordinary(reply)
            if len(ids) > max_tokens:
                reply, finish = enc.decode(ids[:max_tokens]), "length"
        if owner.usage is not None:
            p_tok, c_tok = owner.usage
        else:
            p_tok = sum(_count(m["content"]) for m in messages)
            c_tok = _count(reply)
        usage = {"prompt_tokens": p_tok, "completion_tokens": c_tok, "total_tokens": p_tok + c_tok}
        model = body.get("model", owner.model)
        cid, created = f"chatcmpl-{len(owner.requests)}", int(time.time())
        if not stream:
            if b == "malformed":
                self._send_bytes(
                    200, b'{"choices": [{"message": {"content": "trunc', "application/json"
                )
                return 200
            resp = {
                "id": cid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": finish,
                        "message": {"role": "assistant", "content": reply},
                    }
                ],
            }
            if b != "no-usage":
                resp["usage"] = usage
            self._send_json(200, resp)
            return 200

        def chunk(delta: dict, fin: str | None) -> dict:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": fin}],
            }

        self._start_stream()
        self._event(chunk({"role": "assistant", "content": ""}, None))
        if b == "malformed":
            self._event('{"choices": [{"delta": {"content": "tr')
            self._end_stream()
            return 200
        for i, piece in enumerate(_WORDS.findall(reply)):
            if owner.chunk_delay:
                self._wait(owner.chunk_delay)
            self._event(chunk({"content": piece}, None))
            if i == 0 and b.startswith("stall:"):
                self._wait(float(b.split(":", 1)[1]))
            if i == 0 and b == "error-event":
                self._event(
                    {"error": {"message": "scripted mid-stream failure", "type": "server_error"}}
                )
                self._end_stream()
                return 200
        self._event(chunk({}, finish))
        opts = body.get("stream_options") or {}
        if opts.get("include_usage") and b != "no-usage":
            self._event(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            )
        self._event("[DONE]")
        self._end_stream()
        return 200

    # -- embeddings ----------------------------------------------------------------------------
    def _embeddings(self, rec: RecordedRequest) -> int:
        owner, body, b = self.owner, rec.body, rec.behaviour
        inp = body.get("input")
        if isinstance(inp, str) or (
            isinstance(inp, list) and inp and all(isinstance(x, int) for x in inp)
        ):
            items = [inp]
        elif (
            isinstance(inp, list)
            and inp
            and all(
                isinstance(x, str) or (isinstance(x, list) and all(isinstance(t, int) for t in x))
                for x in inp
            )
        ):
            items = list(inp)
        else:
            self._error(
                400,
                "'input' must be a string, a list of strings, or token-id lists "
                f"(non-empty); got {json.dumps(inp)[:80]}",
            )
            return 400
        if any(isinstance(x, str) and x == "" for x in items):
            self._error(400, "'input' cannot contain empty strings")
            return 400
        if owner.max_inputs is not None and len(items) > owner.max_inputs:
            self._error(400, f"too many inputs: {len(items)} > {owner.max_inputs}")
            return 400
        dim = body.get("dimensions", owner.dim)
        if not isinstance(dim, int) or dim < 1:
            self._error(400, f"'dimensions' must be a positive int, got {dim!r}")
            return 400
        if b == "malformed":
            self._send_bytes(200, b'{"data": [{"embedding": [0.1, 0.', "application/json")
            return 200
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            self._error(400, f"'encoding_format' must be 'float' or 'base64', got {fmt!r}")
            return 400
        data = []
        n_tok = 0
        for i, item in enumerate(items):
            key = item if isinstance(item, str) else json.dumps(item)
            n_tok += _count(item) if isinstance(item, str) else len(item)
            vec = OpenAIServer.embedding(key, dim)
            emb: Any = (
                base64.b64encode(vec.astype("<f4").tobytes()).decode()
                if fmt == "base64"
                else vec.tolist()
            )
            data.append({"object": "embedding", "index": i, "embedding": emb})
        if b == "shuffle":
            data.reverse()
        resp: dict[str, Any] = {
            "object": "list",
            "data": data,
            "model": body.get("model", owner.model),
        }
        if b != "no-usage":
            resp["usage"] = {"prompt_tokens": n_tok, "total_tokens": n_tok}
        self._send_json(200, resp)
        return 200

    # -- rerank -------------------------------------------------------------------------------
    def _rerank(self, rec: RecordedRequest) -> int:
        owner, body, b = self.owner, rec.body, rec.behaviour
        query, docs = body.get("query"), body.get("documents")
        if (
            not isinstance(query, str)
            or not isinstance(docs, list)
            or not docs
            or not all(isinstance(d, str) for d in docs)
        ):
            self._error(400, "'query' must be a string and 'documents' a non-empty list of strings")
            return 400
        if owner.max_inputs is not None and len(docs) > owner.max_inputs:
            self._error(400, f"too many documents: {len(docs)} > {owner.max_inputs}")
            return 400
        if b == "malformed":
            self._send_bytes(200, b'{"results": [{"index": 0, "relev', "application/json")
            return 200
        scored = [(i, OpenAIServer.rerank_score(query, d)) for i, d in enumerate(docs)]
        scored.sort(key=lambda x: (-x[1], x[0]))
        top_n = body.get("top_n")
        if isinstance(top_n, int) and top_n > 0:
            scored = scored[:top_n]
        if owner.rerank_format == "tei":
            self._send_json(200, [{"index": i, "score": s} for i, s in scored])
            return 200
        self._send_json(
            200,
            {
                "id": f"rerank-{len(owner.requests)}",
                "model": body.get("model", owner.model),
                "results": [{"index": i, "relevance_score": s} for i, s in scored],
                "usage": {"total_tokens": _count(query) * len(docs) + sum(_count(d) for d in docs)},
            },
        )
        return 200


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: OpenAIServer

    def handle_error(self, request, client_address) -> None:
        """A client that hangs up (tests of timeouts and cancellation do) is not an error; a
        real one is still printed."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class OpenAIServer:
    """A scripted OpenAI-compatible server on 127.0.0.1 (random free port). See the module
    docstring for endpoints, behaviours, settings and observations."""

    def __init__(
        self,
        *,
        dim: int = 8,
        model: str = "test-model",
        api_key: str | None = None,
        reply: str | Callable[[list[dict]], str] | None = None,
    ) -> None:
        self.dim = dim
        self.model = model
        self.api_key = api_key
        self.reply = reply
        self.usage: tuple[int, int] | None = None
        self.max_inputs: int | None = None
        self.rerank_format = "cohere"
        self.chunk_delay = 0.0
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.disconnects = 0
        self._script: deque[str] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> OpenAIServer:
        """Bind a free port and serve in a daemon thread."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="openai-test-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; waiting handlers give up promptly."""
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server not started; call start() or use it as a context manager")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """The API root to pass as ``base_url``: ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting -------------------------------------------------------------------------------
    def script(self, behaviours: list[str], *, append: bool = False) -> None:
        """Set the behaviours of the next requests (see module docstring); validated here."""
        bad = [b for b in behaviours if not isinstance(b, str) or not _BEHAVIOUR.match(b)]
        if bad:
            raise ValueError(f"unknown behaviour(s) {bad}; see the openai_server docstring")
        with self._lock:
            if not append:
                self._script.clear()
            self._script.extend(behaviours)

    def _next_behaviour(self) -> str:
        with self._lock:
            return self._script.popleft() if self._script else "ok"

    def reset(self) -> None:
        """Clear the script, the request log and the counters (settings stay)."""
        with self._lock:
            self._script.clear()
            self.requests.clear()
            self.max_in_flight = self.in_flight
            self.disconnects = 0

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 60.0) -> bool:
        """Poll ``predicate`` until true or ``timeout`` seconds pass; return its last value."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return True
            time.sleep(0.01)
        return bool(predicate())

    # -- content ---------------------------------------------------------------------------------
    @staticmethod
    def default_reply(messages: list[dict]) -> str:
        """The reply to a chat: ``"Echo: "`` plus the last message's first 30 words."""
        words = messages[-1]["content"].split()
        return "Echo: " + " ".join(words[:30])

    @staticmethod
    def rerank_score(query: str, document: str) -> float:
        """The server's relevance: the share of the query's distinct tokens (lowercased words;
        CJK characters one by one) found in the document, plus 1e-3 / (1 + len(document))."""

        def toks(t: str) -> set[str]:
            return set(re.findall(r"[a-z0-9]+|[\u4e00-\u9fff]", t.lower()))

        q = toks(query)
        share = len(q & toks(document)) / len(q) if q else 0.0
        return share + 1e-3 / (1 + len(document))

    @staticmethod
    def embedding(text: str, dim: int) -> np.ndarray:
        """The server's vector for ``text`` (token-id inputs use ``json.dumps(ids)``):
        float32, unit norm, seeded by sha256 of the UTF-8 text."""
        seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
        vec = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
        return vec / np.linalg.norm(vec)
