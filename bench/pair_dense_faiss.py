"""Paired: fastrag ``FlatIndex`` (as users get it) against faiss ``IndexFlatIP`` on the same
``bench/_dense_data`` sets, in one process, one after the other in each repeat; prints the
medians and the median of faiss's time / fastrag's per repeat. A quick A/B companion to
``bench_dense.py`` (run it on two checkouts, interleaved, to compare them):

    OPENBLAS_NUM_THREADS=1 taskset -c 1 python bench/pair_dense_faiss.py --data e5,dominant
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="e5,minilm,iso,dominant")
    ap.add_argument("--size", default="100000x384", help="rows x dim")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--int8", action="store_true", help="FlatIndex(int8=True, bf16=False)")
    args = ap.parse_args()
    import faiss
    from _dense_data import dataset

    from fastrag.indexes.flat import FlatIndex

    n, dim = (int(v) for v in args.size.split("x"))
    faiss.omp_set_num_threads(args.threads)
    for data in args.data.split(","):
        xp, qp = dataset(data, n, dim, 1000)
        x, q = np.load(xp), np.load(qp)
        forced = {"int8": True, "bf16": False} if args.int8 else {}
        ours = FlatIndex(dim, metric="dot", **forced)
        ours.add(x)
        peer = faiss.IndexFlatIP(dim)
        peer.add(x)
        for _ in range(3):  # the copy, the kernels, the pass's verdict
            ours.search(q, 10, num_threads=args.threads)
        peer.search(q, 10)
        ta, tf = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            ours.search(q, 10, num_threads=args.threads)
            ta.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            peer.search(q, 10)
            tf.append(time.perf_counter() - t0)
        ratio = float(np.median(np.array(tf) / np.array(ta)))
        print(f"{data} {args.size}, {args.threads} thread(s): fastrag {np.median(ta):.3f} s, "
              f"faiss {np.median(tf):.3f} s, paired {ratio:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
