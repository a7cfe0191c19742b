"""``fastrag.WebModule``: LazyLLM's web UI for a flow (the ``[serve]`` extra).

``WebModule(ppl, port=23491).start()`` serves, on a background thread, the chat page of
``fastrag serve`` and an OpenAI-compatible ``POST /v1/chat/completions`` that answers each user
message with ``ppl(message)``; ``.wait()`` blocks until ``.stop()`` (or Ctrl-C).
"""

from __future__ import annotations

import errno
import html
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from fastrag._async import call_sync
from fastrag.errors import missing_extra

__all__ = ["WebModule"]

log = logging.getLogger(__name__)

PAGE = Path(__file__).resolve().parent / "static" / "index.html"
PAGE_TITLE = "fastrag chat"
MODEL_NAME = "fastrag-webmodule"
START_TIMEOUT_S = 30.0
# LazyLLM's WebModule options: accepted at these values only (text chat of one flow)
LAZYLLM_OPTIONS: dict[str, Any] = {
    "components": {},
    "history": [],
    "text_mode": None,
    "trace_mode": None,
    "audio": False,
    "files_target": None,
    "static_paths": None,
    "encode_files": False,
    "share": False,
}


class WebModule:
    """A chat web page and ``POST /v1/chat/completions`` answering each message with
    ``flow(message)`` (a :func:`fastrag.pipeline` flow or any callable ``str -> str``; run on
    fastrag's worker pool, or awaited if it is async).

    ``port``: 1..65535, or None for a free one (``.port`` tells which, once started).
    ``host``: 127.0.0.1 by default (pass ``"0.0.0.0"`` deliberately to listen on every
    interface). ``stream`` (LazyLLM's) is accepted either way: a client that asks for a stream
    (the page does) gets the answer as one chunk, once the flow returns. LazyLLM's other options
    (``history``, ``audio``, ``components``, ...) are accepted only at their defaults.
    ``WebModule.running()`` lists the started, not yet stopped ones.
    """

    _running: ClassVar[list[WebModule]] = []
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        flow: Callable[[str], Any],
        port: int | None = None,
        host: str = "127.0.0.1",
        title: str = PAGE_TITLE,
        **lazyllm_options: Any,
    ) -> None:
        if not callable(flow):
            raise TypeError(
                "WebModule(flow): flow must be callable (a fastrag.pipeline() flow or a function "
                f"str -> str), got {type(flow).__name__}"
            )
        if port is not None and (
            isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
        ):
            raise ValueError(
                f"WebModule(port={port!r}): port must be an int in 1..65535, or None for a free one"
            )
        if not isinstance(host, str) or not host:
            raise ValueError(f"WebModule(host={host!r}): host must be a non-empty str")
        if not isinstance(title, str):
            raise TypeError(f"WebModule(title={title!r}): title must be a str")
        stream = lazyllm_options.pop("stream", False)
        if not isinstance(stream, bool):
            raise TypeError(f"WebModule(stream={stream!r}): stream must be a bool")
        for name, value in lazyllm_options.items():
            if name not in LAZYLLM_OPTIONS:
                raise TypeError(
                    f"WebModule() got an unexpected keyword argument {name!r} (it takes flow, "
                    f"port, host, title, stream and LazyLLM's {', '.join(LAZYLLM_OPTIONS)})"
                )
            if value != LAZYLLM_OPTIONS[name]:
                raise ValueError(
                    f"WebModule({name}={value!r}) is not supported: fastrag's WebModule serves "
                    "text chat, calling flow(message) with the user's message only (keep a "
                    "conversation in the flow, e.g. fastrag.ChatEngine); leave "
                    f"{name}= out"
                )
        self.flow, self.port, self.host, self.title = flow, port, host, title
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._done = threading.Event()

    # -- lifecycle -------------------------------------------------------------------------------
    @classmethod
    def running(cls) -> tuple[WebModule, ...]:
        """The modules started and not yet stopped, oldest first."""
        with cls._lock:
            return tuple(cls._running)

    @property
    def url(self) -> str | None:
        """``http://host:port/`` while serving, else None."""
        if self._thread is None:
            return None
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> WebModule:
        """Serve on a background thread (returns once the server accepts connections)."""
        if self._thread is not None:
            raise RuntimeError(f"this WebModule is already serving at {self.url}; stop() it first")
        uvicorn = _uvicorn()
        app = self._app()
        sock = self._bind()
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            proxy_headers=False,
            server_header=False,
        )
        server = uvicorn.Server(config)
        done = threading.Event()  # set when the server thread ends
        thread = threading.Thread(
            target=_run, args=(server, sock, done), name="fastrag-webmodule", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started and not done.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not server.started:
            server.should_exit = True
            done.wait(5.0)
            sock.close()
            raise RuntimeError(
                f"WebModule could not start serving on {self.host}:{self.port} (see the log above)"
            )
        self._server, self._thread, self._socket, self._done = server, thread, sock, done
        with WebModule._lock:
            WebModule._running.append(self)
        log.info("WebModule serving %r at %s", self.flow, self.url)
        return self

    def wait(self) -> WebModule:
        """Block until :meth:`stop` (from another thread) or Ctrl-C, which stops it."""
        if self._thread is None:
            raise RuntimeError("this WebModule is not serving: call start() first")
        done = self._done
        try:
            # an Event, not Thread.join: Python 3.11's join, interrupted by Ctrl-C, can mark the
            # thread stopped while it still runs (bpo-45274's fix)
            while not done.wait(0.2):
                pass
        except KeyboardInterrupt:
            self.stop()
        return self

    def stop(self) -> WebModule:
        """Shut the server down and free the port (nothing to do if it is not serving)."""
        server, thread, sock, done = self._server, self._thread, self._socket, self._done
        if thread is None:
            return self
        server.should_exit = True
        if not done.wait(10.0):  # requests still open after 10 s: close them
            server.force_exit = True
            done.wait(10.0)
        thread.join(1.0)
        sock.close()
        self._server = self._thread = self._socket = None
        with WebModule._lock:
            if self in WebModule._running:
                WebModule._running.remove(self)
        return self

    def __repr__(self) -> str:
        where = self.url or "not serving"
        return f"WebModule({self.flow!r}, {where})"

    def _bind(self) -> socket.socket:
        port = self.port or 0
        try:
            family = socket.getaddrinfo(self.host, port, type=socket.SOCK_STREAM)[0][0]
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            raise OSError(f"WebModule(host={self.host!r}): cannot resolve it: {exc}") from None
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, port))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise OSError(
                    exc.errno,
                    f"WebModule: port {port} on {self.host} is in use; stop what listens there "
                    "(WebModule.running() lists fastrag's) or pass another port= (None: a free "
                    "one)",
                ) from None
            raise OSError(
                exc.errno, f"WebModule cannot listen on {self.host}:{port}: {exc.strerror}"
            ) from None
        self.port = sock.getsockname()[1]
        return sock

    # -- the app ---------------------------------------------------------------------------------
    def _page(self) -> str:
        title = html.escape(self.title)
        page = PAGE.read_text(encoding="utf-8")
        return (
            page.replace(f"<title>{PAGE_TITLE}</title>", f"<title>{title}</title>", 1)
            .replace(f"<h1>{PAGE_TITLE}</h1>", f"<h1>{title}</h1>", 1)
            # no document store behind a flow: no uploads
            .replace("</head>", "<style>section#upload-box { display: none; }</style>\n</head>", 1)
        )

    def _app(self) -> Any:
        from fastapi import FastAPI  # lazy: the [serve] extra
        from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse

        app = FastAPI(title=self.title, docs_url=None, redoc_url=None, openapi_url=None)
        page = self._page()
        flow = self.flow

        def error(status: int, message: str, kind: str, param: str | None = None) -> Any:
            body = {"error": {"message": message, "type": kind, "param": param}}
            return JSONResponse(body, status_code=status)

        @app.get("/")
        async def index() -> Any:
            return HTMLResponse(page)

        @app.get("/health")
        async def health() -> dict[str, str]:
            return {"status": "ok"}

        @app.get("/v1/groups")
        async def groups() -> dict[str, list]:
            return {"groups": []}  # a flow has no knowledge-base picker

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            model = {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "fastrag"}
            return {"object": "list", "data": [model]}

        async def chat(request: Any) -> Any:  # a plain Starlette route: the Request itself
            try:
                body = await request.json()
            except ValueError:
                return error(400, "the body is not JSON", "invalid_request_error")
            try:
                message = _user_message(body)
            except ValueError as exc:
                return error(400, str(exc), "invalid_request_error", "messages")
            try:
                answer = await call_sync(flow, message)
            except Exception as exc:
                log.exception("WebModule: the flow failed on %r", message)
                return error(500, f"the flow failed: {type(exc).__name__}: {exc}", "flow_error")
            if answer is None:
                return error(500, "the flow returned None, not the answer text", "flow_error")
            text = answer if isinstance(answer, str) else str(answer)
            reply = _completion(text, body.get("model") or MODEL_NAME)
            if body.get("stream"):
                return StreamingResponse(_sse(reply), media_type="text/event-stream")
            return JSONResponse(reply)

        app.add_route("/v1/chat/completions", chat, methods=["POST"])
        return app


