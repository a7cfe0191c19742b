"""``fastrag warmup``: compile every kernel ahead of time (for images and CI)."""

from __future__ import annotations

import argparse
import os

from fastrag.warmup import plan_jobs, warmup

__all__ = ["add_warmup_arguments", "cmd_warmup"]


def cmd_warmup(args: argparse.Namespace) -> int:
    print(
        f"compiling fastrag's kernels in {len(plan_jobs(args.jobs))} process(es) "
        "(cached on disk; later runs start at once)"
    )
    print(f"warm-up done in {warmup(jobs=args.jobs):.1f} s")
    return 0


def add_warmup_arguments(warm: argparse.ArgumentParser) -> None:
    """The arguments of ``fastrag warmup`` (its handler, ``cmd_warmup``, as ``func``)."""
    warm.add_argument(
        "--jobs",
        type=int,
        default=min(4, os.cpu_count() or 1),
        help="processes compiling at once (default: the CPU count, at most 4; 1 compiles "
        "in this process)",
    )
    warm.set_defaults(func=cmd_warmup)
