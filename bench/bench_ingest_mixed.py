"""Ingest of a mixed folder of real files (issue 12): store bytes per text byte before and after
store format v3, and ingest seconds against llama-index-core.

The corpus: real files nobody here wrote, taken from what is installed on this machine (the
Python standard library and site-packages): ``.py .pyi .rst .md .txt .html .json .csv .toml
.yaml .xml .ini .cfg .h .c``, LICENSE/COPYING files and dist-info METADATA files (no extension),
a few ``.png`` (binaries a reader should skip), plus a few PDFs (pypdf) and DOCX files
(python-docx) generated from sampled ``.rst`` texts. Selection is deterministic: candidates are
sorted by path and an evenly spaced sample is taken up to a cap per kind (files of 64 B to 256
KB); the copies go to a temporary folder. ``--corpus DIR`` runs on any folder instead.

1. Store bytes. The same child script ingests the folder into a store with two groups,
   ``line`` (``transform=lambda t: t.split("\\n")``, valid on both formats) and ``sentence``
   (``SentenceSplitter``, 256/32), once with the old code (a temporary ``git worktree`` of
   ``--old-commit``, format v2: every node carries its document's full metadata JSON, segments
   uncompressed) and once with this checkout (format v3: a node stores only its own metadata,
   text segments zstd-compressed). v2 reads fewer kinds of files (no sniffing of unknown
   extensions, JSON without a ``text`` field is an error), so v3 also runs on exactly the files
   v2 read ("v3, v2's files"): that row is the like-for-like comparison. Per group: UTF-8 bytes
   of its nodes' texts, bytes of its segment files (manifest ``size``), their ratio, and the
   share of those bytes that is metadata (the group table written again without its metadata
   column, with the store's codec: the difference). Goal: a line-level group <= 1.5x its text.
2. Ingest seconds. ``SimpleDirectoryReader(folder, recursive=True).load_data()`` +
   ``SentenceSplitter(chunk_size=256, chunk_overlap=32).get_nodes_from_documents`` against
   ``fr.Document(folder)`` + the same-size ``SentenceSplitter`` group, in memory and with
   ``store=`` (a fresh store folder each run). Each timed process runs the ingest twice: the
   first run pays lazy imports and numba cache loads ("cold"), the second does not ("warm").
   One untimed process per library first (reported as "first run": numba compile if the cache
   is cold), then ``--repeats`` fresh processes; medians reported. Files read by each library
   are counted per extension (llama-index-core without llama-index-readers-file reads every
   file, PDF, DOCX and PNG included, as text with undecodable bytes dropped).

    python bench/bench_ingest_mixed.py            # 1,476 files, 12.7 MB here; ~4 minutes
    python bench/bench_ingest_mixed.py --smoke    # 14 files, no old-commit worktree (CI)
    python bench/bench_ingest_mixed.py --corpus DIR

Writes ``bench/results/ingest_mixed.{json,md}`` (``--smoke``: ``ingest_mixed_smoke.*``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, markdown_table, write_results

REPO = Path(__file__).resolve().parents[1]
OLD_COMMIT = "ff46871"  # last commit with store format v2
CHUNK_SIZE, CHUNK_OVERLAP = 256, 32
LINE_GOAL = 1.5  # issue 12: a line-level group's store bytes <= 1.5x its text bytes
LIBS = ("llama-index-core", "fastrag", "fastrag store=")
NO_EXT = "(none)"

# kind -> files taken (full run); the smoke corpus takes one of each
CAPS = {
    ".py": 450,
    ".pyi": 80,
    ".rst": 250,
    ".md": 60,
    ".txt": 150,
    ".html": 20,
    ".json": 120,
    ".csv": 30,
    ".toml": 40,
    ".yaml": 10,
    ".xml": 25,
    ".ini": 10,
    ".cfg": 10,
    ".h": 40,
    ".c": 20,
    "license": 120,
    "metadata": 80,
    ".png": 10,
}
SMOKE_KINDS = (
    ".py",
    ".rst",
    ".md",
    ".txt",
    ".html",
    ".json",
    ".csv",
    ".toml",
    ".yaml",
    "license",
    "metadata",
    ".png",
)
N_GENERATED = 12  # PDFs and DOCX files each (full run; one each in smoke)
LICENSE_NAMES = ("LICENSE", "LICENCE", "COPYING", "NOTICE", "AUTHORS")


# -- corpus ------------------------------------------------------------------------------------
def _kind(p: Path) -> str | None:
    if p.suffix == "":
        if p.name.upper().startswith(LICENSE_NAMES):
            return "license"
        return "metadata" if p.name == "METADATA" else None
    ext = p.suffix.lower()
    return ext if ext in CAPS else None


def _source_roots() -> list[tuple[str, Path]]:
    paths = sysconfig.get_paths()
    roots = [("stdlib", Path(paths["stdlib"]))]
    for key in ("purelib", "platlib"):
        p = Path(paths[key])
        if all(p != r for _, r in roots):
            roots.append(("site-packages" if key == "purelib" else key, p))
    return roots


def _candidates(max_bytes: int) -> dict[str, list[tuple[str, Path]]]:
    """Every installed file of each kind, as (label/relative path, path), sorted."""
    roots = _source_roots()
    others = [r for _, r in roots]
    out: dict[str, list[tuple[str, Path]]] = {k: [] for k in CAPS}
    for label, root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            dirnames[:] = sorted(
                d
                for d in dirnames
                if not d.startswith(".") and d != "__pycache__" and here / d not in others
            )
            for name in sorted(filenames):
                p = here / name
                kind = _kind(p)
                if kind is None or name.startswith(".") or p.is_symlink():
                    continue
                size = p.stat().st_size
                if 64 <= size <= max_bytes:
                    out[kind].append((f"{label}/{p.relative_to(root).as_posix()}", p))
    return {k: sorted(v) for k, v in out.items()}


def _spread(items: list, n: int) -> list:
    """``n`` evenly spaced items of a sorted list (all of them when there are fewer)."""
    if len(items) <= n:
        return list(items)
    return [items[int((i + 0.5) * len(items) / n)] for i in range(n)]


def _flat_name(i: int, rel: str, keep_suffix: bool) -> str:
    """A short file name from a relative path: no folders, no dots but the suffix's."""
    p = Path(rel)
    suffix = p.suffix if keep_suffix else ""
    stem = rel[: len(rel) - len(suffix)] if suffix else rel
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in stem.split("/", 1)[-1])
    return f"{i:04d}-{stem[-70:]}{suffix}"


