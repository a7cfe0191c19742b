"""Chat memory: the recent messages of each conversation (session), kept in this process, in a
SQLite database, or in Redis.

Spring AI's ``ChatMemory`` / ``MessageWindowChatMemory`` (over a ``ChatMemoryRepository``) and
LlamaIndex's token-limited buffer (over a ``chat_store``) in one small shape. A memory holds
``(role, content)`` messages per session id; a subclass decides which messages a session keeps
(:meth:`ChatMemory._kept`), applied inside every write, so what is stored is what the next turn
sees. System messages are never evicted.

Where the messages live (``path``):

* None: this process's memory (gone when it ends).
* A path: a SQLite database (``sqlite3``, write-ahead log, one row per message, one transaction
  per change). Any number of threads and processes, e.g. ``fastrag serve --workers N`` and
  several servers on one machine, add to one memory and none of their messages is lost or
  reordered within a session. A path ending in ``.sqlite``, ``.sqlite3`` or ``.db`` is the
  database; ``NAME.json`` stands for ``NAME.sqlite3`` beside it; any other path is a folder
  holding ``chat_memory.sqlite3``. The ``.json`` files earlier fastrag versions wrote there (one
  file, or one per session) are imported once; they are left as they are.
* A ``redis://HOST:PORT/DB`` URL (or ``rediss://``, ``unix://``; the ``[redis]`` extra): a
  Redis database, for servers on several machines, with the same semantics.

A store that cannot be read or written is a :class:`~fastrag.errors.StoreError` naming it,
never skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from fastrag._checks import check_int, check_str
from fastrag.analysis.tokens import count_tokens, count_tokens_batch
from fastrag.chat.backend import LocalStore, Message, MessageStore
from fastrag.chat.redis_store import RedisStore, is_redis_url
from fastrag.chat.sqlite_store import SQLiteStore, database_path
from fastrag.errors import ConfigError
from fastrag.query.base import Query

__all__ = ["ChatMemory", "MessageWindowChatMemory", "TokenWindowChatMemory", "open_store"]


def _messages(messages: Iterable[Any]) -> list[Message]:
    """Checked ``(role, content)`` pairs (roles as ``Query.history`` accepts them)."""
    return list(Query("", history=list(messages)).history)


def open_store(path: str | os.PathLike[str] | None) -> MessageStore:
    """The backend that keeps a memory's messages at ``path`` (see the module docstring)."""
    if path is None:
        return LocalStore()
    if isinstance(path, str) and is_redis_url(path):
        return RedisStore(path)
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(
            f"chat memory path must be a path, a redis:// URL or None, got {type(path).__name__}"
        )
    return SQLiteStore(database_path(Path(path).expanduser()))


class ChatMemory:
    """Messages per session: ``get``, ``add``, ``extend``, ``clear``, ``sessions``.

    The base class keeps every message; subclasses override :meth:`_kept` to keep a window.
    Safe from many threads and (with a database) many processes.

    Args:
        path: where the messages live: None (this process), a path (a SQLite database; see
            the module docstring for how a path names it) or a ``redis://`` URL.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = path
        self.store = open_store(path)
        #: messages imported from earlier versions' ``.json`` files when this memory opened
        self.migrated = 0
        if isinstance(self.store, SQLiteStore):
            self.path = Path(path).expanduser()
            self.migrated = self.store.migrate(self.path, self._keep)

    # -- public --------------------------------------------------------------------------------
    def get(self, session_id: str = "default") -> list[Message]:
        """The session's messages, oldest first (a copy; empty for an unknown session)."""
        return self.store.get(check_str("session_id", session_id))

    def add(self, session_id: str, role: str, content: str) -> None:
        """Append one message (then trim the session to the window)."""
        self.extend(session_id, [(role, content)])

    def extend(self, session_id: str, messages: Iterable[Any]) -> None:
        """Append messages (``(role, content)`` pairs or ``{"role", "content"}`` dicts) in
        one write, trimming the session to the window in the same transaction."""
        check_str("session_id", session_id)
        self.store.append(session_id, _messages(messages), self._keep)

    def clear(self, session_id: str | None = None) -> None:
        """Forget one session (None: every session)."""
        self.store.clear(None if session_id is None else check_str("session_id", session_id))

    def sessions(self) -> list[str]:
        """The session ids that hold messages, in order of creation."""
        return self.store.sessions()

    def close(self) -> None:
        """Close the connection to the database (the messages stay in it)."""
        self.store.close()

    def __enter__(self) -> ChatMemory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.sessions())

    def __repr__(self) -> str:
        where = "" if self.path is None else f", path={self.store.location!r}"
        return f"{type(self).__name__}(sessions={len(self)}{where})"

    # -- the window ------------------------------------------------------------------------------
    @property
    def _keep(self) -> Any:
        """The window as the backends take it (None: keep everything, nothing to read)."""
        return None if type(self)._kept is ChatMemory._kept else self._kept

    def _kept(self, messages: Sequence[Message]) -> list[int]:
        """The indexes of the messages a session keeps (subclasses: evict the oldest
        non-system ones)."""
        return list(range(len(messages)))

    @staticmethod
    def _evict(messages: Sequence[Message], sizes: Sequence[int], limit: int) -> list[int]:
        """The indexes kept when the oldest non-system messages are dropped until the sizes
        of those kept sum to at most ``limit``."""
        total = sum(sizes)
        drop = set()
        for i, (role, _) in enumerate(messages):
            if total <= limit:
                break
            if role != "system":
                drop.add(i)
                total -= sizes[i]
        return [i for i in range(len(messages)) if i not in drop]


class MessageWindowChatMemory(ChatMemory):
    """Keeps the last ``max_messages`` messages of each session (Spring AI's
    ``MessageWindowChatMemory``; system messages are kept beyond the window)."""

    def __init__(self, max_messages: int = 20, path: str | os.PathLike[str] | None = None) -> None:
        self.max_messages = check_int("max_messages", max_messages, min=1)
        super().__init__(path)

    def _kept(self, messages: Sequence[Message]) -> list[int]:
        return self._evict(messages, [1] * len(messages), self.max_messages)


class TokenWindowChatMemory(ChatMemory):
    """Keeps the most recent messages of each session whose contents add up to at most
    ``max_tokens`` tokens (tiktoken ``encoding``); system messages are always kept."""

    def __init__(
        self,
        max_tokens: int = 3000,
        path: str | os.PathLike[str] | None = None,
        encoding: str = "cl100k_base",
    ) -> None:
        self.max_tokens = check_int("max_tokens", max_tokens, min=1)
        self.encoding = check_str("encoding", encoding)
        count_tokens("", encoding)  # an unknown encoding fails here, not on the first add
        super().__init__(path)

    def _kept(self, messages: Sequence[Message]) -> list[int]:
        sizes = count_tokens_batch([c for _, c in messages], self.encoding)
        return self._evict(messages, sizes, self.max_tokens)
