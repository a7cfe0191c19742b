"""The ``fastrag`` command line (``fastrag --help``), one module per command family:
:mod:`~fastrag.cli.ingest`, :mod:`~fastrag.cli.info`, :mod:`~fastrag.cli.search` (search and
ask), :mod:`~fastrag.cli.evaluate` (eval and demo), :mod:`~fastrag.cli.serve` (serve and mcp);
:mod:`~fastrag.cli.main` builds the parser and runs a command."""

from fastrag.cli.main import build_parser, main
from fastrag.synth.extractive import extractive_answer

__all__ = ["build_parser", "extractive_answer", "main"]
