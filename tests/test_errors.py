"""Every exception class fastrag defines is a FastragError (one ``except`` catches them all),
and each failure has one name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import fastrag
from fastrag.errors import EmbeddingError, FastragError

# answered as HTTP responses inside the server, never raised to a caller
HTTP_SIGNALS = {"fastrag.serve.guard.ApiError", "fastrag.serve.guard.BodyTooLarge"}


def _modules():
    for info in pkgutil.walk_packages(fastrag.__path__, "fastrag."):
        try:
            yield importlib.import_module(info.name)
        except ImportError:  # an optional extra that is not installed
            continue


def test_every_exception_class_is_a_fastrag_error():
    found, stray = set(), []
    for mod in _modules():
        for name, obj in vars(mod).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == mod.__name__
                and not issubclass(obj, Warning)
            ):
                found.add(obj)
                if (
                    not issubclass(obj, FastragError)
                    and f"{mod.__name__}.{name}" not in HTTP_SIGNALS
                ):
                    stray.append(f"{mod.__name__}.{name}")
    assert len(found) > 10
    assert stray == []


def test_embedding_value_error_is_embedding_error():
    from fastrag.embeddings import EmbeddingValueError

    assert EmbeddingValueError is EmbeddingError
    err = EmbeddingError("bad vector", index=2, embedder="e")
    assert (err.index, err.embedder, str(err)) == (2, "e", "bad vector")
