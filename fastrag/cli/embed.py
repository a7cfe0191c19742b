"""``fastrag embed``: build a static embedding table (``--build-static MODEL``)."""

from __future__ import annotations

import argparse
import sys
import time

from fastrag.embeddings.distill import STATIC_MODELS
from fastrag.embeddings.static import StaticEmbedding

__all__ = ["TableProgress", "add_embed_arguments", "cmd_embed"]


class TableProgress:
    """Prints ``done/total tokens, tokens/s, ETA`` of a static table's build at most every
    ``every`` seconds (after ``header``, printed on the first call)."""

    def __init__(self, every: float = 2.0, header: str = "") -> None:
        self.start = time.perf_counter()
        self.last = 0.0
        self.every = every
        self.header = header

    def __call__(self, done: int, total: int) -> None:
        if self.header:
            print(self.header, file=sys.stderr, flush=True)
            self.header = ""
        now = time.perf_counter() - self.start
        if done < total and now - self.last < self.every:
            return
        self.last = now
        rate = done / now if now > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else float("inf")
        print(
            f"  {done:,}/{total:,} tokens  {rate:,.0f} tokens/s  ETA {eta:,.0f} s",
            file=sys.stderr,
            flush=True,
        )


def cmd_embed(args: argparse.Namespace) -> int:
    model = args.build_static
    print(f"distilling the static table of {model} (dim {args.dim}; cached once built)")
    t0 = time.perf_counter()
    emb = StaticEmbedding.from_model(
        model,
        dim=args.dim,
        cache_dir=args.cache_dir,
        rebuild=args.rebuild,
        num_threads=args.threads,
        progress=TableProgress(),
    )
    size = emb.table.nbytes()
    print(
        f"table: {emb.path}  ({size / 2**20:.1f} MiB, {emb.table.rows.shape[0]:,} tokens x "
        f"{emb.dim}, int8; {time.perf_counter() - t0:.1f} s)"
    )
    return 0


def add_embed_arguments(embed: argparse.ArgumentParser) -> None:
    """The arguments of ``fastrag embed`` (its handler, ``cmd_embed``, as ``func``)."""
    embed.add_argument(
        "--build-static",
        metavar="MODEL",
        required=True,
        choices=STATIC_MODELS,
        help=f"distil a static embedding table from a packaged model ({', '.join(STATIC_MODELS)}) "
        "into the cache ($FASTRAG_CACHE_DIR/static); a cached, intact table is reused",
    )
    embed.add_argument("--dim", type=int, default=256, help="table dimension (default 256)")
    embed.add_argument(
        "--threads", type=int, default=None, help="model threads while distilling (default 1)"
    )
    embed.add_argument(
        "--cache-dir", default=None, help="folder of the tables (default $FASTRAG_CACHE_DIR/static)"
    )
    embed.add_argument("--rebuild", action="store_true", help="distil again even if cached")
    embed.set_defaults(func=cmd_embed)
