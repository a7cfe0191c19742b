"""The ``fastrag`` command line: ingest, info, search, ask, eval, serve, warmup, demo."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from importlib.metadata import PackageNotFoundError, version

from fastrag.cli.common import UsageError
from fastrag.cli.evaluate import add_demo_parser, add_eval_parser
from fastrag.cli.info import add_info_parser
from fastrag.cli.ingest import add_ingest_parser
from fastrag.cli.search import add_ask_parser, add_search_parser
from fastrag.cli.serve import add_mcp_parser, add_serve_parser
from fastrag.errors import FastragError, ReaderError, StoreWarning
from fastrag.plugins import PLUGINS_ENV, load_plugins
from fastrag.warmup import plan_jobs, warmup

__all__ = ["build_parser", "main"]


def cmd_warmup(args: argparse.Namespace) -> int:
    print(
        f"compiling fastrag's kernels in {len(plan_jobs(args.jobs))} process(es) "
        "(cached on disk; later runs start at once)"
    )
    print(f"warm-up done in {warmup(jobs=args.jobs):.1f} s")
    return 0


def _version() -> str:
    try:
        return version("fastrag-engine")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The parser of every ``fastrag`` subcommand (each sets ``func``, its handler)."""
    p = argparse.ArgumentParser(prog="fastrag", description=__doc__)
    p.add_argument("--version", action="version", version=f"fastrag {_version()}")
    p.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (it registers similarities, readers, analyzers); "
        f"repeatable; also ${PLUGINS_ENV}, comma-separated",
    )
    sub = p.add_subparsers(dest="command", required=True)
    add_ingest_parser(sub)
    add_info_parser(sub)
    add_search_parser(sub)
    add_ask_parser(sub)
    add_eval_parser(sub)
    warm = sub.add_parser("warmup", help="compile every kernel ahead of time (for images, CI)")
    warm.add_argument(
        "--jobs",
        type=int,
        default=min(4, os.cpu_count() or 1),
        help="processes compiling at once (default: the CPU count, at most 4; 1 compiles "
        "in this process)",
    )
    warm.set_defaults(func=cmd_warmup)
    add_serve_parser(sub)
    add_mcp_parser(sub)
    add_demo_parser(sub)
    return p


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
    """Run the ``fastrag`` command line ``argv`` (default: ``sys.argv[1:]``); the exit status."""
    args = build_parser().parse_args(argv)
    _one_line_warnings(StoreWarning)
    try:
        load_plugins(args.plugin)
        return args.func(args)
    except (FastragError, UsageError) as exc:
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
