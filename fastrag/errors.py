"""Exception hierarchy. Every error fastrag raises on bad input is a FastragError subclass
that also derives from the builtin a caller would expect (ValueError, KeyError, ...)."""

from __future__ import annotations


class FastragError(Exception):
    """Base class of every fastrag error."""


class ConfigError(FastragError, ValueError):
    """An argument or registration is invalid (unknown name, bad value, duplicate)."""


class ReaderError(FastragError, ValueError):
    """A source file could not be read or decoded."""


class TransformError(FastragError, RuntimeError):
    """A node transform failed; the message names the group, the node and its file."""


class StoreError(FastragError, RuntimeError):
    """A store on disk is unreadable, from an unknown format version, or inconsistent."""


class StoreLockTimeout(StoreError, TimeoutError):
    """Another writer held a store's lock for longer than ``lock_timeout``."""


class StoreIOError(StoreError, OSError):
    """A store write failed in the operating system (a full disk, a read-only file system);
    ``errno`` and ``filename`` are the failed call's. Nothing was committed."""

    def __str__(self) -> str:  # the message, not OSError's "[Errno N] strerror: filename"
        return str(self.args[0]) if self.args else ""


class StoreWarning(UserWarning):
    """Something about a store a user should know, and nothing was lost: a damaged or stale
    derived file (index, vectors) was dropped and rebuilt, source files are missing or changed
    on disk (kept and served as stored), or a store was opened read-only."""


class EmbeddingError(ConfigError):
    """An embedder returned vectors of the wrong shape, dtype or values. ``.index`` is the
    text's position in the call (None when the whole answer is malformed), ``.embedder`` the
    embedder's name (None when unknown)."""

    def __init__(self, message: str, *, index: int | None = None, embedder: str | None = None):
        self.index = index
        self.embedder = embedder
        super().__init__(message)


class MissingExtraError(FastragError, ImportError):
    """An optional dependency is needed; the message names the extra to install."""


def missing_extra(package: str, extra: str, feature: str) -> MissingExtraError:
    return MissingExtraError(
        f"{feature} needs the optional package {package!r}; "
        f"install it with: pip install 'fastrag-engine[{extra}]'"
    )
