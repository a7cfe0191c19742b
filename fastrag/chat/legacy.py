"""Chat memories as fastrag wrote them before SQLite (format ``fastrag.chat_memory/1``): one
``.json`` file holding every session, or a folder with one ``.json`` file per session. They are
read here, once, to be imported into a database; nothing here writes or removes them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastrag.errors import ConfigError, StoreError
from fastrag.query.base import Query

__all__ = ["FORMAT", "legacy_files", "read_legacy"]

FORMAT = "fastrag.chat_memory/1"

Message = tuple[str, str]


def legacy_files(path: Path) -> list[Path]:
    """The v1 files ``path`` names: the file itself (a ``.json`` path), or the ``*.json``
    files of a folder (sorted by name), or none."""
    if path.suffix.lower() == ".json":
        return [path] if path.is_file() else []
    if path.is_dir():
        return sorted(f for f in path.glob("*.json") if f.is_file())
    return []


def _load(data: bytes, f: Path) -> dict[str, Any]:
    try:
        obj = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise StoreError(
            f"chat memory file {str(f)!r} nests JSON deeper than a chat memory does (format "
            f"{FORMAT!r} is 4 levels deep): it is not a chat memory file; move it out of the way"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoreError(
            f"chat memory file {str(f)!r} is damaged ({exc}); restore it from a backup, or "
            "move it out of the way to start without its sessions"
        ) from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        got = obj.get("format") if isinstance(obj, dict) else type(obj).__name__
        raise StoreError(
            f"chat memory file {str(f)!r} is not a {FORMAT!r} file (format {got!r}); "
            "restore it, or move it out of the way"
        )
    return obj


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
        return list(Query("", history=out).history)
    except ConfigError as exc:
        raise StoreError(f"{where}: {exc}") from None


def read_legacy(f: Path, data: bytes) -> Iterator[tuple[str, list[Message]]]:
    """``(session_id, messages)`` of the v1 file ``f`` whose bytes are ``data``; a
    :class:`~fastrag.errors.StoreError` naming the file when it is not one."""
    obj = _load(data, f)
    if "sessions" in obj:
        sessions = obj["sessions"]
        if not isinstance(sessions, dict):
            raise StoreError(f"chat memory file {str(f)!r}: 'sessions' must be an object")
        for sid, raw in sessions.items():
            yield sid, _pairs(raw, f"chat memory file {str(f)!r}, session {sid!r}")
        return
    sid = obj.get("session_id")
    if not isinstance(sid, str) or not sid:
        raise StoreError(f"chat memory file {str(f)!r} has no 'session_id'")
    yield sid, _pairs(obj.get("messages"), f"chat memory file {str(f)!r}")
