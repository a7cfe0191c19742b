"""Everything between the socket and the routes of ``fastrag serve``: the settings (limits,
key), errors as ``{"error": {"message", "type", "param"}}``, and :class:`Guard`, the outermost
ASGI layer that counts every request for ``/metrics``, checks the bearer key (constant-time; the
probes and the chat page are open) and caps request bodies (413) -- before FastAPI parses
anything. Secrets -- the keys the server knows, and the value of any secret-looking query
parameter (``?api_key=``, ``key``, ``token``, ...: uvicorn's access log prints the query
string) -- are scrubbed from error bodies and from every log line the server's handlers write.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from fastrag._checks import check_int
from fastrag.errors import ConfigError
from fastrag.serve.config import ServeConfig
from fastrag.serve.metrics import Metrics

__all__ = [
    "KEY_SCOPE",
    "OPEN_PATHS",
    "ApiError",
    "BodyTooLarge",
    "Guard",
    "ServeSettings",
    "error_body",
    "install_error_handlers",
    "install_log_filter",
    "limit_for",
    "redact_query",
    "setup_logging",
    "validation_error",
]

log = logging.getLogger("fastrag.serve")

# paths open without the key: the probes (orchestrators send no key; without it /ready says only
# ready or not) and the static chat page (it holds no data)
OPEN_PATHS = ("/health", "/ready", "/", "/index.html", "/favicon.ico")
#: the ASGI scope key :class:`Guard` sets: whether the request carried the API key (True when
#: the server has none)
KEY_SCOPE = "fastrag.key_ok"
ROUTES = (
    "/v1/chat/completions",
    "/v1/retrieve",
    "/v1/documents",
    "/v1/groups",
    "/v1/models",
    "/health",
    "/ready",
    "/metrics",
    "/",
)


# query parameters whose values are secrets wherever a URL shows up (access log, upstream errors)
_SECRET_PARAM = re.compile(
    r"([?&;](?:api[_-]?key|x[_-]api[_-]key|key|token|access[_-]?token|refresh[_-]?token|"
    r"id[_-]?token|auth|authorization|password|passwd|secret|client[_-]?secret|sig|signature)"
    r"=)[^&;#\s\"']*",
    re.IGNORECASE,
)


def redact_query(text: str) -> str:
    """``text`` with the values of secret-looking URL query parameters replaced by ``***``."""
    return _SECRET_PARAM.sub(r"\1***", text) if "=" in text else text


# -- settings ------------------------------------------------------------------------------------
class ServeSettings:
    """The request limits and behaviour knobs of one app (defaults: :class:`ServeConfig`'s)."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        max_body_bytes: int = ServeConfig.max_body_bytes,
        max_upload_bytes: int = ServeConfig.max_upload_bytes,
        max_queries: int = ServeConfig.max_queries,
        max_query_chars: int = ServeConfig.max_query_chars,
        max_messages: int = ServeConfig.max_messages,
        max_upload_files: int = ServeConfig.max_upload_files,
        model_name: str = ServeConfig.model_name,
        secrets: Sequence[str] = (),
    ) -> None:
        if api_key is not None and (not isinstance(api_key, str) or len(api_key) < 8):
            raise ConfigError(
                "api_key must be a string of at least 8 characters (or None for no authentication)"
            )
        self.api_key = api_key
        self.max_body_bytes = check_int("max_body_bytes", max_body_bytes, min=1024)
        self.max_upload_bytes = check_int("max_upload_bytes", max_upload_bytes, min=1024)
        self.max_queries = check_int("max_queries", max_queries, min=1)
        self.max_query_chars = check_int("max_query_chars", max_query_chars, min=1)
        self.max_messages = check_int("max_messages", max_messages, min=1)
        self.max_upload_files = check_int("max_upload_files", max_upload_files, min=1)
        self.model_name = model_name
        self.secrets = tuple(s for s in (api_key, *secrets) if s)

    def scrub(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, "[redacted]")
        return redact_query(text)


