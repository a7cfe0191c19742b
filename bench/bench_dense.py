"""Exact dense top-10: fastrag ``FlatIndex`` vs numpy (matmul + argpartition) vs faiss
``IndexFlatIP``, batch queries/s and single-query latency against the memory-bandwidth bound.

Data (``--data``, bench/_dense_data.py): ``iso`` seeded Gaussian unit rows; ``dominant``
Gaussian rows with a common component and a few 4x dimensions; ``e5`` and ``minilm`` vectors of
real text from the shipped embedding models, tiled to the size asked for. 1,000 queries. The
float32 search costs the same on any data of one shape; a first pass does not (its candidates
depend on how close the scores are), hence the real vectors.

Each thread count runs in its own child process with ``NUMBA_NUM_THREADS``,
``OPENBLAS_NUM_THREADS`` and ``OMP_NUM_THREADS`` set before numpy loads (faiss also gets
``omp_set_num_threads``), and with ``OPENBLAS_CORETYPE`` per ``--coretype`` (below). Inside
a child all peers search the same arrays, repeats are interleaved (fastrag, numpy, faiss,
fastrag, ...), and medians are reported.

* batch: 1,000 queries, top-10. ``fastrag`` is ``FlatIndex`` with its defaults (the int8 first
  pass on CPUs with AVX2 or AVX512-VNNI where its probe and the corpus's pilot say it pays,
  bf16 on AMX-BF16 with torch; the one-time copy of the corpus is timed apart),
  ``fastrag_bf16`` is ``FlatIndex(bf16=True, int8=False)`` (only where torch is installed and
  the default pass is not bf16 already), ``fastrag_fp32`` is
  ``FlatIndex(bf16=False, int8=False)`` (float32 sgemm + numba top-k).
  numpy does one matmul + ``argpartition`` per query batch; at 1M rows it takes the queries in
  batches that keep the score matrix under ~2 GB.
* single: one query at a time (median latency over ``--single`` queries, one peer after the
  other with a pause between them, so no peer's spinning threads hold a core); bound = corpus
  bytes / read bandwidth, measured by a streaming numba sum over the same corpus array with the
  same threads. Goal: fastrag within 1.5x of the bound.
* ``sgemm``: numpy's float32 matmul GFLOP/s (1 thread) with and without
  ``OPENBLAS_CORETYPE=SkylakeX``; ``--coretype auto`` sets it for the children only where
  OpenBLAS picked an AVX2-era kernel on an AVX-512 CPU (never downgrading a newer pick).

Usage: ``python bench/bench_dense.py`` (full: 100k and 1M rows x dim 384 and 768, 1 and 2
threads), ``--smoke`` (tiny, CI). Writes ``bench/results/dense.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _dense_data import SETS, dataset
from _harness import machine_info, markdown_table, median, write_results

K = 10
NUMPY_SCORE_BUDGET = 2 * 2**30  # bytes of scores + argpartition indices per numpy batch


# ---------------------------------------------------------------------------------- peers
def numpy_topk(x, q, k):
    """The obvious numpy search: matmul, argpartition, sort the k (query batches bound RAM)."""
    import numpy as np

    qb = max(1, min(q.shape[0], NUMPY_SCORE_BUDGET // (12 * x.shape[0])))
    rows = np.empty((q.shape[0], k), np.int64)
    scores = np.empty((q.shape[0], k), np.float32)
    for q0 in range(0, q.shape[0], qb):
        s = q[q0 : q0 + qb] @ x.T
        part = np.argpartition(s, s.shape[1] - k, axis=1)[:, -k:]
        ps = np.take_along_axis(s, part, 1)
        order = np.argsort(-ps, axis=1, kind="stable")
        rows[q0 : q0 + qb] = np.take_along_axis(part, order, 1)
        scores[q0 : q0 + qb] = np.take_along_axis(ps, order, 1)
    return rows, scores


def numpy_single(x, q, k):
    import numpy as np

    s = x @ q
    part = np.argpartition(s, s.shape[0] - k)[-k:]
    return part[np.argsort(-s[part], kind="stable")]


def _bandwidth_kernel():
    import numpy as np
    from fastrag._kernels._config import FASTMATH
    from numba import njit, prange

    @njit(parallel=True, fastmath=FASTMATH, cache=False)
    def stream_sum(a):
        out = np.zeros(a.shape[0], np.float32)
        for i in prange(a.shape[0]):
            acc = np.float32(0.0)
            for j in range(a.shape[1]):
                acc += a[i, j]
            out[i] = acc
        return out

    return stream_sum


def sgemm_gflops(repeats: int = 5) -> float:
    import numpy as np
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a = rng.standard_normal((1000, 384), dtype=np.float32)
    b = rng.standard_normal((8192, 384), dtype=np.float32)
    c = np.empty((1000, 8192), np.float32)
    ts = []
    with threadpool_limits(1, "blas"):
        np.matmul(a, b.T, out=c)
        for _ in range(repeats):
            t0 = time.perf_counter()
            np.matmul(a, b.T, out=c)
            ts.append(time.perf_counter() - t0)
    return 2 * 1000 * 8192 * 384 / median(ts) / 1e9


def lib_label(filename: str) -> str:
    """'numpy' or 'faiss' for an OpenBLAS file name (faiss bundles libopenblaso 0.3.15)."""
    return (
        "faiss"
        if filename.startswith("libopenblaso")
        else ("numpy" if "scipy_openblas" in filename or "numpy" in filename else filename)
    )


def blas_architectures() -> dict[str, str]:
    from threadpoolctl import threadpool_info

    return {
        Path(i["filepath"]).name: i.get("architecture")
        for i in threadpool_info()
        if i.get("user_api") == "blas"
    }


# ---------------------------------------------------------------------------------- child
def bench_size(data: str, n: int, dim: int, cfg: dict, stream_sum) -> dict:
    """All peers on one corpus size, in this process."""
    import faiss
    import numpy as np

    from fastrag.indexes.flat import FlatIndex
    from fastrag.indexes.int8 import Int8Corpus

    xp, qp = dataset(data, n, dim, cfg["n_queries"])
    x = np.load(xp)
    q = np.load(qp)
    t_build = time.perf_counter()
    index = FlatIndex.from_vectors(x, "cosine")  # checks norms: no copy for unit rows
    t_build = time.perf_counter() - t_build
    assert np.shares_memory(index.vectors, x)
    # the int8 or bf16 copy (made once, on the first batch that uses it), timed on its own,
    # after torch's import and the kernels' first load (paid once per process)
    FlatIndex.from_vectors(x[:4096], "cosine", normalized=True)._approx_copy(q.shape[0], K)
    t_copy = time.perf_counter()
    copy = index._approx_copy(q.shape[0], K)
    t_copy = time.perf_counter() - t_copy
    kind = None if copy is None else "int8" if isinstance(copy, Int8Corpus) else "bf16"
    index_fp32 = FlatIndex.from_vectors(x, "cosine", normalized=True, bf16=False, int8=False)
    flat_ip = faiss.IndexFlatIP(dim)
    flat_ip.add(x)
    peers = {
        "fastrag": lambda: index.search(q, K)[0],
        "fastrag_fp32": lambda: index_fp32.search(q, K)[0],
        "numpy": lambda: numpy_topk(x, q, K)[0],
        "faiss": lambda: flat_ip.search(q, K)[1],
    }
    if kind != "bf16" and bf16_available():
        index_bf16 = FlatIndex.from_vectors(x, "cosine", normalized=True, bf16=True, int8=False)
        peers["fastrag_bf16"] = lambda: index_bf16.search(q, K)[0]
        index_bf16.search(q[:64], K)
    warm_q = q[:64]
    index.search(warm_q, K)
    index_fp32.search(warm_q, K)
    index.search(warm_q[0], K)
    flat_ip.search(warm_q, K)
    numpy_topk(x, warm_q, K)
    batch: dict[str, list[float]] = {p: [] for p in peers}
    found = {}
    for rep in range(cfg["repeats"]):
        order = list(peers)[rep % len(peers) :] + list(peers)[: rep % len(peers)]
        for p in order:
            t0 = time.perf_counter()
            found[p] = peers[p]()
            batch[p].append(time.perf_counter() - t0)
    single_fns = {
        "fastrag": lambda v: index.search(v, K),
        "numpy": lambda v: numpy_single(x, v, K),
        "faiss": lambda v: flat_ip.search(v[None, :], K),
    }
    # One peer at a time, then a pause: after a call, OpenBLAS's and OpenMP's worker threads
    # spin for a while, and on 2 cores a spinning peer steals the core the next peer's
    # parallel region needs (interleaved, every 2-thread single query measured 2-4x slower).
    single: dict[str, list[float]] = {p: [] for p in single_fns}
    for p, fn in single_fns.items():
        time.sleep(0.5)
        fn(q[0])
        for i in range(cfg["single"]):
            t0 = time.perf_counter()
            fn(q[i])
            single[p].append(time.perf_counter() - t0)
    stream_sum(x[:1000])
    bw_t = []
    for _ in range(7):
        t0 = time.perf_counter()
        stream_sum(x)
        bw_t.append(time.perf_counter() - t0)
    bandwidth = x.nbytes / median(bw_t)
    ref = found["faiss"]
    agree = {
        p: float(np.mean([len(set(a) & set(b)) / K for a, b in zip(found[p], ref, strict=False)]))
        for p in peers
        if p != "faiss"
    }
    row = {
        "data": data,
        "n": n,
        "dim": dim,
        "n_queries": q.shape[0],
        "corpus_bytes": x.nbytes,
        "index_build_s": t_build,
        "first_pass": kind,
        "copy_s": t_copy,
        "batch_s": {p: median(v) for p, v in batch.items()},
        "batch_qps": {p: q.shape[0] / median(v) for p, v in batch.items()},
        "batch_all_s": batch,
        "single_ms": {p: 1e3 * median(v) for p, v in single.items()},
        "read_bandwidth_gbs": bandwidth / 1e9,
        "bound_ms": 1e3 * x.nbytes / bandwidth,
        "agree_at_10_vs_faiss": agree,
    }
    row["int8_verdict"] = getattr(index._approx.get("int8"), "verdict", None)
    row["single_vs_bound"] = row["single_ms"]["fastrag"] / row["bound_ms"]
    row["fastrag_vs_faiss_batch"] = row["batch_qps"]["fastrag"] / row["batch_qps"]["faiss"]
    return row


def bf16_available() -> bool:
    """Whether torch (the bf16 pass) is importable."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def run_child(cfg: dict) -> dict:
    """One thread count: every size, every peer, interleaved repeats."""
    import faiss
    import numba

    threads = cfg["threads"]
    faiss.omp_set_num_threads(threads)
    stream_sum = _bandwidth_kernel()
    from fastrag.indexes.int8 import int8_probe
    from fastrag.indexes.quantized import bf16_probe

    out = {
        "threads": threads,
        "numba_threads": numba.get_num_threads(),
        "blas": blas_architectures(),
        "sgemm_gflops_1t": sgemm_gflops(),
        "bf16_probe": bf16_probe(),
        "int8_probe": int8_probe(),
        "sizes": [],
    }
    for data, n, dim in cfg["sizes"]:
        row = bench_size(data, n, dim, cfg, stream_sum)
        out["sizes"].append(row)
        print(
            f"[{threads}t] {data} {n}x{dim}: "
            + ", ".join(
                f"{p} {row['batch_qps'][p]:.0f} q/s"
                + (f" {row['single_ms'][p]:.2f} ms" if p in row["single_ms"] else "")
                for p in row["batch_qps"]
            )
            + f"; bound {row['bound_ms']:.2f} ms",
            file=sys.stderr,
            flush=True,
        )
    return out


