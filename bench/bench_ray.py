"""Ray benchmark: batch retrieval on a local Ray cluster vs one process, and sharded BM25.

Setup: a store of tiled CMRC 2018 documents (``gen_bm25_corpus.document_layout``: runs of 5-15
shuffled CMRC sentences, seed 0; 200,000 documents by default), one node per document, BM25
with jieba tokens (``bm25_chinese``), top-10; the queries are the 3,219 CMRC dev questions
repeated to 100,000. The store and its index are built once (timed, cached under
``bench/.work/``).

Sections:
1. Batch retrieval of every query: ``Retriever.batch_arrow`` in this process (numba threads
   on every core) vs ``fastrag.ray.retrieve`` on ``ray.init(num_cpus=N)`` with N actors of one
   thread each. Reports q/s, the overhead per query, and the job's fixed cost (a one-query
   job: actor start and store open). The Ray rows are checked equal to the single-process ones.
2. Sharded BM25 (``fastrag.ray.build_index``, 1/2/4 segments): the search time of each
   segment and the cost of merging the per-segment top-k, for the scaling model of
   ``docs/scaling.md`` (a segment per machine: a query costs the slowest segment plus the merge).

    python bench/bench_ray.py                  # 200k docs, 100k queries (~10 min on 2 cores)
    python bench/bench_ray.py --smoke          # 5k docs, 2k queries
    python bench/bench_ray.py --build 100000 300000   # only section 3 (below), these sizes

3. ``--build N ...``: build throughput of ``fastrag.ray.build_index`` from Parquet files the
   Ray workers read themselves (16 files of N/16 documents with an ``id`` column, one segment
   per file), with 1 and 2 workers (``ray.init(num_cpus=W)``); the driver never holds the
   corpus. Writes bench/results/ray_build.{json,md}.

Writes bench/results/ray.{json,md} (``--smoke``: ray_smoke.*).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import WORK_DIR, machine_info, markdown_table, median, write_results
from gen_bm25_corpus import document_layout, load_cmrc, split_sentences

import fastrag as fr


def corpus_texts(n_docs: int, seed: int = 0) -> list[str]:
    contexts, _ = load_cmrc()
    sents = [s for c in contexts for s in split_sentences(c)]
    sents = list(dict.fromkeys(sents))
    stream, offs = document_layout(n_docs, len(sents), seed)
    return ["".join(sents[j] for j in stream[offs[i] : offs[i + 1]]) for i in range(n_docs)]


def build_store(n_docs: int) -> tuple[Path, dict]:
    path = WORK_DIR / f"ray_store_{n_docs}"
    info = {}
    if not (path / "manifest.json").is_file():
        shutil.rmtree(path, ignore_errors=True)
        t0 = time.perf_counter()
        texts = corpus_texts(n_docs)
        doc = fr.Document.from_texts(texts, store=path)
        info["ingest_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        fr.Retriever(doc, "root", "bm25_chinese", topk=10)("预热")
        info["index_s"] = time.perf_counter() - t0
    return path, info


def build_scaling(sizes: list[int], workers: list[int], repeats: int) -> None:
    """Section 3: docs/s of build_index over Parquet files read by the workers."""
    import resource

    import pyarrow.parquet as pq
    import ray

    rows = []
    for n in sizes:
        folder = WORK_DIR / f"ray_build_parquet_{n}"
        if not (folder / "_done").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            texts = corpus_texts(n)
            for f, lo in enumerate(range(0, n, -(-n // 16))):
                part = texts[lo : lo + -(-n // 16)]
                pq.write_table(
                    pa.table({"id": [f"d{lo + i}" for i in range(len(part))], "text": part}),
                    folder / f"part-{f:02d}.parquet",
                )
            (folder / "_done").write_text("ok")
        n_bytes = sum(p.stat().st_size for p in folder.glob("*.parquet"))
        for w in workers:
            ray.init(
                num_cpus=w,
                include_dashboard=False,
                log_to_driver=False,
                runtime_env={"env_vars": {"FASTRAG_BACKGROUND_COMPILE": "0"}},
            )
            ray.data.DataContext.get_current().enable_progress_bars = False
            fr.ray.build_index(
                [str(folder / "part-00.parquet")],
                WORK_DIR / "ray_build_warm",
                similarity="bm25_chinese",
                overwrite=True,
            )  # warm: workers import fastrag, load kernels
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                sr = fr.ray.build_index(
                    str(folder / "*.parquet"),
                    WORK_DIR / "ray_build_ix",
                    num_shards=16,
                    similarity="bm25_chinese",
                    overwrite=True,
                )
                times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            sr.refresh()
            t_open = time.perf_counter() - t0
            ix_bytes = sum(
                p.stat().st_size for p in (WORK_DIR / "ray_build_ix").rglob("*") if p.is_file()
            )
            ray.shutdown()
            t = median(times)
            rows.append(
                {
                    "docs": n,
                    "workers": w,
                    "build_s": times,
                    "docs_per_s": n / t,
                    "segments": len(sr.segments),
                    "parquet_bytes": n_bytes,
                    "index_dir_bytes": ix_bytes,
                    "open_s": t_open,
                    "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                    "loadavg_after": os.getloadavg(),
                }
            )
            print(rows[-1], flush=True)
    payload = {"machine": machine_info(["ray", "numba", "pyarrow"]), "rows": rows}
    md = [
        "# fastrag.ray.build_index throughput (Parquet read by the workers, bm25_chinese)",
        "",
        f"CPU: {payload['machine'].get('cpu')}; load at start: "
        f"{payload['machine'].get('loadavg_at_start')}; medians of {repeats}.",
        "",
        markdown_table(
            [
                "docs",
                "workers",
                "seconds",
                "docs/s",
                "segments",
                "index dir MB",
                "open (global stats) s",
                "load after",
            ],
            [
                [
                    r["docs"],
                    r["workers"],
                    median(r["build_s"]),
                    r["docs_per_s"],
                    r["segments"],
                    r["index_dir_bytes"] / 1e6,
                    r["open_s"],
                    " ".join(f"{x:.1f}" for x in r["loadavg_after"]),
                ]
                for r in rows
            ],
        ),
    ]
    jp, mp = write_results("ray_build", payload, "\n".join(md))
    print("\n".join(md))
    print(f"wrote {jp} and {mp}")


def collect(ray, ds) -> pa.Table:
    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-docs", type=int, default=200_000)
    ap.add_argument("--n-queries", type=int, default=100_000)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument(
        "--build",
        type=int,
        nargs="+",
        metavar="N",
        help="only the build throughput section, for these corpus sizes",
    )
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args(argv)
    if args.build:
        build_scaling(args.build, args.workers, args.repeats)
        return
    if args.smoke:
        args.n_docs, args.n_queries, args.repeats = 5_000, 2_000, 1
    import ray

    _, questions = load_cmrc()
    queries = (questions * (args.n_queries // len(questions) + 1))[: args.n_queries]
    store, build = build_store(args.n_docs)
    doc = fr.Document(store=store, mode="r")
    ret = fr.Retriever(doc, "root", "bm25_chinese", topk=10)
    want = ret.batch_arrow(queries)  # warm (index mapped, kernels compiled)
    single = [time.perf_counter()]
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        ret.batch_arrow(queries)
        single.append(time.perf_counter() - t0)
    t_single = median(single[1:])

    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    kw = dict(similarity="bm25_chinese", topk=10, concurrency=args.cpus, num_threads=1)
    t0 = time.perf_counter()
    collect(ray, fr.ray.retrieve(store, queries[:1], **kw))
    t_fixed = time.perf_counter() - t0
    times = []
    got = None
    bs = max(1000, args.n_queries // (4 * args.cpus))
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        got = collect(ray, fr.ray.retrieve(store, queries, batch_size=bs, **kw))
        times.append(time.perf_counter() - t0)
    t_ray = median(times)
    got = got.sort_by([("query_index", "ascending"), ("rank", "ascending")])
    same = got.column("node_id").equals(want.column("node_id")) and got.column("score").equals(
        want.column("score")
    )

    # sharded BM25: per-segment search time and merge cost
    sub = queries[: min(len(queries), 20_000)]
    texts_table = doc.group("root").table.select(["id", "text", "metadata"])
    shards = []
    for n in (1, 2, 4):
        path = WORK_DIR / f"ray_shards_{args.n_docs}_{n}"
        t0 = time.perf_counter()
        sr = fr.ray.build_index(
            _as_corpus(texts_table),
            path,
            num_shards=n,
            similarity="bm25_chinese",
            executor="ray",
            overwrite=True,
            topk=10,
        )
        t_build = time.perf_counter() - t0
        assert sr.batch_arrow(sub).equals(ret.batch_arrow(sub)), "sharded != one index"
        seg_times, merge_times = _segment_times(sr, sub, args.repeats)
        shards.append(
            {
                "segments": n,
                "build_s": t_build,
                "docs_per_segment": args.n_docs // n,
                "segment_search_s": seg_times,
                "merge_s": median(merge_times),
                "queries": len(sub),
            }
        )
    ray.shutdown()

    payload = {
        "machine": machine_info(["ray", "numba", "pyarrow"]),
        "n_docs": args.n_docs,
        "n_queries": args.n_queries,
        "cpus": args.cpus,
        "build": build,
        "single_s": single[1:],
        "ray_s": times,
        "ray_fixed_s": t_fixed,
        "single_qps": args.n_queries / t_single,
        "ray_qps": args.n_queries / t_ray,
        "overhead_us_per_query": 1e6 * (t_ray - t_single) / args.n_queries,
        "ray_equals_single": bool(same),
        "batch_size": bs,
        "shards": shards,
    }
    m = payload["machine"]
    rows = [
        [
            "one process, batch_arrow (numba threads: all cores)",
            t_single,
            payload["single_qps"],
            "",
        ],
        [
            f"fastrag.ray.retrieve, {args.cpus} actors x 1 thread",
            t_ray,
            payload["ray_qps"],
            f"{payload['overhead_us_per_query']:.1f} us/query; fixed {t_fixed:.2f} s",
        ],
    ]
    md = [
        f"# Ray batch retrieval ({args.n_docs:,} docs, {args.n_queries:,} queries, top-10, "
        f"bm25_chinese)",
        "",
        f"CPU: {m.get('cpu')}, {args.cpus} CPUs for Ray; "
        f"load at start: {m.get('loadavg_at_start')}; "
        f"medians of {args.repeats}. Ray rows equal the single-process rows: {same}.",
        "",
        markdown_table(["path", "seconds", "queries/s", "overhead"], rows),
        "",
        "## Sharded BM25 (segments searched one after another in one process)",
        "",
        markdown_table(
            ["segments", "docs/segment", "build s", "slowest segment s", "merge s", "queries"],
            [
                [
                    s["segments"],
                    s["docs_per_segment"],
                    s["build_s"],
                    max(s["segment_search_s"]),
                    s["merge_s"],
                    s["queries"],
                ]
                for s in shards
            ],
        ),
    ]
    name = "ray_smoke" if args.smoke else "ray"
    jp, mp = write_results(name, payload, "\n".join(md))
    print("\n".join(md))
    print(f"wrote {jp} and {mp}")


def _as_corpus(table: pa.Table) -> pa.Table:
    import json

    metas = [json.loads(x) for x in table.column("metadata").to_pylist()]
    cols = {"id": table.column("id"), "text": table.column("text")}
    keys = sorted({k for m in metas for k in m})
    for k in keys:
        cols[k] = pa.array([m.get(k) for m in metas])
    return pa.table(cols)


def _segment_times(sr, queries, repeats):
    """Median search seconds of each segment for ``queries``, and of the merge."""
    from fastrag.analysis import encode_queries
    from fastrag.retrieval.merge import merge_hits

    segs = sr._segs.items  # the open segments (executor="local")
    qv, qo = encode_queries(queries, sr._analyzer(), sr._vocab)
    per = []
    parts = []
    for s in segs:
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = s.search_bm25(qv, qo, 10, None, None, None)
            ts.append(time.perf_counter() - t0)
        per.append(median(ts))
        parts.append(out)
    merges = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        merge_hits(parts, 10, offsets=sr._offsets[:-1])
        merges.append(time.perf_counter() - t0)
    return per, merges


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
