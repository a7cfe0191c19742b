"""``fastrag info``: a store's groups, node counts and bytes, where it was made from, and
(``--verify``, ``--deep``) whether its files are intact; ``--cpu``: which dense-search passes
this machine runs, and why."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fastrag.cli.common import UsageError
from fastrag.documents.deepcheck import deep_check
from fastrag.documents.relink import source_status
from fastrag.documents.sources import SOURCE_SCHEMA
from fastrag.documents.store import MANIFEST, Store
from fastrag.errors import StoreError

__all__ = ["add_info_arguments", "cmd_info", "print_cpu", "print_info"]


def cmd_info(args: argparse.Namespace) -> int:
    if args.cpu:
        if args.path or args.verify or args.deep:
            raise UsageError("--cpu describes this machine: pass it alone (fastrag info --cpu)")
        return print_cpu()
    if not args.path:
        raise UsageError("name a store (fastrag info STORE), or pass --cpu")
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
        rec = v.get("embedder")
        print(
            f"vectors {v['group']!r} key {v['key']!r}: dim {v['dim']}, "
            f"{sum(s['rows'] for s in v['segments']):,} nodes"
            + (f", embedder {rec.get('name')}" if isinstance(rec, dict) else "")
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


def print_cpu() -> int:
    """Print the CPU's SIMD classes, each BLAS kernel, and which first pass a batch dense
    search takes here with the reason (the int8 probe runs once per CPU and is cached)."""
    from threadpoolctl import threadpool_info

    from fastrag._blas import cpu_flags  # lazy: numba, only for --cpu
    from fastrag.indexes.int8 import int8_probe, probe_cache_path  # lazy: numba kernels
    from fastrag.indexes.quantized import bf16_probe, first_pass  # lazy: numba kernels

    flags = cpu_flags()
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    classes = [
        ("AVX2", "avx2"),
        ("AVX-512", "avx512f"),
        ("AVX512-VNNI", "avx512_vnni"),
        ("AVX512-BF16", "avx512_bf16"),
        ("AMX-BF16", "amx_bf16"),
    ]
    print(f"CPU: {model}")
    print("SIMD: " + ", ".join(f"{name} {'yes' if f in flags else 'no'}" for name, f in classes))
    for lib in threadpool_info():
        if lib.get("user_api") == "blas":
            print(
                f"BLAS: {Path(str(lib.get('filepath'))).name} "
                f"({lib.get('internal_api')} {lib.get('version')}, "
                f"{lib.get('architecture')} kernel, {lib.get('num_threads')} threads)"
            )
    int8 = int8_probe()
    cached = " (cached in " + str(probe_cache_path()) + ")" if int8.get("cached") else ""
    print(f"int8 first pass: {'yes' if int8['fast'] else 'no'}: {int8['reason']}{cached}")
    bf16 = bf16_probe()
    print(f"bf16 first pass: {'yes' if bf16['fast'] else 'no'}: {bf16['reason']}")
    chosen = first_pass("auto", "auto")
    print(
        "dense batch search (FlatIndex defaults): "
        + (
            f"{chosen} first pass, then the candidates rescored exactly (float32); a corpus "
            "where the pass measures no gain takes the float32 path"
            if chosen
            else "float32 sgemm (no first pass pays on this CPU)"
        )
    )
    return 0


def add_info_arguments(info: argparse.ArgumentParser) -> None:
    """The arguments of ``fastrag info`` (its handler, ``cmd_info``, as ``func``)."""
    info.add_argument("path", nargs="?")
    info.add_argument(
        "--cpu",
        action="store_true",
        help="print the CPU's SIMD classes, BLAS kernels and which first pass dense search "
        "takes here, with the reason",
    )
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