def _make_pdf(text: str, path: Path, lines_per_page: int = 50, width: int = 90) -> None:
    """A text PDF (Courier, Latin-1) written with pypdf's low-level objects."""
    import textwrap

    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    lines: list[str] = []
    for para in text.splitlines():
        lines += textwrap.wrap(para, width) or [""]
    lines = [ln.encode("latin-1", "replace").decode("latin-1") for ln in lines]
    w = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Courier"),
        }
    )
    for i in range(0, max(1, len(lines)), lines_per_page):
        page = w.add_blank_page(612, 792)
        ops = ["BT", "/F1 9 Tf", "11 TL", "40 760 Td"]
        ops += [f"({esc(ln)}) Tj T*" for ln in lines[i : i + lines_per_page]] + ["ET"]
        stream = DecodedStreamObject()
        stream.set_data("\n".join(ops).encode("latin-1"))
        page[NameObject("/Contents")] = w._add_object(stream)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
    with open(path, "wb") as f:
        w.write(f)


def _make_docx(text: str, path: Path) -> None:
    import docx

    d = docx.Document()
    for para in text.split("\n\n"):
        if para.strip():
            d.add_paragraph(para.strip())
    d.save(str(path))


def build_corpus(dest: Path, smoke: bool) -> dict[str, Any]:
    """Copy the deterministic sample into ``dest``; returns what was taken and what was not."""
    max_bytes = 32_000 if smoke else 256_000
    cands = _candidates(max_bytes)
    notes = []
    for kind, cap in CAPS.items():
        if smoke and kind not in SMOKE_KINDS:
            continue
        folder = dest / kind.lstrip(".")
        folder.mkdir(parents=True, exist_ok=True)
        for i, (rel, p) in enumerate(_spread(cands[kind], 1 if smoke else cap)):
            shutil.copyfile(p, folder / _flat_name(i, rel, kind.startswith(".")))
    # PDFs and DOCX files made from .rst texts (4-40 KB) that real projects wrote
    texts = [(rel, p) for rel, p in cands[".rst"] if 4_000 <= p.stat().st_size <= 40_000]
    picked = _spread(texts, 2 * (1 if smoke else N_GENERATED))
    for ext, maker, module in ((".pdf", _make_pdf, "pypdf"), (".docx", _make_docx, "docx")):
        try:
            __import__(module)
        except ImportError:
            notes.append(f"{ext} files not generated: {module} is not installed")
            continue
        folder = dest / ext.lstrip(".")
        folder.mkdir(parents=True, exist_ok=True)
        for i, (rel, p) in enumerate(picked[ext == ".docx" :: 2]):
            text = p.read_text(encoding="utf-8", errors="replace")
            maker(text, folder / (_flat_name(i, rel, False) + ext))
    info = describe_corpus(dest)
    info["sources"] = {label: str(root) for label, root in _source_roots()}
    info["notes"] = notes
    info["generated"] = "PDF/DOCX from sampled .rst files; everything else copied unchanged"
    return info


