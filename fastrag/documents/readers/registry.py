"""The reader registry: readers that :func:`register_reader` adds for every later read, and the
checks of an extension and of a per-call ``readers=`` mapping."""

from __future__ import annotations

import re

from fastrag.documents.readers.report import ReaderFn
from fastrag.errors import ConfigError

__all__ = ["REGISTERED", "check_ext", "check_readers", "register_reader"]

#: extension (".xyz", lowercased) -> reader, for every later read; overrides the built-ins
REGISTERED: dict[str, ReaderFn] = {}


def check_ext(ext: object, what: str = "reader extension") -> str:
    """``ext`` lowercased, or a :class:`ConfigError` unless it looks like ``.xyz``."""
    if not isinstance(ext, str) or not re.fullmatch(r"\.[^./\\\s]+", ext):
        raise ConfigError(f"{what} must look like '.xyz', got {ext!r}")
    return ext.lower()


def _check_fn(ext: object, fn: object) -> None:
    if not callable(fn):
        raise ConfigError(
            f"reader for {ext!r} must be callable (path -> str | list), got {type(fn).__name__}"
        )


def check_readers(readers: object) -> dict[str, ReaderFn]:
    """A ``readers=`` mapping checked and keyed by lowercased extension (None: empty)."""
    if readers is None:
        return {}
    if not isinstance(readers, dict):
        raise ConfigError(
            f"readers must be a dict like {{'.xyz': fn}}, got {type(readers).__name__}"
        )
    out = {}
    for ext, fn in readers.items():
        _check_fn(ext, fn)
        out[check_ext(ext)] = fn
    return out


def register_reader(ext: str, fn: ReaderFn) -> None:
    """Register ``fn(path) -> str | list[str] | list[(str, dict)]`` for ``ext`` (e.g. ".xyz"),
    for every later read; it overrides a built-in reader of the same extension."""
    _check_fn(ext, fn)
    REGISTERED[check_ext(ext)] = fn
