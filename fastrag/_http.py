"""HTTP plumbing shared by the OpenAI-compatible clients (:class:`fastrag.llms.OpenAILike`,
:class:`fastrag.embeddings.OpenAIEmbedding`).

* Config checks: base URL (API root, not the endpoint), api key, headers, numbers.
* One ``httpx.AsyncClient`` per event loop (:class:`LoopClients`) and one concurrency limit per
  client object across all loops and threads (:class:`GlobalLimiter`);
  a client is closed when its loop shuts down (``asyncio.run`` finalizes it) or by ``aclose``.
* Retries: HTTP 408/409/429/5xx, timeouts and connection errors are retryable; the wait is
  ``backoff * 2**(attempt-1)`` (times a jitter in [0.5, 1], capped at ``max_wait``) or what
  ``Retry-After`` / ``retry-after-ms`` says. :func:`post_json` is the whole non-streaming
  loop; the callers supply their own error types through ``refuse`` and ``fail``.
* Deadlines (:class:`Deadline`): ``timeout`` bounds each attempt as a whole, from sending the
  request to the last byte of the answer (httpx's own timeout is per read, so a server
  trickling bytes would never trip it); streams get ``timeout`` to the first token and then
  between tokens. As in the openai client, ``max_retries`` is separate: a timed-out attempt
  is retried. The whole call ends within ``(max_retries + 1) * timeout`` of its first attempt:
  no attempt runs past that, and no retry is started whose backoff wait would end past it.
  Waiting for a free slot of ``max_concurrency`` before the first attempt is not counted.
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import json
import random
import sys
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

import httpx

from fastrag._async import run_sync
from fastrag.errors import ConfigError

__all__ = [
    "RETRY_STATUSES",
    "Deadline",
    "Failure",
    "LoopClients",
    "LoopState",
    "PooledClient",
    "backoff_delay",
    "check_api_key",
    "check_base_url",
    "check_headers",
    "error_detail",
    "failure_summary",
    "parse_retry_after",
    "post_json",
    "post_to_service",
    "service_errors",
    "status_failure",
    "within",
]

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
_HINTS = {401: " (check api_key)", 403: " (check api_key)", 404: " (check base_url and model)"}
T = TypeVar("T")

# A non-retryable answer: (detail with hint, HTTP status, attempt number) -> the error to raise.
Refuse = Callable[[str, int, int], BaseException]


# -- config checks ---------------------------------------------------------------------------------
def check_base_url(base_url: Any, endpoint: str, example: str) -> str:
    """The http(s) API root without a trailing slash; rejects a URL ending in ``endpoint``."""
    text = base_url.strip() if isinstance(base_url, str) else ""
    try:
        url = httpx.URL(text) if text else None
    except (httpx.InvalidURL, TypeError, ValueError):
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(f"base_url must be an http(s) URL such as {example}, got {base_url!r}")
    text = str(url).rstrip("/")
    if text.endswith(endpoint):
        raise ConfigError(
            f"base_url should be the API root, not the endpoint: got {base_url!r}; "
            f"use {text[: -len(endpoint)]!r}"
        )
    return text


def check_api_key(api_key: Any) -> str | None:
    if api_key is not None and (not isinstance(api_key, str) or not api_key):
        raise ConfigError("api_key must be None (no auth header) or a non-empty str")
    return api_key


def check_headers(headers: Any) -> dict[str, str]:
    if headers is not None and (
        not isinstance(headers, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
    ):
        raise ConfigError(f"headers must be a dict of str to str, got {headers!r}")
    return dict(headers or {})


# -- server answers --------------------------------------------------------------------------------
def parse_retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return max(0.0, float(ra))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(ra)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_detail(body: bytes) -> str:
    """The server's error message from an error body (OpenAI, vLLM, Ollama shapes)."""
    text = body.decode("utf-8", "replace")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            text = str(err)
    text = " ".join(text.split())
    return text[:300] + ("..." if len(text) > 300 else "") if text else "(empty body)"