def _run(server: Any, sock: socket.socket, done: threading.Event) -> None:
    try:
        server.run(sockets=[sock])
    finally:
        done.set()


def _uvicorn() -> Any:
    for module in ("fastapi", "uvicorn"):
        try:
            __import__(module)
        except ImportError:
            raise missing_extra(module, "serve", "fastrag.WebModule") from None
    import uvicorn

    return uvicorn


def _user_message(body: Any) -> str:
    """The last message's text (it must be the user's); a ValueError says what is wrong."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        raise ValueError('"messages" must be a non-empty list of {"role", "content"} objects')
    last = messages[-1]
    if last.get("role") != "user":
        raise ValueError(f"the last message must be the user's, got role {last.get('role')!r}")
    content = last.get("content")
    if isinstance(content, list):  # OpenAI's content parts: the text ones
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        content = "".join(p for p in parts if isinstance(p, str)) if parts else None
    if not isinstance(content, str) or not content.strip():
        raise ValueError("the last user message has no text content")
    return content


def _completion(text: str, model: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
    }


async def _sse(reply: dict[str, Any]) -> Any:
    """``reply`` as OpenAI's stream: one chunk with the whole answer, the finish, ``[DONE]``."""
    head = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    text = reply["choices"][0]["message"]["content"]
    for delta, finish in (({"role": "assistant", "content": text}, None), ({}, "stop")):
        chunk = head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
    yield "data: [DONE]\n\n"
