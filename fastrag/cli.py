"""The ``fastrag`` command line: ingest, info, eval, demo."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _parse_group(spec: str) -> tuple[str, str, dict]:
    """``NAME=SPEC``: SPEC is ``lines``, ``paragraphs``, ``sentence:SIZE[:OVERLAP]`` or
    ``tokens:SIZE[:OVERLAP]``, optionally followed by ``@PARENT``."""
    if "=" not in spec:
        raise argparse.ArgumentTypeError(f"--group {spec!r}: expected NAME=SPEC, e.g. block=lines")
    name, rest = spec.split("=", 1)
    parent = "root"
    if "@" in rest:
        rest, parent = rest.rsplit("@", 1)
    kind, *args = rest.split(":")
    if kind not in ("lines", "paragraphs", "sentence", "tokens"):
        raise argparse.ArgumentTypeError(
            f"--group {spec!r}: unknown SPEC {kind!r}; use lines, paragraphs, "
            "sentence:SIZE[:OVERLAP] or tokens:SIZE[:OVERLAP]"
        )
    try:
        nums = [int(a) for a in args]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--group {spec!r}: sizes must be integers") from None
    return name, parent, {"kind": kind, "args": nums}


def _split_lines(text: str) -> list[str]:
    return text.split("\n")


def _split_paragraphs(text: str) -> list[str]:
    return text.split("\n\n")


def _register(doc, name: str, parent: str, spec: dict) -> None:
    from fastrag.transforms.sentence import SentenceSplitter, TokenTextSplitter

    kind, args = spec["kind"], spec["args"]
    if kind == "lines":
        doc.create_node_group(name, transform=_split_lines, parent=parent)
    elif kind == "paragraphs":
        doc.create_node_group(name, transform=_split_paragraphs, parent=parent)
    else:
        cls = SentenceSplitter if kind == "sentence" else TokenTextSplitter
        size = args[0] if args else 256
        overlap = args[1] if len(args) > 1 else size // 10
        doc.create_node_group(name, transform=cls, parent=parent, chunk_size=size,
                              chunk_overlap=overlap)


def cmd_ingest(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from fastrag.documents.document import Document

    groups = args.group
    t0 = time.perf_counter()
    doc = Document(args.path, store=args.store, on_error=args.on_error)
    for name, parent, spec in groups:
        _register(doc, name, parent, spec)
    names = [g[0] for g in groups] + list(args.builtin)
    with tqdm(total=len(names) + 1, desc="ingest", unit="group", disable=args.quiet) as bar:
        bar.update(1)  # root, read above
        for name in names:
            bar.set_postfix_str(name)
            doc.group(name)
            bar.update(1)
    print(f"ingested {len(doc.group('root'))} documents into {args.store} "
          f"in {time.perf_counter() - t0:.2f} s")
    return _print_info(Path(args.store))


def _print_info(path: Path, verify: bool = False) -> int:
    from fastrag.documents.store import MANIFEST, Store
    from fastrag.errors import StoreError

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
    print(f"store {path}  format v{m['format_version']}  sources {n_sources:,}  "
          f"generation {m['generation']}  total {store.nbytes():,} bytes")
    print(f"{'group':<20} {'parent':<14} {'nodes':>10} {'segments':>9} {'bytes':>14}")
    for name, g in m["groups"].items():
        stale = "  (stale: updated on next use)" if g["root_gen"] < m["root_gen"] else ""
        size = sum(s["size"] for s in g["segments"])
        print(f"{name:<20} {g.get('parent') or '-'!s:<14} {g['nodes']:>10,} "
              f"{len(g['segments']):>9} {size:>14,}{stale}")
    for v in m["vectors"].values():
        print(f"vectors {v['group']!r} key {v['key']!r}: dim {v['dim']}, "
              f"{sum(s['rows'] for s in v['segments']):,} nodes")
    if m["indexes"]:
        print(f"{len(m['indexes'])} indexes: " + ", ".join(sorted(m["indexes"])))
    if verify:
        problems = store.verify()
        for p in problems:
            print(f"damaged: {p}", file=sys.stderr)
        print(f"verify: {len(store.referenced()) - 1} files checked, {len(problems)} damaged")
        return 1 if problems else 0
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    return _print_info(Path(args.path), verify=args.verify)


def _run_eval(squad, args) -> int:
    import tempfile

    from fastrag.eval.squad_run import evaluate_squad, format_table

    topks = [int(k) for k in str(args.topk).split(",")]
    with tempfile.TemporaryDirectory(prefix="fastrag-eval-") as tmp:
        workdir = Path(args.workdir) if args.workdir else Path(tmp)
        res = evaluate_squad(squad, workdir, similarities=args.similarity, topks=topks,
                             per_file=args.kb_per_file, group=args.group)
    print(f"{res['n_queries']:,} questions over {res['n_nodes']:,} paragraphs "
          f"(one batch per similarity)\n")
    print(format_table(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, ensure_ascii=False))
        print(f"\nwrote {args.json}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from fastrag.eval.loaders import _read_json

    return _run_eval(_read_json(Path(args.squad)), args)


def cmd_demo(args: argparse.Namespace) -> int:
    from fastrag.datasets import load_cmrc2018_dev

    print("fastrag demo: CMRC 2018 dev (CC BY-SA 4.0, bundled) as the LazyLLM tutorial's "
          "knowledge base; all questions retrieved as one batch per analyzer")
    return _run_eval(load_cmrc2018_dev(), args)


def _eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kb-per-file", type=int, default=10, help="paragraphs per .txt file")
    p.add_argument("--group", default="block")
    p.add_argument("--similarity", action="append", default=None,
                   help="repeatable; default: bm25_chinese and bm25_cjk side by side")
    p.add_argument("--topk", default="1,3,5", help="comma-separated cut-offs")
    p.add_argument("--workdir", help="keep the knowledge base and store here")
    p.add_argument("--json", help="also write the results as JSON to this path")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fastrag", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    ing = sub.add_parser("ingest", help="read files into a store and build node groups")
    ing.add_argument("path", help="file or directory (read recursively)")
    ing.add_argument("--store", required=True, help="store directory (created if missing)")
    ing.add_argument("--group", action="append", default=[], metavar="NAME=SPEC", type=_parse_group,
                     help="node group to build: lines, paragraphs, sentence:SIZE[:OVERLAP], "
                          "tokens:SIZE[:OVERLAP]; append @PARENT for a parent other than root")
    ing.add_argument("--builtin", action="append", default=[],
                     choices=["CoarseChunk", "MediumChunk", "FineChunk"],
                     help="also build a built-in group")
    ing.add_argument("--on-error", choices=["raise", "skip"], default="raise")
    ing.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    ing.set_defaults(func=cmd_ingest)

    info = sub.add_parser("info", help="print a store's groups, node counts and bytes "
                          "(--verify: checksums)")
    info.add_argument("path")
    info.add_argument("--verify", action="store_true",
                      help="check every file's size and checksum (exit 1 if any is damaged)")
    info.set_defaults(func=cmd_info)

    ev = sub.add_parser("eval", help="retrieval recall / context relevance / MRR on SQuAD data")
    ev.add_argument("--squad", required=True, help="SQuAD-format JSON file (e.g. CMRC 2018)")
    _eval_args(ev)
    ev.set_defaults(func=cmd_eval)

    demo = sub.add_parser("demo", help="batch retrieval over the bundled CMRC knowledge base")
    _eval_args(demo)
    demo.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "similarity", "unset") is None:
        args.similarity = ["bm25_chinese", "bm25_cjk"]
    from fastrag.errors import FastragError

    try:
        return args.func(args)
    except FastragError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