# -- errors --------------------------------------------------------------------------------------
class ApiError(Exception):
    """An error answered as ``{"error": {"message", "type", "param"}}`` with ``status``."""

    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type, param
        self.headers = headers


class BodyTooLarge(Exception):
    pass


def error_body(message: str, type: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param}}


def _status_type(status: int) -> str:
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        405: "invalid_request_error",
        413: "request_too_large",
        502: "upstream_error",
        503: "unavailable",
    }.get(status, "server_error" if status >= 500 else "invalid_request_error")


def _loc(loc: Sequence[Any]) -> str | None:
    parts = [str(p) for p in loc if p != "body"]
    # pydantic names union members ("list[TextPart]", "str"): they are no part of the field path
    parts = [p for p in parts if not (p[:1].isalpha() and ("[" in p or p in ("str", "int")))]
    return ".".join(parts) or None


def validation_error(errors: Sequence[dict[str, Any]]) -> ApiError:
    """A pydantic error as a 400 naming its field: of the errors, the one deepest in the body
    (a union reports every member's; the deepest is the most specific)."""
    err = max(errors, key=lambda e: len(e.get("loc", ())))
    param = _loc(err.get("loc", ()))
    kind = err.get("type", "")
    if kind == "json_invalid":
        return ApiError(400, f"request body is not valid JSON: {err.get('msg', '')}")
    if kind == "extra_forbidden":
        return ApiError(400, f"unknown field {param!r}", param=param)
    if kind == "missing":
        return ApiError(400, f"missing required field {param!r}", param=param)
    if param is None:
        return ApiError(400, f"request body must be a JSON object ({err.get('msg', '')})")
    return ApiError(400, f"invalid value for {param!r}: {err.get('msg', '')}", param=param)


