"""File writes of a store: atomic replacement, checksums while writing, and operating-system
errors (a full disk, a read-only file system) turned into errors that name the file."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import xxhash

from fastrag.errors import StoreError, StoreIOError

TMP_PREFIX = ".tmp-"


class FileMaps:
    """Read-only memory maps of a store's files as Arrow buffers, whose resident pages can be
    dropped from the process once read (a later read maps them again from the page cache)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()

    def __reduce__(self) -> tuple:
        return (FileMaps, ())  # a copy in another process maps its own files

    def open(self, path: Path) -> pa.Buffer:
        """The bytes of ``path``, memory-mapped read-only (empty files read as no bytes)."""
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return pa.py_buffer(b"")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        with self._lock:
            self._maps.add(mm)
        return pa.py_buffer(mm)

    def release(self) -> int:
        """Drop this process's resident pages of every live map (MADV_DONTNEED: the maps are
        read-only, so nothing is lost); returns the bytes mapped (0 where madvise lacks it)."""
        if not hasattr(mmap, "MADV_DONTNEED"):
            return 0
        with self._lock:
            maps = list(self._maps)
        total = 0
        for mm in maps:
            with contextlib.suppress(ValueError, OSError):  # closed meanwhile
                mm.madvise(mmap.MADV_DONTNEED)
                total += len(mm)
        return total


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class HashingFile:
    """A binary file wrapper that hashes and counts what is written through it."""

    closed = False

    def __init__(self, f) -> None:
        self.f, self.h, self.n = f, xxhash.xxh3_64(), 0

    def write(self, b) -> int:
        self.h.update(b)
        self.n += len(b)
        return self.f.write(b)

    def flush(self) -> None:
        self.f.flush()

    def tell(self) -> int:
        return self.n


def atomic_write_bytes(path: Path, write: Callable) -> dict[str, Any]:
    """Write ``path`` atomically: ``write(fileobj)`` into a temp file, fsync, rename.
    Returns ``{"size", "checksum"}`` of what was written."""
    path = Path(path)
    tmp = path.parent / f"{TMP_PREFIX}{path.name}.{os.getpid()}.{threading.get_ident()}"
    try:
        with open(tmp, "wb") as f:
            hf = HashingFile(f)
            write(hf)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.fastrag_file = str(path)  # a failed write() names no file
        raise
    fsync_dir(path.parent)
    return {"size": hf.n, "checksum": hf.h.hexdigest()}


_ERRNO_WORDS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EFBIG: "file too large",
    errno.EIO: "input/output error",
}
_ERRNO_FIX = {
    errno.ENOSPC: "free some space (or move the store) and try again",
    errno.EDQUOT: "free some space (or raise the quota) and try again",
    errno.EROFS: "open it with mode='r' to read it, or copy it to a writable place",
    errno.EACCES: "open it with mode='r' to read it, or fix the folder's permissions",
    errno.EPERM: "open it with mode='r' to read it, or fix the folder's permissions",
}


@contextlib.contextmanager
def os_errors(store: Path) -> Iterator[None]:
    """Turn an operating-system error of a write into a StoreError naming it and the file."""
    try:
        yield
    except StoreError:
        raise
    except OSError as exc:
        code = errno.errorcode.get(exc.errno, str(exc.errno)) if exc.errno else "OSError"
        words = _ERRNO_WORDS.get(exc.errno, exc.strerror or str(exc))
        where = exc.filename or getattr(exc, "fastrag_file", None) or store
        fix = _ERRNO_FIX.get(exc.errno, "check the disk and try again")
        err = StoreIOError(
            f"cannot write store {str(store)!r}: {words} ({code}) at "
            f"{str(where)!r}; nothing was committed and the store is as it was; "
            f"{fix}"
        )
        err.errno, err.filename = exc.errno, str(where)
        raise err from exc


def why_read_only(path: Path) -> str:
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "on a read-only file system"
    except (OSError, AttributeError):
        pass
    return "not writable by this user"


def remove_new_store(path: Path, lock: str, note: str) -> None:
    """Empty the folder of a store a failed first write created, with its ``lock`` file held:
    temp files, then the lock file, and only when nothing but those and the holder's
    ``note`` is there."""
    entries = list(path.iterdir())
    if any(e.name not in (lock, note) and not e.name.startswith(TMP_PREFIX) for e in entries):
        return
    for entry in entries:
        if entry.name.startswith(TMP_PREFIX):
            entry.unlink()
    (path / lock).unlink(missing_ok=True)
