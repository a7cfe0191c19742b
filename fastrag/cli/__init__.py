"""The ``fastrag`` command line (``fastrag --help``), one module per command family:
:mod:`~fastrag.cli.ingest`, :mod:`~fastrag.cli.info`, :mod:`~fastrag.cli.search` (search and
ask), :mod:`~fastrag.cli.evaluate` (eval and demo), :mod:`~fastrag.cli.serve` (serve and mcp),
:mod:`~fastrag.cli.warmup`; :mod:`~fastrag.cli.main` builds the parser and runs a command,
importing only that command's module (so ``fastrag --help`` starts in a blink)."""

from __future__ import annotations

from typing import Any

from fastrag.cli.main import build_parser, main

__all__ = ["build_parser", "extractive_answer", "main"]


def __getattr__(name: str) -> Any:
    if name == "extractive_answer":  # loads the synthesis layer: only when asked for
        from fastrag.synth.extractive import extractive_answer  # lazy: keeps --help light

        return extractive_answer
    raise AttributeError(f"module 'fastrag.cli' has no attribute {name!r}")
