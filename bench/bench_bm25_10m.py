"""BM25 at 10M documents on one machine (issue 40): a packed index built from a streamed
corpus with bounded memory (``fastrag.indexes.bm25.stream.build_packed``), opened memory-mapped,
and a batch of 10,000 queries; build time, index bytes, peak RSS and q/s per size.

The corpus is bench/gen_bm25_corpus.py's Zipf law (1M-term vocabulary, s = 1.1, 50-250 tokens
per document), generated chunk by chunk (seed per chunk) inside the build process; queries
follow the same law (2-10 tokens). Each phase runs in a process of its own so that its peak
RSS is its own:

* build: generate and spill each chunk, merge into the packed files (peak RSS includes the
  chunk being generated);
* query: open the index (``from_arrays`` on memory-mapped files), one cold pass over the
  queries (the search kernels decode the blocks they reach; 1 thread), then interleaved warm
  passes at each thread count (medians), and the RSS the decoded postings added;
* growth: open the index again and search the first 10, 100, 1,000 and 10,000 queries in
  turn: postings decoded and RSS after each, against the postings of the terms they hold
  (what decoding whole terms would take).

    python bench/bench_bm25_10m.py --sizes 1000000,10000000 --name bm25_10m
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_bm25_corpus as gen
import numpy as np
from _harness import WORK_DIR, current_rss_mb, machine_info, markdown_table, median, write_results


def _law(seed: int):
    cdf = np.cumsum(np.arange(1, gen.ZIPF_VOCAB + 1, dtype=np.float64) ** -gen.ZIPF_S)
    cdf /= cdf[-1]
    rank_to_id = np.random.default_rng([seed, 7]).permutation(gen.ZIPF_VOCAB).astype(np.int32)
    return cdf, rank_to_id


def chunks(n_docs: int, chunk: int, seed: int):
    """The corpus, ``chunk`` documents at a time: ``(values, offsets)``."""
    cdf, rank_to_id = _law(seed)
    for c, lo in enumerate(range(0, n_docs, chunk)):
        n = min(chunk, n_docs - lo)
        rng = np.random.default_rng([seed, 100, c])
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(rng.integers(gen.ZIPF_DOC_LEN[0], gen.ZIPF_DOC_LEN[1] + 1, n), out=offsets[1:])
        values = np.empty(int(offsets[-1]), np.int32)
        gen._zipf_ids(rng, cdf, rank_to_id, values)
        yield values, offsets


def queries(n_q: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    cdf, rank_to_id = _law(seed)
    rq = np.random.default_rng([seed, 1])
    qo = np.zeros(n_q + 1, np.int64)
    np.cumsum(rq.integers(gen.ZIPF_QUERY_LEN[0], gen.ZIPF_QUERY_LEN[1] + 1, n_q), out=qo[1:])
    qv = np.empty(int(qo[-1]), np.int32)
    gen._zipf_ids(rq, cdf, rank_to_id, qv)
    return qv, qo


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase_build(args) -> dict:
    from fastrag.indexes.bm25.stream import build_packed

    folder = Path(args.dir)
    shutil.rmtree(folder, ignore_errors=True)
    t0, c0 = time.perf_counter(), time.process_time()
    meta = build_packed(
        chunks(args.n_docs, args.chunk, args.seed), gen.ZIPF_VOCAB, folder, k1=1.2, b=0.75
    )
    sizes = {f.name: f.stat().st_size for f in folder.iterdir()}
    return {
        "build_s": time.perf_counter() - t0,
        "build_cpu_s": time.process_time() - c0,
        "peak_rss_mb": _peak_mb(),
        "files": sizes,
        "nnz": meta["nnz"],
        "n_tokens": meta["n_tokens"],
    }


def phase_query(args) -> dict:
    from fastrag.indexes.bm25.stream import open_packed

    qv, qo = queries(args.queries, args.seed)
    from fastrag.indexes.bm25.index import BM25Index  # noqa: F401 - imports and kernels first
    from fastrag.warmup import _bm25_search

    _bm25_search(lambda _m: None)
    rss0 = current_rss_mb()
    t0 = time.perf_counter()
    index = open_packed(args.dir)
    open_s = time.perf_counter() - t0
    rss_open = current_rss_mb()
    t0 = time.perf_counter()
    first = index.search_csr(qv, qo, 10, num_threads=1)
    cold_s = time.perf_counter() - t0
    rss_cold = current_rss_mb()
    threads = [int(t) for t in args.threads.split(",")]
    times: dict[int, list[float]] = {t: [] for t in threads}
    for _ in range(args.repeats):
        for t in threads:
            t0 = time.perf_counter()
            got = index.search_csr(qv, qo, 10, num_threads=t)
            times[t].append(time.perf_counter() - t0)
            assert np.array_equal(got[0], first[0])
    n_q = qo.shape[0] - 1
    return {
        "n_queries": n_q,
        "open_s": open_s,
        "open_rss_mb": rss_open - rss0,
        "cold_s": cold_s,
        "cold_rss_mb": rss_cold - rss_open,
        "qps": {str(t): n_q / median(v) for t, v in times.items()},
        "times": {str(t): v for t, v in times.items()},
        "peak_rss_mb": _peak_mb(),
        "rss_after_mb": current_rss_mb(),
        "decoded_postings": _decoded(index),
    }


def phase_growth(args) -> dict:
    from fastrag.indexes.bm25.stream import open_packed

    qv, qo = queries(args.queries, args.seed)
    from fastrag.warmup import _bm25_search

    _bm25_search(lambda _m: None)
    rss0 = current_rss_mb()
    index = open_packed(args.dir)
    df = np.diff(np.asarray(index.indptr, np.int64))
    steps, done = [], 0
    for n in (10, 100, 1000, 10_000):
        n = min(n, qo.shape[0] - 1)
        if n <= done:
            continue
        index.search_csr(qv[qo[done] : qo[n]], qo[done : n + 1] - qo[done], 10, num_threads=1)
        done = n
        steps.append(
            {
                "queries": n,
                "decoded_postings": index.decoded_postings,
                "term_postings": int(df[np.unique(qv[: qo[n]])].sum()),
                "rss_mb": current_rss_mb() - rss0,
            }
        )
    return {"steps": steps}


def phase_paired(args) -> dict:
    """Warm search of the packed index (blocks decoded as reached) against the same postings
    fully decoded into a plain in-memory index: what decoding on demand costs once warm."""
    from fastrag.indexes.bm25.index import BM25Index
    from fastrag.indexes.bm25.stream import open_packed
    from fastrag.warmup import _bm25_search

    qv, qo = queries(args.queries, args.seed)
    _bm25_search(lambda _m: None)
    packed = open_packed(args.dir)
    packed.search_csr(qv, qo, 10, num_threads=1)  # the cold pass: its blocks decoded
    full = open_packed(args.dir)
    arrays = {k: np.array(v) for k, v in full.to_arrays().items()}  # every posting decoded
    plain = BM25Index.from_arrays(arrays, full.meta())
    plain.check_postings()
    del full
    want = plain.search_csr(qv, qo, 10, num_threads=1)
    got = packed.search_csr(qv, qo, 10, num_threads=1)
    assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))
    times: dict[str, list[float]] = {"packed": [], "plain": []}
    for _ in range(max(args.repeats, 5)):
        for name, index in (("packed", packed), ("plain", plain)):
            t0 = time.perf_counter()
            index.search_csr(qv, qo, 10, num_threads=1)
            times[name].append(time.perf_counter() - t0)
    ratios = [a / b for a, b in zip(times["packed"], times["plain"], strict=True)]
    return {"times": times, "paired_ratio": median(ratios), "load": list(os.getloadavg())}


def _decoded(index) -> int:
    """Postings decoded so far (the blocks the queries reached)."""
    return index.decoded_postings


def run_phase(phase: str, extra: list[str], script: str = __file__) -> dict:
    """The JSON that ``script --phase phase`` prints last, run in a process of its own."""
    out = subprocess.run(
        [sys.executable, script, "--phase", phase, *extra],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(payload: dict) -> str:
    m = payload["machine"]
    lines = [
        "# BM25 at 10M documents: streamed packed build, memory-mapped open, 10,000 queries",
        "",
        f"Machine: {m['cpu']}, {m['usable_cores']} usable cores, {m['mem_total_gb']} GB; "
        f"numpy {m['numpy']}, numba {m['numba']}; fastrag commit {m['commit']}, "
        f"{m['date']}; load average at start {payload['load_start']}, at end "
        f"{payload['load_end']}. Zipf corpus (1M-term vocabulary, s = 1.1, 50-250 tokens "
        "per document, generated chunk by chunk inside the build process), k1 = 1.2, b = 0.75, "
        "top-10. Each phase in a process of its own.",
        "",
        f"Reproduce: `{payload['command']}`",
        "",
    ]
    rows = []
    for r in payload["runs"]:
        b, q = r["build"], r["query"]
        nnz = b["nnz"]
        total = sum(v for k, v in b["files"].items() if k.endswith(".npy"))
        rows.append(
            [
                r["n_docs"],
                nnz,
                b["build_s"],
                b["build_cpu_s"],
                b["peak_rss_mb"],
                total / 2**20,
                total / nnz,
                b["files"]["words.npy"] / nnz,
                q["open_s"] * 1e3,
                q["cold_s"],
                q["cold_rss_mb"],
                *[
                    q["qps"][str(t)] if str(t) in q["qps"] else q["qps"][t]
                    for t in payload["threads"]
                ],
                q["peak_rss_mb"],
            ]
        )
    lines.append(
        markdown_table(
            [
                "docs",
                "postings",
                "build s",
                "build CPU s",
                "build peak RSS MB",
                "index MB",
                "B/posting",
                "of which packed words",
                "open ms",
                "cold pass s (1 thread, decoding)",
                "RSS added by the cold pass MB",
                *[f"q/s warm, {t} thread{'s' if t > 1 else ''}" for t in payload["threads"]],
                "query peak RSS MB",
            ],
            rows,
        )
    )
    lines += [
        "",
        "Build: the chunks' postings are spilled to disk (8 bytes each) and merged into the "
        "block codec window by window (2^25 postings), so its memory is one chunk's postings "
        "plus one window, whatever the corpus size. Query: the search kernels decode into "
        "memory (8 bytes per posting) the 128-posting blocks they reach, and a term held by "
        "an earlier call is decoded whole first; the cold pass pays that once, the warm passes "
        "search the decoded postings. Warm q/s: medians of "
        "interleaved repeats. The RSS the cold pass adds is mostly the decoded blocks "
        "(decoded_postings in the JSON) at 8 bytes per posting, in whole 4 KiB pages, plus "
        "the rank directories and heads of common terms and the packed pages read.",
    ]
    growth = [
        [r["n_docs"], g["queries"], g["decoded_postings"], g["term_postings"], g["rss_mb"]]
        for r in payload["runs"]
        for g in r.get("growth", {}).get("steps", [])
    ]
    if growth:
        lines += [
            "",
            "## Memory as queries arrive (a fresh open, then calls of the first 10, the next "
            "90, 900 and 9,000 queries, 1 thread; a term in an earlier call is decoded whole)",
            "",
            markdown_table(
                [
                    "docs",
                    "queries",
                    "postings decoded (blocks reached)",
                    "postings of the terms they hold",
                    "RSS added MB",
                ],
                growth,
            ),
        ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase", choices=["build", "query", "growth", "paired"])
    ap.add_argument("--dir")
    ap.add_argument("--n-docs", type=int)
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--chunk", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="bm25_10m")
    ap.add_argument("--from-json", help="re-render the report of a results JSON and exit")
    args = ap.parse_args()
    if args.from_json:
        payload = json.loads(Path(args.from_json).read_text())
        write_results(Path(args.from_json).stem, payload, report(payload))
        return
    if args.phase:
        phases = {
            "build": phase_build,
            "query": phase_query,
            "growth": phase_growth,
            "paired": phase_paired,
        }
        out = phases[args.phase](args)
        print(json.dumps(out))
        return
    payload = {
        "machine": machine_info(),
        "load_start": list(os.getloadavg()),
        "threads": [int(t) for t in args.threads.split(",")],
        "command": "python bench/bench_bm25_10m.py " + " ".join(sys.argv[1:]),
        "runs": [],
    }
    for n in (int(s) for s in args.sizes.split(",")):
        folder = WORK_DIR / f"bm25_packed_{n}"
        common = ["--dir", str(folder), "--seed", str(args.seed)]
        print(f"{time.strftime('%H:%M:%S')} build {n:,}", flush=True)
        build = run_phase("build", [*common, "--n-docs", str(n), "--chunk", str(args.chunk)])
        print(json.dumps(build), flush=True)
        query = run_phase(
            "query",
            [
                *common,
                "--queries",
                str(args.queries),
                "--threads",
                args.threads,
                "--repeats",
                str(args.repeats),
            ],
        )
        print(json.dumps(query), flush=True)
        growth = run_phase("growth", [*common, "--queries", str(args.queries)])
        print(json.dumps(growth), flush=True)
        payload["runs"].append({"n_docs": n, "build": build, "query": query, "growth": growth})
        shutil.rmtree(folder, ignore_errors=True)
    payload["load_end"] = list(os.getloadavg())
    jp, mp = write_results(args.name, payload, report(payload))
    print(f"wrote {jp} and {mp}")


if __name__ == "__main__":
    main()
