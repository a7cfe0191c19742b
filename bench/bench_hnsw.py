"""HNSW: fastrag ``HNSWIndex`` vs raw hnswlib at the same M / ef_construction / ef / seed.

Data: seeded *structured* vectors (dimension j has variance 1/j, a spectrum like real
embeddings; i.i.d. Gaussian vectors give HNSW recall@10 of 0.07-0.2 at dim 384 and prove
nothing), 1,000 queries from the same distribution. Ground truth: fastrag's exact FlatIndex.

Rows (one process, same arrays, medians of interleaved repeats):

* build: wall time of adding all vectors (both with ``max_elements=n`` up front);
* ef sweep: recall@10 and batch queries/s of both at each ``ef``, 1 and 2 threads; the goal is
  equal recall and fastrag q/s >= 0.9x raw hnswlib;
* single query: median latency of one-query calls (the wrapper's fixed cost shows here);
* mask crossover: one query and a ``--mask-queries`` batch with a mask allowing a fraction of
  the rows, answered by exact search over the allowed rows vs hnswlib's filter callback, with the
  filter's recall: the data behind ``EXACT_MAX_FRACTION`` / ``EXACT_MAX_ROWS``;
* persistence: save / load time and file size.

Usage: ``python bench/bench_hnsw.py`` (full: 100,000 x 384), ``--smoke`` (tiny, CI).
Writes ``bench/results/hnsw.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, markdown_table, median, write_results

K = 10


def structured(n: int, dim: int, seed: int) -> np.ndarray:
    """Gaussian rows scaled so dimension j (1-based) has variance 1/j (seeded, chunked)."""
    out = np.empty((n, dim), np.float32)
    scale = (1.0 / np.sqrt(np.arange(1, dim + 1))).astype(np.float32)
    for c, s0 in enumerate(range(0, n, 100_000)):
        rng = np.random.default_rng([seed, c])
        out[s0 : s0 + 100_000] = (
            rng.standard_normal((min(100_000, n - s0), dim), dtype=np.float32) * scale
        )
    return out


def recall_at_k(rows: np.ndarray, exact: np.ndarray) -> float:
    return float(
        np.mean(
            [
                len(set(a[a >= 0]) & set(b[b >= 0])) / max(1, (b >= 0).sum())
                for a, b in zip(rows, exact, strict=False)
            ]
        )
    )


def timed(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return median(ts)


def run(args: argparse.Namespace) -> dict:
    import hnswlib

    import fastrag.indexes.hnsw as hnsw_mod
    from fastrag.indexes.flat import FlatIndex
    from fastrag.indexes.hnsw import HNSWIndex

    x = structured(args.n, args.dim, seed=0)
    q = structured(args.n_queries, args.dim, seed=1)
    exact = FlatIndex.from_vectors(x, "cosine")
    truth = exact.search(q, K)[0]

    params = {"M": args.M, "ef_construction": args.ef_construction, "seed": 100}
    t0 = time.perf_counter()
    raw = hnswlib.Index(space="cosine", dim=args.dim)
    raw.init_index(
        max_elements=args.n, M=args.M, ef_construction=args.ef_construction, random_seed=100
    )
    raw.add_items(x, np.arange(args.n), num_threads=args.build_threads)
    build_raw = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = HNSWIndex(
        args.dim,
        "cosine",
        M=args.M,
        ef_construction=args.ef_construction,
        max_elements=args.n,
        seed=100,
        num_threads=args.build_threads,
    )
    ours.add(x)
    build_ours = time.perf_counter() - t0
    print(f"build: hnswlib {build_raw:.1f} s, fastrag {build_ours:.1f} s", file=sys.stderr)

    sweep = []
    for threads in args.threads:
        for ef in args.efs:
            raw.set_ef(ef)
            ours.ef = ef
            fns = {
                "hnswlib": lambda t=threads: raw.knn_query(q, k=K, num_threads=t)[0],
                "fastrag": lambda t=threads: ours.search(q, K, num_threads=t)[0],
            }
            got = {p: f() for p, f in fns.items()}  # warm-up, and the rows for recall
            times = {p: [] for p in fns}
            for rep in range(args.repeats):
                for p in list(fns) if rep % 2 == 0 else list(fns)[::-1]:
                    t0 = time.perf_counter()
                    fns[p]()
                    times[p].append(time.perf_counter() - t0)
            row = {
                "threads": threads,
                "ef": ef,
                "recall": {p: recall_at_k(got[p].astype(np.int64), truth) for p in fns},
                "qps": {p: q.shape[0] / median(v) for p, v in times.items()},
            }
            row["qps_ratio"] = row["qps"]["fastrag"] / row["qps"]["hnswlib"]
            sweep.append(row)
            print(
                f"[{threads}t ef={ef}] recall {row['recall']}, q/s {row['qps']}",
                file=sys.stderr,
                flush=True,
            )

    raw.set_ef(args.ef)
    ours.ef = args.ef
    n_single = min(args.single, q.shape[0])
    single = {"hnswlib": [], "fastrag": []}
    for i in range(n_single):
        for p, fn in (
            ("hnswlib", lambda v: raw.knn_query(v, k=K, num_threads=1)),
            ("fastrag", lambda v: ours.search(v, K, num_threads=1)),
        ):
            t0 = time.perf_counter()
            fn(q[i])
            single[p].append(time.perf_counter() - t0)
    single_us = {p: 1e6 * median(v) for p, v in single.items()}

    crossover = []
    rng = np.random.default_rng(7)
    saved = (
        hnsw_mod.EXACT_MAX_ROWS,
        hnsw_mod.EXACT_MAX_FRACTION,
        hnsw_mod.EXACT_MAX_FRACTION_BATCH,
    )
    qb = q[: args.mask_queries]
    try:
        for frac in args.fractions:
            mask = rng.random(args.n) < frac
            mtruth = exact.search(qb, K, mask=mask)[0]
            row = {"fraction": frac, "allowed": int(mask.sum())}
            for mode, (rows_lim, frac_lim) in (("exact", (args.n, 1.0)), ("filter", (0, 0.0))):
                hnsw_mod.EXACT_MAX_ROWS = rows_lim
                hnsw_mod.EXACT_MAX_FRACTION = hnsw_mod.EXACT_MAX_FRACTION_BATCH = frac_lim
                got = ours.search(qb, K, mask=mask, exact_fallback_vectors=x, num_threads=1)[0]
                row[f"{mode}_recall"] = recall_at_k(got, mtruth)
                row[f"{mode}_batch_ms"] = 1e3 * timed(
                    lambda m=mask: ours.search(
                        qb, K, mask=m, exact_fallback_vectors=x, num_threads=1
                    ),
                    args.repeats,
                )
                row[f"{mode}_single_ms"] = 1e3 * median(
                    [
                        timed(
                            lambda v=v, m=mask: ours.search(
                                v, K, mask=m, exact_fallback_vectors=x, num_threads=1
                            ),
                            1,
                        )
                        for v in q[:10]
                    ]
                )
            crossover.append(row)
            print(f"[mask {frac}] {row}", file=sys.stderr, flush=True)
    finally:
        (
            hnsw_mod.EXACT_MAX_ROWS,
            hnsw_mod.EXACT_MAX_FRACTION,
            hnsw_mod.EXACT_MAX_FRACTION_BATCH,
        ) = saved

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hnsw.bin"
        t0 = time.perf_counter()
        ours.save(path)
        save_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        loaded = HNSWIndex.load(path, args.dim, "cosine", ef=args.ef)
        load_s = time.perf_counter() - t0
        same = all(
            np.array_equal(a, b)
            for a, b in zip(ours.search(q, K), loaded.search(q, K), strict=False)
        )
        size = os.path.getsize(path)

    return {
        "n": args.n,
        "dim": args.dim,
        "n_queries": args.n_queries,
        "k": K,
        "params": params,
        "ef_default": args.ef,
        "build_threads": args.build_threads,
        "build_s": {"hnswlib": build_raw, "fastrag": build_ours},
        "sweep": sweep,
        "single_us": single_us,
        "mask_crossover": crossover,
        "mask_queries": qb.shape[0],
        "persistence": {
            "save_s": save_s,
            "load_s": load_s,
            "file_mb": size / 2**20,
            "identical_after_load": same,
        },
    }


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for threads in sorted({r["threads"] for r in res["sweep"]}):
        rows = [r for r in res["sweep"] if r["threads"] == threads]
        for p, style in (("hnswlib", "o--"), ("fastrag", "s-")):
            axes[0].plot(
                [r["recall"][p] for r in rows],
                [r["qps"][p] for r in rows],
                style,
                label=f"{p}, {threads} thr",
            )
    axes[0].set_xlabel("recall@10 (vs exact)")
    axes[0].set_ylabel("queries/s (1,000-query batch)")
    axes[0].set_yscale("log")
    axes[0].set_title(f"HNSW ef sweep, {res['n']:,} x {res['dim']} structured vectors")
    axes[0].legend(fontsize=8)
    cr = res["mask_crossover"]
    fr = [r["fraction"] for r in cr]
    n_mask = res["mask_queries"]
    axes[1].plot(
        fr, [r["exact_batch_ms"] for r in cr], "s-", label=f"exact over allowed, {n_mask} q"
    )
    axes[1].plot(fr, [r["filter_batch_ms"] for r in cr], "o--", label=f"hnswlib filter, {n_mask} q")
    axes[1].plot(fr, [r["exact_single_ms"] for r in cr], "s-", label="exact, 1 q")
    axes[1].plot(fr, [r["filter_single_ms"] for r in cr], "o--", label="filter, 1 q")
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("fraction of rows the mask allows")
    axes[1].set_ylabel("ms")
    axes[1].set_title("Masked search: exact vs filtered graph walk")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(res: dict, info: dict, command: str) -> str:
    lines = [
        "# HNSW: fastrag HNSWIndex vs raw hnswlib (same M, ef_construction, ef, seed)",
        "",
        (
            f"Machine: {info['cpu']}, {info['usable_cores']} usable cores, load average at start "
            f"{info['loadavg_at_start']}; hnswlib {info.get('hnswlib')}, numpy {info['numpy']}, "
            f"numba {info.get('numba')}; commit {info['commit']}; {info['date']}."
        ),
        (
            f"Command: `{command}`. {res['n']:,} structured vectors (variance 1/j) x {res['dim']}, "
            f"{res['n_queries']:,} queries, top-{res['k']}, M={res['params']['M']}, "
            f"ef_construction={res['params']['ef_construction']}, cosine."
        ),
        "",
        (
            f"Build ({res['build_threads']} threads): hnswlib {res['build_s']['hnswlib']:.2f} s, "
            f"fastrag {res['build_s']['fastrag']:.2f} s. Single query (ef={res['ef_default']}, "
            f"1 thread, median): hnswlib {res['single_us']['hnswlib']:.0f} us, fastrag "
            f"{res['single_us']['fastrag']:.0f} us."
        ),
        "",
        "## ef sweep (batch of all queries)",
        "",
        markdown_table(
            [
                "threads",
                "ef",
                "recall hnswlib",
                "recall fastrag",
                "q/s hnswlib",
                "q/s fastrag",
                "fastrag/hnswlib q/s",
            ],
            [
                [
                    r["threads"],
                    r["ef"],
                    r["recall"]["hnswlib"],
                    r["recall"]["fastrag"],
                    r["qps"]["hnswlib"],
                    r["qps"]["fastrag"],
                    r["qps_ratio"],
                ]
                for r in res["sweep"]
            ],
        ),
        "",
        "## Mask crossover (1 thread): exact over the allowed rows vs hnswlib's filter",
        "",
        markdown_table(
            [
                "allowed fraction",
                "allowed rows",
                f"exact {res['mask_queries']} q ms",
                f"filter {res['mask_queries']} q ms",
                "exact 1 q ms",
                "filter 1 q ms",
                "filter recall",
            ],
            [
                [
                    r["fraction"],
                    r["allowed"],
                    r["exact_batch_ms"],
                    r["filter_batch_ms"],
                    r["exact_single_ms"],
                    r["filter_single_ms"],
                    r["filter_recall"],
                ]
                for r in res["mask_crossover"]
            ],
        ),
        "",
        (
            f"Persistence: save {res['persistence']['save_s']:.2f} s, load "
            f"{res['persistence']['load_s']:.2f} s, {res['persistence']['file_mb']:.1f} MiB, "
            f"identical results after load: {res['persistence']['identical_after_load']}."
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes for CI (< 20 s)")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--n-queries", type=int, default=1000)
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=200)
    ap.add_argument("--ef", type=int, default=64, help="ef of the single-query row")
    ap.add_argument("--efs", default="16,32,64,128,256")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--build-threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--single", type=int, default=300)
    ap.add_argument("--fractions", default="0.001,0.003,0.01,0.03,0.1,0.3")
    ap.add_argument("--mask-queries", type=int, default=50)
    ap.add_argument("--name", default=None)
    args = ap.parse_args(argv)
    if args.smoke:
        args.n, args.dim, args.n_queries, args.efs = 4000, 32, 200, "32,64"
        args.ef_construction, args.repeats, args.single = 100, 2, 50
        args.fractions = "0.01,0.3"
    args.efs = [int(v) for v in args.efs.split(",")]
    args.threads = [int(v) for v in args.threads.split(",")]
    args.fractions = [float(v) for v in args.fractions.split(",")]
    info = machine_info(["hnswlib", "numba"])
    res = run(args)
    command = "python bench/bench_hnsw.py " + " ".join(sys.argv[1:] if argv is None else argv)
    payload = {"benchmark": "hnsw", "command": command, "machine": info, **res}
    name = args.name or ("hnsw_smoke" if args.smoke else "hnsw")
    jp, mp = write_results(name, payload, markdown(res, info, command))
    png = mp.with_suffix(".png")
    plot(res, png)
    print(mp.read_text())
    print(f"wrote {jp}, {mp}, {png}")


if __name__ == "__main__":
    main()
