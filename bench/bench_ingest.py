"""Ingest benchmark: files -> root -> FineChunk (128/12) and CoarseChunk (1024/100).

Side by side in one run, on the same seeded corpus (``bench/gen_ingest_corpus.py``, ~100 MB of
.txt files, half CMRC Chinese, half generated English):

* ``fastrag``          read_file on each file + ``SentenceSplitter.batch_span_arrays``, chunk
                       strings materialized;
* ``fastrag.Document`` ``Document(dir).group("FineChunk" | "CoarseChunk")`` (root Arrow table,
                       ids, offsets; the whole public path), when it builds;
* ``llama-index-core`` plain file reads -> ``Document(text=...)`` ->
                       ``SentenceSplitter(chunk_size, chunk_overlap).get_nodes_from_documents``.

Each (library, config) runs in its own subprocess: a warm-up on two files (numba compile,
nltk load), then ``--repeats`` timed runs over all files (median reported), then peak RSS
(``ru_maxrss``) and a chunk-quality check: tokens of every chunk counted with tiktoken
cl100k_base on the chunk text (max, mean, count, chunks over the limit).

Usage: ``python bench/bench_ingest.py`` (100 MB), ``--smoke`` (2 MB, one repeat, < 20 s on an
idle machine), ``--mb 20 --repeats 3``. Writes ``bench/results/ingest.json`` and ``.md``
(``ingest_smoke.*`` for ``--smoke``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import current_rss_mb, machine_info, markdown_table, write_results
from gen_ingest_corpus import generate

CONFIGS = {"FineChunk": (128, 12), "CoarseChunk": (1024, 100)}
LIBS = ("fastrag", "fastrag.Document", "llama-index-core")


# -- child: one library, one config ----------------------------------------------------------
def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.txt"))


def _run_fastrag(files: list[Path], size: int, overlap: int) -> list[str]:
    from fastrag.documents.readers import read_file
    from fastrag.transforms import SentenceSplitter

    texts = [text for f in files for text, _ in read_file(f)]
    arrays = SentenceSplitter(size, overlap).batch_span_arrays(texts)
    return [
        t[s:e]
        for t, (st, en) in zip(texts, arrays, strict=False)
        for s, e in zip(st.tolist(), en.tolist(), strict=False)
    ]


def _run_document(files: list[Path], size: int, overlap: int, group: str) -> list[str]:
    from fastrag.documents.document import Document

    doc = Document([str(f) for f in files])
    return doc.group(group).table.column("text").to_pylist()


def _run_llama(files: list[Path], size: int, overlap: int) -> list[str]:
    from llama_index.core import Document as LDocument
    from llama_index.core.node_parser import SentenceSplitter as LSplitter

    docs = [LDocument(text=f.read_text(encoding="utf-8")) for f in files]
    nodes = LSplitter(chunk_size=size, chunk_overlap=overlap).get_nodes_from_documents(docs)
    return [n.get_content() for n in nodes]


def child(lib: str, folder: Path, group: str, repeats: int) -> dict:
    size, overlap = CONFIGS[group]
    files = _files(folder)
    n_bytes = sum(f.stat().st_size for f in files)
    if lib == "fastrag":

        def run(fs):
            return _run_fastrag(fs, size, overlap)
    elif lib == "fastrag.Document":

        def run(fs):
            return _run_document(fs, size, overlap, group)
    else:

        def run(fs):
            return _run_llama(fs, size, overlap)

    run(files[:2])  # warm-up: imports, numba compile / cache load, nltk data
    rss_before = current_rss_mb()
    times, chunks = [], []
    for _ in range(repeats):
        chunks = []  # free the previous run's chunks before timing the next
        t0 = time.perf_counter()
        chunks = run(files)
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    from fastrag.analysis.tokens import get_encoding

    counts = [len(t) for t in get_encoding().encode_ordinary_batch(chunks)]
    sec = statistics.median(times)
    return {
        "lib": lib,
        "group": group,
        "chunk_size": size,
        "chunk_overlap": overlap,
        "files": len(files),
        "mb": n_bytes / 1e6,
        "times_s": times,
        "median_s": sec,
        "mb_per_s": n_bytes / 1e6 / sec,
        "rss_before_mb": rss_before,
        "peak_rss_mb": peak,
        "chunks": len(chunks),
        "max_tokens": max(counts, default=0),
        "mean_tokens": sum(counts) / max(1, len(counts)),
        "over_limit": sum(c > size for c in counts),
        "chars_in_chunks": sum(len(c) for c in chunks),
    }


# -- parent ----------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="2 MB corpus, one repeat")
    ap.add_argument("--mb", type=float, default=100.0, help="corpus size in MB (default 100)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per library (median)")
    ap.add_argument(
        "--peer-repeats",
        type=int,
        default=None,
        help="timed runs for llama-index-core (default: --repeats)",
    )
    ap.add_argument(
        "--libs", default=",".join(LIBS), help="comma-separated subset of " + ", ".join(LIBS)
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--group", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        print(json.dumps(child(args.child, Path(args.dir), args.group, args.repeats)))
        return

    if args.smoke:
        args.mb, args.repeats, args.peer_repeats = 2.0, 1, 1
    if args.mb <= 0 or args.repeats < 1:
        ap.error("--mb must be > 0 and --repeats >= 1")
    libs = [x.strip() for x in args.libs.split(",") if x.strip()]
    for lib in libs:
        if lib not in LIBS:
            ap.error(f"unknown library {lib!r}; choose from {', '.join(LIBS)}")
    peer_repeats = args.peer_repeats or args.repeats
    folder = generate(args.mb, args.seed)
    info = machine_info(["llama-index-core", "tiktoken", "pyarrow"])
    info["fastrag_threads"] = min(8, os.cpu_count() or 1)
    results = []
    for group in CONFIGS:
        for lib in libs:
            reps = peer_repeats if lib == "llama-index-core" else args.repeats
            cmd = [
                sys.executable,
                __file__,
                "--child",
                lib,
                "--dir",
                str(folder),
                "--group",
                group,
                "--repeats",
                str(reps),
            ]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                err = proc.stderr.strip().splitlines()[-1:] or ["?"]
                print(f"{group:12s} {lib:18s} FAILED: {err[0]}", flush=True)
                results.append({"lib": lib, "group": group, "error": err[0]})
                continue
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            res["wall_s"] = time.perf_counter() - t0
            results.append(res)
            print(
                f"{group:12s} {lib:18s} {res['mb_per_s']:8.2f} MB/s  "
                f"peak {res['peak_rss_mb']:7.0f} MB  chunks {res['chunks']:8d}  "
                f"max tok {res['max_tokens']}",
                flush=True,
            )

    rows = []
    for group in CONFIGS:
        peer = next(
            (
                r
                for r in results
                if r["group"] == group and r["lib"] == "llama-index-core" and "error" not in r
            ),
            None,
        )
        for r in results:
            if r["group"] != group:
                continue
            if "error" in r:
                rows.append(
                    [
                        group,
                        r["lib"],
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        "error: " + r["error"],
                    ]
                )
                continue
            ratio = r["mb_per_s"] / peer["mb_per_s"] if peer else None
            r["speedup_vs_llama"] = ratio
            rows.append(
                [
                    group,
                    r["lib"],
                    r["mb_per_s"],
                    r["median_s"],
                    f"{ratio:.1f}x" if ratio else "",
                    r["peak_rss_mb"],
                    r["chunks"],
                    r["max_tokens"],
                    round(r["mean_tokens"], 1),
                    r["over_limit"],
                    "",
                ]
            )
    mb = results[0].get("mb", args.mb) if results else args.mb
    md = [
        f"# Ingest: files -> root -> chunks ({mb:.1f} MB, seed {args.seed})",
        "",
        (
            f"Median of {args.repeats} runs (llama-index-core: {peer_repeats}); each library in "
            "its own process; peak RSS is the process's ru_maxrss. Chunk tokens counted with "
            "tiktoken cl100k_base on each chunk's text."
        ),
        "",
        markdown_table(
            [
                "group",
                "library",
                "MB/s",
                "seconds",
                "vs llama",
                "peak RSS MB",
                "chunks",
                "max tokens",
                "mean tokens",
                "over limit",
                "note",
            ],
            rows,
        ),
        "",
        (
            f"Machine: {info['cpu']}, {info['usable_cores']} cores, load at start "
            f"{info['loadavg_at_start']}, numba {info.get('numba')}, numpy {info['numpy']}, "
            f"llama-index-core {info['llama-index-core']}, commit {info['commit']}."
        ),
        "",
        (
            f"Reproduce: `python bench/gen_ingest_corpus.py --mb {args.mb:g} && python "
            f"bench/bench_ingest.py --mb {args.mb:g} --repeats {args.repeats}`"
        ),
    ]
    name = "ingest_smoke" if args.smoke else "ingest"
    payload = {
        "machine": info,
        "corpus": str(folder),
        "mb": mb,
        "seed": args.seed,
        "repeats": args.repeats,
        "peer_repeats": peer_repeats,
        "results": results,
    }
    jp, mp = write_results(name, payload, "\n".join(md))
    print("\n".join(md))
    print(f"wrote {jp} and {mp}")


if __name__ == "__main__":
    main()
