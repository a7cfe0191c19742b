"""``fastrag ingest --embed static`` against a BM25-only ingest of the same folder (issue 44,
goal 3: the whole path at BM25's pace, under 2x its time).

The corpus: 2,000 real Markdown files in seven languages, the documentation sets of
bench/data (Vue's guide and API in six languages, FastAPI's tutorial in six, ant-design's in
two, then tldr-pages in ten languages, sorted, until 2,000), copied into one temporary folder.
The Vue and tldr corpora are rebuilt from git snapshots first if missing
(``bench/bench_quality.py --tldr-git DIR --vue-mirror DIR``); ``--corpus DIR`` runs on any
folder instead.

Each run is one ``fastrag ingest CORPUS --store NEW -q [--embed NAME]`` process (default group
``chunk``, sentence:256:32, its BM25 index; with ``--embed``, the group's vectors too), with
the kernels compiled and the static tables built beforehand. The variants run interleaved,
``--repeats`` rounds; per variant the median wall and CPU seconds and peak RSS (the child's
own), and per round the ratio to the BM25-only run of that round.

    python bench/bench_ingest_embed.py                       # static (e5-small's table)
    python bench/bench_ingest_embed.py --embed static,static-minilm --repeats 5

Writes ``bench/results/ingest_embed.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import (  # noqa: E402
    BENCH_DIR,
    WORK_DIR,
    child_peak,
    machine_info,
    markdown_table,
    write_results,
)

SOURCES = [
    WORK_DIR / "vue_corpus",
    BENCH_DIR / "data" / "fastapi_docs" / "corpus",
    BENCH_DIR / "data" / "mixed_docs" / "corpus",
    WORK_DIR / "tldr_corpus",
]


def make_corpus(dest: Path, n_files: int) -> int:
    """Copy the first ``n_files`` Markdown files of SOURCES into ``dest``; their bytes."""
    total = count = 0
    for src in SOURCES:
        if not src.is_dir():
            raise SystemExit(
                f"{src} is missing: build it with bench/bench_quality.py --tldr-git / "
                "--vue-mirror, or pass --corpus DIR"
            )
        for path in sorted(src.rglob("*.md")):
            if count == n_files:
                return total
            out = dest / src.name / path.relative_to(src)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)
            total += out.stat().st_size
            count += 1
    if count < n_files:
        raise SystemExit(f"only {count} Markdown files in the sources, {n_files} asked")
    return total


def run(corpus: Path, store: Path, embed: str | None) -> dict:
    shutil.rmtree(store, ignore_errors=True)
    args = ["ingest", str(corpus), "--store", str(store), "-q"]
    if embed:
        args += ["--embed", embed]
    res = child_peak("fastrag.cli", args)
    if res["returncode"] != 0:
        raise SystemExit(f"fastrag {' '.join(args)} failed:\n{res['stderr']}")
    manifest = json.loads((store / "manifest.json").read_text())
    res["chunks"] = manifest["groups"]["chunk"]["nodes"]
    res["vectors"] = sum(
        sum(s["rows"] for s in v["segments"]) for v in manifest["vectors"].values()
    )
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", help="ingest this folder instead of the 2,000 docs files")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--embed", default="static", help="comma list of --embed names")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--name", default="ingest_embed")
    a = ap.parse_args()
    embeds = [e.strip() for e in a.embed.split(",") if e.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="fastrag-ingest-embed-"))
    try:
        corpus = Path(a.corpus) if a.corpus else tmp / "corpus"
        text_bytes = None
        if not a.corpus:
            text_bytes = make_corpus(corpus, a.files)
        subprocess.run([sys.executable, "-m", "fastrag.cli", "warmup"], check=True)
        for e in embeds:  # build (or check) the tables outside the timed runs
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    f"from fastrag.embeddings.named import embedder_by_name;"
                    f"embedder_by_name({e!r}).embed(['warm up'])",
                ],
                check=True,
            )
        variants = [None, *embeds]
        runs: dict[str, list[dict]] = {str(v): [] for v in variants}
        load0 = os.getloadavg()
        for r in range(a.repeats):
            order = variants if r % 2 == 0 else variants[::-1]
            for v in order:
                runs[str(v)].append(run(corpus, tmp / "store", v))
                print(
                    str(v),
                    {k: round(x, 2) for k, x in runs[str(v)][-1].items() if isinstance(x, float)},
                    flush=True,
                )
        load1 = os.getloadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = runs["None"]
    rows, out = [], {}
    for v in variants:
        rs = runs[str(v)]
        wall = statistics.median(x["wall_s"] for x in rs)
        cpu = statistics.median(x["cpu_s"] for x in rs)
        pairs = list(zip(rs, base, strict=True))
        ratio_w = statistics.median(x["wall_s"] / b["wall_s"] for x, b in pairs)
        ratio_c = statistics.median(x["cpu_s"] / b["cpu_s"] for x, b in pairs)
        peak = statistics.median(x["peak_rss_mb"] for x in rs)
        name = "BM25 only" if v is None else f"--embed {v}"
        out[name] = {
            "wall_s": wall,
            "cpu_s": cpu,
            "wall_ratio": ratio_w,
            "cpu_ratio": ratio_c,
            "peak_rss_mb": peak,
            "chunks": rs[0]["chunks"],
            "vectors": rs[0]["vectors"],
            "runs": rs,
        }
        rows.append(
            [
                name,
                f"{rs[0]['chunks']:,}",
                f"{rs[0]['vectors']:,}",
                f"{wall:.1f}",
                f"{cpu:.1f}",
                f"{ratio_w:.2f}x",
                f"{ratio_c:.2f}x",
                f"{peak:,.0f}",
            ]
        )
    info = machine_info()
    corpus_txt = (
        f"{a.files:,} Markdown files ({text_bytes / 1e6:.1f} MB: Vue, FastAPI, ant-design and "
        "tldr-pages docs, seven languages)"
        if text_bytes is not None
        else f"folder {a.corpus}"
    )
    md = "\n\n".join(
        [
            "# `fastrag ingest --embed` vs BM25 only",
            f"`python bench/bench_ingest_embed.py --embed {a.embed} --repeats {a.repeats}`; "
            f"{corpus_txt}; CPU {info.get('cpu')}, {os.cpu_count()} CPUs, load {load0[0]:.2f} at "
            f"start and {load1[0]:.2f} at end. One process per run (kernels compiled and tables "
            "built first), variants interleaved; medians of the rounds; ratios are per round "
            "against that round's BM25-only run.",
            markdown_table(
                [
                    "run",
                    "chunks",
                    "vectors",
                    "wall s",
                    "CPU s",
                    "wall ratio",
                    "CPU ratio",
                    "peak RSS MiB",
                ],
                rows,
            ),
        ]
    )
    write_results(a.name, {"machine": info, "corpus": corpus_txt, "results": out}, md)
    print(md)


if __name__ == "__main__":
    main()
