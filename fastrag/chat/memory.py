"""Chat memory: the recent messages of each conversation (session), optionally on disk.

Spring AI's ``ChatMemory`` / ``MessageWindowChatMemory`` and LlamaIndex's token-limited
buffer in one small shape. A memory holds ``(role, content)`` messages per session id; a
subclass decides which messages a session keeps (:meth:`ChatMemory._trim`), applied on every
write, so what is stored is what the next turn sees. System messages are never evicted.

Thread-safe: one lock guards every session. With ``path=`` each write is persisted before
it returns, atomically (temp file, fsync, ``os.replace``): a ``*.json`` path holds every
session in one file, any other path is a directory with one file per session. One process
should write a path at a time; readers in other processes always see complete files. A file
that cannot be read is a :class:`~fastrag.errors.StoreError` naming it, never skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastrag._checks import check_int, check_str
from fastrag.analysis.tokens import count_tokens, count_tokens_batch
from fastrag.errors import ConfigError, StoreError, StoreIOError
from fastrag.query.base import Query

__all__ = ["ChatMemory", "MessageWindowChatMemory", "TokenWindowChatMemory"]

Message = tuple[str, str]
FORMAT = "fastrag.chat_memory/1"
_MAX_NAME = 80  # the readable part of a session file's name (the id itself is inside the file)


def _messages(messages: Iterable[Any]) -> list[Message]:
    """Checked ``(role, content)`` pairs (roles as ``Query.history`` accepts them)."""
    return list(Query("", history=list(messages)).history)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise StoreIOError(f"could not write chat memory file {str(path)!r}: {exc}") from exc
    _fsync_dir(path.parent)


def _dumps(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, indent=1) + "\n").encode("utf-8")


def _pairs(raw: Any, where: str) -> list[Message]:
    if not isinstance(raw, list):
        raise StoreError(f"{where}: 'messages' must be a list, got {type(raw).__name__}")
    out = []
    for i, m in enumerate(raw):
        if not (
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
        ):
            raise StoreError(
                f"{where}: message {i} must be {{'role': str, 'content': str}}, got {m!r:.80}"
            )
        out.append((m["role"], m["content"]))
    try:
        return _messages(out)
    except ConfigError as exc:
        raise StoreError(f"{where}: {exc}") from None


def _session_json(messages: Sequence[Message]) -> list[dict[str, str]]:
    return [{"role": r, "content": c} for r, c in messages]


class ChatMemory:
    """Messages per session: ``get``, ``add``, ``extend``, ``clear``, ``sessions``.

    The base class keeps every message; subclasses override :meth:`_trim` to keep a window.

    Args:
        path: where to persist (None: in memory only). A path ending in ``.json`` is one
            file for all sessions; anything else is a directory with one file per session.
            Existing sessions are loaded on construction.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self._lock = threading.RLock()
        self._sessions: dict[str, list[Message]] = {}
        self.path = None if path is None else Path(path).expanduser()
        if self.path is not None:
            self._single = self.path.suffix.lower() == ".json"
            self._load()

    # -- public --------------------------------------------------------------------------------
    def get(self, session_id: str = "default") -> list[Message]:
        """The session's messages, oldest first (a copy; empty for an unknown session)."""
        check_str("session_id", session_id)
        with self._lock:
            return list(self._sessions.get(session_id, ()))

    def add(self, session_id: str, role: str, content: str) -> None:
        """Append one message (then trim the session to the window)."""
        self.extend(session_id, [(role, content)])

    def extend(self, session_id: str, messages: Iterable[Any]) -> None:
        """Append messages (``(role, content)`` pairs or ``{"role", "content"}`` dicts) in
        one write."""
        check_str("session_id", session_id)
        new = _messages(messages)
        with self._lock:
            kept = self._trim(self._sessions.get(session_id, []) + new)
            self._sessions[session_id] = kept
            self._save(session_id)

    def clear(self, session_id: str | None = None) -> None:
        """Forget one session (None: every session)."""
        with self._lock:
            ids = (
                list(self._sessions)
                if session_id is None
                else [check_str("session_id", session_id)]
            )
            gone = [sid for sid in ids if self._sessions.pop(sid, None) is not None]
            for sid in gone[-1:] if self.path is not None and self._single else gone:
                self._save(sid)  # one file holds them all: one write

    def sessions(self) -> list[str]:
        """The session ids that hold messages, in order of creation."""
        with self._lock:
            return list(self._sessions)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def __repr__(self) -> str:
        where = f", path={str(self.path)!r}" if self.path is not None else ""
        return f"{type(self).__name__}(sessions={len(self)}{where})"

    # -- the window ------------------------------------------------------------------------------
    def _trim(self, messages: list[Message]) -> list[Message]:
        """The messages a session keeps (subclasses: evict the oldest non-system ones)."""
        return messages

    @staticmethod
    def _evict(messages: list[Message], sizes: Sequence[int], limit: int) -> list[Message]:
        """Drop the oldest non-system messages until the sizes of those kept sum to at most
        ``limit``."""
        total = sum(sizes)
        drop = set()
        for i, (role, _) in enumerate(messages):
            if total <= limit:
                break
            if role != "system":
                drop.add(i)
                total -= sizes[i]
        return [m for i, m in enumerate(messages) if i not in drop]

    # -- persistence -----------------------------------------------------------------------------
    def _file(self, session_id: str) -> Path:
        assert self.path is not None
        # readable prefix + hash: unique also on case-insensitive file systems and for long ids
        digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:16]
        return self.path / f"{quote(session_id, safe='')[:_MAX_NAME]}-{digest}.json"

    def _save(self, session_id: str) -> None:
        if self.path is None:
            return
        if self._single:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            sessions = {sid: _session_json(m) for sid, m in self._sessions.items()}
            _write_atomic(self.path, _dumps({"format": FORMAT, "sessions": sessions}))
            return
        self.path.mkdir(parents=True, exist_ok=True)
        f = self._file(session_id)
        if session_id not in self._sessions:
            try:
                f.unlink()
            except FileNotFoundError:
                pass
            return
        _write_atomic(
            f,
            _dumps(
                {
                    "format": FORMAT,
                    "session_id": session_id,
                    "messages": _session_json(self._sessions[session_id]),
                }
            ),
        )

    @staticmethod
    def _read(f: Path) -> dict[str, Any]:
        try:
            obj = json.loads(f.read_bytes().decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise StoreError(
                f"chat memory file {str(f)!r} is damaged ({exc}); restore it from "
                "a backup or delete it to forget that session"
            ) from None
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            got = obj.get("format") if isinstance(obj, dict) else type(obj).__name__
            raise StoreError(
                f"chat memory file {str(f)!r} is not a {FORMAT!r} file (format "
                f"{got!r}); restore it or delete it"
            )
        return obj

    def _load(self) -> None:
        p = self.path
        assert p is not None
        if self._single:
            if p.is_dir():
                raise ConfigError(
                    f"chat memory path {str(p)!r} is a directory but ends in "
                    "'.json'; pass a file path or a directory without '.json'"
                )
            if not p.exists():
                return
            obj = self._read(p)
            sessions = obj.get("sessions")
            if not isinstance(sessions, dict):
                raise StoreError(f"chat memory file {str(p)!r}: 'sessions' must be an object")
            for sid, raw in sessions.items():
                where = f"chat memory file {str(p)!r}, session {sid!r}"
                self._sessions[sid] = self._trim(_pairs(raw, where))
            return
        if p.exists() and not p.is_dir():
            raise ConfigError(
                f"chat memory path {str(p)!r} is a file; name a directory, or a "
                "'.json' file to keep every session in one file"
            )
        if not p.exists():
            return
        for tmp in p.glob(".*.tmp"):  # left by a writer that crashed before os.replace
            tmp.unlink(missing_ok=True)
        for f in sorted(p.glob("*.json")):
            obj = self._read(f)
            sid = obj.get("session_id")
            if not isinstance(sid, str) or not sid:
                raise StoreError(f"chat memory file {str(f)!r} has no 'session_id'")
            where = f"chat memory file {str(f)!r}"
            self._sessions[sid] = self._trim(_pairs(obj.get("messages"), where))


class MessageWindowChatMemory(ChatMemory):
    """Keeps the last ``max_messages`` messages of each session (Spring AI's
    ``MessageWindowChatMemory``; system messages are kept beyond the window)."""

    def __init__(self, max_messages: int = 20, path: str | os.PathLike[str] | None = None) -> None:
        self.max_messages = check_int("max_messages", max_messages, min=1)
        super().__init__(path)

    def _trim(self, messages: list[Message]) -> list[Message]:
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

    def _trim(self, messages: list[Message]) -> list[Message]:
        sizes = count_tokens_batch([c for _, c in messages], self.encoding)
        return self._evict(messages, sizes, self.max_tokens)