def describe_corpus(folder: Path) -> dict[str, Any]:
    """Files and bytes per extension, total, and a fingerprint of (name, size) pairs."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    per: dict[str, dict[str, int]] = {}
    digest = hashlib.sha256()
    for p in files:
        ext = p.suffix.lower() or NO_EXT
        row = per.setdefault(ext, {"files": 0, "bytes": 0})
        row["files"] += 1
        row["bytes"] += p.stat().st_size
        if p.suffix.lower() not in (".pdf", ".docx"):  # generated files carry timestamps
            digest.update(f"{p.relative_to(folder).as_posix()}\0{p.stat().st_size}\n".encode())
    return {
        "folder": str(folder),
        "files": len(files),
        "bytes": sum(r["bytes"] for r in per.values()),
        "per_ext": dict(sorted(per.items())),
        "fingerprint": digest.hexdigest()[:16],
    }


# -- child processes ---------------------------------------------------------------------------
def _check_root(expect_root: str) -> None:
    import fastrag

    got = Path(fastrag.__file__).resolve()
    if Path(expect_root).resolve() not in got.parents:
        raise SystemExit(f"import fastrag resolved to {got}, expected under {expect_root}")


def _ext_counts(paths) -> dict[str, int]:
    return dict(sorted(Counter(Path(p).suffix.lower() or NO_EXT for p in paths).items()))


def child_store(folder: str, store: str, files: str | None, expect_root: str) -> dict:
    """Ingest into a store with the ``line`` and ``sentence`` groups; measure its files."""
    import warnings

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.ipc as ipc

    _check_root(expect_root)
    import fastrag as fr
    from fastrag.documents import transaction as store_module

    codec = getattr(store_module, "COMPRESSION", None)
    src: Any = [ln for ln in Path(files).read_text().splitlines() if ln] if files else folder
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        doc = fr.Document(src, store=store, on_error="skip")
        doc.create_node_group("line", transform=lambda t: t.split("\n"))
        doc.create_node_group(
            "sentence",
            transform=fr.SentenceSplitter,
            chunk_size=CHUNK_SIZE,
            chunk_overlap=CHUNK_OVERLAP,
        )
        tables = {g: doc.group(g).table for g in ("root", "line", "sentence")}
    seconds = time.perf_counter() - t0
    manifest = json.loads((Path(store) / "manifest.json").read_text())

    def ipc_bytes(table: pa.Table) -> int:
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, table.schema, options=ipc.IpcWriteOptions(compression=codec)) as w:
            w.write_table(table, max_chunksize=65536)
        return sink.getvalue().size

    def utf8(col) -> int:
        return int(pc.sum(pc.binary_length(col)).as_py() or 0)

    empty = ipc_bytes(pa.table({"x": pa.array([], pa.int8())}))
    groups = {}
    for name, table in tables.items():
        seg = sum(int(s["size"]) for s in manifest["groups"][name]["segments"])
        text = utf8(table.column("text"))
        full, bare = ipc_bytes(table), ipc_bytes(table.drop_columns(["metadata"]))
        share = (full - bare) / full if full else 0.0
        groups[name] = {
            "nodes": table.num_rows,
            "text_bytes": text,
            "store_bytes": seg,
            "segments": len(manifest["groups"][name]["segments"]),
            "ratio": seg / text if text else None,
            "metadata_json_bytes": utf8(table.column("metadata")),
            "metadata_share": share,
            "metadata_bytes_est": round(seg * share),
            # each column written alone with the store's codec: where bytes go
            "column_bytes": {c: ipc_bytes(table.select([c])) - empty for c in table.column_names},
        }
    all_files = [p for p in Path(store).rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in all_files)
    sources = sum(int(s["size"]) for s in manifest["sources"])
    meta = tables["root"].column("metadata").to_pylist()
    dicts = [json.loads(m) for m in meta]  # abs_path: where the file is (since issue 42)
    paths = list(dict.fromkeys(d.get("abs_path") or d.get("file_path") for d in dicts))
    paths = [p for p in paths if p]
    return {
        "fastrag": str(Path(fr.__file__).resolve().parent),
        "format_version": manifest.get("format_version"),
        "codec": codec,
        "seconds": seconds,
        "groups": groups,
        "store_total_bytes": total,
        "store_files": len(all_files),
        "sources_bytes": sources,
        "manifest_bytes": (Path(store) / "manifest.json").stat().st_size,
        "metadata_bytes_est": sum(g["metadata_bytes_est"] for g in groups.values()),
        "files_read": len(paths),
        "files_read_per_ext": _ext_counts(paths),
        "warnings": len(caught),
        "read_paths": paths,
    }


def _ingest_llama(folder: str) -> dict:
    from llama_index.core import SimpleDirectoryReader
    from llama_index.core.node_parser import SentenceSplitter

    docs = SimpleDirectoryReader(folder, recursive=True).load_data()
    nodes = SentenceSplitter(
        chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP
    ).get_nodes_from_documents(docs)
    paths = list(dict.fromkeys(d.metadata.get("file_path") for d in docs))
    return {
        "documents": len(docs),
        "nodes": len(nodes),
        "node_chars": sum(len(n.get_content()) for n in nodes),
        "files_read": len(paths),
        "files_read_per_ext": _ext_counts(paths),
    }


def _ingest_fastrag(folder: str, store: str | None) -> dict:
    import fastrag as fr

    doc = fr.Document(folder, store=store, on_error="skip")
    doc.create_node_group(
        "sentence",
        transform=fr.SentenceSplitter,
        chunk_size=CHUNK_SIZE,
        chunk_overlap=CHUNK_OVERLAP,
    )
    table = doc.group("sentence").table
    counts = doc.read_report.counts()
    read = {e: c["read"] for e, c in counts.items() if c["read"]}
    return {
        "documents": doc.group("root").table.num_rows,
        "nodes": table.num_rows,
        "node_chars": sum(len(t) for t in table.column("text").to_pylist()),
        "files_read": sum(read.values()),
        "files_read_per_ext": read,
        "files_skipped": sum(c["skipped"] for c in counts.values()),
        "files_failed": sum(c["failed"] for c in counts.values()),
        "not_read": doc.read_report.reasons(),
    }


def child_time(lib: str, folder: str, store_base: str, runs: int, expect_root: str) -> dict:
    """Import, then ``runs`` ingests in this process (fresh store folder each)."""
    import logging
    import resource

    class Count(logging.Handler):
        messages: Counter = Counter()

        def emit(self, record):
            Count.messages[f"{record.name}: {record.getMessage()[:120]}"] += 1

    logging.getLogger().addHandler(Count(logging.WARNING))
    t0 = time.perf_counter()
    if lib == "llama-index-core":
        import llama_index.core  # noqa: F401
        import llama_index.core.node_parser  # noqa: F401
    else:
        _check_root(expect_root)
        import fastrag  # noqa: F401
    out: dict[str, Any] = {"lib": lib, "import_s": time.perf_counter() - t0, "runs_s": []}
    for r in range(runs):
        store = str(Path(store_base) / f"run{r}") if lib == "fastrag store=" else None
        t = time.perf_counter()
        res = _ingest_llama(folder) if lib == "llama-index-core" else _ingest_fastrag(folder, store)
        out["runs_s"].append(time.perf_counter() - t)
        out.update(res)
    out["log_warnings"] = sum(Count.messages.values())
    out["log_messages"] = dict(Count.messages.most_common(5))
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return out


# -- parent ------------------------------------------------------------------------------------
def _run_child(args: list[str], root: Path, cwd: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root)}
    cmd = [sys.executable, str(Path(__file__).resolve()), *args, "--expect-root", str(root)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"child {args[:2]} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def wait_for_load(limit: float, max_wait: float) -> float:
    """Wait (up to ``max_wait`` s) until the 1-minute load average is below ``limit``."""
    t0 = time.monotonic()
    while os.getloadavg()[0] > limit and time.monotonic() - t0 < max_wait:
        time.sleep(10)
    return time.monotonic() - t0


def store_rows(stores: dict[str, dict]) -> tuple[list, list]:
    rows, totals = [], []
    for label, res in stores.items():
        g = res["groups"]
        for name in ("root", "line", "sentence"):
            x = g[name]
            goal = ""
            if name == "line":
                goal = "PASS" if x["ratio"] is not None and x["ratio"] <= LINE_GOAL else "FAIL"
            rows.append(
                [
                    label,
                    name,
                    x["nodes"],
                    x["text_bytes"] / 1e6,
                    x["store_bytes"] / 1e6,
                    f"{x['ratio']:.2f}x" if x["ratio"] else "",
                    f"{x['metadata_share']:.0%}",
                    goal,
                ]
            )
        root_text = g["root"]["text_bytes"]
        totals.append(
            [
                label,
                f"v{res['format_version']}",
                res["codec"] or "none",
                res["files_read"],
                root_text / 1e6,
                res["store_total_bytes"] / 1e6,
                f"{res['store_total_bytes'] / root_text:.2f}x" if root_text else "",
                f"{res['metadata_bytes_est'] / res['store_total_bytes']:.0%}",
                res["seconds"],
            ]
        )
    return rows, totals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--smoke", action="store_true", help="14-file corpus, one repeat, no old-commit worktree"
    )
    ap.add_argument("--corpus", default=None, help="run on this folder instead")
    ap.add_argument("--repeats", type=int, default=3, help="timed processes per library")
    ap.add_argument("--old-commit", default=OLD_COMMIT, help="the BEFORE code (format v2)")
    ap.add_argument("--no-before", action="store_true", help="skip the old-commit store run")
    ap.add_argument(
        "--max-load",
        type=float,
        default=1.5,
        help="wait (up to 5 min) for the load average to fall below this",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--child", choices=("store", "time"), help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--files", help=argparse.SUPPRESS)
    ap.add_argument("--lib", help=argparse.SUPPRESS)
    ap.add_argument("--runs", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--expect-root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "store":
        print(json.dumps(child_store(args.dir, args.store, args.files, args.expect_root)))
        return
    if args.child == "time":
        print(json.dumps(child_time(args.lib, args.dir, args.store, args.runs, args.expect_root)))
        return
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    if args.smoke:
        args.repeats = 1
    before = not (args.smoke or args.no_before)
    command = "python bench/bench_ingest_mixed.py " + " ".join(sys.argv[1:])

    tmp = Path(tempfile.mkdtemp(prefix="fastrag-ingest-"))
    worktree = tmp / "old"
    try:
        if args.corpus:
            folder = Path(args.corpus).resolve()
            corpus = describe_corpus(folder)
        else:
            folder = tmp / "corpus"
            corpus = build_corpus(folder, args.smoke)
        print(
            f"corpus {folder}: {corpus['files']} files, {corpus['bytes'] / 1e6:.1f} MB", flush=True
        )
        waited = 0.0 if args.smoke else wait_for_load(args.max_load, 300)
        info = machine_info(["llama-index-core", "pyarrow", "pypdf", "python-docx"])
        info["waited_for_load_s"] = round(waited, 1)

        # 1. store bytes: v2 (old worktree), v3 on v2's files, v3 on the whole folder
        stores: dict[str, dict] = {}
        if before:
            subprocess.run(
                [
                    "git",
                    "-C",
                    str(REPO),
                    "worktree",
                    "add",
                    "--detach",
                    str(worktree),
                    args.old_commit,
                ],
                check=True,
                capture_output=True,
            )
            stores["before (v2)"] = _run_child(
                ["--child", "store", "--dir", str(folder), "--store", str(tmp / "s_v2")],
                worktree,
                worktree,
            )
            listing = tmp / "v2_files.txt"
            listing.write_text("\n".join(stores["before (v2)"]["read_paths"]) + "\n")
            stores["after (v3), v2's files"] = _run_child(
                [
                    "--child",
                    "store",
                    "--dir",
                    str(folder),
                    "--store",
                    str(tmp / "s_v3same"),
                    "--files",
                    str(listing),
                ],
                REPO,
                REPO,
            )
        stores["after (v3), all files"] = _run_child(
            ["--child", "store", "--dir", str(folder), "--store", str(tmp / "s_v3")], REPO, REPO
        )
        for label, res in stores.items():
            line = res["groups"]["line"]
            print(
                f"{label:24s} line {line['ratio']:.2f}x  sentence "
                f"{res['groups']['sentence']['ratio']:.2f}x  total "
                f"{res['store_total_bytes'] / 1e6:.1f} MB",
                flush=True,
            )

        # 2. ingest seconds: one untimed first process, then --repeats fresh processes
        timing: dict[str, dict] = {}
        for lib in LIBS:
            procs = []
            for i in range(args.repeats + (0 if args.smoke else 1)):
                base = tmp / f"t_{LIBS.index(lib)}_{i}"
                procs.append(
                    _run_child(
                        [
                            "--child",
                            "time",
                            "--lib",
                            lib,
                            "--dir",
                            str(folder),
                            "--store",
                            str(base),
                        ],
                        REPO,
                        REPO,
                    )
                )
                shutil.rmtree(base, ignore_errors=True)
            first = None if args.smoke else procs.pop(0)
            res = dict(procs[-1])
            res.update(
                {
                    "first_process_s": first["runs_s"][0] if first else None,
                    "cold_s": [p["runs_s"][0] for p in procs],
                    "warm_s": [p["runs_s"][-1] for p in procs],
                    "import_s": [p["import_s"] for p in procs],
                }
            )
            res["cold_median_s"] = statistics.median(res["cold_s"])
            res["warm_median_s"] = statistics.median(res["warm_s"])
            timing[lib] = res
            print(
                f"{lib:18s} cold {res['cold_median_s']:7.2f} s  warm "
                f"{res['warm_median_s']:7.2f} s  files read {res['files_read']}",
                flush=True,
            )
        info["loadavg_at_end"] = list(os.getloadavg())
    finally:
        if worktree.exists():
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)],
                check=False,
                capture_output=True,
            )
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    md = report(corpus, stores, timing, info, args, command)
    name = "ingest_mixed_smoke" if args.smoke else "ingest_mixed"
    for res in stores.values():
        res.pop("read_paths", None)
    payload = {
        "machine": info,
        "command": command,
        "corpus": corpus,
        "old_commit": args.old_commit if before else None,
        "line_goal": LINE_GOAL,
        "chunk_size": CHUNK_SIZE,
        "chunk_overlap": CHUNK_OVERLAP,
        "repeats": args.repeats,
        "stores": stores,
        "ingest": timing,
    }
    jp, mp = write_results(name, payload, md)
    print(md)
    print(f"wrote {jp} and {mp}")


def report(corpus, stores, timing, info, args, command) -> str:
    exts = sorted(
        set(corpus["per_ext"]) | {e for t in timing.values() for e in t["files_read_per_ext"]}
    )
    v2 = stores.get("before (v2)")
    head = ["ext", "files", "MB", "fastrag reads", "llama-index reads"]
    head += ["v2 reads"] if v2 else []
    crow = []
    for e in exts:
        c = corpus["per_ext"].get(e, {"files": 0, "bytes": 0})
        row = [
            e,
            c["files"],
            c["bytes"] / 1e6,
            timing["fastrag"]["files_read_per_ext"].get(e, 0),
            timing["llama-index-core"]["files_read_per_ext"].get(e, 0),
        ]
        crow.append(row + ([v2["files_read_per_ext"].get(e, 0)] if v2 else []))
    total = [
        "all",
        corpus["files"],
        corpus["bytes"] / 1e6,
        timing["fastrag"]["files_read"],
        timing["llama-index-core"]["files_read"],
    ]
    crow.append(total + ([v2["files_read"]] if v2 else []))
    rows, totals = store_rows(stores)
    peer = timing["llama-index-core"]
    trows = []
    for lib, r in timing.items():
        trows.append(
            [
                lib,
                r["first_process_s"],
                r["cold_median_s"],
                r["warm_median_s"],
                f"{peer['cold_median_s'] / r['cold_median_s']:.1f}x",
                f"{peer['warm_median_s'] / r['warm_median_s']:.1f}x",
                r["files_read"],
                r["documents"],
                r["nodes"],
                r["peak_rss_mb"],
            ]
        )
    line_goal = [
        f"{label}: {'PASS' if s['groups']['line']['ratio'] <= LINE_GOAL else 'FAIL'} "
        f"({s['groups']['line']['ratio']:.2f}x)"
        for label, s in stores.items()
    ]
    fr_read = timing["fastrag"]
    not_read = (
        "; ".join(
            f"{ext}: {why} ({n})"
            for ext, reasons in fr_read["not_read"].items()
            for why, n in reasons.items()
        )
        or "none"
    )
    top_log = "; ".join(f"{n}x {m!r}" for m, n in peer["log_messages"].items()) or "none"
    per_node = []
    for label, st in stores.items():
        g = st["groups"]["line"]
        cols = ", ".join(f"{c} {b / g['nodes']:.1f}" for c, b in g["column_bytes"].items())
        per_node.append(
            f"{label}: {cols} (text: {g['text_bytes'] / g['nodes']:.1f} B of UTF-8 per node)"
        )
    md = [
        f"# Ingest of a mixed folder of real files ({corpus['files']:,} files, "
        f"{corpus['bytes'] / 1e6:.1f} MB)",
        "",
        f"Corpus: {corpus.get('generated', 'the folder given with --corpus')}; "
        f"fingerprint {corpus['fingerprint']}. " + " ".join(corpus.get("notes", [])),
        "",
        markdown_table(head, crow),
        "",
        "## Store bytes per text byte",
        "",
        f"Goal (issue 12): a line-level group's store bytes <= {LINE_GOAL}x its text bytes. "
        + "; ".join(line_goal)
        + ". ratio = group segment bytes / UTF-8 bytes of the group's "
        "node texts; metadata = share of the group's bytes that its metadata column takes "
        "(table rewritten without it, same codec). BEFORE is commit "
        f'{args.old_commit} (format v2) run from a temporary worktree; "v2\'s files" = the '
        "files v2 read, ingested by v3 (like for like).",
        "",
        markdown_table(
            ["store", "group", "nodes", "text MB", "store MB", "ratio", "metadata", "goal"], rows
        ),
        "",
        markdown_table(
            [
                "store",
                "format",
                "codec",
                "files",
                "root text MB",
                "store total MB",
                "total / root text",
                "metadata",
                "ingest s",
            ],
            totals,
        ),
        "",
        "Bytes per line node by column (each column written alone with the store's "
        "codec): " + "; ".join(per_node) + ".",
        "",
        f"## Ingest seconds (SentenceSplitter {CHUNK_SIZE}/{CHUNK_OVERLAP})",
        "",
        f"Median of {args.repeats} fresh processes; cold = first ingest in the process "
        "(lazy imports, numba cache load), warm = second ingest in the same process; "
        "first run = one untimed process before them (numba compile when its cache is "
        "cold). Imports not included.",
        "",
        markdown_table(
            [
                "library",
                "first run s",
                "cold s",
                "warm s",
                "cold vs llama",
                "warm vs llama",
                "files read",
                "documents",
                "nodes",
                "peak RSS MB",
            ],
            trows,
        ),
        "",
        f"fastrag left out {fr_read['files_skipped']} files (skipped) and "
        f"{fr_read['files_failed']} (failed): {not_read}. llama-index-core "
        f"{info.get('llama-index-core')} (without llama-index-readers-file) read every file "
        "as text with undecodable bytes dropped: PDF and DOCX as their raw bytes, PNGs as "
        f"binary noise; it logged {peer['log_warnings']} warnings ({top_log}).",
        "",
        f"Machine: {info['cpu']}, {info['usable_cores']} cores, load average at start "
        f"{[round(x, 2) for x in info['loadavg_at_start']]} (waited "
        f"{info['waited_for_load_s']} s for < {args.max_load}), at end "
        f"{[round(x, 2) for x in info['loadavg_at_end']]}; Python {info['python']}, "
        f"pyarrow {info['pyarrow']}, numba {info.get('numba')}; commit {info['commit']}; "
        f"{info['date']}.",
        "",
        f"Reproduce: `{command.strip()}`",
    ]
    return "\n".join(md)


if __name__ == "__main__":
    main()
