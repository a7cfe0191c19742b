"""``fastrag.pipeline``: LazyLLM's ``pipeline()``, callable as this module's name.

``fastrag.pipeline(f, g)`` and ``with fastrag.pipeline() as ppl:`` build a
:class:`fastrag.flow.Pipeline`. ``RAGPipeline`` lived here before; it is
:mod:`fastrag.rag`'s now, and ``from fastrag.pipeline import RAGPipeline`` still works for one
release with a DeprecationWarning naming its home.
"""

from __future__ import annotations

import sys
import types
import warnings
from typing import Any

from fastrag import rag as _rag
from fastrag.flow.flows import Pipeline

__all__: list[str] = []

_MOVED = {"RAGPipeline": "fastrag.rag"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(
            f"fastrag.pipeline.{name} moved to {_MOVED[name]}; import it from there "
            f"(from {_MOVED[name]} import {name}) or as fastrag.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_rag, name)
    raise AttributeError(f"module 'fastrag.pipeline' has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    def __call__(self, *stages: Any, **named: Any) -> Pipeline:
        return Pipeline(*stages, **named)


sys.modules[__name__].__class__ = _CallableModule