def backoff_delay(
    attempt: int,
    retry_after: float | None,
    backoff: float,
    max_wait: float,
    *,
    retry_after_jitter: float = 0.0,
) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based).

    The server's ``retry_after`` (capped at ``max_wait``; stretched by up to
    ``retry_after_jitter`` of itself when > 0), else ``backoff * 2**(attempt-1)`` capped at
    ``max_wait`` times a jitter in [0.5, 1].
    """
    if retry_after is not None:
        wait = min(retry_after, max_wait)
        return wait * random.uniform(1.0, 1.0 + retry_after_jitter) if retry_after_jitter else wait
    base = min(backoff * 2 ** (attempt - 1), max_wait)
    return base * random.uniform(0.5, 1.0)


class Failure:
    """What one failed attempt left behind (for the retry decision and the final error).

    ``kind`` is ``"status"``, ``"timeout"`` or ``"connection"``.
    """

    __slots__ = ("detail", "kind", "retry_after", "status")

    def __init__(
        self, kind: str, detail: str, status: int | None = None, retry_after: float | None = None
    ) -> None:
        self.kind, self.detail, self.status, self.retry_after = kind, detail, status, retry_after

    @classmethod
    def from_transport(
        cls, exc: Exception, timeout: float, waiting_for: str = "the whole response"
    ) -> Failure:
        """From an httpx transport error or a :func:`within` deadline (``TimeoutError``)."""
        if isinstance(exc, (httpx.TimeoutException, asyncio.TimeoutError)):
            return cls(
                "timeout",
                f"no answer within timeout={timeout:g} s (waiting for {waiting_for}); "
                "pass a larger timeout= (seconds per attempt) if the server is just slow",
            )
        return cls("connection", f"{type(exc).__name__}: {exc or 'connection failed'}")

    def not_retried(self, wait: float, deadline: Deadline) -> Failure:
        """This failure, noting that its retry was dropped: the wait would pass ``deadline``."""
        note = (
            f"; not retried: waiting {wait:.3g} s would pass the call's deadline "
            f"({deadline.attempts} attempts x timeout={deadline.timeout:g} s); "
            "raise timeout= or max_retries= to allow longer waits"
        )
        return Failure(self.kind, self.detail + note, self.status, self.retry_after)


def status_failure(
    status: int, headers: httpx.Headers, body: bytes, attempt: int, refuse: Refuse
) -> Failure:
    """Classify a non-200 answer: raise ``refuse(...)`` at once for non-retryable statuses."""
    detail = f"HTTP {status}: {error_detail(body)}"
    if status not in RETRY_STATUSES:
        raise refuse(f"{detail}{_HINTS.get(status, '')}", status, attempt)
    return Failure("status", detail, status, parse_retry_after(headers))


def failure_summary(last: Failure, attempts: int) -> str:
    """``request failed[ after N attempts]; last error: ...``."""
    what = "request failed" if attempts == 1 else f"request failed after {attempts} attempts"
    return f"{what}; last error: {last.detail}"


def service_errors(
    error: Callable[..., BaseException], who: str, what: str, where: str
) -> tuple[Refuse, Callable[[Failure, int], BaseException]]:
    """:func:`post_json`'s ``refuse`` and ``fail`` for a service: ``error(message, status=,
    attempts=)`` saying the ``who`` refused the request, or the ``what`` request failed, and
    ``where``."""

    def refuse(detail: str, status: int, attempt: int) -> BaseException:
        return error(
            f"the {who} refused the request: {detail} {where}", status=status, attempts=attempt
        )

    def fail(last: Failure, attempts: int) -> BaseException:
        return error(
            f"{what} {failure_summary(last, attempts)} {where}",
            status=last.status,
            attempts=attempts,
        )

    return refuse, fail


async def post_to_service(
    client: Any,
    st: LoopState,
    url: str,
    body: dict[str, Any],
    *,
    error: Callable[..., BaseException],
    who: str,
    what: str,
    where: str,
) -> httpx.Response:
    """:func:`post_json` with ``client``'s retry settings (``timeout``, ``max_retries``,
    ``retry_backoff``, ``retry_max_wait``) and :func:`service_errors`' ``refuse``/``fail``."""
    refuse, fail = service_errors(error, who, what, where)
    return await post_json(
        st,
        url,
        body,
        timeout=client.timeout,
        max_retries=client.max_retries,
        backoff=client.retry_backoff,
        max_wait=client.retry_max_wait,
        refuse=refuse,
        fail=fail,
    )


