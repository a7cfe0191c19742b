"""BM25 speed: fastrag vs bm25s 0.3.16 (numba backend) and rank_bm25, side by side.

Corpus: ``bench/gen_bm25_corpus.py`` (CMRC dev sentences tiled and shuffled into documents,
seeded), tokenized two ways (jieba ``bm25_chinese`` and ``bm25_cjk``); queries: the CMRC dev
questions. For each analyzer, in one process on the same token ids:

* index build time from token ids (bm25s: its ``index((ids, vocab))``; fastrag:
  ``BM25Index.build``), index bytes (arrays that define the index; bm25s also keeps a dict vocab);
* batch top-10 queries/s with 1 and 2 threads (medians of interleaved repeats);
* single-query latency (one query per call, public API of each library);
* identical top-10 ids and scores (1e-5) vs bm25s lucene on every query (bm25s orders exact
  ties arbitrarily: a differing id must have exactly the same score);
* first query in a fresh process (imports + memory-mapped index load + query), with numba's
  on-disk cache already warm, for fastrag and bm25s;
* q/s vs corpus size (plot), and optionally 1,000,000 documents for fastrag alone.

Usage: ``python bench/bench_bm25.py`` (full, ~20-30 min on 2 busy cores), ``--smoke`` (tiny, CI),
``--million`` (adds 1M documents). Writes ``bench/results/bm25.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

os.environ.setdefault("DISABLE_TQDM", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_bm25_corpus as gen
from _harness import (
    RESULTS_DIR,
    WORK_DIR,
    current_rss_mb,
    machine_info,
    markdown_table,
    median,
    peak_rss_mb,
    write_results,
)

from fastrag.indexes.bm25.index import BM25Index

K = 10
REL = 1e-5


# --------------------------------------------------------------------------------- helpers
def log(*a) -> None:
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def as_lists(values: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    """Documents as lists of Python ints sharing one int object per token id (bm25s input)."""
    ints = list(range(int(values.max()) + 1 if values.size else 1))
    get = ints.__getitem__
    return [
        list(map(get, values[offsets[i] : offsets[i + 1]].tolist()))
        for i in range(offsets.shape[0] - 1)
    ]


def bm25s_nbytes(ret) -> int:
    s = ret.scores
    n = s["data"].nbytes + s["indices"].nbytes + s["indptr"].nbytes
    if getattr(ret, "nonoccurrence_array", None) is not None:
        n += ret.nonoccurrence_array.nbytes
    return int(n)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def verify(index: BM25Index, ours, theirs_ids, theirs_scores, qv, qo) -> dict:
    """Top-10 agreement with bm25s on every query (tie-aware)."""
    rows, scores, counts = ours
    exact = tie_swaps = bad_ids = bad_scores = 0
    for i in range(rows.shape[0]):
        n = int(counts[i])
        b_ids = theirs_ids[i].astype(np.int64)
        b_sc = theirs_scores[i]
        if not np.allclose(scores[i, :n], b_sc[:n], rtol=REL, atol=0):
            bad_scores += 1
        if n < K and np.any(b_sc[n:] > 0):
            bad_scores += 1
        same = rows[i, :n] == b_ids[:n]
        exact += int(same.sum())
        if not same.all():
            dense = index.get_scores(qv[qo[i] : qo[i + 1]])
            for j in np.nonzero(~same)[0]:
                if dense[rows[i, j]] == dense[b_ids[j]]:
                    tie_swaps += 1
                else:
                    bad_ids += 1
    return {
        "queries": int(rows.shape[0]),
        "positions_same_id": exact,
        "positions_tie_swapped": tie_swaps,
        "positions_different": bad_ids,
        "queries_scores_differ": bad_scores,
        "identical": bad_ids == 0 and bad_scores == 0,
    }


FRESH_FASTRAG = textwrap.dedent("""
    import time; t0 = time.perf_counter()
    import json, sys
    import numpy as np
    from fastrag.indexes.bm25.index import BM25Index
    d = sys.argv[1]
    meta = json.load(open(d + "/meta.json"))
    arrays = {n: np.load(f"{d}/{n}.npy", mmap_mode="r") for n in meta["arrays"]}
    idx = BM25Index.from_arrays(arrays, meta["meta"])
    q = np.load(d + "/query.npy")
    t1 = time.perf_counter()
    rows, scores, counts = idx.search(q, np.array([0, q.shape[0]]), 10)
    t2 = time.perf_counter()
    print(json.dumps({"import_and_load_s": t1 - t0, "first_query_s": t2 - t1,
                      "total_s": t2 - t0, "top1": int(rows[0, 0])}))
