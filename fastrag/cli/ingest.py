"""``fastrag ingest``: read files into a store and build its node groups (and the index
``fastrag search`` uses by default, so reads never build or write one)."""

from __future__ import annotations

import argparse
import importlib.abc
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from fastrag._heap import map_large_blocks, trim_heap
from fastrag.analysis.language import release_language_model
from fastrag.analysis.tokens import release_encodings
from fastrag.cli.common import UsageError, is_stored, pick_group
from fastrag.cli.embed import TableProgress
from fastrag.cli.info import print_info
from fastrag.documents.document import Document
from fastrag.embeddings.named import EMBEDDER_NAMES, embedder_by_name
from fastrag.errors import ConfigError
from fastrag.retrieval.retriever import Retriever
from fastrag.transforms import (
    LineSplitter,
    ParagraphSplitter,
    SentenceSplitter,
    TokenTextSplitter,
)

__all__ = ["add_ingest_arguments", "cmd_ingest", "parse_group"]

_KINDS = ("lines", "paragraphs", "sentence", "tokens")


def parse_group(spec: str) -> tuple[str, str, dict]:
    """``NAME=SPEC``: SPEC is ``lines``, ``paragraphs``, ``sentence:SIZE[:OVERLAP]`` or
    ``tokens:SIZE[:OVERLAP]``, optionally followed by ``@PARENT``."""
    if "=" not in spec:
        raise argparse.ArgumentTypeError(f"--group {spec!r}: expected NAME=SPEC, e.g. block=lines")
    name, rest = spec.split("=", 1)
    parent = "root"
    if "@" in rest:
        rest, parent = rest.rsplit("@", 1)
    kind, *args = rest.split(":")
    if kind not in _KINDS:
        raise argparse.ArgumentTypeError(
            f"--group {spec!r}: unknown SPEC {kind!r}; use lines, paragraphs, "
            "sentence:SIZE[:OVERLAP] or tokens:SIZE[:OVERLAP]"
        )
    try:
        nums = [int(a) for a in args]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--group {spec!r}: sizes must be integers") from None
    return name, parent, {"kind": kind, "args": nums}


def _transform(spec: dict) -> Any:
    """The transform of a CLI group spec (one whose spec the store records)."""
    kind, args = spec["kind"], spec["args"]
    if kind == "lines":
        return LineSplitter()
    if kind == "paragraphs":
        return ParagraphSplitter()
    cls = SentenceSplitter if kind == "sentence" else TokenTextSplitter
    size = args[0] if args else 256
    overlap = args[1] if len(args) > 1 else size // 10
    return cls(chunk_size=size, chunk_overlap=overlap)


def _progress(desc: str, total: int | None, quiet: bool) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit="group",
        disable=quiet,
        file=sys.stderr,
        leave=False,
    )


def cmd_ingest(args: argparse.Namespace) -> int:
    # Arrow buffers from the C allocator Python uses while ingesting: memory one frees, the
    # other reuses (with Arrow's own pool both kept their high-water marks: ~50-100 MB more
    # peak RSS on a 50 MB log). Restored after, for a caller of main() in its own process;
    # buffers keep the pool they came from.
    pool = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    map_large_blocks()
    if getattr(args, "own_process", False):  # an in-process caller keeps pyarrow's detection
        _skip_pandas_detection()
    try:
        return _ingest(args)
    finally:
        pa.set_memory_pool(pool)