# -- per-loop clients ------------------------------------------------------------------------------
class GlobalLimiter:
    """At most ``n`` holders at once across every event loop and thread (``async with``).

    A released slot goes to the longest waiter, on its own loop. A waiter cancelled after it
    was handed a slot gives the slot back, so no slot is lost or counted twice.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self._held = 0
        self._lock = threading.Lock()
        self._waiters: collections.deque = collections.deque()

    @property
    def held(self) -> int:
        return self._held

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._held < self.n and not self._waiters:
                self._held += 1
                return
            fut = loop.create_future()
            self._waiters.append((loop, fut))
        try:
            await fut
        except asyncio.CancelledError:
            with self._lock:
                try:
                    self._waiters.remove((loop, fut))
                    granted = False
                except ValueError:  # already handed a slot
                    granted = True
            if granted:
                self.release()
            raise

    def release(self) -> None:
        with self._lock:
            while self._waiters:
                loop, fut = self._waiters.popleft()
                if loop.is_closed():
                    continue
                loop.call_soon_threadsafe(_grant, fut)  # the slot moves, the count stays
                return
            self._held -= 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


def _grant(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class LoopState:
    """One event loop's client, the client object's concurrency limit and shutdown hook."""

    __slots__ = ("__weakref__", "client", "closer", "sem")

    def __init__(self, client: httpx.AsyncClient, sem: GlobalLimiter) -> None:
        self.client, self.sem = client, sem
        self.closer: AsyncGenerator[None, None] | None = None


async def _close_at_loop_shutdown(client: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    """An async generator parked at its yield: the loop's ``shutdown_asyncgens`` (called by
    ``asyncio.run``) finalizes it, which closes the client on its own loop."""
    try:
        yield
    finally:
        if not client.is_closed:
            await client.aclose()


class LoopClients(weakref.WeakKeyDictionary):
    """event loop -> :class:`LoopState`, made on first use in each loop (thread-safe)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.limiter: GlobalLimiter | None = None  # shared by every loop: one global limit

    async def state(
        self, *, timeout: float, max_concurrency: int, headers: dict[str, str], api_key: str | None
    ) -> LoopState:
        """The running loop's state; a new pooled client (closed at loop shutdown) if none."""
        loop = asyncio.get_running_loop()
        with self.lock:
            for old in [lp for lp in self if lp.is_closed()]:
                del self[old]  # clients of finished loops (closed at their shutdown)
            st = self.get(loop)
            if st is not None and not st.client.is_closed:
                return st
            all_headers = {"Accept": "application/json", **headers}
            if api_key:
                all_headers["Authorization"] = f"Bearer {api_key}"
            n = max_concurrency
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(timeout),
                limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
                headers=all_headers,
            )
            if self.limiter is None:
                self.limiter = GlobalLimiter(n)
            st = LoopState(client, self.limiter)
            self[loop] = st
        closer = _close_at_loop_shutdown(client)
        await closer.__anext__()  # registers it with this loop's async-generator hooks
        st.closer = closer
        return st

    async def aclose(self) -> None:
        """Close the running loop's client (a later :meth:`state` opens a new one)."""
        loop = asyncio.get_running_loop()
        with self.lock:
            st = self.pop(loop, None)
        if st is not None:
            await st.client.aclose()

    def close_all(self) -> None:
        """Close every client on its (still running) loop; safe from any thread, e.g. as the
        finalizer of the owning client, so garbage collection does not leak connections."""
        for loop, st in list(self.items()):
            if loop.is_running() and not loop.is_closed() and not st.client.is_closed:
                try:
                    loop.call_soon_threadsafe(loop.create_task, st.client.aclose())
                except RuntimeError:  # pragma: no cover - loop closed meanwhile
                    pass