# -- errors as JSON ------------------------------------------------------------------------
def install_error_handlers(app: FastAPI, settings: ServeSettings, metrics: Metrics) -> None:
    def answer(
        status: int,
        message: str,
        type: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> JSONResponse:
        return JSONResponse(
            error_body(settings.scrub(message), type, param), status_code=status, headers=headers
        )

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return answer(exc.status, exc.message, exc.type, exc.param, exc.headers)

    @app.exception_handler(BodyTooLarge)
    async def too_large(request: Request, _exc: BodyTooLarge) -> JSONResponse:
        limit = limit_for(request.scope, settings)
        return answer(413, f"request body over the limit of {limit} bytes", "request_too_large")

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        err = validation_error(exc.errors())
        return answer(err.status, err.message, err.type, err.param)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        msg = str(exc.detail)
        if exc.status_code == 404:
            msg = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            msg = f"method {request.method} is not allowed on {request.url.path}"
        return answer(
            exc.status_code,
            msg,
            _status_type(exc.status_code),
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(ConfigError)
    async def config_error(_request: Request, exc: ConfigError) -> JSONResponse:
        return answer(400, str(exc), "invalid_request_error")

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> JSONResponse:
        log.error(
            "unhandled error on %s %s: %s",
            request.method,
            request.url.path,
            settings.scrub(f"{type(exc).__name__}: {exc}"),
        )
        return answer(500, "internal server error (details are in the server log)", "server_error")


def limit_for(scope: dict[str, Any], settings: ServeSettings) -> int:
    if scope.get("path", "").rstrip("/") == "/v1/documents" and scope.get("method") == "POST":
        return settings.max_upload_bytes
    return settings.max_body_bytes


# -- the outer ASGI layer: metrics, auth, body size ----------------------------------------------
def _route(path: str) -> str:
    if path.startswith("/v1/tasks/"):
        return "/v1/tasks/{task_id}"
    if path.startswith("/v1/documents/"):
        return "/v1/documents/{doc_id}"
    if path.startswith("/static/"):
        return "/static/{name}"
    p = path.rstrip("/") or "/"
    return p if p in ROUTES else "other"


class Guard:
    """Outermost ASGI layer: counts every request (status, latency), checks the bearer key,
    and caps the request body (413). Pure ASGI, so streaming responses pass straight
    through."""

    def __init__(
        self, app: FastAPI, settings: ServeSettings, metrics: Metrics, lifecycle: Any
    ) -> None:
        self.app = app
        self.lifecycle = lifecycle
        self.settings = settings
        self.metrics = metrics
        self.state = app.state  # so `app.state` works on the returned app as on FastAPI's
        self._key = settings.api_key.encode() if settings.api_key else None

    def __getattr__(self, name: str) -> Any:  # routes, dependency_overrides, ... of the app
        return getattr(self.app, name)

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.lifecycle.start()
        t0 = time.perf_counter()
        route = _route(scope.get("path", ""))
        status = {"code": 500}

        async def send_counted(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            scope[KEY_SCOPE] = self._key_ok(scope)
            if not scope[KEY_SCOPE] and not _open(scope):
                await _send_json(
                    send_counted,
                    401,
                    error_body(
                        "missing or invalid API key: send the header 'Authorization: Bearer <key>'",
                        "authentication_error",
                    ),
                    {"www-authenticate": "Bearer"},
                )
                return
            limit = limit_for(scope, self.settings)
            length = _header(scope, b"content-length")
            if length is not None and (not length.isdigit() or int(length) > limit):
                await _send_json(
                    send_counted,
                    413,
                    error_body(
                        f"request body over the limit of {limit} bytes", "request_too_large"
                    ),
                )
                return
            await self.app(scope, _capped(receive, limit), send_counted)
        finally:
            seconds = time.perf_counter() - t0
            self.metrics.inc(
                "fastrag_http_requests_total",
                method=scope.get("method", ""),
                path=route,
                status=str(status["code"]),
            )
            self.metrics.observe("fastrag_http_request_duration_seconds", seconds, path=route)

    def _key_ok(self, scope: dict[str, Any]) -> bool:
        """Whether the request carries the API key (constant-time; True without a key)."""
        if self._key is None:
            return True
        auth = _header(scope, b"authorization") or ""
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(token.strip().encode(), self._key)


def _open(scope: dict[str, Any]) -> bool:
    path = scope.get("path", "")
    return path in OPEN_PATHS or path.startswith("/static/")


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k.lower() == name:
            return v.decode("latin-1")
    return None


def _capped(receive: Callable, limit: int) -> Callable:
    seen = {"n": 0}

    async def wrapped() -> dict[str, Any]:
        message = await receive()
        if message["type"] == "http.request":
            seen["n"] += len(message.get("body", b""))
            if seen["n"] > limit:
                raise BodyTooLarge()
        return message

    return wrapped


async def _send_json(
    send: Callable, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> None:
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


class _Redact(logging.Filter):
    """Scrubs a record's message, each of its arguments and its traceback, keeping the
    arguments' number and order (uvicorn's access formatter unpacks them)."""

    def __init__(self, scrub: Callable[[str], str]) -> None:
        super().__init__()
        self.scrub = scrub

    def _clean(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float)):
            return value
        text = value if isinstance(value, str) else str(value)
        clean = self.scrub(text)
        return value if clean == text else clean

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self._clean(record.msg)
        if isinstance(record.args, Mapping):
            record.args = {k: self._clean(v) for k, v in record.args.items()}
        elif isinstance(record.args, tuple):
            record.args = tuple(self._clean(a) for a in record.args)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = self.scrub(record.stack_info)
        return True


def install_log_filter(scrub: Callable[[str], str]) -> None:
    """Scrub secrets from every log line the server's handlers write."""
    flt = _Redact(scrub)
    for name in ("", "uvicorn", "uvicorn.error", "uvicorn.access", "fastrag.serve"):
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, _Redact) for f in handler.filters):
                handler.addFilter(flt)


def setup_logging(level: str = "info") -> None:
    """Log fastrag serve's own lines (startup, failed tasks) to stderr like uvicorn's."""
    logger = logging.getLogger("fastrag.serve")
    logger.setLevel(level.upper())
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