# --------------------------------------------------------------------------------- parent
#: environment that hides AVX-512 from the children (``--hide-avx512``; empty otherwise)
HIDE_AVX512: dict[str, str] = {}
AVX2_ERA_KERNELS = {
    "haswell",
    "zen",
    "sandybridge",
    "nehalem",
    "prescott",
    "core2",
    "penryn",
    "atom",
    "barcelona",
    "bulldozer",
    "piledriver",
    "steamroller",
    "excavator",
}


def has_avx512() -> bool:
    """The CPU has the AVX-512 subsets OpenBLAS's SkylakeX kernels use (F, BW, DQ, VL), and
    the run does not hide them (``--hide-avx512``)."""
    if HIDE_AVX512:
        return False
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return False
    return {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags


def sgemm_probe(coretype: str | None) -> dict:
    res = subprocess.run(
        [sys.executable, __file__, "--sgemm-only"],
        env=child_env(1, coretype),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(res.stdout)


def child_env(threads: int, coretype: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HIDE_AVX512)
    for var in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        env[var] = str(threads)
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    return env


def spawn(cfg: dict, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg_path = Path(tmp) / "cfg.json"
        out_path = Path(tmp) / "out.json"
        cfg_path.write_text(json.dumps(cfg))
        subprocess.run(
            [sys.executable, __file__, "--child", str(cfg_path), str(out_path)], env=env, check=True
        )
        return json.loads(out_path.read_text())


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    peers = ["fastrag", "faiss", "numpy"]
    batch_peers = ["fastrag", "fastrag_fp32", "faiss", "numpy"]
    labels, qps, single, bound = [], [], [], []
    for run in result["runs"]:
        for r in run["sizes"]:
            size = f"{r['n'] / 1e6:g}M" if r["n"] >= 10**6 else f"{r['n'] / 1e3:g}k"
            labels.append(f"{size} x {r['dim']}\n{run['threads']} thr")
            qps.append([r["batch_qps"].get(p, np.nan) for p in batch_peers])
            single.append([r["single_ms"][p] for p in peers])
            bound.append(r["bound_ms"])
    qps, single = np.array(qps), np.array(single)
    xs = np.arange(len(labels))
    fig, axes = plt.subplots(2, 1, figsize=(max(7.0, 1.3 * len(labels)), 8.5))
    w = 0.2
    for i, p in enumerate(batch_peers):
        axes[0].bar(xs + (i - 1.5) * w, qps[:, i], w, label=p)
    for i, p in enumerate(peers):
        axes[1].bar(xs + (i - 1) * w, single[:, i], w, label=p)
    axes[1].scatter(xs, bound, marker="_", s=400, color="black", zorder=3, label="bandwidth bound")
    axes[0].set_ylabel("queries/s (batch of all queries, top-10)")
    axes[1].set_ylabel("single-query latency, ms")
    for ax in axes:
        ax.set_xticks(xs, labels, fontsize=8)
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    axes[0].set_title("Exact top-10, batch")
    axes[1].set_title("Exact top-10, one query")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def paired_ratio(batch_all_s: dict, who: str = "fastrag") -> float:
    """Median over repeats of faiss's batch time / ``who``'s in the same repeat."""
    return median([b / a for a, b in zip(batch_all_s[who], batch_all_s["faiss"], strict=False)])


def markdown(result: dict) -> str:
    info = result["machine"]
    lines = [
        "# Exact dense top-10: fastrag FlatIndex vs numpy vs faiss IndexFlatIP",
        "",
        (
            f"Machine: {info['cpu']} ({info.get('cpu_class', '?')}), {info['usable_cores']} usable "
            "cores, load average at start "
            f"{info['loadavg_at_start']}; numpy {info['numpy']}, numba {info.get('numba')}, "
            f"faiss-cpu {info.get('faiss-cpu')}; commit {info['commit']}; {info['date']}; load "
            f"average at end {result.get('loadavg_at_end', '-')}."
        ),
        (
            f"`OPENBLAS_CORETYPE={result['coretype'] or '(unset)'}` in the children ("
            f"{result.get('coretype_why', 'unset: every OpenBLAS picked an AVX-512 kernel')}); "
            f"BLAS kernel of each library: {result['runs'][0]['blas']}. Machine shared with other "
            "jobs: numbers are noisy."
        ),
        (
            f"Command: `{result['command']}`. Medians of {result['repeats']} interleaved repeats "
            f"(batch) and of {result['single']} single queries."
        ),
        "",
        f"## Batch ({result['runs'][0]['sizes'][0]['n_queries']:,} queries) and single query",
        "",
    ]
    rows = []
    unfair = []
    for run in result["runs"]:
        kernels = sorted({str(a) for a in run["blas"].values() if a})
        fair = len({k.lower() for k in kernels}) <= 1
        if not fair:
            unfair.append(f"{run['threads']} thread(s): {run['blas']}")
        for r in run["sizes"]:
            fp32 = "fastrag_fp32" in r["batch_qps"]
            bf16 = "fastrag_bf16" in r["batch_qps"]
            no = "n/a: BLAS kernels differ"
            rows.append(
                [
                    f"{r.get('data', 'iso')} {r['n']:,} x {r['dim']}",
                    run["threads"],
                    r.get("first_pass") or "none",
                    r["batch_qps"]["fastrag"],
                    r["batch_qps"]["fastrag_bf16"] if bf16 else "-",
                    r["batch_qps"]["fastrag_fp32"] if fp32 else "-",
                    r["batch_qps"]["faiss"],
                    r["batch_qps"]["numpy"],
                    r["fastrag_vs_faiss_batch"] if fair else no,
                    paired_ratio(r["batch_all_s"]) if fair else no,
                    (paired_ratio(r["batch_all_s"], "fastrag_bf16") if bf16 else "-")
                    if fair
                    else no,
                    (paired_ratio(r["batch_all_s"], "fastrag_fp32") if fp32 else "-")
                    if fair
                    else no,
                    r["single_ms"]["fastrag"],
                    r["single_ms"]["faiss"],
                    r["single_ms"]["numpy"],
                    r["bound_ms"],
                    r["single_vs_bound"],
                    r["read_bandwidth_gbs"],
                    r["agree_at_10_vs_faiss"]["fastrag"],
                ]
            )
    lines.append(
        markdown_table(
            [
                "corpus",
                "threads",
                "first pass",
                "fastrag q/s",
                "fastrag bf16 q/s",
                "fastrag fp32 q/s",
                "faiss q/s",
                "numpy q/s",
                "fastrag/faiss",
                "paired",
                "bf16 paired",
                "fp32 paired",
                "fastrag ms",
                "faiss ms",
                "numpy ms",
                "bound ms",
                "fastrag/bound",
                "read GB/s",
                "agree@10",
            ],
            rows,
        )
    )
    first = result["runs"][0]["sizes"]
    if unfair:
        lines += [
            "",
            "**No ratio against faiss is printed where numpy's and faiss's OpenBLAS "
            "ran different kernels** (an unfair comparison; rerun with "
            "`--coretype SkylakeX` or another kernel both support): " + "; ".join(unfair),
        ]
    lines += [
        "",
        (
            'fastrag = `FlatIndex` as users get it (`bf16="auto", int8="auto"`): '
            + (
                f"the {first[0]['first_pass']} first pass was on (int8 probe: "
                + result["runs"][0].get("int8_probe", {}).get("reason", "-")
                + "; bf16 probe: "
                + result["runs"][0].get("bf16_probe", {}).get("reason", "-")
                + "): every row is scored approximately, a proven error bound picks the rows that "
                "can be in the exact top-10, and those are rescored in float32; results are exact. "
                "The one-time copy of the corpus took "
                + ", ".join(f"{r['copy_s']:.2f} s ({r['n']:,} x {r['dim']})" for r in first)
                + "."
                if first[0].get("first_pass")
                else "no first pass was on here (the int8 probe says it does not pay on this CPU, "
                "and no torch or bf16 does not pay), so it is the float32 path."
            )
            + " fastrag bf16 = `FlatIndex(bf16=True, int8=False)` (torch's bf16 matmul, with "
            "torch installed); fastrag fp32 = `FlatIndex(bf16=False, int8=False)`: blocked "
            "float32 sgemm + numba top-k."
        ),
        "",
        (
            "paired = median over the repeats of faiss's time / fastrag's time in the same "
            "repeat (the two run back to back, so a slow spell of the shared machine hits both)."
        ),
        "",
        (
            "bound = corpus bytes / read bandwidth (streaming sum over the same array, same "
            "threads). agree@10 = overlap of fastrag's top-10 with faiss's (1.0 = same sets; "
            "exact-score ties may be ordered differently)."
        ),
        "",
        "## numpy sgemm, one thread (1000 x 8192 x 384; median of 3 interleaved probes)",
        "",
        markdown_table(
            ["OPENBLAS_CORETYPE", "BLAS kernel per library", "GFLOP/s"],
            [[k or "(unset)", v["arch"], v["gflops"]] for k, v in result["sgemm_coretype"].items()],
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes for CI (< 20 s)")
    ap.add_argument("--sizes", default="100000x384,100000x768,1000000x384,1000000x768")
    ap.add_argument("--n-queries", type=int, default=1000)
    ap.add_argument(
        "--data",
        default="iso",
        help=f"vector sets, comma list of {', '.join(SETS)} (e5 and minilm: 384-d sizes only)",
    )
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--single", type=int, default=30)
    ap.add_argument(
        "--coretype", default="auto", help="OPENBLAS_CORETYPE for the children: auto|none|<name>"
    )
    ap.add_argument("--name", default=None, help="results file name (default dense / dense_smoke)")
    ap.add_argument(
        "--hide-avx512",
        action="store_true",
        help="children see no AVX-512 (CPUID faulting): the AVX2 paths of every library here",
    )
    ap.add_argument("--from-json", help="re-render the Markdown and PNG of a results JSON")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--sgemm-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.sgemm_only:
        import faiss  # noqa: F401 - loads faiss's own OpenBLAS, whose kernel is reported too

        print(json.dumps({"gflops": sgemm_gflops(), "arch": blas_architectures()}))
        return
    if args.from_json:
        jp = Path(args.from_json)
        result = json.loads(jp.read_text())
        jp.with_suffix(".md").write_text(markdown(result).rstrip() + "\n")
        plot(result, jp.with_suffix(".png"))
        return
    if args.child:
        cfg = json.loads(Path(args.child[0]).read_text())
        Path(args.child[1]).write_text(json.dumps(run_child(cfg)))
        return
    if args.hide_avx512:
        from _avx2only import AVX512_HIDDEN, hide_avx512_env

        HIDE_AVX512.update(hide_avx512_env())
        os.environ[AVX512_HIDDEN] = "1"  # the report's CPU class
    if args.smoke:
        args.sizes, args.n_queries, args.repeats, args.single = "20000x64", 200, 2, 10
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    machine = machine_info(["faiss-cpu", "numba", "threadpoolctl"])  # load average at start
    sizes = [(d, n, dim) for d in args.data.split(",") for n, dim in sizes]
    sizes = [(d, n, dim) for d, n, dim in sizes if d not in ("e5", "minilm") or dim == 384]
    for d, n, dim in sizes:  # generate once, before the children time anything
        dataset(d, n, dim, args.n_queries)
    sgemm: dict[str, dict] = {}
    for _ in range(3):  # interleaved rounds, median: the machine's load drifts
        for ct in (None, "SkylakeX", "Haswell") if has_avx512() else (None,):
            got = sgemm_probe(ct)
            entry = sgemm.setdefault(
                ct or "",
                {
                    "runs": [],
                    "arch": ", ".join(f"{lib_label(lib)} {a}" for lib, a in got["arch"].items()),
                },
            )
            entry["runs"].append(got["gflops"])
    for entry in sgemm.values():
        entry["gflops"] = median(entry["runs"])
    if args.coretype == "auto":
        # one kernel for every OpenBLAS in the process (numpy's and faiss's alike): SkylakeX
        # where any picked an AVX2-era or older kernel on an AVX-512 CPU; Haswell on an AVX2
        # CPU where they picked different ones (faiss's 0.3.15 says "Zen" on AMD)
        detected = [a.rsplit(" ", 1)[-1] for a in sgemm[""]["arch"].lower().split(", ")]
        if has_avx512():
            coretype = "SkylakeX" if any(a in AVX2_ERA_KERNELS for a in detected) else None
        else:
            coretype = "Haswell" if len(set(detected)) > 1 else None
        why = (
            f"pinned: without it the kernels were {sgemm['']['arch']}; {coretype} is the "
            "newest kernel every one of them has"
            if coretype
            else "unset: every OpenBLAS picked the same kind of kernel"
        )
    else:
        coretype = None if args.coretype == "none" else args.coretype
        why = f"`--coretype {args.coretype}`"
    runs = []
    for t in threads:
        cfg = {
            "threads": t,
            "sizes": sizes,
            "n_queries": args.n_queries,
            "repeats": args.repeats,
            "single": args.single,
        }
        runs.append(spawn(cfg, child_env(t, coretype)))
    result = {
        "benchmark": "dense_exact_topk",
        "command": "python bench/bench_dense.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine,
        "coretype": coretype,
        "coretype_why": why,
        "repeats": args.repeats,
        "single": args.single,
        "k": K,
        "sgemm_coretype": sgemm,
        "runs": runs,
    }
    result["loadavg_at_end"] = list(os.getloadavg())
    result["slower_than_float32"] = slower_than_float32(result)
    name = args.name or ("dense_smoke" if args.smoke else "dense")
    jp, mp = write_results(name, result, markdown(result))
    png = mp.with_suffix(".png")
    plot(result, png)
    print(mp.read_text())
    print(f"wrote {jp}, {mp}, {png}")
    if result["slower_than_float32"] and not args.smoke:  # smoke runs are too short to time
        raise SystemExit(
            "FAIL: fastrag's default search was slower than its float32 path on: "
            + "; ".join(result["slower_than_float32"])
        )


# The default search (with whatever first pass it chose) against its float32 path, paired per
# repeat: below this it counts as slower (the margin is the shared machine's noise).
NOT_SLOWER = 0.93


def slower_than_float32(result: dict) -> list[str]:
    """Rows where the default search's paired speed over the float32 path is under NOT_SLOWER."""
    bad = []
    for run in result["runs"]:
        for r in run["sizes"]:
            if "fastrag_fp32" not in r["batch_all_s"]:
                continue
            ratio = median(
                [
                    b / a
                    for a, b in zip(
                        r["batch_all_s"]["fastrag"], r["batch_all_s"]["fastrag_fp32"], strict=False
                    )
                ]
            )
            if ratio < NOT_SLOWER:
                bad.append(
                    f"{r.get('data', 'iso')} {r['n']}x{r['dim']} {run['threads']}t: {ratio:.2f}x"
                )
    return bad


if __name__ == "__main__":
    main()
