"""Chat memory in a Redis database (the ``redis`` client, the ``[redis]`` extra), for servers on
several machines: the same semantics as the SQLite memory, each change atomic in Redis.

Keys, under a prefix (``fastrag:chat`` unless the URL says ``?prefix=...``): ``PREFIX:m:SID``
is a session's messages (a list, oldest first, each a JSON ``[role, content]``);
``PREFIX:sessions`` orders the sessions by creation (a sorted set, scores from the counter
``PREFIX:order``). An append without a window is one Lua script; an append that trims runs
under ``WATCH`` (read the session, keep the window, replace it in ``MULTI``), retried when
another client changed the session meanwhile. How durable a commit is, is the server's
setting (``appendonly yes`` and ``appendfsync``); fastrag does not change it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from fastrag.chat.backend import Keep, Message, MessageStore
from fastrag.errors import ConfigError, StoreError, StoreIOError, missing_extra

__all__ = ["DEFAULT_PREFIX", "RedisStore", "is_redis_url"]

DEFAULT_PREFIX = "fastrag:chat"
_SCHEMES = ("redis", "rediss", "unix")
_RETRIES = 200  # optimistic-lock rounds before a trimming append gives up

_APPEND = """
if redis.call('ZSCORE', KEYS[2], ARGV[1]) == false then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), ARGV[1])
end
for i = 2, #ARGV do
  redis.call('RPUSH', KEYS[1], ARGV[i])
end
return redis.call('LLEN', KEYS[1])
"""


def is_redis_url(where: str) -> bool:
    """Whether ``where`` is a Redis URL (``redis://``, ``rediss://`` or ``unix://``)."""
    return where.split("://", 1)[0].lower() in _SCHEMES and "://" in where


def _public(url: str) -> str:
    """``url`` without its password (for messages)."""
    scheme, netloc, path, query, fragment = urlsplit(url)
    if "@" not in netloc or ":" not in netloc.rsplit("@", 1)[0]:
        return url
    user, host = netloc.rsplit("@", 1)
    return urlunsplit((scheme, f"{user.split(':', 1)[0]}:***@{host}", path, query, fragment))


def _encode(message: Message) -> bytes:
    return json.dumps(list(message), ensure_ascii=False).encode("utf-8")


def _decode(raw: bytes, where: str) -> Message:
    try:
        role, content = json.loads(raw.decode("utf-8"))
        if isinstance(role, str) and isinstance(content, str):
            return role, content
    except (ValueError, TypeError, UnicodeDecodeError, RecursionError):
        pass
    raise StoreError(f"{where} holds a value fastrag did not write: {raw[:80]!r}")


class RedisStore(MessageStore):
    """The messages of a chat memory in the Redis database ``url`` (e.g.
    ``redis://host:6379/0``; a ``prefix`` query parameter namespaces the keys).

    ``timeout``: seconds a connection or command may take before failing.
    """

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        try:
            import redis  # the [redis] extra
        except ImportError:
            raise missing_extra("redis", "redis", "a Redis chat memory") from None
        scheme, netloc, path, raw_query, fragment = urlsplit(url)
        query = parse_qsl(raw_query)
        prefix = dict(query).get("prefix", DEFAULT_PREFIX)
        if not prefix:
            raise ConfigError(f"Redis chat memory URL {_public(url)!r} has an empty prefix")
        rest = urlencode([(k, v) for k, v in query if k != "prefix"])
        self.location = _public(url)
        self.prefix = prefix
        self._errors = redis.exceptions
        try:
            self._redis = redis.Redis.from_url(
                urlunsplit((scheme, netloc, path, rest, fragment)),
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                health_check_interval=30,
            )
            self._script = self._redis.register_script(_APPEND)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"bad Redis chat memory URL {self.location!r}: {exc}") from None
        self._call(self._redis.ping)

    def _key(self, session_id: str) -> str:
        return f"{self.prefix}:m:{session_id}"

    def _call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except self._errors.ConnectionError as exc:
            raise StoreIOError(
                f"cannot reach the Redis chat memory {self.location!r}: {exc}; nothing was "
                "written. Is redis-server running there?"
            ) from None
        except self._errors.RedisError as exc:
            raise StoreError(
                f"Redis chat memory {self.location!r}: {type(exc).__name__}: {exc}"
            ) from None

    # -- the contract --------------------------------------------------------------------------
    def get(self, session_id: str) -> list[Message]:
        raw = self._call(self._redis.lrange, self._key(session_id), 0, -1)
        where = f"Redis key {self._key(session_id)!r}"
        return [_decode(x, where) for x in raw]

    def append(self, session_id: str, messages: Sequence[Message], keep: Keep) -> None:
        if keep is None:
            if messages:
                keys = [self._key(session_id), f"{self.prefix}:sessions", f"{self.prefix}:order"]
                args = [session_id, *map(_encode, messages)]
                self._call(self._script, keys=keys, args=args)
            return
        self._call(self._append_trimmed, session_id, list(messages), keep)

    def _append_trimmed(self, session_id: str, new: list[Message], keep: Keep) -> None:
        key, sessions = self._key(session_id), f"{self.prefix}:sessions"
        order = None
        if new and self._redis.zscore(sessions, session_id) is None:
            order = self._redis.incr(f"{self.prefix}:order")
        with self._redis.pipeline() as pipe:
            for attempt in range(_RETRIES):
                try:
                    pipe.watch(key)
                    msgs = [_decode(x, f"Redis key {key!r}") for x in pipe.lrange(key, 0, -1)]
                    msgs += new
                    kept = [msgs[i] for i in keep(msgs)]
                    pipe.multi()
                    pipe.delete(key)
                    if kept:
                        pipe.rpush(key, *map(_encode, kept))
                        if order is not None:
                            pipe.zadd(sessions, {session_id: order}, nx=True)
                    else:
                        pipe.zrem(sessions, session_id)
                    pipe.execute()
                    return
                except self._errors.WatchError:
                    time.sleep(min(0.05, 0.001 * attempt))
        raise StoreError(
            f"Redis chat memory {self.location!r}: session {session_id!r} changed under "
            f"{_RETRIES} tries to add to it; nothing was written, try again"
        )

    def clear(self, session_id: str | None) -> None:
        sessions = f"{self.prefix}:sessions"
        if session_id is not None:
            pipe = self._redis.pipeline()
            pipe.delete(self._key(session_id))
            pipe.zrem(sessions, session_id)
            self._call(pipe.execute)
            return
        ids = self._call(self._redis.zrange, sessions, 0, -1)
        pipe = self._redis.pipeline()
        for sid in ids:
            pipe.delete(self._key(sid.decode("utf-8")))
        if ids:
            pipe.zrem(sessions, *ids)
        self._call(pipe.execute)

    def sessions(self) -> list[str]:
        ids = self._call(self._redis.zrange, f"{self.prefix}:sessions", 0, -1)
        return [s.decode("utf-8") for s in ids]

    def close(self) -> None:
        self._redis.close()
