"""The writers' lock of a store: a thread lock per store path and the OS file lock, with a
note of who holds it (so a writer that waits too long can say for whom)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from fastrag.errors import StoreLockTimeout

LOCK = ".lock"
HOLDER = ".lock.holder"  # who holds the writers' lock (pid, host, command, since)

_PATH_LOCKS: dict[str, threading.RLock] = {}
_PATH_LOCKS_GUARD = threading.Lock()
_HELD = threading.local()  # store paths whose locks this thread holds


def path_lock(path: Path) -> threading.RLock:
    """The one thread lock of the store at ``path`` in this process."""
    with _PATH_LOCKS_GUARD:
        return _PATH_LOCKS.setdefault(str(path), threading.RLock())


@contextlib.contextmanager
def writer_lock(path: Path, timeout: float) -> Iterator[None]:
    """Hold the store's thread lock and OS file lock (re-entrant in one thread), waiting at
    most ``timeout`` seconds for another writer (:class:`~fastrag.errors.StoreLockTimeout`
    naming it)."""
    held = _HELD.__dict__.setdefault("paths", set())
    if path in held:  # re-entered by this thread: it holds both locks already
        yield
        return
    with path_lock(path):
        held.add(path)
        lock = FileLock(str(path / LOCK), timeout=timeout)
        try:
            lock.acquire()
        except Timeout:
            held.discard(path)
            raise StoreLockTimeout(
                f"another writer ({holder(path)}) holds the lock "
                f"{str(path / LOCK)!r} for more than lock_timeout={timeout} s; wait for "
                "it, raise lock_timeout, or open the store with mode='r' to read it"
            ) from None
        try:
            _write_holder(path)
            yield
        finally:
            with contextlib.suppress(OSError):
                (path / HOLDER).unlink()
            lock.release()
            held.discard(path)


def _write_holder(path: Path) -> None:
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": " ".join(sys.argv)[:200],
        "since": time.time(),
    }
    with contextlib.suppress(OSError):
        (path / HOLDER).write_text(json.dumps(info))


def holder(path: Path) -> str:
    """Who holds the writers' lock of the store at ``path``, in words (as far as it recorded
    itself)."""
    try:
        info = json.loads((path / HOLDER).read_text())
        return (
            f"pid {info['pid']} on {info['host']}, running {info['command']!r}, "
            f"for {time.time() - float(info['since']):.0f} s"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that did not record itself"


BUILDING = ".building-"  # a folder of work done outside the writers' lock (see `building`)


@contextlib.contextmanager
def building(path: Path, folder: str, timeout: float) -> Iterator[Path]:
    """A new private folder ``path/folder/.building-<random>`` for work a writer does before
    its transaction (a large index built without holding the writers' lock). Garbage
    collection keeps it while this process holds its lock file beside it (:func:`is_building`)
    and removes it once that process has died; it is removed on exit."""
    base = path / folder
    name = f"{BUILDING}{uuid.uuid4().hex}"
    lock = FileLock(str(base / f"{name}.lock"))
    # created and locked under the writers' lock: no collection sees the lock file unlocked
    with writer_lock(path, timeout):
        base.mkdir(exist_ok=True)
        lock.acquire()
        (base / name).mkdir()
    try:
        yield base / name
    finally:
        shutil.rmtree(base / name, ignore_errors=True)
        lock.release()
        with contextlib.suppress(OSError):
            Path(lock.lock_file).unlink()


def is_building(entry: Path) -> bool:
    """Whether ``entry`` (a :func:`building` folder or its lock file) belongs to a build whose
    process is alive (holds the lock file). Call with the writers' lock held."""
    name = entry.name
    if not name.startswith(BUILDING):
        return False
    stem = name[: -len(".lock")] if name.endswith(".lock") else name
    lock_path = entry.parent / f"{stem}.lock"
    if not lock_path.exists():
        return False
    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False