""")

FRESH_BM25S = textwrap.dedent("""
    import time; t0 = time.perf_counter()
    import json, os, sys
    os.environ["DISABLE_TQDM"] = "1"
    import numpy as np
    import bm25s
    r = bm25s.BM25.load(sys.argv[1], mmap=True)
    q = np.load(sys.argv[1] + "/query.npy").tolist()
    t1 = time.perf_counter()
    docs, scores = r.retrieve([q], k=10, show_progress=False, n_threads=1)
    t2 = time.perf_counter()
    print(json.dumps({"import_and_load_s": t1 - t0, "first_query_s": t2 - t1,
                      "total_s": t2 - t0, "top1": int(docs[0, 0])}))
""")


def fresh_process(script: str, arg: str) -> dict:
    """Run ``script`` in a new interpreter; add its wall time as seen from outside."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", script, arg], capture_output=True, text=True, check=True, timeout=600
    )
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_wall_s"] = time.perf_counter() - t0
    return res


# ------------------------------------------------------------------------------ one corpus
def bench_corpus(kind: str, n_docs: int, args, *, full: bool) -> dict:
    """Side-by-side numbers for one analyzer and corpus size (``full``: every measurement;
    otherwise build + batch q/s only, for the size plot)."""
    corpus = gen.make_corpus(n_docs, kind, args.seed)
    values, offsets, n_vocab = corpus["values"], corpus["offsets"], corpus["n_vocab"]
    qv, qo = gen.corpus_queries(corpus, args.max_queries)
    n_q = qo.shape[0] - 1
    q_lists = [qv[qo[i] : qo[i + 1]].tolist() for i in range(n_q)]
    res: dict = {
        "analyzer": corpus["analyzer"],
        "n_docs": n_docs,
        "n_vocab": n_vocab,
        "tokens_per_doc": round(corpus["tokens_per_doc"], 1),
        "n_queries": n_q,
        "tokens_per_query": round(float(qv.shape[0] / n_q), 2),
    }
    log(f"[{kind} {n_docs:,}] {res}")

    # ---- fastrag build (first a tiny build compiles or loads the cached kernels)
    BM25Index.build(values[: offsets[2]], offsets[:3], n_vocab)
    times = []
    for _ in range(args.build_repeats):
        gc.collect()
        dt, index = timed(lambda: BM25Index.build(values, offsets, n_vocab))
        times.append(dt)
    res["fastrag_build_s"] = median(times)
    res["fastrag_build_runs_s"] = times
    res["fastrag_bytes"] = index.nbytes
    res["nnz"] = int(index.indptr[-1])
    log(f"  fastrag build {res['fastrag_build_s']:.2f}s  bytes {index.nbytes:,}")

    # ---- bm25s build from token ids
    import bm25s

    backend = "numpy" if args.smoke else "numba"
    docs = as_lists(values, offsets)
    vocab = {str(t): i for i, t in enumerate(corpus["vocab"].tolist())}
    ret = bm25s.BM25(method="lucene", backend=backend)
    gc.collect()
    dt, _ = timed(lambda: ret.index((docs, vocab), show_progress=False))
    del docs
    gc.collect()
    res["bm25s_backend"] = backend
    res["bm25s_build_s"] = dt
    res["bm25s_bytes"] = bm25s_nbytes(ret)
    log(f"  bm25s build {dt:.2f}s  bytes {res['bm25s_bytes']:,}")

    # ---- batch retrieval, interleaved repeats
    thread_list = [1] if args.smoke else [1, 2]
    runs: dict[str, list[float]] = {}
    out_f = out_b = None
    for t in thread_list:  # warm-up (compiles bm25s's kernels; loads ours)
        index.search_csr(qv, qo, K, num_threads=t)
        ret.retrieve(q_lists[:20], k=K, show_progress=False, n_threads=t)
    for _ in range(args.repeats):
        for t in thread_list:
            dt, out_f = timed(lambda t=t: index.search_csr(qv, qo, K, num_threads=t))
            runs.setdefault(f"fastrag_{t}t", []).append(dt)
            dt, out_b = timed(
                lambda t=t: ret.retrieve(q_lists, k=K, show_progress=False, n_threads=t)
            )
            runs.setdefault(f"bm25s_{t}t", []).append(dt)
    for name, ts in runs.items():
        res[f"{name}_qps"] = n_q / median(ts)
        res[f"{name}_runs_s"] = ts
    log("  q/s " + "  ".join(f"{n}={n_q / median(ts):,.0f}" for n, ts in runs.items()))

    if full:
        # ---- identical results
        f_serial = index.search_csr(qv, qo, K, num_threads=1)
        b_ids, b_scores = out_b
        res["verify_vs_bm25s"] = verify(
            index, f_serial, np.asarray(b_ids), np.asarray(b_scores), qv, qo
        )
        if len(thread_list) > 1:
            res["verify_threads_identical"] = all(
                np.array_equal(a, b) for a, b in zip(out_f, f_serial, strict=False)
            )
        log(f"  verify {res['verify_vs_bm25s']}")

        if kind in ("jieba", "cjk"):
            res["end_to_end"] = end_to_end(kind, corpus, index, ret, n_q, args)
            log(f"  end to end: {res['end_to_end']['summary']}")

        # ---- single-query latency
        n_single = min(n_q, args.single_queries)
        singles = [
            (np.asarray(q_lists[i], np.int32), np.array([0, len(q_lists[i])]))
            for i in range(n_single)
        ]
        lat: dict[str, list[float]] = {"fastrag": [], "bm25s": []}
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for q, o in singles:
                index.search_csr(q, o, K, num_threads=1)
            lat["fastrag"].append((time.perf_counter() - t0) / n_single)
            t0 = time.perf_counter()
            for i in range(n_single):
                ret.retrieve([q_lists[i]], k=K, show_progress=False, n_threads=1)
            lat["bm25s"].append((time.perf_counter() - t0) / n_single)
        for name, ts in lat.items():
            res[f"{name}_single_ms"] = median(ts) * 1e3
        log(
            f"  single query ms: fastrag {res['fastrag_single_ms']:.3f}  "
            f"bm25s {res['bm25s_single_ms']:.3f}"
        )

        # ---- ablation: scoring strategies (1 thread)
        abl: dict[str, list[float]] = {}
        for _ in range(max(1, args.repeats // 2)):
            for strat in ("dense", "touched", "maxscore", "auto"):
                dt, _ = timed(
                    lambda s=strat: index.search_csr(qv, qo, K, num_threads=1, strategy=s)
                )
                abl.setdefault(strat, []).append(dt)
        res["strategy_qps_1t"] = {s: n_q / median(ts) for s, ts in abl.items()}
        log(f"  strategies q/s: { {s: round(v) for s, v in res['strategy_qps_1t'].items()} }")

        # ---- first query in a fresh process
        if not args.smoke and not args.no_fresh:
            d = WORK_DIR / f"fresh_{kind}"
            d.mkdir(parents=True, exist_ok=True)
            arrays = index.to_arrays()
            for n, a in arrays.items():
                np.save(d / f"{n}.npy", a)
            (d / "meta.json").write_text(json.dumps({"arrays": list(arrays), "meta": index.meta()}))
            np.save(d / "query.npy", np.asarray(q_lists[0], np.int32))
            fresh_process(FRESH_FASTRAG, str(d))  # warms numba's cache if it is cold
            res["fastrag_fresh"] = fresh_process(FRESH_FASTRAG, str(d))
            bd = WORK_DIR / f"fresh_bm25s_{kind}"
            ret.save(str(bd))
            np.save(bd / "query.npy", np.asarray(q_lists[0], np.int64))
            res["bm25s_fresh"] = fresh_process(FRESH_BM25S, str(bd))
            log(f"  fresh process: fastrag {res['fastrag_fresh']}  bm25s {res['bm25s_fresh']}")

        # ---- rank_bm25 (slow: a few queries, jieba corpus only)
        if args.rank_bm25_queries and kind == "jieba":
            try:
                from rank_bm25 import BM25Okapi
            except ImportError:
                res["rank_bm25"] = None
            else:
                docs = as_lists(values, offsets)
                dt_build, bm = timed(lambda: BM25Okapi(docs))
                del docs
                nq = min(args.rank_bm25_queries, n_q)
                t0 = time.perf_counter()
                for q in q_lists[:nq]:
                    np.argsort(-bm.get_scores(q))[:K]
                dt = time.perf_counter() - t0
                res["rank_bm25"] = {"build_s": dt_build, "qps": nq / dt, "queries": nq}
                log(f"  rank_bm25 {res['rank_bm25']}")
                del bm
                gc.collect()
    return res


def end_to_end(kind: str, corpus: dict, index: BM25Index, ret, n_q: int, args) -> dict:
    """Query text -> top-10, 1 thread, query analysis included: fastrag's batch
    ``encode_queries`` + ``BM25Index.search_csr`` vs the same analyzer called per query (what a
    bm25s user writes) + ``bm25s.BM25.retrieve`` on token strings. Same tokens (checked), so
    only the libraries' own work differs."""
    from fastrag.analysis import encode_queries, get_analyzer

    name = {"jieba": "bm25_chinese", "cjk": "bm25_cjk"}[kind]
    analyzer = get_analyzer(name)
    _, questions = gen.load_cmrc()
    texts = [questions[i] for i in corpus["q_source"][:n_q].tolist()]
    vocab = {t: i for i, t in enumerate(corpus["vocab"].tolist())}
    qv, qo = gen.corpus_queries(corpus, args.max_queries)
    ev, eo = encode_queries(texts, analyzer, vocab)
    same_tokens = bool(np.array_equal(ev, qv) and np.array_equal(eo, qo))

    def ours():
        v, o = encode_queries(texts, analyzer, vocab)
        return index.search_csr(v, o, K, num_threads=1)

    def theirs():
        return ret.retrieve([analyzer(t) for t in texts], k=K, show_progress=False, n_threads=1)

    ours(), theirs()  # warm-up
    runs: dict[str, list[float]] = {"fastrag": [], "bm25s": [], "fastrag_analysis": []}
    for _ in range(args.repeats):
        runs["fastrag"].append(timed(ours)[0])
        runs["bm25s"].append(timed(theirs)[0])
        runs["fastrag_analysis"].append(timed(lambda: encode_queries(texts, analyzer, vocab))[0])
    t_analysis = []
    for _ in range(max(1, args.repeats // 2)):
        t_analysis.append(timed(lambda: [analyzer(t) for t in texts])[0])
    f_rows = ours()[0]
    b_rows = np.asarray(theirs()[0])
    agree = float(np.mean([len(set(a) & set(b)) / K for a, b in zip(f_rows, b_rows, strict=True)]))
    out = {
        "analyzer": name,
        "queries": n_q,
        "same_tokens": same_tokens,
        "top10_overlap": agree,
        "fastrag_qps": n_q / median(runs["fastrag"]),
        "bm25s_qps": n_q / median(runs["bm25s"]),
        "paired": median([b / a for a, b in zip(runs["fastrag"], runs["bm25s"], strict=True)]),
        "fastrag_analysis_share": median(runs["fastrag_analysis"]) / median(runs["fastrag"]),
        "per_query_analysis_s": median(t_analysis),
        "runs_s": runs,
    }
    out["summary"] = (
        f"fastrag {out['fastrag_qps']:,.0f} q/s, bm25s {out['bm25s_qps']:,.0f} q/s, "
        f"paired {out['paired']:.2f}x, same tokens {same_tokens}, overlap {agree:.3f}"
    )
    return out


def bench_fastrag_alone(kind: str, n_docs: int, args) -> dict:
    """Build time, memory and q/s of fastrag alone on a large corpus."""
    rss0 = current_rss_mb()
    corpus = gen.make_corpus(n_docs, kind, args.seed)
    values, offsets, n_vocab = corpus["values"], corpus["offsets"], corpus["n_vocab"]
    qv, qo = corpus["q_values"], corpus["q_offsets"]
    rss_corpus = current_rss_mb()
    times = []
    for _ in range(max(1, args.build_repeats - 1)):
        gc.collect()
        dt, index = timed(lambda: BM25Index.build(values, offsets, n_vocab))
        times.append(dt)
    rss_index = current_rss_mb()
    res = {
        "analyzer": corpus["analyzer"],
        "n_docs": n_docs,
        "n_vocab": n_vocab,
        "tokens_per_doc": round(corpus["tokens_per_doc"], 1),
        "n_queries": qo.shape[0] - 1,
        "fastrag_build_s": median(times),
        "fastrag_build_runs_s": times,
        "fastrag_bytes": index.nbytes,
        "nnz": int(index.indptr[-1]),
        "corpus_token_bytes": int(values.nbytes + offsets.nbytes),
        "rss_corpus_mb": rss_corpus - rss0,
        "rss_after_build_mb": rss_index - rss0,
        "peak_rss_mb": peak_rss_mb(),
    }
    for t in (1, 2):
        index.search_csr(qv, qo, K, num_threads=t)
        ts = [
            timed(lambda t=t: index.search_csr(qv, qo, K, num_threads=t))[0]
            for _ in range(args.repeats)
        ]
        res[f"fastrag_{t}t_qps"] = (qo.shape[0] - 1) / median(ts)
        res[f"fastrag_{t}t_runs_s"] = ts
    log(
        f"[{kind} {n_docs:,} fastrag alone] "
        + json.dumps({k: v for k, v in res.items() if not k.endswith("runs_s")}, ensure_ascii=False)
    )
    return res


# ----------------------------------------------------------------------------------- report
def ratio(a, b):
    return a / b if a and b else float("nan")


def paired(r: dict, a: str, b: str) -> float:
    """Median over repeats of ``b``'s time / ``a``'s time in the same repeat (back to back,
    so a slow spell of the shared machine hits both)."""
    ta, tb = r.get(f"{a}_runs_s"), r.get(f"{b}_runs_s")
    return median([y / x for x, y in zip(ta, tb, strict=False)]) if ta and tb else float("nan")


def report(payload: dict) -> str:
    lines = ["# BM25: fastrag vs bm25s 0.3.16 (numba) and rank_bm25", ""]
    m = payload["machine"]
    lines.append(
        f"Machine: {m['cpu']}, {m['usable_cores']} cores, load average at start "
        f"{m['loadavg_at_start']}, at end {payload.get('loadavg_at_end')}; numpy "
        f"{m['numpy']}, numba {m.get('numba')}, bm25s {m.get('bm25s')}; commit "
        f"{m['commit']}. Medians of {payload['args']['repeats']} interleaved repeats. "
        "The machine is shared by other jobs: absolute figures drift, ratios are "
        "measured side by side in one process."
    )
    lines.append("")
    rows = []
    for r in payload["main"]:
        v = r.get("verify_vs_bm25s", {})
        rows.append(
            [
                r["analyzer"],
                r["n_docs"],
                r["tokens_per_doc"],
                r["n_queries"],
                r.get("bm25s_1t_qps"),
                r.get("fastrag_1t_qps"),
                ratio(r.get("fastrag_1t_qps"), r.get("bm25s_1t_qps")),
                paired(r, "fastrag_1t", "bm25s_1t"),
                r.get("bm25s_2t_qps"),
                r.get("fastrag_2t_qps"),
                ratio(r.get("fastrag_2t_qps"), r.get("fastrag_1t_qps")),
                paired(r, "fastrag_2t", "fastrag_1t"),
                r.get("bm25s_single_ms"),
                r.get("fastrag_single_ms"),
                ratio(r.get("fastrag_single_ms"), r.get("bm25s_single_ms")),
                r["bm25s_build_s"],
                r["fastrag_build_s"],
                ratio(r["fastrag_build_s"], r["bm25s_build_s"]),
                r["bm25s_bytes"] / 2**20,
                r["fastrag_bytes"] / 2**20,
                "yes" if v.get("identical") else f"NO {v}",
            ]
        )
    lines.append(
        markdown_table(
            [
                "analyzer",
                "docs",
                "tok/doc",
                "queries",
                "bm25s q/s 1t",
                "fastrag q/s 1t",
                "x 1t",
                "x 1t paired",
                "bm25s q/s 2t",
                "fastrag q/s 2t",
                "fastrag 2t/1t",
                "2t/1t paired",
                "bm25s single ms",
                "fastrag single ms",
                "single ratio",
                "bm25s build s",
                "fastrag build s",
                "build ratio",
                "bm25s MiB",
                "fastrag MiB",
                "identical top-10",
            ],
            rows,
        )
    )
    lines.append("")
    lines.append(
        "paired = median over the repeats of the ratio of the two times measured back "
        "to back in the same repeat (a slow spell of the shared machine hits both)."
    )
    lines.append("")
    e2e = [r for r in payload["main"] if "end_to_end" in r]
    if e2e:
        lines.append(
            "End to end, query text -> top-10, 1 thread, analysis included: fastrag "
            "`encode_queries` (batch) + `BM25Index.search_csr` vs the same analyzer called per "
            "query + `bm25s.BM25.retrieve` on the token strings (same tokens for both):"
        )
        lines.append("")
        lines.append(
            markdown_table(
                [
                    "analyzer",
                    "docs",
                    "queries",
                    "bm25s q/s",
                    "fastrag q/s",
                    "x",
                    "x paired",
                    "fastrag analysis share",
                    "analysis query by query, s for all (bm25s side)",
                    "same tokens",
                    "top-10 overlap",
                ],
                [
                    [
                        e["analyzer"],
                        r["n_docs"],
                        e["queries"],
                        e["bm25s_qps"],
                        e["fastrag_qps"],
                        ratio(e["fastrag_qps"], e["bm25s_qps"]),
                        e["paired"],
                        e["fastrag_analysis_share"],
                        e["per_query_analysis_s"],
                        "yes" if e["same_tokens"] else "NO",
                        e["top10_overlap"],
                    ]
                    for r in e2e
                    for e in [r["end_to_end"]]
                ],
            )
        )
        lines.append("")
    fresh = [r for r in payload["main"] if "fastrag_fresh" in r]
    if fresh:
        lines.append(
            "First query in a fresh process (imports + memory-mapped index + query; "
            "numba's on-disk cache warm):"
        )
        lines.append("")
        lines.append(
            markdown_table(
                [
                    "analyzer",
                    "fastrag total s",
                    "fastrag process wall s",
                    "bm25s total s",
                    "bm25s process wall s",
                ],
                [
                    [
                        r["analyzer"],
                        r["fastrag_fresh"]["total_s"],
                        r["fastrag_fresh"]["process_wall_s"],
                        r["bm25s_fresh"]["total_s"],
                        r["bm25s_fresh"]["process_wall_s"],
                    ]
                    for r in fresh
                ],
            )
        )
        lines.append("")
    strat = [r for r in payload["main"] if "strategy_qps_1t" in r]
    if strat:
        lines.append("Scoring strategies, fastrag 1 thread (q/s; all exact, same results):")
        lines.append("")
        lines.append(
            markdown_table(
                [
                    "analyzer",
                    "dense accumulate + scan",
                    "touched rows + live heap",
                    "maxscore",
                    "auto (default)",
                ],
                [
                    [
                        r["analyzer"],
                        r["strategy_qps_1t"]["dense"],
                        r["strategy_qps_1t"]["touched"],
                        r["strategy_qps_1t"]["maxscore"],
                        r["strategy_qps_1t"]["auto"],
                    ]
                    for r in strat
                ],
            )
        )
        lines.append("")
    rk = [r for r in payload["main"] if r.get("rank_bm25")]
    for r in rk:
        lines.append(
            f"rank_bm25 (BM25Okapi, {r['analyzer']}, {r['n_docs']:,} docs): "
            f"{r['rank_bm25']['qps']:.2f} q/s over {r['rank_bm25']['queries']} "
            f"queries, build {r['rank_bm25']['build_s']:.1f} s."
        )
        lines.append("")
    if payload["sizes"]:
        lines.append("Queries/s vs corpus size (1 thread / 2 threads):")
        lines.append("")
        lines.append(
            markdown_table(
                [
                    "analyzer",
                    "docs",
                    "bm25s 1t",
                    "fastrag 1t",
                    "bm25s 2t",
                    "fastrag 2t",
                    "fastrag build s",
                    "fastrag MiB",
                ],
                [
                    [
                        r["analyzer"],
                        r["n_docs"],
                        r.get("bm25s_1t_qps"),
                        r.get("fastrag_1t_qps"),
                        r.get("bm25s_2t_qps"),
                        r.get("fastrag_2t_qps"),
                        r["fastrag_build_s"],
                        r["fastrag_bytes"] / 2**20,
                    ]
                    for r in payload["sizes"]
                ],
            )
        )
        lines.append("")
    return "\n".join(lines)


def plot(payload: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
    for ax, kind in zip(axes, ("bm25_chinese", "bm25_cjk"), strict=False):
        pts = [r for r in payload["sizes"] if r["analyzer"].endswith(kind)]
        pts.sort(key=lambda r: r["n_docs"])
        for key, label, style in (
            ("fastrag_1t_qps", "fastrag 1 thread", "o-"),
            ("fastrag_2t_qps", "fastrag 2 threads", "o--"),
            ("bm25s_1t_qps", "bm25s 1 thread", "s-"),
            ("bm25s_2t_qps", "bm25s 2 threads", "s--"),
        ):
            xs = [r["n_docs"] for r in pts if r.get(key)]
            ys = [r[key] for r in pts if r.get(key)]
            if xs:
                ax.plot(xs, ys, style, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("documents")
        ax.set_ylabel("queries / s (top-10)")
        ax.set_title(f"{kind} tokens")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def render(payload: dict) -> str:
    """The Markdown report, with the 1M-document table when there is one."""
    md = report(payload)
    if payload["million"]:
        md += (
            "\n1,000,000 documents, fastrag alone:\n\n"
            + markdown_table(
                [
                    "analyzer",
                    "tok/doc",
                    "build s",
                    "index MiB",
                    "RSS after build MiB",
                    "peak RSS MiB",
                    "q/s 1t",
                    "q/s 2t",
                ],
                [
                    [
                        r["analyzer"],
                        r["tokens_per_doc"],
                        r["fastrag_build_s"],
                        r["fastrag_bytes"] / 2**20,
                        r["rss_after_build_mb"],
                        r["peak_rss_mb"],
                        r["fastrag_1t_qps"],
                        r["fastrag_2t_qps"],
                    ]
                    for r in payload["million"]
                ],
            )
            + "\n"
        )
    return md


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-docs", type=int, default=200_000)
    ap.add_argument("--analyzers", default="jieba,cjk")
    ap.add_argument(
        "--sizes",
        default="10000,50000",
        help="extra corpus sizes for the q/s-vs-size plot (comma-separated)",
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--from-json", help="re-render the Markdown of a results JSON")
    ap.add_argument("--build-repeats", type=int, default=3)
    ap.add_argument("--single-queries", type=int, default=500)
    ap.add_argument("--max-queries", type=int, default=0, help="0: every CMRC dev question")
    ap.add_argument("--rank-bm25-queries", type=int, default=20)
    ap.add_argument("--million", action="store_true", help="add 1,000,000 docs, fastrag alone")
    ap.add_argument("--million-analyzers", default="jieba")
    ap.add_argument("--no-fresh", action="store_true", help="skip the fresh-process runs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="tiny run for CI (< 20 s)")
    ap.add_argument("--out", default=None, help="results directory (default bench/results)")
    ap.add_argument("--name", default=None, help="results file name (default bm25)")
    args = ap.parse_args(argv)
    if args.from_json:
        jp = Path(args.from_json)
        jp.with_suffix(".md").write_text(render(json.loads(jp.read_text())))
        return
    if args.smoke:
        args.n_docs, args.sizes, args.repeats, args.build_repeats = 3000, "", 2, 1
        args.single_queries, args.max_queries, args.rank_bm25_queries = 50, 200, 0
        args.million = False
    t_start = time.perf_counter()
    payload: dict = {
        "args": vars(args),
        "machine": machine_info(["bm25s", "rank-bm25"]),
        "main": [],
        "sizes": [],
        "million": [],
    }
    kinds = [k for k in args.analyzers.split(",") if k]
    sizes = sorted({int(s) for s in args.sizes.split(",") if s})
    for kind in kinds:
        main_res = bench_corpus(kind, args.n_docs, args, full=True)
        payload["main"].append(main_res)
        payload["sizes"].append(main_res)
        for n in sizes:
            payload["sizes"].append(bench_corpus(kind, n, args, full=False))
    if args.million:
        for kind in [k for k in args.million_analyzers.split(",") if k]:
            r = bench_fastrag_alone(kind, 1_000_000, args)
            payload["million"].append(r)
            payload["sizes"].append(r)
    payload["loadavg_at_end"] = list(os.getloadavg())
    payload["wall_s"] = time.perf_counter() - t_start
    md = render(payload)
    out = Path(args.out) if args.out else RESULTS_DIR
    name = "bm25_smoke" if args.smoke else (args.name or "bm25")
    jp, mp = write_results(name, payload, md, out)
    if not args.smoke and payload["sizes"]:
        plot(payload, out / f"{name}.png")
    print(md)
    log(f"wrote {jp} and {mp} in {payload['wall_s']:.0f} s")
    bad = [
        r["analyzer"]
        for r in payload["main"]
        if not r.get("verify_vs_bm25s", {}).get("identical", False)
    ]
    if bad:
        raise SystemExit(f"results differ from bm25s for {bad}")


if __name__ == "__main__":
    main()
