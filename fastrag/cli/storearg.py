"""The store argument of the commands that read a store: the first word after the command
(``fastrag search STORE QUERY``) or ``--store STORE``, as ``fastrag ingest`` takes it."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from fastrag.errors import ConfigError

__all__ = ["add_store_argument", "take_store"]


def add_store_argument(
    p: argparse.ArgumentParser,
    help: str | None = None,
    then: Sequence[str] = (),
    required: bool = True,
) -> None:
    """Add the positional ``store`` and ``--store STORE``. ``then``: the positional arguments
    after the store, which take the words one place later when ``--store`` names the store."""
    p.add_argument("store", nargs="?", help=help)
    p.add_argument(
        "--store",
        dest="store_flag",
        metavar="STORE",
        help="the store, as a flag (as `fastrag ingest --store`) instead of the first argument",
    )
    p.set_defaults(store_then=tuple(then), store_required=required)


def take_store(args: argparse.Namespace, command: str = "") -> None:
    """Settle ``args.store`` from the positional or ``--store`` (the positionals after it move
    one place when the flag is used); a usage error when it is missing or given twice."""
    flag = getattr(args, "store_flag", None)
    if flag is not None:
        names = ["store", *args.store_then]
        words = [getattr(args, n) for n in names]
        if words[-1] is not None and words[0] != flag:
            raise ConfigError(
                f"the store is given twice: {words[0]!r} and --store {flag!r}; give one of them"
            )
        if words[0] != flag:  # the positionals were read one place early
            for name, value in zip(names, [flag, *words[:-1]], strict=True):
                setattr(args, name, value)
        args.store_flag = None
    if getattr(args, "store_required", False) and not args.store:
        name = f"fastrag {command} " if command else ""
        raise ConfigError(f"name the store: `{name}STORE ...` or --store STORE")