# -- the request loop ------------------------------------------------------------------------------
class Deadline:
    """The clock of one call of ``attempts`` tries: each attempt must end ``timeout`` s after
    it starts, and all of them within ``attempts * timeout`` s of the first one's start."""

    __slots__ = ("attempts", "end", "timeout")

    def __init__(self, timeout: float, attempts: int) -> None:
        self.timeout, self.attempts = timeout, attempts
        self.end: float | None = None

    def start_attempt(self) -> float:
        """The loop time by which the attempt starting now must be done."""
        now = asyncio.get_running_loop().time()
        if self.end is None:
            self.end = now + self.attempts * self.timeout
        return min(now + self.timeout, self.end)

    async def wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` before a retry; False (at once) if that would pass the deadline."""
        if self.end is not None and asyncio.get_running_loop().time() + seconds >= self.end:
            return False
        await asyncio.sleep(seconds)
        return True


if sys.version_info >= (3, 11):

    async def within(aw: Awaitable[T], deadline: float) -> T:
        """``await aw``, cancelling it and raising ``asyncio.TimeoutError`` at loop time
        ``deadline``."""
        async with asyncio.timeout_at(deadline):  # no extra task, unlike 3.11's wait_for
            return await aw

else:

    async def within(aw: Awaitable[T], deadline: float) -> T:
        """``await aw``, cancelling it and raising ``asyncio.TimeoutError`` at loop time
        ``deadline``."""
        return await asyncio.wait_for(aw, max(0.0, deadline - asyncio.get_running_loop().time()))


async def post_json(
    st: LoopState,
    url: str,
    body: dict[str, Any],
    *,
    timeout: float,
    max_retries: int,
    backoff: float,
    max_wait: float,
    refuse: Refuse,
    fail: Callable[[Failure, int], BaseException],
    retry_after_jitter: float = 0.0,
) -> httpx.Response:
    """POST ``body`` as JSON until an HTTP 200 answer, which is returned.

    Retryable failures are retried ``max_retries`` times (waits from :func:`backoff_delay`)
    within the :class:`Deadline` of ``timeout`` per attempt; a non-retryable status raises
    ``refuse(detail, status, attempt)`` at once; running out of attempts or time raises
    ``fail(last_failure, attempts_made)``.
    """
    clock = Deadline(timeout, max_retries + 1)
    attempt = 0
    while True:
        attempt += 1
        try:
            async with st.sem:
                request = st.client.post(url, json=body, timeout=timeout)
                resp = await within(request, clock.start_attempt())
        except (httpx.TransportError, asyncio.TimeoutError) as exc:
            last = Failure.from_transport(exc, timeout)
        else:
            if resp.status_code == 200:
                return resp
            last = status_failure(resp.status_code, resp.headers, resp.content, attempt, refuse)
        if attempt == clock.attempts:
            break
        wait = backoff_delay(
            attempt, last.retry_after, backoff, max_wait, retry_after_jitter=retry_after_jitter
        )
        if not await clock.wait(wait):
            last = last.not_retried(wait, clock)
            break
    raise fail(last, attempt)


class PooledClient:
    """Mixin: ``_state()`` / ``aclose()`` / ``close()`` over ``self._states`` (a
    :class:`LoopClients`) with the owner's ``timeout``, ``max_concurrency``, ``headers`` and
    ``api_key``."""

    _states: LoopClients
    timeout: float
    max_concurrency: int
    headers: dict[str, str]
    api_key: str | None

    def __getstate__(self) -> dict:
        """Picklable (worker processes, Ray actors): HTTP clients are per event loop, made
        anew in the process that unpickles."""
        state = self.__dict__.copy()
        for key in ("_states", "_finalizer"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        init = getattr(self, "_init_clients", None)
        if init is not None:
            init()
        else:
            self._states = LoopClients()

    async def _state(self) -> LoopState:
        return await self._states.state(
            timeout=self.timeout,
            max_concurrency=self.max_concurrency,
            headers=self.headers,
            api_key=self.api_key,
        )

    async def aclose(self) -> None:
        """Close this event loop's HTTP client (a later call opens a new one)."""
        await self._states.aclose()

    def close(self) -> None:
        """Close the HTTP client of the shared loop the sync wrappers use."""
        run_sync(self.aclose())
