"""Probe: the AVX2 int8 kernel with more int16 steps before widening, and for 16 or 32 vector
registers (docs/dense.md, "The whole process on its AVX2 paths").

``kernels/avx2.py`` builds its LLVM IR from module constants (steps, code ranges, tile shape);
this probe builds variants of it, compiles each for an LLVM CPU target (``znver3``: AVX2 with
16 registers, as an AVX2-only CPU compiles it; ``znver4``: 32 registers), and times

* the kernel alone on one 1,024 x 1,024 block at dimension 384, against NumPy's sgemm of the
  same shape (medians of interleaved rounds, one thread);
* with ``--search SET``, a whole int8 search of 1,000 queries over 100k rows of
  ``bench/_dense_data`` set ``SET`` (one thread), split into kernel, screening and rescoring,
  with faiss ``IndexFlatIP`` on the same data.

Variants are ``steps,xmax,qmax,mr,nr``; the query codes of the ``2 steps`` dimensions one int16
lane adds sum to at most ``32767 // (2 xmax)`` (the scale grows where they would not), which
keeps the int16 sums exact (before 2026-12-07 the codes were narrowed instead:
``steps * 2 * 2 xmax * qmax <= 32767``). Run with ``OPENBLAS_CORETYPE=Haswell
OPENBLAS_NUM_THREADS=1`` (and ``taskset``):

    python bench/probe_avx2_steps.py --cpu znver3 --variants 1,127,64,4,16 2,127,64,4,16
    python bench/probe_avx2_steps.py --cpu znver3 --search e5 --variants 1,127,64,4,16
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

ARGS = [ctypes.c_void_p] * 6 + [ctypes.c_int64] * 4 + [ctypes.c_void_p] * 2 + [ctypes.c_int64]
ARGS += [ctypes.c_void_p] * 3  # the bound's coefficients per query, the rows' error weights


def set_variant(avx2, variant: tuple[int, ...]) -> None:
    steps, xmax, qmax, mr, nr = variant
    cap = 32767 // (2 * xmax)  # the query codes' lane cap (kernels/avx2.py)
    if 2 * qmax > cap or nr % 8:
        raise SystemExit(
            f"variant {variant}: one step's int16 sums could overflow, or nr is not a multiple of 8"
        )
    avx2.STEPS, avx2.XMAX, avx2.QMAX, avx2.MR, avx2.NR = variant
    avx2.DIM_STEP, avx2._G, avx2.LANE_CAP = 4 * steps, nr // 8, cap
    avx2._STATE.clear()


def compile_for(avx2, cpu: str, keep: list):
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    tm = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features="", opt=3)
    mod = llvm.parse_assembly(avx2._ir())
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    keep.append(engine)
    return ctypes.CFUNCTYPE(None, *ARGS)(engine.get_function_address("scores_bf16"))


def kernel_rounds(variants, cpu: str, rounds: int) -> None:
    from fastrag._kernels import avx2

    nb = m = 1024
    dp = 384
    rng = np.random.default_rng(0)
    q8 = rng.integers(-60, 61, (nb, dp)).astype(np.int8)
    xp = rng.integers(0, 62, (m // 8, dp // 4, 8, 4)).astype(np.uint8)
    kq, sq, sx = np.zeros(nb, np.int32), np.ones(nb, np.float32), np.ones(m, np.float32)
    out, thr = np.empty((nb, m), np.uint16), np.full(nb, np.inf, np.float32)
    bound, weights = np.zeros((nb, 4), np.float32), np.zeros(m, np.float32)
    keep: list = []
    fns = []
    for v in variants:
        set_variant(avx2, v)
        flags = np.zeros((nb, m // v[4]), np.uint16)
        fns.append((v, compile_for(avx2, cpu, keep), flags))
    a = rng.standard_normal((nb, dp), dtype=np.float32)
    b = rng.standard_normal((m, dp), dtype=np.float32)
    c = np.empty((nb, m), np.float32)
    times: dict = {v: [] for v, _, _ in fns}
    times["sgemm"] = []
    for _ in range(rounds):
        for v, fn, flags in fns:
            t0 = time.perf_counter()
            for _ in range(5):
                fn(*(x.ctypes.data for x in (q8, kq, sq, xp, sx, out)), nb, m, dp, m,
                   thr.ctypes.data, flags.ctypes.data, flags.shape[1], bound.ctypes.data,
                   weights.ctypes.data, weights.ctypes.data)  # fmt: skip
            times[v].append((time.perf_counter() - t0) / 5)
        t0 = time.perf_counter()
        for _ in range(5):
            np.matmul(a, b.T, out=c)
        times["sgemm"].append((time.perf_counter() - t0) / 5)
    sg = float(np.median(times["sgemm"]))
    print(f"target {cpu}: sgemm {sg * 1e3:.2f} ms per 1,024 x 1,024 x 384 block")
    for v, _, _ in fns:
        t = float(np.median(times[v]))
        print(f"  steps {v[0]}, rows ±{v[1]}, queries ±{v[2]}, tile {v[3]} x {v[4]}: "
              f"{t * 1e3:.2f} ms, {sg / t:.2f}x sgemm")  # fmt: skip


def search_split(variant, cpu: str, data: str, rounds: int) -> None:
    import faiss
    import llvmlite.binding as llvm
    from _dense_data import dataset
    from fastrag._kernels import avx2, dense_quant

    from fastrag.indexes import exact
    from fastrag.indexes.int8 import Int8Corpus, Int8Format, Int8Scorer

    set_variant(avx2, variant)
    llvm.get_host_cpu_name = lambda: cpu  # compile_ir targets this CPU, with its own features

    class _Features(dict):
        def flatten(self) -> str:
            return ""

    llvm.get_host_cpu_features = lambda: _Features(avx2=True)
    fmt = Int8Format("avx2", avx2, True, 8, avx2.NR, avx2.MR, avx2.XMAX, avx2.XMAX, avx2.QMAX,
                     avx2.DIM_STEP, avx2.LANE_CAP)  # fmt: skip
    xp, qp = dataset(data, 100_000, 384, 1000)
    x, q = np.load(xp), np.load(qp)
    corpus = Int8Corpus(384, fmt)
    corpus.update(x)
    split = {"kernel": 0.0, "screening": 0.0, "rescoring": 0.0}

    def timed(obj, name: str, key: str) -> None:
        fn = getattr(obj, name)

        def wrapper(*a):
            t0 = time.perf_counter()
            try:
                return fn(*a)
            finally:
                split[key] += time.perf_counter() - t0

        setattr(obj, name, wrapper)

    timed(Int8Scorer, "score", "kernel")
    timed(dense_quant, "merge_block_bf16", "screening")
    timed(dense_quant, "rescore_candidates", "rescoring")
    exact._approx_search(x, corpus, q[:64], 10, None, 1)
    index = faiss.IndexFlatIP(384)
    index.add(x)
    faiss.omp_set_num_threads(1)
    runs = []
    for _ in range(rounds):
        for key in split:
            split[key] = 0.0
        t0 = time.perf_counter()
        exact._approx_search(x, corpus, q, 10, None, 1)
        total = time.perf_counter() - t0
        t0 = time.perf_counter()
        index.search(q, 10)
        runs.append((total, time.perf_counter() - t0, dict(split)))
    runs.sort(key=lambda r: r[0])
    total, fa, parts = runs[len(runs) // 2]
    ratio = float(np.median([f / t for t, f, _ in runs]))
    print(f"{data}, variant {variant}, target {cpu}: search {total:.3f} s ("
          + ", ".join(f"{k} {v:.3f}" for k, v in parts.items())
          + f"), faiss {fa:.3f} s, paired {ratio:.2f}x faiss")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", default="znver3", help="LLVM CPU target (znver3, haswell, znver4)")
    ap.add_argument("--variants", nargs="+", default=["1,127,64,4,16", "2,127,64,4,16"])
    ap.add_argument("--search", help="time whole searches on this bench/_dense_data set")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    os.environ.setdefault("FASTRAG_INT8_KERNEL", "avx2")
    variants = [tuple(int(v) for v in s.split(",")) for s in args.variants]
    if args.search:
        for v in variants:
            search_split(v, args.cpu, args.search, args.rounds)
    else:
        kernel_rounds(variants, args.cpu, args.rounds)


if __name__ == "__main__":
    main()
