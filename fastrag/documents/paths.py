"""The path arguments of a Document: checks, and how paths are told from texts."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from fastrag.documents.readers import supported_extensions
from fastrag.errors import ConfigError


def check_path_arg(path: Any) -> None:
    """``path`` is None, a str or os.PathLike, or a non-empty list of them."""
    if path is None or isinstance(path, (str, os.PathLike)) and not isinstance(path, bytes):
        if isinstance(path, os.PathLike) and isinstance(os.fspath(path), bytes):
            raise ConfigError(
                f"Document path {path!r} is a bytes path; pass a str path (os.fsdecode(path))"
            )
        return
    hint = "; pass a str path (os.fsdecode(path))" if isinstance(path, bytes) else ""
    if isinstance(path, (list, tuple)):
        if not path:
            raise ConfigError(
                "Document got an empty list of paths; pass a file, a folder or a "
                "list of them (Document.from_texts takes texts)"
            )
        for i, item in enumerate(path):
            if not isinstance(item, (str, os.PathLike)) or isinstance(item, bytes):
                fix = "; decode bytes with os.fsdecode(path)" if isinstance(item, bytes) else ""
                raise ConfigError(
                    f"Document path [{i}] is {type(item).__name__} ({item!r:.60}); "
                    f"paths must be str or pathlib.Path{fix}"
                )
        return
    raise ConfigError(
        f"Document takes a path (str or pathlib.Path) or a list of paths, got "
        f"{type(path).__name__} ({path!r:.60}){hint}; for texts use "
        "Document.from_texts([...])"
    )


def input_keys(path: Any) -> list[str]:
    """The sources a Document was asked to read, as sorted absolute paths."""
    items = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    return sorted({str(Path(p).expanduser().absolute()) for p in items})


def short_list(paths: list[str]) -> str:
    shown = ", ".join(repr(p) for p in paths[:3])
    return f"[{shown}{f', ... ({len(paths)} in all)' if len(paths) > 3 else ''}]"


def names_a_path(x: Any) -> bool:
    """Whether a string given to ``add`` names an existing file or folder (not a text)."""
    if not isinstance(x, str) or "\n" in x or len(x) >= 4096:
        return False
    try:
        return Path(x).exists()
    except (OSError, ValueError):  # too long for a file name, NUL bytes: a text
        return False


_PATHLIKE_EXT = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,5}$")


def looks_like_path(x: str) -> bool:
    """A one-line string with no spaces around that ends in a file extension or holds a path
    separator: meant as a path, not as a text."""
    if "\n" in x or len(x) > 1024 or x != x.strip():
        return False
    spaced = any(c.isspace() for c in x)
    ext = _PATHLIKE_EXT.search(x)
    if ext and (not spaced or ext.group().lower() in supported_extensions()):
        return True
    return (os.sep in x or "/" in x) and not spaced


def lazyllm_path(path: Any, dataset_path: Any, manager: Any) -> Any:
    """The path of ``Document(dataset_path=..., manager=False)`` (LazyLLM's spelling):
    ``dataset_path`` is ``path``; ``manager`` (LazyLLM's document-manager web service) must
    be off, as fastrag has none."""
    if manager not in (False, None):
        raise ConfigError(
            f"Document(manager={manager!r}): fastrag has no document-manager service (LazyLLM's "
            "manager=True/'ui'); pass manager=False, and serve the Document with "
            "`fastrag serve` or fastrag.serve(doc) for an HTTP API"
        )
    if dataset_path is None:
        return path
    if path is not None:
        raise ConfigError(
            f"Document got both path={path!r:.60} and dataset_path={dataset_path!r:.60}; "
            "pass one (dataset_path is LazyLLM's name for path)"
        )
    return dataset_path