def _ingest(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    opts = {
        "on_error": args.on_error,
        "json_text_field": args.text_field,
        "show_progress": not args.quiet,
    }
    opts.update(_reader_options(args))
    if args.embed:
        header = (
            f"--embed {args.embed}: building its static table (once; cached, and reused by every "
            "store): e5-small's 250k pieces take ~20 CPU-minutes, MiniLM's ~20 s"
        )
        opts["embed"] = embedder_by_name(
            args.embed, progress=None if args.quiet else TableProgress(header=header)
        )
    existed = (Path(args.store) / "manifest.json").exists()
    if args.add:
        if not existed:
            print(
                f"error: --add needs an existing store; {args.store} is not one (drop --add "
                "to create it)",
                file=sys.stderr,
            )
            return 2
        doc = Document(store=args.store, **opts)
        added = doc.add(args.path)
        print(f"added {len(added)} documents from {', '.join(args.path)}", file=sys.stderr)
    else:
        doc = Document(
            args.path,
            store=args.store,
            replace=args.replace,
            remove_missing=args.sync,
            **opts,
        )
    doc.derived.keep_tokens = False  # one shot: a large index is packed part by part
    release_language_model()  # reading is done: ~20 MiB of mapped model pages
    if not len(doc.group("root")) and not existed:
        report = doc.read_report
        print(report.summary(), file=sys.stderr)
        for line in report.missing_extras():
            print(f"note: {line}", file=sys.stderr)
        raise UsageError(
            f"no documents found in {', '.join(args.path)}: nothing was written "
            f"(the store {args.store} was not created); ingest files with text "
            "(-v lists what was skipped and why)"
        )
    for name, parent, spec in args.group:
        doc.create_node_group(name, transform=_transform(spec), parent=parent)
    builtin = Document.BUILTIN_GROUPS
    if not args.group and len(doc.group_names) == 1 + len(builtin) and not args.builtin:
        doc.create_node_group(
            "chunk", transform=_transform({"kind": "sentence", "args": [256, 32]})
        )
        print(
            "no --group given: building group 'chunk' (sentence:256:32)",
            file=sys.stderr,
        )
    names = [
        n for n in doc.group_names[1:] if n not in builtin or n in args.builtin or is_stored(doc, n)
    ]
    groups = []
    with _progress("building groups", len(names), args.quiet) as bar:
        for name in names:
            bar.set_postfix_str(name)
            try:
                groups.append(doc.group(name))
            except ConfigError as exc:
                if not doc.is_stored_only(name):
                    raise
                print(f"note: group {name!r} was not updated: {exc}", file=sys.stderr)
            bar.update(1)
    release_encodings()  # chunking is done: ~26 MiB less at the index build's peak
    for group in groups:  # stored: the index build reads their texts a segment at a time
        group.release_table()
    trim_heap()  # the groups' tables and texts freed above (~100 MiB for a 50 MB log)
    _build_default_index(doc, names)
    _embed_default_group(doc, names)
    report = doc.read_report
    if not args.add and report.entries:
        print(report.summary())
        if args.verbose:
            print(report.details())
    for line in report.missing_extras():  # the rest was read: say what to install
        print(f"note: {line}", file=sys.stderr)
    changes = doc.source_changes
    verb = "updated" if existed else "ingested"
    print(
        f"{verb} {args.store}: {changes.summary()}; {len(doc.group('root')):,} documents "
        f"in {time.perf_counter() - t0:.2f} s"
    )
    return print_info(Path(args.store))


def _skip_pandas_detection() -> None:
    """pyarrow imports pandas, where installed, at its first conversion of a Python list, to
    check whether it was given pandas objects (38 MiB of an ingest's peak; ingest gives it
    none): that first check runs with pandas hidden, so pyarrow takes it as absent for the
    rest of the process (``to_pandas`` still imports pandas; ``pa.table(data_frame)`` would
    not recognize one), hence only where ``fastrag ingest`` is the process's own command."""
    if "pandas" in sys.modules:
        return
    hide = _NoPandas()
    sys.meta_path.insert(0, hide)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(hide)


class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("hidden from pyarrow's detection", name=name)
        return None


def _build_default_index(doc: Document, built: list[str]) -> None:
    """Build and store the index `fastrag search` uses by default, so reads never build (or
    write) one."""
    if doc.store is None or not doc.store.writable:
        return
    group = pick_group(doc, None, quiet=True)
    if group != "root" and group not in built:
        return
    if not len(doc.group(group)):
        return
    Retriever(doc, group, "bm25", topk=1).prepare(load=False)


def _embed_default_group(doc: Document, built: list[str]) -> None:
    """Embed and store the vectors of the group ``fastrag search`` uses by default, for each
    embedder of the Document (``--embed``, or the one the store records), so that search and
    serve never embed a whole group themselves."""
    if not doc.embed or doc.store is None or not doc.store.writable:
        return
    group = pick_group(doc, None, quiet=True)
    if (group != "root" and group not in built) or not len(doc.group(group)):
        return
    for key in doc.embed:
        doc.embeddings(group, key)


def _reader_options(args: argparse.Namespace) -> dict:
    """The Document's folder-walk and record options from the ingest flags."""
    out: dict[str, Any] = {"recursive": not args.no_recursive}
    if args.metadata_field:
        out["metadata_fields"] = args.metadata_field
    if args.required_ext:
        out["required_exts"] = args.required_ext
    if args.exclude:
        out["exclude"] = args.exclude
    return out


def add_ingest_arguments(ing: argparse.ArgumentParser) -> None:
    """The arguments of ``fastrag ingest`` (its handler, ``cmd_ingest``, as ``func``)."""
    ing.add_argument("path", nargs="+", help="files or directories (read recursively)")
    ing.add_argument("--store", required=True, help="store directory (created if missing)")
    ing.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        type=parse_group,
        help="node group to build: lines, paragraphs, sentence:SIZE[:OVERLAP], "
        "tokens:SIZE[:OVERLAP]; append @PARENT for a parent other than root "
        "(default: chunk=sentence:256:32 for a new store)",
    )
    ing.add_argument(
        "--builtin",
        action="append",
        default=[],
        choices=list(Document.BUILTIN_GROUPS),
        help="also build a built-in group",
    )
    how = ing.add_mutually_exclusive_group()
    how.add_argument(
        "--add",
        action="store_true",
        help="add these files to an existing store (keeping its sources)",
    )
    how.add_argument(
        "--replace",
        action="store_true",
        help="make these files the store's only sources",
    )
    how.add_argument(
        "--sync",
        action="store_true",
        help="also remove the store's sources that are gone from disk or not "
        "under these paths (by default they are kept and reported)",
    )
    ing.add_argument(
        "--on-error",
        choices=["raise", "skip"],
        default="raise",
        help="skip: report a file that cannot be read and go on",
    )
    ing.add_argument(
        "--text-field",
        default="text",
        help="JSON/JSONL/CSV field holding the text (default: text)",
    )
    ing.add_argument(
        "--metadata-field",
        action="append",
        default=[],
        help="repeatable: keep only these record fields as metadata",
    )
    ing.add_argument(
        "--required-ext",
        action="append",
        default=[],
        help="repeatable: read only files with these extensions (.md)",
    )
    ing.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="repeatable: skip files matching this glob",
    )
    ing.add_argument(
        "--embed",
        choices=EMBEDDER_NAMES,
        default=None,
        help="also embed the default group and store the vectors, recording the embedder, so "
        "search and serve answer cosine and hybrid at once (static: a table distilled from "
        "MiniLM, thousands of texts per second; static-e5-small: from e5-small; e5-small, "
        "minilm: the models, ~1-10 texts/s)",
    )
    ing.add_argument("--no-recursive", action="store_true", help="top-level files only")
    ing.add_argument("-v", "--verbose", action="store_true", help="list the files skipped")
    ing.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    ing.set_defaults(func=cmd_ingest)
