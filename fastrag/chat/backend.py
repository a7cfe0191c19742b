"""Where a chat memory's messages live: the contract every backend keeps, and the in-process
backend.

A backend keeps ``(role, content)`` messages per session id, in the order they were added,
and applies a memory's window *inside* the write that adds messages: ``append`` takes a
``keep`` function (the indexes of the messages a session keeps, oldest first) and runs it on
the session's messages as they are once the new ones are in, in the same transaction, so two
processes adding at once can neither lose a message nor see a window the other one broke.

Backends: :class:`LocalStore` (this process only), :class:`~fastrag.chat.sqlite_store.SQLiteStore`
(a file, any number of threads and processes on one machine) and
:class:`~fastrag.chat.redis_store.RedisStore` (a Redis server, for servers on several machines).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

__all__ = ["Keep", "LocalStore", "Message", "MessageStore"]

Message = tuple[str, str]
#: the indexes of the messages a session keeps (None: keep every message)
Keep = Callable[[Sequence[Message]], Sequence[int]] | None


class MessageStore:
    """The contract of a chat memory backend (every method is safe from many threads)."""

    #: where the messages live, as users named it (for messages and ``repr``)
    location: str = "this process"

    def get(self, session_id: str) -> list[Message]:
        """The session's messages, oldest first (empty for an unknown session)."""
        raise NotImplementedError

    def append(self, session_id: str, messages: Sequence[Message], keep: Keep) -> None:
        """Add ``messages`` after the session's, then keep only what ``keep`` picks, as one
        atomic change."""
        raise NotImplementedError

    def clear(self, session_id: str | None) -> None:
        """Forget one session (None: every session)."""
        raise NotImplementedError

    def sessions(self) -> list[str]:
        """The ids of the sessions that hold messages, in order of creation."""
        raise NotImplementedError

    def close(self) -> None:
        """Release connections (the messages stay where they are)."""


class LocalStore(MessageStore):
    """Messages in this process's memory, gone when it ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, list[Message]] = {}

    def get(self, session_id: str) -> list[Message]:
        with self._lock:
            return list(self._sessions.get(session_id, ()))

    def append(self, session_id: str, messages: Sequence[Message], keep: Keep) -> None:
        with self._lock:
            msgs = self._sessions.get(session_id, []) + list(messages)
            if keep is not None:
                msgs = [msgs[i] for i in keep(msgs)]
            if msgs:
                self._sessions[session_id] = msgs
            else:
                self._sessions.pop(session_id, None)

    def clear(self, session_id: str | None) -> None:
        with self._lock:
            if session_id is None:
                self._sessions.clear()
            else:
                self._sessions.pop(session_id, None)

    def sessions(self) -> list[str]:
        with self._lock:
            return list(self._sessions)
