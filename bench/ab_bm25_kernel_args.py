"""A/B of the BM25 search kernels before and after they took their arrays in tuples (issue 41,
goal 3): the kernels of git revision ``--base`` (positional arrays) against the working tree's
(tuples), on the same indexes and queries in one process.

Results must be identical (rows, scores bit for bit, counts) for every strategy, with and
without a mask and a cutoff, for plain and packed (lazily decoded) indexes, with rank
directories and impact heads; speed is compared by interleaved repeats at 1 and 2 threads.

    python bench/ab_bm25_kernel_args.py --base a34887e --docs 300000 --repeats 7

``--aa`` measures the harness's own noise floor: a second copy of the working tree's kernels
(git ``HEAD``) in place of the old ones, called the same way, so every ratio should be 1.
``--base-tuples`` says the base revision's kernels already take tuples (a later change to the
tuple kernels, e.g. ``--base 789408f --base-tuples`` for the borrowing kernels).
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
from _harness import machine_info, markdown_table, median, write_results
from fastrag._kernels.bm25 import search as new_search
from gen_bm25_corpus import corpus_queries, make_named_corpus

from fastrag.indexes import BM25Index
from fastrag.indexes.bm25.args import strategy_code

ROOT = Path(__file__).resolve().parents[1]
K = 10


def old_kernels(base: str, where: Path):
    """The ``kernels/`` package of git revision ``base``, imported as ``kold``."""
    dest = where / "kold"
    dest.mkdir()
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", base, "kernels"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest), "--strip-components=1"], input=tar, check=True)
    sys.path.insert(0, str(where))
    return importlib.import_module("kold.bm25.search")


def run(style, kern, index, qv, qo, strategy, mask, cutoff, threads):
    """One batch through kernels called the old (``style="old"``) or the new way:
    ``(rows, scores, counts)``."""
    n_q = qo.shape[0] - 1
    rows = np.empty((n_q, K), np.int64)
    scores = np.empty((n_q, K), np.float32)
    counts = np.empty(n_q, np.int32)
    has_mask = mask is not None
    mask = mask if has_mask else np.zeros(0, np.bool_)
    has_cut = cutoff is not None
    cut = float(cutoff) if has_cut else 0.0
    code = strategy_code(strategy)
    n = max(index.n_docs, 1)
    slots = threads
    acc = np.zeros((slots, n), np.float32)
    pos = np.full((slots, n), -1, np.int32)
    touched = np.empty((slots, n + 1), np.int32)
    heads = (index._rank_slot, index._rank_dir, index._head_ptr, index._head_doc, index._head_w)
    ix = (index._lz, index.indptr, index.indices, index.data, index.term_max, index.base_weights)
    numba.set_num_threads(threads)
    if style == "new":
        flt, out = (mask, has_mask, cut, has_cut), (rows, scores, counts)
        if threads == 1:
            kern.search_batch_serial(
                ix, heads, (qv, qo), K, flt, (code, 0), (acc[0], pos[0], touched[0]), out
            )
        else:
            plan = (code, 0)
            kern.search_batch_parallel(ix, heads, (qv, qo), K, flt, plan, (acc, pos, touched), out)
    else:
        lz, *arrays = ix
        common = (*arrays, qv, qo, K, mask, has_mask, cut, has_cut, code)
        if threads == 1:
            kern.search_batch_serial(
                *common, acc[0], pos[0], touched[0], rows, scores, counts, *heads, lz
            )
        else:
            kern.search_batch_parallel(*common, acc, pos, touched, rows, scores, counts, *heads, lz)
    return rows, scores, counts


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="git revision of the kernels before")
    ap.add_argument("--docs", type=int, default=300_000)
    ap.add_argument("--corpora", default="zipf,cmrc_jieba")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tile", type=int, default=1, help="time the query batch repeated N times")
    ap.add_argument("--name", default="bm25_kernel_args_ab")
    ap.add_argument("--speed-only", action="store_true", help="skip the identity cases")
    ap.add_argument("--aa", action="store_true", help="A/A: HEAD's kernels as the old ones")
    ap.add_argument("--base-tuples", action="store_true", help="the base's kernels take tuples too")
    ap.add_argument("--strategy", default="auto", help="the strategy timed (auto, maxscore, ...)")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="fastrag-ab-"))
    old = old_kernels("HEAD" if args.aa else args.base, tmp)
    style = {"old": "new" if args.aa or args.base_tuples else "old", "new": "new"}
    kerns = {"old": old, "new": new_search}
    checks, speed = [], []
    for name in args.corpora.split(","):
        c = make_named_corpus(name, args.docs)
        qv, qo = corpus_queries(c, args.queries)
        plain = BM25Index.build(c["values"], c["offsets"], c["n_vocab"])
        plain.build_rank_directories()
        arrays = plain.to_arrays(packed=True)
        packed = BM25Index.from_arrays(arrays, plain.meta(packed=True))
        for index in (plain, packed):  # the wrapper's checks, rank directories, lazy state
            index.search_csr(qv, qo, K, num_threads=1)
        rng = np.random.default_rng(0)
        mask = rng.random(plain.n_docs) < 0.3
        n_same = n_cases = 0
        for index in (plain, packed) if not args.speed_only else ():
            for strategy in ("auto", "maxscore", "touched", "dense"):
                for m, cut in ((None, None), (mask, None), (None, 5.0), (mask, 5.0)):
                    for threads in (1, 2):
                        a = run(style["old"], old, index, qv, qo, strategy, m, cut, threads)
                        b = run("new", new_search, index, qv, qo, strategy, m, cut, threads)
                        n_cases += 1
                        n_same += all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
        if n_cases:
            checks.append([name, n_cases, n_same])
        lengths = np.tile(np.diff(qo), args.tile)
        qv = np.tile(qv[qo[0] : qo[-1]], args.tile)
        qo = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        for threads in (1, 2):
            times = {"old": [], "new": []}
            for kind in ("old", "new"):  # warm (and compile) both first
                run(style[kind], kerns[kind], plain, qv, qo, args.strategy, None, None, threads)
            for r in range(args.repeats):
                for kind in ("old", "new") if r % 2 == 0 else ("new", "old"):
                    t0 = time.process_time()
                    w0 = time.perf_counter()
                    run(style[kind], kerns[kind], plain, qv, qo, args.strategy, None, None, threads)
                    times[kind].append((time.perf_counter() - w0, time.process_time() - t0))
            ratios = [o[0] / n[0] for o, n in zip(times["old"], times["new"], strict=True)]
            cpu = [o[1] / n[1] for o, n in zip(times["old"], times["new"], strict=True)]
            n_q = qo.shape[0] - 1
            speed.append(
                [
                    name,
                    threads,
                    f"{n_q / median([t[0] for t in times['old']]):,.0f}",
                    f"{n_q / median([t[0] for t in times['new']]):,.0f}",
                    f"{median(ratios):.3f}",
                    f"{min(ratios):.3f}-{max(ratios):.3f}",
                    f"{median(cpu):.3f}",
                ]
            )
    info = machine_info()
    md = "\n\n".join(
        [
            f"# BM25 kernels: A/A, two copies of HEAD's kernels ({args.docs:,} docs)"
            if args.aa
            else f"# BM25 kernels: {args.base}'s tuple kernels vs the working tree's "
            f"(A/B, {args.docs:,} docs)"
            if args.base_tuples
            else f"# BM25 kernels: tuples of arrays vs positional arrays (A/B, {args.docs:,} docs)",
            f"`python bench/ab_bm25_kernel_args.py --base {args.base} --docs {args.docs} "
            f"--repeats {args.repeats} --tile {args.tile} --strategy {args.strategy}"
            f"{' --aa' if args.aa else ''}{' --base-tuples' if args.base_tuples else ''}"
            f"{' --speed-only' if args.speed_only else ''}`; "
            f"CPU {info.get('cpu')}, load at start "
            f"{info.get('loadavg_at_start')}; top-{K}, "
            f"{args.queries} queries (timed {args.tile} times over per batch); base {args.base}.",
            "Identical results (rows, float32 scores, counts; every strategy, with and without "
            "mask and cutoff, plain and packed indexes, 1 and 2 threads):"
            if checks
            else "(--speed-only: identity not checked in this run)",
            markdown_table(["corpus", "cases", "identical"], checks) if checks else "",
            f"Speed (strategy {args.strategy}, queries/s, medians of interleaved repeats; ratio = "
            "old time / new time per pair, > 1 means the new kernels are faster):",
            markdown_table(
                [
                    "corpus",
                    "threads",
                    "old q/s",
                    "new q/s",
                    "median ratio",
                    "range",
                    "CPU-time ratio",
                ],
                speed,
            ),
        ]
    )
    write_results(args.name, {"checks": checks, "speed": speed, "machine": info}, md)
    print(md)


if __name__ == "__main__":
    main()
