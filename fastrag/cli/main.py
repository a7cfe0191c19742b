"""The ``fastrag`` command line: ingest, info, search, ask, eval, serve, embed, warmup, demo."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Collection, Sequence

from fastrag.errors import FastragError, ReaderError, StoreWarning
from fastrag.plugins import PLUGINS_ENV, load_plugins

__all__ = ["COMMANDS", "build_parser", "command_of", "main"]

COMMANDS: dict[str, tuple[str, str]] = {
    "ingest": ("fastrag.cli.ingest", "read files into a store and build node groups"),
    "info": (
        "fastrag.cli.info",
        "print a store's groups, node counts and bytes (--verify: checksums); "
        "--cpu: this machine's dense-search passes",
    ),
    "search": (
        "fastrag.cli.search",
        "retrieve from a store: a hits table, JSON, or a batch of queries to JSONL/Parquet",
    ),
    "ask": (
        "fastrag.cli.search",
        "answer a question from a store (an OpenAI-compatible "
        "LLM, or an extractive answer without one)",
    ),
    "eval": (
        "fastrag.cli.evaluate",
        "hit rate / nDCG / MRR of a store on your questions, or recall on SQuAD data (--squad)",
    ),
    "embed": (
        "fastrag.cli.embed",
        "build a static embedding table distilled from a packaged model (--build-static)",
    ),
    "warmup": ("fastrag.cli.warmup", "compile every kernel ahead of time (for images, CI)"),
    "serve": (
        "fastrag.cli.serve",
        "an OpenAI-compatible RAG server over a store: chat "
        "completions, batch retrieval, uploads, a chat page",
    ),
    "mcp": (
        "fastrag.cli.serve",
        "an MCP server over a store for agents: tools search, "
        "ask and list_groups, documents as resources (stdio, or --http)",
    ),
    "demo": ("fastrag.cli.evaluate", "batch retrieval over the bundled CMRC knowledge base"),
}
"""Each subcommand, in ``fastrag --help``'s order: the module that runs it (its
``add_<name>_arguments(parser)`` adds the arguments and the handler) and its one-line help.
A module is imported only for the command that runs, so ``fastrag --help`` and each command
load just what they use (``tests/test_imports.py`` checks it)."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # ~0.1 s: for --version only

    try:
        return version("fastrag-engine")
    except PackageNotFoundError:
        return "unknown"


class VersionAction(argparse.Action):
    """``--version``: prints ``fastrag VERSION`` and exits, reading the installed version only
    then (``importlib.metadata`` costs as much as the rest of ``fastrag --help``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="show program's version number and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        print(f"fastrag {_version()}")
        parser.exit()


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser of the ``fastrag`` command line (each subcommand sets ``func``, its handler).
    ``commands``: the subcommands given their arguments (default: all); the others are listed
    (``fastrag --help`` shows them) without importing their modules."""
    p = argparse.ArgumentParser(prog="fastrag", description=__doc__)
    p.add_argument("--version", action=VersionAction)
    p.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (it registers similarities, readers, analyzers); "
        f"repeatable; also ${PLUGINS_ENV}, comma-separated",
    )
    sub = p.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text)
        if commands is None or name in commands:
            add_arguments = getattr(importlib.import_module(module), f"add_{name}_arguments")
            add_arguments(cmd)
    return p


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` runs, read without a parser (the first word after the global
    options), or None when there is none or it cannot tell (then every command is built)."""
    takes_value = False
    for arg in argv:
        if takes_value:
            takes_value = False
        elif arg == "--":
            return None
        elif arg.startswith("-"):  # --plugin (or an abbreviation) takes the next word
            takes_value = "=" not in arg and len(arg) > 2 and "--plugin".startswith(arg)
        else:
            return arg if arg in COMMANDS else None
    return None


def _parse(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed by a parser that built only the command it names; the whole parser
    when that cannot be told (argparse alone decides what the words mean)."""
    name = command_of(argv)
    if name is None and not any(arg in COMMANDS for arg in argv):
        name = ""  # no command word at all: help, --version or a usage error; builds none
    if name is not None:
        args = build_parser([name]).parse_args(argv)
        if args.command == name:
            return args
    return build_parser().parse_args(argv)


def _one_line_warnings(category: type) -> None:
    """Print fastrag's warnings as ``warning: MESSAGE`` lines (not Python's file:line form)."""
    default = warnings.showwarning

    def show(message, cat, filename, lineno, file=None, line=None):
        if issubclass(cat, category):
            print(f"warning: {message}", file=sys.stderr)
        else:
            default(message, cat, filename, lineno, file, line)

    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    """Run the ``fastrag`` command line ``argv`` (default: ``sys.argv[1:]``, the process's own
    command, which may then change process-wide settings for it); the exit status."""
    own_process = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    if command_of(argv) == "ingest" and "pyarrow" not in sys.modules:
        # Arrow's C++ code (IPC, compression) allocates from this pool, chosen once when
        # pyarrow loads: the C allocator returns what ingest frees between its phases,
        # mimalloc (pyarrow's default) kept ~30 MiB more at a 50 MB log's peak
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    args = _parse(argv)
    args.own_process = own_process
    _one_line_warnings(StoreWarning)
    try:
        load_plugins(args.plugin)
        if hasattr(args, "store_flag"):  # a command that reads a store (storearg loaded)
            from fastrag.cli.storearg import take_store  # lazy: --help loads no command code

            take_store(args, args.command)
        return args.func(args)
    except FastragError as exc:  # a UsageError (fastrag.cli.common) too
        hint = (
            "\n(pass --on-error skip to report unreadable files and go on)"
            if isinstance(exc, ReaderError) and args.command == "ingest"
            else ""
        )
        print(f"error: {exc}{hint}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `fastrag search ... | head`: the reader left; not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
