"""``Idempotency-Key``: a client's retry of an upload or delete cannot do it twice.

A client (Stripe's and OpenAI's SDKs do) sends ``Idempotency-Key: <unique string>`` with a
request it may retry. The first request with a key creates its task and remembers
``key -> (request fingerprint, task id)`` in ``TASKS_DIR/keys/`` (shared by every worker,
kept across restarts for :data:`~fastrag.serve.tasks.KEEP_S`). A retry with the same key and
the same request gets that task back (same ``task_id``, header ``Idempotent-Replayed: true``)
instead of a new one; the same key with a different request is a 422; a retry while the first
request is still being accepted is a 409. A key whose task ``failed`` changed nothing, so it is
free again: the next request with it is a new task.

The fingerprint is of the request's meaning, not its bytes: the parsed JSON body, or for a
multipart upload the file names and contents, metadata and group (clients pick a new random
multipart boundary for every try).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

from filelock import FileLock

from fastrag.serve.guard import ApiError
from fastrag.serve.tasks import KEEP_S, TaskStore

__all__ = ["HEADER", "IdempotencyKeys", "check_key", "fingerprint"]

HEADER = "Idempotency-Key"
_KEY = re.compile(r"^[\x20-\x7e]{1,255}$")
_PENDING_S = 300.0  # a claim whose task record never appeared this long after is abandoned


def check_key(value: str | None) -> str | None:
    """The header's value, or None when absent; a 400 when it is not 1 to 255 printable
    ASCII characters."""
    if value is None:
        return None
    key = value.strip()
    if not _KEY.match(key):
        raise ApiError(
            400,
            f"the {HEADER} header must be 1 to 255 printable ASCII characters "
            f"(e.g. a UUID), got {len(key)} characters",
            param=HEADER,
        )
    return key


def fingerprint(request: str, body: Any) -> str:
    """A digest of what a request asks for: ``request`` ("METHOD /path") and its parsed
    ``body`` (JSON-able; key order does not matter)."""
    text = json.dumps([request, body], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class IdempotencyKeys:
    """The keys of one tasks folder: ``claim`` before creating a task, ``release`` if creating
    it failed."""

    def __init__(self, tasks: TaskStore, keep_s: float = KEEP_S) -> None:
        self.tasks = tasks
        self.keep_s = float(keep_s)
        self.root = tasks.root / "keys"
        self.root.mkdir(exist_ok=True, mode=0o700)

    def _path(self, key: str) -> Path:
        # hashed: any printable key makes a safe file name, and keys are not stored
        return self.root / (hashlib.sha256(key.encode("ascii")).hexdigest()[:40] + ".json")

    def _lock(self) -> FileLock:
        return FileLock(str(self.root / ".lock"), timeout=30)

    def claim(self, key: str, digest: str, request: str) -> tuple[str, dict[str, Any] | None]:
        """``(task id, None)``: create the task under that id; ``(task id, record)``: a retry,
        answer with that task. Raises a 422 for a key first used for a different request, a
        409 while the first request with it is still being accepted."""
        path = self._path(key)
        with self._lock():
            entry = _read(path)
            now = time.time()
            if entry is not None and entry.get("created", 0) > now - self.keep_s:
                rec = self.tasks.get(entry.get("task_id", ""))
                if rec is None and entry["created"] > now - _PENDING_S:
                    raise ApiError(
                        409,
                        f"a request with this {HEADER} is still being accepted; "
                        "retry it in a moment",
                        "idempotency_error",
                        param=HEADER,
                    )
                if rec is not None and rec.get("status") != "failed":
                    if entry.get("fingerprint") != digest:
                        raise ApiError(
                            422,
                            f"this {HEADER} was already used for a different request "
                            f"(first: {entry.get('request')}, task {rec['id']}); send a new "
                            "key with each new request",
                            "idempotency_error",
                            param=HEADER,
                        )
                    return rec["id"], rec
            task_id = uuid.uuid4().hex
            _write(
                path,
                {"task_id": task_id, "fingerprint": digest, "request": request, "created": now},
            )
            return task_id, None

    def release(self, key: str, task_id: str) -> None:
        """Forget ``key`` if it still names ``task_id`` (whose creation failed)."""
        path = self._path(key)
        with self._lock():
            entry = _read(path)
            if entry is not None and entry.get("task_id") == task_id:
                path.unlink(missing_ok=True)

    def prune(self) -> int:
        """Forget keys older than ``keep_s``; returns how many."""
        now = time.time()
        removed = 0
        with self._lock():
            for path in self.root.glob("*.json"):
                entry = _read(path)
                if entry is None or entry.get("created", 0) < now - self.keep_s:
                    path.unlink(missing_ok=True)
                    removed += 1
            for path in self.root.glob("*.tmp"):  # a process that died while writing one
                if path.stat().st_mtime < now - _PENDING_S:
                    path.unlink(missing_ok=True)
        return removed


def _read(path: Path) -> dict[str, Any] | None:
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def _write(path: Path, entry: dict[str, Any]) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(entry), encoding="utf-8")
    os.replace(tmp, path)
