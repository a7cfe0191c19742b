"""``fastrag info``: a store's groups, node counts and bytes, where it was made from, and
(``--verify``, ``--deep``) whether its files are intact."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fastrag.cli.common import UsageError
from fastrag.documents.deepcheck import deep_check
from fastrag.documents.relink import source_status
from fastrag.documents.sources import SOURCE_SCHEMA
from fastrag.documents.store import MANIFEST, Store
from fastrag.errors import StoreError

__all__ = ["add_info_parser", "cmd_info", "print_info"]


def cmd_info(args: argparse.Namespace) -> int:
    if args.deep and not args.verify:
        raise UsageError("--deep extends --verify: pass both (fastrag info STORE --verify --deep)")
    return print_info(Path(args.path), verify=args.verify, deep=args.deep)


def print_info(path: Path, verify: bool = False, deep: bool = False) -> int:
    """Print the store at ``path``; the exit status (with ``verify``: 1 if anything is
    damaged)."""
    if not (path / MANIFEST).exists():
        print(f"error: {path} is not a fastrag store (no {MANIFEST})", file=sys.stderr)
        return 2
    try:
        store = Store(path, mode="r")
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    m = store.manifest
    n_sources = sum(s["rows"] for s in m["sources"])
    print(
        f"store {path}  format v{m['format_version']}  sources {n_sources:,}  "
        f"generation {m['generation']}  total {store.nbytes():,} bytes"
    )
    print(f"{'group':<20} {'parent':<14} {'nodes':>10} {'segments':>9} {'bytes':>14}")
    for name, g in m["groups"].items():
        stale = "  (stale: updated on next use)" if g["root_gen"] < m["root_gen"] else ""
        size = sum(s["size"] for s in g["segments"])
        print(
            f"{name:<20} {g.get('parent') or '-'!s:<14} {g['nodes']:>10,} "
            f"{len(g['segments']):>9} {size:>14,}{stale}"
        )
    for v in m["vectors"].values():
        print(
            f"vectors {v['group']!r} key {v['key']!r}: dim {v['dim']}, "
            f"{sum(s['rows'] for s in v['segments']):,} nodes"
        )
    if m["indexes"]:
        print(f"{len(m['indexes'])} indexes: " + ", ".join(sorted(m["indexes"])))
    _print_sources(store)
    if verify:
        problems = store.verify()
        for p in problems:
            print(f"damaged: {p}", file=sys.stderr)
        print(f"verify: {len(store.referenced()) - 1} files checked, {len(problems)} damaged")
        if deep and not problems:
            problems = deep_check(store)
            for p in problems:
                print(f"bad structure: {p}", file=sys.stderr)
            print(f"deep: every table, index and vector checked, {len(problems)} problems")
        return 1 if problems else 0
    return 0


def _print_sources(store: Store) -> None:
    """Where the store was made from, and which of its source files are missing or changed
    on disk (the store serves them as stored either way)."""
    inputs = store.manifest.get("inputs")
    if inputs:
        print(f"made from {', '.join(inputs)}")
    try:
        sources = store.read_segments(store.manifest["sources"], SOURCE_SCHEMA)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return
    missing, changed = source_status(sources)
    for what, keys, fix in (
        (
            "missing on disk (kept and served as stored)",
            missing,
            "re-link moved files: fastrag ingest NEW_PATH --store STORE; remove them: "
            "fastrag ingest PATH --store STORE --sync",
        ),
        (
            "changed on disk since ingest (served as ingested)",
            changed,
            "update them: fastrag ingest PATH --store STORE",
        ),
    ):
        if keys:
            print(f"{len(keys):,} source files {what}; {fix}")
            for k in keys[:20]:
                print(f"  {k}")
            if len(keys) > 20:
                print(f"  ... and {len(keys) - 20:,} more")


def add_info_parser(sub: Any) -> None:
    """Add ``fastrag info`` to the subcommands ``sub``."""
    info = sub.add_parser(
        "info",
        help="print a store's groups, node counts and bytes (--verify: checksums)",
    )
    info.add_argument("path")
    info.add_argument(
        "--verify",
        action="store_true",
        help="check every file's size and checksum (exit 1 if any is damaged)",
    )
    info.add_argument(
        "--deep",
        action="store_true",
        help="with --verify: also check the structure of every table and index "
        "(for a store from someone else: checksums catch accidents only)",
    )
    info.set_defaults(func=cmd_info)
