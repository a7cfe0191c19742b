"""Keys and locks of a Document's derived data: the per-key locks that make N threads asking
for one artifact cause one build, and the names artifacts are stored under."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Hashable
from typing import Any


class KeyLocks:
    """One lock per key, created on first use."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Hashable, threading.RLock] = {}

    def __call__(self, key: Hashable) -> threading.RLock:
        with self._guard:
            return self._locks.setdefault(key, threading.RLock())


def params_key(*parts: Any) -> str:
    return hashlib.blake2b(
        json.dumps(parts, sort_keys=True, default=str).encode(), digest_size=8
    ).hexdigest()


def vectors_key(group: str, key: str) -> str:
    return json.dumps([group, key])
