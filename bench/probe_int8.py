"""Probe: an int8 first pass for exact dense top-k, against the bf16 pass it would replace.

Issue 13, goal 2. The bf16 pass (``fastrag.indexes.flat``, docs/dense.md) scores every row in
bfloat16, keeps the rows a proven error bound cannot rule out and rescores them in float32.
This probe builds the same pipeline with int8 scores and measures whether it pays:

* **Quantisation.** Each row ``x`` (and each query) is quantised symmetrically, per row:
  ``s = max|x| / 127`` (float32), ``x_int = rint(x / s)`` in ``[-127, 127]``. The residual
  ``dx = x - s x_int`` is computed exactly (float64) and its norm stored, rounded up.
* **Scores.** ``P = q_int . x_int`` in exact int32 arithmetic, ``a = s_q s_x P`` (float64).
  Three int8 kernels: ``torch._int_mm`` (oneDNN), a plain numba loop left to LLVM's
  auto-vectoriser, and a numba kernel whose micro-kernel is written in LLVM IR through an
  ``@intrinsic`` that calls ``llvm.x86.avx512.vpdpbusd.512`` (AVX512-VNNI: 64 u8 x s8
  products per instruction). VPDPBUSD multiplies *unsigned* by *signed* bytes, so the query
  is offset by +128 (``q_u = q_int + 128``) and each row's ``128 sum(x_int)`` is subtracted
  afterwards (the standard VNNI trick). Rows are packed in blocks of ``NR`` rows x 4 dims
  (one 64-byte vector = 16 rows x 4 consecutive dims), so a block of 4 query bytes is one
  broadcast; ``MR`` queries x ``NR`` rows accumulate in ``MR x NR / 16`` zmm registers.
* **Bound** (docs/int8.md): ``|s - a| <= (|q| + |dq|) |dx| + |dq| |x| + d 2^-24 |q| |x|``
  (times 1.01), where ``s`` is the float32 score the exact search computes. The a-priori
  form, with ``|dx| <= s_x sqrt(d) / 2``, is also measured (``int8_apriori``).
* **Selection and rescoring** are the bf16 pass's: per query a heap of the k largest lower
  ends ``a - e``; every row whose upper end ``a + e`` reaches it is a candidate (buffer
  ``max(1024, 16 k)`` per worker; a query that outgrows it is searched again in float32);
  candidates are rescored with fastrag's ``rescore_candidates`` kernel.

Measured, for ``n_queries`` x ``n`` x ``dim`` and 1 and 2 threads (worker threads pulling
1,024-row corpus chunks, each with single-threaded BLAS / torch, as ``FlatIndex`` does):

1. ``throughput``: GOP/s (2 ops per multiply-add) of the score kernels alone: numpy float32
   sgemm, torch bf16 ``mm`` (flat.py's call), ``torch._int_mm``, numba auto-vectorised (on a
   1/8 slice of the corpus: it is slow), numba VNNI.
2. ``e2e``: first pass (query quantisation + scores + candidate selection) and the whole exact
   top-k search (+ rescoring) for bf16 (flat.py's worker loop, and ``exact_search`` itself),
   int8 via ``torch._int_mm`` and int8 via the VNNI kernel; float32 ``exact_search`` as the
   baseline. Repeats are interleaved (every method once per round); medians.
3. ``bound``: candidates per query (rows rescored) for top-k under each bound, on random
   unit vectors, a mixture of Gaussians and vectors with a few large ("outlier") dimensions;
   every method's top-k checked against the float32 search (mismatched rows counted); on
   128 queries, the bound's tightness (observed error / bound) and an oracle's candidates.
4. ``equalize``: candidates after per-dimension equalisation (SmoothQuant-style) of the
   outlier and random data.

Usage: ``python bench/probe_int8.py`` (about 9 minutes on 2 busy cores), ``--parts ...`` to
rerun some parts (their rows replace the last JSON's), ``--report``, ``--smoke`` (tiny).
Writes ``bench/results/int8_probe.{json,md}``. ``os.getloadavg()`` is recorded around every
measurement: the machine is shared, so only numbers from the same round compare well.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import RESULTS_DIR, machine_info, markdown_table, median, write_results  # noqa: E402
from fastrag._kernels import dense as _dense  # noqa: E402
from fastrag._kernels import dense_quant as _quant  # noqa: E402
from fastrag._kernels._config import FASTMATH  # noqa: E402
from fastrag._kernels.topk import worse  # noqa: E402

from fastrag.indexes import flat  # noqa: E402

CHUNK = flat.CORPUS_CHUNK  # corpus rows per score block, as FlatIndex
MR = 8  # query rows per VNNI micro-kernel
NV = 2  # zmm vectors of 16 rows per micro-kernel
NR = 16 * NV  # corpus rows per packed block
PARTS = ("throughput", "e2e", "bound", "equalize")
GROUP = 64  # scores screened at once (as kernels/dense.py)
SAFETY = 1.01  # the bound's safety factor (as bf16_error_bound)


# ------------------------------------------------------------------------------ quantisation
@njit(inline="always")
def _round_up(x):
    """float64 -> the float32 at or above it (copied from kernels/dense.py)."""
    t = np.float32(x)
    return np.nextafter(t, np.float32(np.inf)) if np.float64(t) < x else t


@njit(inline="always")
def _round_down(x):
    """float64 -> the float32 at or below it (copied from kernels/dense.py)."""
    t = np.float32(x)
    return np.nextafter(t, np.float32(-np.inf)) if np.float64(t) > x else t


@njit(nogil=True)
def quantize_rows(x, out, scales, resid, norms, row_sums):
    """Symmetric per-row int8: ``out[i] = rint(x[i] / scales[i])`` with ``scales[i] =
    max|x[i]| / 127``; ``resid[i]`` >= the exact norm of ``x[i] - scales[i] out[i]``,
    ``norms[i]`` >= ``|x[i]|`` (float32, rounded up), ``row_sums[i] = sum(out[i])``.
    Columns of ``out`` past ``x.shape[1]`` (padding) are zeroed."""
    n, d = x.shape
    for i in range(n):
        mx = np.float32(0.0)
        for j in range(d):
            mx = max(mx, abs(x[i, j]))
        s = mx / np.float32(127.0)
        out[i, :] = 0
        scales[i] = s
        r2 = 0.0
        n2 = 0.0
        tot = 0
        if s > 0:
            inv = 1.0 / np.float64(s)
            for j in range(d):
                v = np.float64(x[i, j])
                qv = min(127.0, max(-127.0, np.rint(v * inv)))
                out[i, j] = np.int8(qv)
                tot += np.int64(qv)
                dl = v - np.float64(s) * qv  # exact: s * qv has <= 31 significant bits
                r2 += dl * dl
                n2 += v * v
        else:
            for j in range(d):
                v = np.float64(x[i, j])
                r2 += v * v
                n2 += v * v
        resid[i] = _round_up(math.sqrt(r2) * (1.0 + 1e-12))
        norms[i] = _round_up(math.sqrt(n2) * (1.0 + 1e-12))
        row_sums[i] = tot


def quantize(x: np.ndarray, d_pad: int | None = None) -> dict[str, np.ndarray]:
    n, d = x.shape
    d_pad = d_pad or d
    q = np.empty((n, d_pad), np.int8)
    scales = np.empty(n, np.float32)
    resid = np.empty(n, np.float32)
    norms = np.empty(n, np.float32)
    sums = np.empty(n, np.int64)
    quantize_rows(x, q, scales, resid, norms, sums)
    return {"q": q, "scale": scales, "resid": resid, "norm": norms, "sum": sums}


class Int8Corpus:
    """int8 copy of the corpus: row-major (torch), packed VNNI blocks, per-row scale,
    residual norm, norm, and ``128 sum(x_int)`` (the unsigned-query correction)."""

    def __init__(self, vectors: np.ndarray) -> None:
        n, d = vectors.shape
        self.n, self.dim = n, d
        self.d_pad = -(-d // 8) * 8  # torch._int_mm wants multiples of 8; VNNI groups of 4
        qz = quantize(vectors, self.d_pad)
        self.q = qz["q"]
        self.scale = _padded(qz["scale"])
        self.resid = _padded(qz["resid"])
        self.norm = _padded(qz["norm"])
        # a-priori residual bound |dx| <= s_x sqrt(d) / 2 (per component |x/s - rint| <= 1/2)
        self.resid_apriori = _padded(
            (qz["scale"].astype(np.float64) * math.sqrt(d) * 0.5 * (1 + 2.0**-20)).astype(
                np.float32
            )
        )
        n_blk = -(-n // NR)
        padded = np.zeros((n_blk * NR, self.d_pad), np.int8)
        padded[:n] = self.q
        self.packed = np.ascontiguousarray(
            padded.reshape(n_blk, NR, self.d_pad // 4, 4).transpose(0, 2, 1, 3)
        )
        corr = np.zeros(n_blk * NR, np.int32)
        corr[:n] = 128 * qz["sum"]
        self.corr = corr


def _padded(a: np.ndarray) -> np.ndarray:
    """``a`` followed by GROUP zeros (the screening loop reads whole groups)."""
    return np.concatenate([a, np.zeros(GROUP, a.dtype)])


class Int8Queries:
    """Quantised queries (signed for torch, +128 unsigned for VNNI) and bound coefficients."""

    def __init__(self, queries: np.ndarray, d_pad: int) -> None:
        n_q, d = queries.shape
        self.n_q_pad = -(-n_q // MR) * MR
        qz = quantize(queries, d_pad)
        q8 = np.zeros((self.n_q_pad, d_pad), np.int8)
        q8[:n_q] = qz["q"]
        self.q = q8
        self.qu = q8.view(np.uint8) ^ np.uint8(0x80)  # q_int + 128 as unsigned bytes
        self.scale = qz["scale"]
        qn = qz["norm"].astype(np.float64)
        dq = qz["resid"].astype(np.float64)
        # |s - a| <= c1 |dx| + c2 |x|: (|q| + |dq|) |dx| + |dq| |x| + d 2^-24 |q| |x|
        self.c1 = SAFETY * (qn + dq)
        self.c2 = SAFETY * (dq + d * 2.0**-24 * qn)


# ------------------------------------------------------------------------- int8 score kernels
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_V16 = ir.VectorType(_I32, 16)


def _data_ptr(context, builder, arr_type, arr, elem):
    proxy = cgutils.create_struct_proxy(arr_type)(context, builder, value=arr)
    return builder.bitcast(proxy.data, elem.as_pointer()), proxy


@intrinsic
def _vnni_tile(typingctx, qu, packed, corr, out, i0, blk, col0):
    """``out[i0 + i, col0 + c] = sum_p qu[i0 + i, p] * x[blk * NR + c, p] - corr[blk * NR + c]``
    for ``i < MR``, ``c < NR``: an MR x NR register tile of VPDPBUSD accumulators over all
    groups of 4 dims (``packed[blk]`` holds NR rows x 4 dims per 64-byte group)."""
    sig = types.void(qu, packed, corr, out, i0, blk, col0)

    def codegen(context, builder, signature, args):
        qa, xa, ca, oa, i0v, bv, c0v = args
        i8 = ir.IntType(8)
        qd, _ = _data_ptr(context, builder, signature.args[0], qa, i8)
        xd, xproxy = _data_ptr(context, builder, signature.args[1], xa, i8)
        cd, _ = _data_ptr(context, builder, signature.args[2], ca, _I32)
        od, oproxy = _data_ptr(context, builder, signature.args[3], oa, _I32)
        groups = builder.extract_value(xproxy.shape, 1)  # packed: (blocks, d/4, NR, 4)
        width = builder.extract_value(oproxy.shape, 1)
        d = builder.mul(groups, ir.Constant(_I64, 4))
        fn = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(_V16, [_V16, _V16, _V16]),
            "llvm.x86.avx512.vpdpbusd.512",
        )
        accs = [cgutils.alloca_once_value(builder, ir.Constant(_V16, None)) for _ in range(MR * NV)]
        step = ir.Constant(_I64, NR * 4)
        xbase = builder.gep(xd, [builder.mul(builder.mul(bv, groups), step)])
        qrows = [
            builder.gep(qd, [builder.mul(builder.add(i0v, ir.Constant(_I64, i)), d)])
            for i in range(MR)
        ]
        with cgutils.for_range(builder, groups) as loop:
            p = loop.index
            xs = []
            for v in range(NV):
                off = builder.add(builder.mul(p, step), ir.Constant(_I64, 64 * v))
                ptr = builder.bitcast(builder.gep(xbase, [off]), _V16.as_pointer())
                xs.append(builder.load(ptr, align=1))
            for i in range(MR):
                ptr = builder.gep(qrows[i], [builder.mul(p, ir.Constant(_I64, 4))])
                word = builder.load(builder.bitcast(ptr, _I32.as_pointer()), align=1)
                one = builder.insert_element(ir.Constant(_V16, None), word, ir.Constant(_I32, 0))
                splat = builder.shuffle_vector(
                    one, ir.Constant(_V16, None), ir.Constant(_V16, [0] * 16)
                )
                for v in range(NV):
                    acc = accs[i * NV + v]
                    builder.store(builder.call(fn, [builder.load(acc), splat, xs[v]]), acc)
        cbase = builder.mul(bv, ir.Constant(_I64, NR))
        for v in range(NV):
            cptr = builder.gep(cd, [builder.add(cbase, ir.Constant(_I64, 16 * v))])
            c = builder.load(builder.bitcast(cptr, _V16.as_pointer()), align=1)
            for i in range(MR):
                row = builder.mul(builder.add(i0v, ir.Constant(_I64, i)), width)
                col = builder.add(c0v, ir.Constant(_I64, 16 * v))
                optr = builder.gep(od, [builder.add(row, col)])
                builder.store(
                    builder.sub(builder.load(accs[i * NV + v]), c),
                    builder.bitcast(optr, _V16.as_pointer()),
                    align=1,
                )
        return context.get_dummy_value()

    return sig, codegen


@njit(nogil=True)
def score_block_vnni(qu, packed, corr, blk0, n_blk, out):
    """``out[:, :n_blk * NR]`` = int8 scores of all (padded) queries ``qu`` (u8, +128) with
    packed blocks ``blk0 .. blk0 + n_blk``; each block's tile stays in L1 while every query
    block passes over it."""
    for b in range(n_blk):
        for i0 in range(0, qu.shape[0], MR):
            _vnni_tile(qu, packed, corr, out, i0, blk0 + b, b * NR)


@njit(nogil=True, fastmath=True)
def score_block_autovec(qu, x8, corr, out):
    """``out[i, j] = qu[i] . x8[j] - corr[j]``: the plain loop (LLVM vectorises the inner
    reduction with vpmovzxbd/vpmovsxbd + vpdpwssd, 16 multiply-adds per instruction)."""
    for j in range(x8.shape[0]):
        xj = x8[j]
        c = corr[j]
        for i in range(qu.shape[0]):
            qi = qu[i]
            acc = np.int32(0)
            for p in range(qi.shape[0]):
                acc += np.int32(qi[p]) * np.int32(xj[p])
            out[i, j] = acc - c


# ----------------------------------------------------------------------- int8 candidate merge
@njit(inline="always")
def _replace_root(hs, hr, k, s, r):
    """Replace the worst of a worst-at-root heap and sift down (copied from kernels/dense.py)."""
    i = 0
    while True:
        c = 2 * i + 1
        if c >= k:
            break
        c2 = c + 1
        if c2 < k and worse(hs[c2], hr[c2], hs[c], hr[c]):
            c = c2
        if worse(hs[c], hr[c], s, r):
            hs[i] = hs[c]
            hr[i] = hr[c]
            i = c
        else:
            break
    hs[i] = s
    hr[i] = r


@njit(inline="always")
def _screen(low, e_max, sq):
    """A float32 threshold on ``float32(P) * s_x``: a row below it has ``a + e < low`` for
    any error ``e <= e_max`` (``a = s_q s_x P``), with slack for the float32 product."""
    if low == -np.inf or sq == 0.0:
        return np.float32(-np.inf)
    y = np.float64(low) - e_max
    y = (y - 2.0**-20 * (abs(y) + e_max)) / sq  # the slack merge_block_int8 adds to e
    return _round_down(y - 2.0**-18 * abs(y) - 2.0**-60)


@njit(nogil=True, fastmath=FASTMATH)
def merge_block_int8(
    block, m, row0, sx, rx, nx, q0, sq, c1, c2, heap_s, heap_r, cand_s, cand_r, n_cand, over
):
    """Merge int32 scores ``block[i, :m]`` (rows ``row0 + j``) of queries ``q0 + i``, as
    ``merge_block_bf16`` does for bf16: row ``r`` scores ``a = sq[q] sx[r] P`` and its exact
    score lies within ``e = c1[q] rx[r] + c2[q] nx[r]`` of ``a``; ``heap_*[q]`` keeps the k
    largest lower ends, rows whose upper end reaches its root go to ``cand_*[q]`` (upper end
    and row). Scores are screened 64 at a time (float32) against the largest error."""
    k = heap_s.shape[1]
    cap = cand_s.shape[1]
    vals = np.empty(GROUP, np.float32)
    r_max = 0.0
    n_max = 0.0
    for j in range(m):
        r_max = max(r_max, np.float64(rx[row0 + j]))
        n_max = max(n_max, np.float64(nx[row0 + j]))
    for i in range(block.shape[0]):
        q = q0 + i
        if over[q]:
            continue
        hs = heap_s[q]
        hr = heap_r[q]
        s_q = np.float64(sq[q])
        a1 = c1[q]
        a2 = c2[q]
        e_max = a1 * r_max + a2 * n_max
        low = hs[0]
        thr = _screen(low, e_max, s_q)
        row = block[i]
        n = n_cand[q]
        j = 0
        while j < m and not over[q]:
            g = min(GROUP, m - j)
            rj = row[j : j + g]  # slices: plain indexing would wrap negative indices (gathers)
            sj = sx[row0 + j : row0 + j + g]
            for t in range(GROUP):
                vals[t] = np.float32(rj[t]) * sj[t] if t < g else np.float32(-np.inf)
            hit = 0
            for t in range(GROUP):
                hit |= np.int32(vals[t] >= thr)
            if hit:
                for t in range(g):
                    if not vals[t] >= thr:
                        continue
                    r = row0 + j + t
                    a = s_q * np.float64(sx[r]) * np.float64(row[j + t])
                    e = a1 * np.float64(rx[r]) + a2 * np.float64(nx[r])
                    e += 2.0**-20 * (abs(a) + e)
                    hi = _round_up(a + e)
                    if not hi >= low:
                        continue
                    if n == cap:  # drop candidates the risen bar has left behind
                        keep = 0
                        for u in range(n):
                            if cand_s[q, u] >= low:
                                cand_s[q, keep] = cand_s[q, u]
                                cand_r[q, keep] = cand_r[q, u]
                                keep += 1
                        n = keep
                        if 4 * n > 3 * cap:
                            over[q] = True
                            break
                    cand_s[q, n] = hi
                    cand_r[q, n] = r
                    n += 1
                    lo = _round_down(a - e)
                    if lo > low:
                        _replace_root(hs, hr, k, lo, r)
                        low = hs[0]
                        thr = _screen(low, e_max, s_q)
            j += GROUP
        n_cand[q] = n


# ------------------------------------------------------------------------------ first passes
def _new_heaps(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    return np.full(shape, -np.inf, np.float32), np.full(shape, _dense.ROW_SENTINEL, np.int64)


def _candidate_buffers(n_q: int, k: int, cap: int) -> tuple[np.ndarray, ...]:
    heap_s, heap_r = _new_heaps((n_q, k))
    return (
        heap_s,
        heap_r,
        np.empty((n_q, cap), np.float32),
        np.empty((n_q, cap), np.int64),
        np.zeros(n_q, np.int64),
        np.zeros(n_q, np.bool_),
    )


def run_workers(
    worker: Callable[[Iterator[int]], Any],
    n_chunks: int,
    threads: int,
    pool: concurrent.futures.ThreadPoolExecutor,
) -> list[Any]:
    """``threads`` workers pull chunk ids in ascending order (as flat._blocked does)."""
    if threads <= 1:
        return [worker(iter(range(n_chunks)))]
    ids = itertools.count()
    jobs = [pool.submit(worker, _until(ids, n_chunks)) for _ in range(threads)]
    return [j.result() for j in jobs]


def _until(ids: Iterator[int], stop: int) -> Iterator[int]:
    for c in ids:
        if c >= stop:
            return
        yield c


def _torch_worker_setup(torch: Any) -> None:
    torch.set_num_threads(1)


def bf16_first_pass(
    torch: Any, approx: flat.Bf16Corpus, queries: np.ndarray, k: int, cap: int, threads: int, pool
) -> list[tuple[np.ndarray, ...]]:
    """flat._bf16_search's first pass (its worker loop with merge_block_bf16), returning each
    worker's (heap_s, heap_r, cand_s, cand_r, n_cand, over)."""
    n_q, dim = queries.shape
    n = approx.n
    q_corpus = flat.Bf16Corpus(dim)  # 64-byte aligned bf16 bits of the queries
    q_corpus.update(queries)
    coef, rel = flat.bf16_error_bound(queries)
    zero = np.zeros_like(coef)  # merge_block_bf16's second error weight: unused for bf16
    qt = torch.from_numpy(q_corpus.bits[:n_q].view(np.int16)).view(torch.bfloat16)
    xt = torch.from_numpy(approx.bits[:n].view(np.int16)).view(torch.bfloat16)
    n_chunks = -(-n // CHUNK)
    empty_mask = np.zeros(0, np.bool_)

    def worker(chunks: Iterator[int]) -> tuple[np.ndarray, ...]:
        _torch_worker_setup(torch)
        bufs = _candidate_buffers(n_q, k, cap)
        out = torch.empty((n_q * CHUNK,), dtype=torch.bfloat16)
        out_bits = out.view(torch.int16).numpy().view(np.uint16)
        for c in chunks:
            c0 = c * CHUNK
            m = min(CHUNK, n - c0)
            torch.mm(qt, xt[c0 : c0 + m].T, out=out[: n_q * m].view(n_q, m))
            norms = approx.norms[c0 : c0 + m]
            _quant.merge_block_bf16(
                out_bits[: n_q * m].reshape(n_q, m),
                m,
                c0,
                norms,
                norms,
                empty_mask,
                False,
                0,
                coef,
                zero,
                rel,
                *bufs,
            )
        return bufs

    return run_workers(worker, n_chunks, threads, pool)


def int8_first_pass(
    kernel: str,
    torch: Any,
    corpus: Int8Corpus,
    queries: np.ndarray,
    k: int,
    cap: int,
    threads: int,
    pool,
    apriori: bool = False,
) -> list[tuple[np.ndarray, ...]]:
    """Quantise the queries, score every chunk in int8 (``kernel``: "vnni" or "torch"), merge
    with merge_block_int8; returns each worker's candidate buffers."""
    n_q = queries.shape[0]
    n = corpus.n
    qq = Int8Queries(queries, corpus.d_pad)
    rx = corpus.resid_apriori if apriori else corpus.resid
    n_chunks = -(-n // CHUNK)
    qt = torch.from_numpy(qq.q[:n_q]) if kernel == "torch" else None
    xt = torch.from_numpy(corpus.q) if kernel == "torch" else None

    def worker(chunks: Iterator[int]) -> tuple[np.ndarray, ...]:
        bufs = _candidate_buffers(n_q, k, cap)
        if kernel == "torch":
            _torch_worker_setup(torch)
            out_t = torch.empty((n_q * CHUNK,), dtype=torch.int32)
            out_np = out_t.numpy()
        else:
            out = np.empty((qq.n_q_pad, CHUNK), np.int32)
        for c in chunks:
            c0 = c * CHUNK
            m = min(CHUNK, n - c0)
            if kernel == "torch":
                torch._int_mm(qt, xt[c0 : c0 + m].T, out=out_t[: n_q * m].view(n_q, m))
                block = out_np[: n_q * m].reshape(n_q, m)
            else:
                score_block_vnni(qq.qu, corpus.packed, corpus.corr, c0 // NR, -(-m // NR), out)
                block = out[:n_q]
            merge_block_int8(
                block, m, c0, corpus.scale, rx, corpus.norm, 0, qq.scale, qq.c1, qq.c2, *bufs
            )
        return bufs

    return run_workers(worker, n_chunks, threads, pool)


def finish(
    vectors: np.ndarray,
    queries: np.ndarray,
    k: int,
    parts: list[tuple[np.ndarray, ...]],
    threads: int,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Rescore the candidates exactly (flat._bf16_search's second half): returns rows, scores
    and candidate statistics (rows rescored per query, queries sent to the float32 search)."""
    n_q = queries.shape[0]
    low_s, low_r = _new_heaps((n_q, k))
    _dense.merge_candidates(
        np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts]), low_s, low_r
    )
    cand_s = np.stack([p[2] for p in parts])
    cand_r = np.stack([p[3] for p in parts])
    n_cand = np.stack([p[4] for p in parts])
    over = np.logical_or.reduce([p[5] for p in parts])
    heap_s, heap_r = _new_heaps((n_q, k))
    numba.set_num_threads(threads)
    _quant.rescore_candidates(vectors, queries, low_s, cand_s, cand_r, n_cand, over, heap_s, heap_r)
    rows = np.empty((n_q, k), np.int64)
    scores = np.empty((n_q, k), np.float32)
    counts = np.empty(n_q, np.int32)
    _dense.finalize_topk(heap_s, heap_r, -np.inf, rows, scores, counts)
    if over.any():
        redo = np.flatnonzero(over)
        r2, s2, _ = flat.exact_search(vectors, queries[redo], k, num_threads=threads)
        rows[redo], scores[redo] = r2, s2
    return rows, scores, {"over": over, "low": low_s[:, 0], "cand_s": cand_s, "n_cand": n_cand}


def rescored_counts(stats: dict[str, Any]) -> np.ndarray:
    """Rows rescored per query: candidates whose upper end reaches the final k-th lower end
    (-1 for a query sent to the float32 search)."""
    cs, nc, low = stats["cand_s"], stats["n_cand"], stats["low"]
    w, n_q, cap = cs.shape
    valid = np.arange(cap)[None, None, :] < nc[:, :, None]
    out = ((cs >= low[None, :, None]) & valid).sum(axis=(0, 2))
    out[stats["over"]] = -1
    return out


# ------------------------------------------------------------------------------------- data
def unit(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def make_data(
    kind: str, n: int, n_q: int, dim: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded unit-norm float32 corpus and queries.

    random: Gaussian. clustered: 256 Gaussian clusters (centre + 0.5 x noise of equal norm;
    same-cluster cosine ~0.8), queries drawn the same way. outliers: Gaussian with 8 of the
    dims scaled by 4 (transformer embeddings often have a few such dims), which raises
    ``max|x|`` and so the int8 step.
    """
    rng = np.random.default_rng(seed)
    if kind == "random":
        x = rng.standard_normal((n, dim), dtype=np.float32)
        q = rng.standard_normal((n_q, dim), dtype=np.float32)
    elif kind == "clustered":
        centres = unit(rng.standard_normal((256, dim), dtype=np.float32))

        def draw(m: int) -> np.ndarray:
            noise = unit(rng.standard_normal((m, dim), dtype=np.float32))
            return centres[rng.integers(0, 256, m)] + np.float32(0.5) * noise

        x, q = draw(n), draw(n_q)
    elif kind == "outliers":
        x = rng.standard_normal((n, dim), dtype=np.float32)
        q = rng.standard_normal((n_q, dim), dtype=np.float32)
        x[:, :8] *= 4
        q[:, :8] *= 4
    else:
        raise ValueError(kind)
    return unit(x), unit(q)


# ---------------------------------------------------------------------------------- helpers
def load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def timed_rounds(
    methods: dict[str, Callable[[], Any]], repeats: int
) -> tuple[dict[str, list[float]], list[float], list[float]]:
    """Warm each method up, then ``repeats`` rounds running every method once (interleaved)."""
    for fn in methods.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in methods}
    load0 = load()
    for _ in range(repeats):
        for name, fn in methods.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times, load0, load()


def scores_only(
    name: str,
    torch: Any,
    x: np.ndarray,
    q: np.ndarray,
    approx: flat.Bf16Corpus,
    corpus: Int8Corpus,
    threads: int,
    pool,
    frac: float = 1.0,
) -> Callable[[], None]:
    """A callable scoring every query against the first ``frac`` of the corpus with one
    kernel (workers pull chunks; output into a per-worker block buffer, as FlatIndex)."""
    n_q = q.shape[0]
    n = int(corpus.n * frac)
    n_chunks = -(-n // CHUNK)
    if name == "bf16":
        qb = flat.Bf16Corpus(q.shape[1])
        qb.update(q)
        qt = torch.from_numpy(qb.bits[:n_q].view(np.int16)).view(torch.bfloat16)
        xt = torch.from_numpy(approx.bits[: approx.n].view(np.int16)).view(torch.bfloat16)
    qq = Int8Queries(q, corpus.d_pad)
    q8t, x8t = torch.from_numpy(qq.q[:n_q]), torch.from_numpy(corpus.q)

    def worker(chunks: Iterator[int]) -> None:
        torch.set_num_threads(1)
        if name == "bf16":
            out_t = torch.empty((n_q * CHUNK,), dtype=torch.bfloat16)
        elif name == "int_mm":
            out_t = torch.empty((n_q * CHUNK,), dtype=torch.int32)
        elif name == "sgemm":
            buf = np.empty(n_q * CHUNK, np.float32)
        else:
            out = np.empty((qq.n_q_pad, CHUNK), np.int32)
        for c in chunks:
            c0 = c * CHUNK
            m = min(CHUNK, n - c0)
            if name == "sgemm":
                np.matmul(q, x[c0 : c0 + m].T, out=buf[: n_q * m].reshape(n_q, m))
            elif name == "bf16":
                torch.mm(qt, xt[c0 : c0 + m].T, out=out_t[: n_q * m].view(n_q, m))
            elif name == "int_mm":
                torch._int_mm(q8t, x8t[c0 : c0 + m].T, out=out_t[: n_q * m].view(n_q, m))
            elif name == "vnni":
                score_block_vnni(qq.qu, corpus.packed, corpus.corr, c0 // NR, -(-m // NR), out)
            elif name == "autovec":
                score_block_autovec(qq.qu, corpus.q[c0 : c0 + m], corpus.corr[c0 : c0 + m], out)

    return lambda: run_workers(worker, n_chunks, threads, pool)


def asm_report() -> dict[str, Any]:
    """Instruction counts in the compiled kernels: VPDPBUSD in the VNNI kernel, and what LLVM
    made of the plain loop."""
    out = {}
    for name, disp in (("vnni", score_block_vnni), ("autovec", score_block_autovec)):
        asm = disp.inspect_asm(disp.signatures[0])
        out[name] = {
            ins: len(re.findall(rf"\b{ins}\b", asm))
            for ins in (
                "vpdpbusd",
                "vpdpwssd",
                "vpmaddubsw",
                "vpmaddwd",
                "vpbroadcastd",
                "vpmovzxbd",
            )
        }
    return out


def check_kernels(torch: Any) -> None:
    """The int8 kernels agree with exact integer arithmetic (odd sizes: padding paths)."""
    rng = np.random.default_rng(1)
    x = unit(rng.standard_normal((3 * NR + 5, 36), dtype=np.float32))
    q = unit(rng.standard_normal((MR + 3, 36), dtype=np.float32))
    corpus = Int8Corpus(x)
    qq = Int8Queries(q, corpus.d_pad)
    want = qq.q[: q.shape[0]].astype(np.int64) @ corpus.q.astype(np.int64).T
    out = np.empty((qq.n_q_pad, CHUNK), np.int32)
    score_block_vnni(qq.qu, corpus.packed, corpus.corr, 0, corpus.packed.shape[0], out)
    assert np.array_equal(out[: q.shape[0], : x.shape[0]], want), "VNNI kernel"
    out2 = np.empty((qq.n_q_pad, x.shape[0]), np.int32)
    score_block_autovec(qq.qu, corpus.q, corpus.corr, out2)
    assert np.array_equal(out2[: q.shape[0]], want), "auto-vectorised kernel"
    q8 = np.zeros((16, corpus.d_pad), np.int8)
    q8[: q.shape[0]] = qq.q[: q.shape[0]]
    x8 = np.zeros((208, corpus.d_pad), np.int8)
    x8[: x.shape[0]] = corpus.q
    got = torch._int_mm(torch.from_numpy(q8), torch.from_numpy(x8).T).numpy()
    assert np.array_equal(got[: q.shape[0], : x.shape[0]], want), "torch._int_mm"


# -------------------------------------------------------------------------------- the probe
def probe_throughput(torch, dims, n, n_q, threads_list, repeats, pool) -> list[dict[str, Any]]:
    rows = []
    for dim in dims:
        x, q = make_data("random", n, n_q, dim)
        approx = flat.Bf16Corpus(dim)
        approx.update(x)
        corpus = Int8Corpus(x)
        for threads in threads_list:
            methods = {
                name: scores_only(name, torch, x, q, approx, corpus, threads, pool, frac)
                for name, frac in (
                    ("sgemm", 1.0),
                    ("bf16", 1.0),
                    ("int_mm", 1.0),
                    ("vnni", 1.0),
                    ("autovec", 0.125),
                )
            }
            times, l0, l1 = timed_rounds(methods, repeats)
            for name, ts in times.items():
                frac = 0.125 if name == "autovec" else 1.0
                ops = 2.0 * n_q * int(n * frac) * dim
                rows.append(
                    {
                        "dim": dim,
                        "threads": threads,
                        "kernel": name,
                        "n_rows": int(n * frac),
                        "median_s": median(ts),
                        "gops": ops / median(ts) / 1e9,
                        "best_gops": ops / min(ts) / 1e9,
                        "times_s": ts,
                        "load_start": l0,
                        "load_end": l1,
                    }
                )
                print(
                    f"throughput d={dim} t={threads} {name}: {rows[-1]['gops']:.0f} GOP/s "
                    f"(best {rows[-1]['best_gops']:.0f}) load {l0} -> {l1}",
                    flush=True,
                )
        del x, q, approx, corpus
    return rows


def probe_e2e(
    torch, dims, kinds, n, n_q, k, threads_list, repeats, pool, cap=None
) -> list[dict[str, Any]]:
    return [
        row
        for kind in kinds
        for dim in dims
        for row in _e2e_one(torch, kind, dim, n, n_q, k, threads_list, repeats, pool, cap)
    ]


def _e2e_one(
    torch, kind, dim, n, n_q, k, threads_list, repeats, pool, cap=None
) -> list[dict[str, Any]]:
    """First pass and whole search per method; ``cap``: candidate buffer of this probe's
    passes (default: flat.py's); ``search_bf16_flat`` always runs with flat.py's."""
    rows = []
    cap = cap or max(flat.BF16_CANDIDATES, 16 * k)
    x, q = make_data(kind, n, n_q, dim)
    t0 = time.perf_counter()
    approx = flat.Bf16Corpus(dim)
    approx.update(x)
    t_bf16_copy = time.perf_counter() - t0
    t0 = time.perf_counter()
    corpus = Int8Corpus(x)
    t_int8_copy = time.perf_counter() - t0
    for threads in threads_list:

        def fp(name: str, threads: int = threads) -> Callable[[], Any]:
            if name == "bf16":
                return lambda: bf16_first_pass(torch, approx, q, k, cap, threads, pool)
            return lambda: int8_first_pass(name, torch, corpus, q, k, cap, threads, pool)

        def full(name: str, threads: int = threads) -> Callable[[], Any]:
            return lambda: finish(x, q, k, fp(name, threads)(), threads)

        methods = {
            "first_pass_bf16": fp("bf16"),
            "first_pass_int8_torch": fp("torch"),
            "first_pass_int8_vnni": fp("vnni"),
            "search_float32": lambda threads=threads: flat.exact_search(
                x, q, k, num_threads=threads
            ),
            "search_bf16_flat": lambda threads=threads: flat.exact_search(
                x, q, k, num_threads=threads, approx=approx
            ),
            "search_bf16": full("bf16"),
            "search_int8_torch": full("torch"),
            "search_int8_vnni": full("vnni"),
        }
        times, l0, l1 = timed_rounds(methods, repeats)
        row = {
            "data": kind,
            "dim": dim,
            "threads": threads,
            "k": k,
            "cap": cap,
            "load_start": l0,
            "load_end": l1,
            "bf16_copy_s": t_bf16_copy,
            "int8_copy_s": t_int8_copy,
        }
        for name, ts in times.items():
            row[name + "_s"] = median(ts)
            row[name + "_times"] = ts
        for name in ("bf16", "vnni"):  # queries the production buffer sent to float32
            stats = finish(x, q, k, fp(name)(), threads)[2]
            row[f"over_{name}"] = int(stats["over"].sum())
            row[f"rescored_{name}_mean"] = float(rescored_counts(stats).mean())
        rows.append(row)
        print(
            f"e2e {kind} d={dim} t={threads}: "
            + ", ".join(f"{name} {median(ts) * 1e3:.0f} ms" for name, ts in times.items())
            + f"; load {l0} -> {l1}",
            flush=True,
        )
    return rows


def probe_bound(torch, dims, kinds, n, n_q, k, pool, threads=2) -> list[dict[str, Any]]:
    """Candidates per query and exactness of every method, with an ample buffer."""
    return [
        _bound_one(torch, kind, dim, n, n_q, k, pool, threads) for kind in kinds for dim in dims
    ]


def _bound_one(torch, kind, dim, n, n_q, k, pool, threads) -> dict[str, Any]:
    cap = 16384
    x, q = make_data(kind, n, n_q, dim)
    l0 = load()
    exact_rows, exact_scores, _ = flat.exact_search(x, q, k, num_threads=threads)
    approx = flat.Bf16Corpus(dim)
    approx.update(x)
    corpus = Int8Corpus(x)
    runs = {
        "bf16": lambda: bf16_first_pass(torch, approx, q, k, cap, threads, pool),
        "int8": lambda: int8_first_pass("vnni", torch, corpus, q, k, cap, threads, pool),
        "int8_torch": lambda: int8_first_pass("torch", torch, corpus, q, k, cap, threads, pool),
        "int8_apriori": lambda: int8_first_pass(
            "vnni", torch, corpus, q, k, cap, threads, pool, apriori=True
        ),
    }
    row: dict[str, Any] = {
        "data": kind,
        "dim": dim,
        "k": k,
        "n": n,
        "n_queries": n_q,
        "scale_median": float(np.median(corpus.scale[:n])),
        "resid_median": float(np.median(corpus.resid[:n])),
        "resid_over_apriori": float(np.median(corpus.resid[:n] / corpus.resid_apriori[:n])),
        "kth_score_median": float(np.median(exact_scores[:, -1])),
    }
    for name, fn in runs.items():
        rws, scs, stats = finish(x, q, k, fn(), threads)
        cnt = rescored_counts(stats)
        ok = cnt[cnt >= 0]
        row[name] = {
            "cand_median": float(np.median(ok)) if ok.size else None,
            "cand_p90": float(np.percentile(ok, 90)) if ok.size else None,
            "cand_p99": float(np.percentile(ok, 99)) if ok.size else None,
            "cand_max": int(ok.max()) if ok.size else None,
            "cand_mean": float(ok.mean()) if ok.size else None,
            "over_at_cap_16384": int(stats["over"].sum()),
            "more_than_768": int((cnt > 768).sum() + stats["over"].sum()),
            "mismatched_rows": _mismatched_rows(rws, exact_rows),
            "mismatched_queries": int((rws != exact_rows).any(axis=1).sum()),
            "max_score_diff": float(np.max(np.abs(scs - exact_scores))),
        }
    row["tightness"] = _tightness(torch, x, q[:128], corpus, approx, exact_rows[:128])
    flat_rows, _, _ = flat.exact_search(x, q, k, num_threads=threads, approx=approx)
    row["bf16_flat_mismatched_rows"] = _mismatched_rows(flat_rows, exact_rows)
    row["load_start"], row["load_end"] = l0, load()
    print(
        f"bound {kind} d={dim}: "
        + ", ".join(
            f"{name} median {row[name]['cand_median']} p99 {row[name]['cand_p99']:.0f} "
            f"mismatch {row[name]['mismatched_rows']}"
            for name in runs
        ),
        flush=True,
    )
    return row


def _tightness(torch, x, q, corpus, approx, exact_rows) -> dict[str, Any]:
    """On a sample of queries and every row: the largest and median ``|real - a| / e`` (real =
    float64 score; <= 1 is what the bound promises) for int8 and bf16, and the rank, in
    approximate-score order, of the last true top-k row (the fewest candidates an oracle would
    need; median and max over the sample)."""
    n_q, dim = q.shape
    real = q.astype(np.float64) @ x.astype(np.float64).T
    qq = Int8Queries(q, corpus.d_pad)
    p = torch._int_mm(torch.from_numpy(qq.q), torch.from_numpy(corpus.q).T).numpy()[:n_q]
    sx = corpus.scale[: corpus.n].astype(np.float64)
    a8 = qq.scale.astype(np.float64)[:, None] * sx[None, :] * p
    e8 = qq.c1[:, None] * corpus.resid[None, : corpus.n].astype(np.float64) + qq.c2[
        :, None
    ] * corpus.norm[None, : corpus.n].astype(np.float64)
    qb = flat.Bf16Corpus(dim)
    qb.update(q)
    bits = torch.mm(
        torch.from_numpy(qb.bits[:n_q].view(np.int16)).view(torch.bfloat16),
        torch.from_numpy(approx.bits[: approx.n].view(np.int16)).view(torch.bfloat16).T,
    )
    ab = bits.float().numpy().astype(np.float64)
    coef, rel = flat.bf16_error_bound(q)
    eb = coef[:, None] * approx.norms[None, : approx.n].astype(np.float64) + rel * np.abs(ab)
    out = {}
    for name, a, e in (("int8", a8, e8), ("bf16", ab, eb)):
        ratio = np.abs(real - a) / e
        last = np.take_along_axis(a, exact_rows, axis=1).min(axis=1)
        ranks = (a >= last[:, None]).sum(axis=1)
        out[name] = {
            "err_over_bound_max": float(ratio.max()),
            "err_over_bound_median": float(np.median(ratio)),
            "err_max": float(np.abs(real - a).max()),
            "bound_median": float(np.median(e)),
            "oracle_candidates_median": float(np.median(ranks)),
            "oracle_candidates_max": int(ranks.max()),
        }
    return out


def probe_equalize(torch, dims, n, n_q, k, pool, threads=2) -> list[dict[str, Any]]:
    """Per-dimension equalisation before quantising (SmoothQuant-style): ``x' = x / c``,
    ``q' = q c`` with ``c_j = (rms_j / mean rms)^alpha`` over the corpus, so ``q'.x' = q.x``;
    candidates per query of the int8 pass (rescoring uses the original vectors)."""
    rows = []
    for kind in ("outliers", "random"):
        for dim in dims:
            x, q = make_data(kind, n, n_q, dim)
            exact_rows, _, _ = flat.exact_search(x, q, k, num_threads=threads)
            rms = np.sqrt(np.einsum("ij,ij->j", x, x, dtype=np.float64) / x.shape[0])
            for alpha in (0.0, 0.5, 1.0):
                c = (rms / rms.mean()) ** alpha
                corpus = Int8Corpus((x / c).astype(np.float32))
                parts = int8_first_pass(
                    "vnni", torch, corpus, (q * c).astype(np.float32), k, 16384, threads, pool
                )
                got, _, stats = finish(x, q, k, parts, threads)
                cnt = rescored_counts(stats)
                ok = cnt[cnt >= 0]
                rows.append(
                    {
                        "data": kind,
                        "dim": dim,
                        "alpha": alpha,
                        "cand_median": float(np.median(ok)),
                        "cand_p99": float(np.percentile(ok, 99)),
                        "over_at_cap_16384": int(stats["over"].sum()),
                        "mismatched_rows": _mismatched_rows(got, exact_rows),
                        "load": load(),
                    }
                )
                print(
                    f"equalize {kind} d={dim} alpha={alpha}: median {rows[-1]['cand_median']}"
                    f" p99 {rows[-1]['cand_p99']:.0f}",
                    flush=True,
                )
    return rows


def _mismatched_rows(got: np.ndarray, want: np.ndarray) -> int:
    """Rows of ``want``'s top-k (all queries) missing from ``got``'s."""
    return int(sum(len(set(b) - set(a)) for a, b in zip(got, want, strict=True)))


# ---------------------------------------------------------------------------------- report
def to_markdown(res: dict[str, Any]) -> str:
    m = res["machine"]
    out = [
        "# int8 first pass for exact dense top-k: probe (issue 13, goal 2)",
        "",
        f"Machine: {m['cpu']}, {m['usable_cores']} usable cores (AVX-512, AVX512_BF16, "
        f"AVX512_VNNI, no AMX), shared with other jobs; torch {m.get('torch')}, numba "
        f"{m.get('numba')}, llvmlite {m.get('llvmlite')}, numpy {m['numpy']}.",
        f"First full run: commit {m['commit']}, {m['date']}, `{res['command']}`, load "
        f"average (1, 5, 15 min) {[round(v, 2) for v in m['loadavg_at_start']]} at start, "
        f"{res['loadavg_at_end']} at end. Medians of {res['repeats']} interleaved repeats; "
        "`load` = 1-minute load average before -> after each group.",
        "",
        "Parts run since then (their rows replace the first run's; each row carries its "
        "`run_date` in the JSON): "
        + "; ".join(
            f"{p}: {r['date']}, `{r['command']}`, load {r['loadavg_at_start'][0]:.2f} -> "
            f"{r['loadavg_at_end'][0]:.2f}"
            for p, runs in res.get("part_runs", {}).items()
            for r in runs
        )
        + ".",
        "",
        "## Score kernels alone (GOP/s, 2 ops per multiply-add)",
        "",
        f"{res['n_queries']} queries x {res['n']:,} rows (autovec: first 1/8 of the rows), "
        "1,024-row chunks pulled by worker threads, single-threaded BLAS/torch per worker.",
        "",
    ]
    tp = res["throughput"]
    keys = sorted({(r["dim"], r["threads"]) for r in tp})
    names = ["sgemm", "bf16", "int_mm", "autovec", "vnni"]
    table = []
    for dim, th in keys:
        by = {r["kernel"]: r for r in tp if r["dim"] == dim and r["threads"] == th}
        table.append(
            [dim, th]
            + [f"{by[nm]['gops']:.0f} ({by[nm]['best_gops']:.0f})" for nm in names]
            + [
                f"{by['vnni']['gops'] / by['bf16']['gops']:.2f}",
                f"{by['sgemm']['load_start'][0]} -> {by['sgemm']['load_end'][0]}",
            ]
        )
    out.append(
        markdown_table(
            [
                "dim",
                "threads",
                "numpy f32 sgemm",
                "torch bf16 mm",
                "torch._int_mm",
                "numba int8 auto-vec",
                "numba int8 VNNI",
                "VNNI / bf16",
                "load",
            ],
            table,
        )
    )
    out += [
        "",
        "Median (best) of the repeats. Assembly of the numba kernels (instruction "
        f"counts): {res['asm']}.",
        "",
    ]
    out += [
        "## End to end (ms for the whole query batch, top-10)",
        "",
        "first pass = quantise/convert queries + scores + candidate selection (bound-based, "
        "the same selection for bf16 and int8); search = first pass + exact float32 "
        "rescoring + merges (results equal the float32 search). `bf16 flat` is "
        "`flat.exact_search` with the bf16 copy (production); `bf16` is this probe's "
        "copy of its loop. rescored = mean rows rescored per query; to f32 = queries "
        "whose candidates overflowed the buffer (searched again in float32).",
        "",
    ]
    table = []
    for r in res["e2e"]:
        table.append(
            [r["data"], r["dim"], r["threads"], r["cap"]]
            + [
                r[c + "_s"] * 1e3
                for c in (
                    "first_pass_bf16",
                    "first_pass_int8_torch",
                    "first_pass_int8_vnni",
                    "search_float32",
                    "search_bf16_flat",
                    "search_bf16",
                    "search_int8_torch",
                    "search_int8_vnni",
                )
            ]
            + [
                f"{r['search_bf16_flat_s'] / r['search_int8_vnni_s']:.2f}",
                f"{r['rescored_bf16_mean']:.0f} / {r['rescored_vnni_mean']:.0f}",
                f"{r['over_bf16']} / {r['over_vnni']}",
                f"{r['load_start'][0]} -> {r['load_end'][0]}",
            ]
        )
    out.append(
        markdown_table(
            [
                "data",
                "dim",
                "threads",
                "cap",
                "1st bf16",
                "1st int8 torch",
                "1st int8 VNNI",
                "search f32",
                "search bf16 flat",
                "search bf16",
                "search int8 torch",
                "search int8 VNNI",
                "bf16 flat / int8 VNNI",
                "rescored bf16 / int8",
                "to f32 bf16 / int8",
                "load",
            ],
            table,
        )
    )
    out += [
        "",
        "One-time corpus copies (s): "
        + ", ".join(
            f"{r['data']} d={r['dim']}: bf16 {r['bf16_copy_s']:.2f}, int8 {r['int8_copy_s']:.2f}"
            for r in res["e2e"]
            if r["threads"] == res["threads"][0]
        ),
        "",
    ]
    out += [
        "## Candidates per query (rows rescored for the exact top-10) and exactness",
        "",
        f"{res['n_queries']} queries x {res['n']:,} rows; the candidates are the rows whose "
        "upper bound reaches the k-th largest lower bound. mismatch = rows of the top-10 "
        "that differ from the float32 search's (all queries). `>768` = queries with more "
        "than 768 rows to rescore (the production buffer, 1,024 per worker, sends a query "
        "to the float32 search when more than 3/4 of it stay live).",
        "",
    ]
    table = []
    for r in res["bound"]:
        for name in ("bf16", "int8", "int8_apriori"):
            b = r[name]
            table.append(
                [
                    r["data"],
                    r["dim"],
                    name,
                    b["cand_median"],
                    b["cand_p90"],
                    b["cand_p99"],
                    b["cand_max"],
                    b["more_than_768"],
                    b["mismatched_rows"],
                    f"{r['kth_score_median']:.3f}",
                ]
            )
    out.append(
        markdown_table(
            [
                "data",
                "dim",
                "bound",
                "median",
                "p90",
                "p99",
                "max",
                ">768",
                "mismatch",
                "10th score (median)",
            ],
            table,
        )
    )
    out += [
        "",
        "int8 via torch._int_mm gives the same integers, so the same candidates: "
        + ", ".join(
            f"{r['data']} d={r['dim']}: mismatch {r['int8_torch']['mismatched_rows']}"
            for r in res["bound"]
        )
        + ". Production bf16 (`exact_search`) mismatches: "
        + ", ".join(
            f"{r['data']} d={r['dim']}: {r['bf16_flat_mismatched_rows']}" for r in res["bound"]
        )
        + ".",
        "",
        "Bound tightness on the first 128 queries x all rows (real = float64 score; "
        "the bound promises |real - a| / e <= 1) and the fewest candidates an oracle needs "
        "(rank of the last true top-10 row in approximate order):",
        "",
        markdown_table(
            [
                "data",
                "dim",
                "pass",
                "e (median)",
                "max |real - a|",
                "max ratio",
                "median ratio",
                "oracle median",
                "oracle max",
            ],
            [
                [
                    r["data"],
                    r["dim"],
                    nm,
                    f"{r['tightness'][nm]['bound_median']:.4f}",
                    f"{r['tightness'][nm]['err_max']:.4f}",
                    f"{r['tightness'][nm]['err_over_bound_max']:.3f}",
                    f"{r['tightness'][nm]['err_over_bound_median']:.3f}",
                    r["tightness"][nm]["oracle_candidates_median"],
                    r["tightness"][nm]["oracle_candidates_max"],
                ]
                for r in res["bound"]
                for nm in ("bf16", "int8")
            ],
        ),
        "",
        "Per-dimension equalisation before quantising (x' = x / c, q' = q c, "
        "c_j = (rms_j / mean rms)^alpha): candidates per query of the int8 pass "
        "(alpha = 0: none).",
        "",
        markdown_table(
            ["data", "dim", "alpha", "median", "p99", "over 16,384", "mismatch"],
            [
                [
                    r["data"],
                    r["dim"],
                    r["alpha"],
                    r["cand_median"],
                    r["cand_p99"],
                    r.get("over_at_cap_16384"),
                    r["mismatched_rows"],
                ]
                for r in res.get("equalize", [])
            ],
        ),
        "",
        "Measured residual norm / a-priori bound (s_x sqrt(d)/2), median: "
        + ", ".join(
            f"{r['data']} d={r['dim']}: {r['resid_over_apriori']:.2f}" for r in res["bound"]
        )
        + ".",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1024)
    ap.add_argument("--dims", type=int, nargs="+", default=[384, 768])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument(
        "--parts",
        nargs="+",
        default=list(PARTS),
        choices=PARTS,
        help="a subset reruns those parts and keeps the others from the last JSON",
    )
    ap.add_argument("--e2e-data", nargs="+", default=["random", "clustered"])
    ap.add_argument(
        "--e2e-cap",
        type=int,
        default=None,
        help="candidate buffer per worker of the probe's passes (default flat.py's)",
    )
    ap.add_argument("--bound-data", nargs="+", default=["random", "clustered", "outliers"])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, results to int8_smoke")
    ap.add_argument("--name", default=None)
    ap.add_argument(
        "--report", action="store_true", help="only rewrite the Markdown from the last results JSON"
    )
    args = ap.parse_args(argv)
    if args.report:
        path = RESULTS_DIR / f"{args.name or 'int8_probe'}.json"
        res = _prune_runs(json.loads(path.read_text()))
        print(write_results(path.stem, res, to_markdown(res)))
        return 0
    if args.smoke:
        args.n, args.queries, args.dims, args.repeats = 5000, 64, [384], 1
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    check_kernels(torch)
    res: dict[str, Any] = {
        "machine": machine_info(["torch", "numba", "llvmlite"]),
        "command": "python bench/probe_int8.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "n": args.n,
        "n_queries": args.queries,
        "dims": args.dims,
        "threads": args.threads,
        "repeats": args.repeats,
        "k": args.k,
        "mr": MR,
        "nv": NV,
        "kernels_from": str(Path(_dense.__file__).resolve()),
        "cpu_flags": sorted(f for f in flat_cpu_flags() if f.startswith(("avx512", "amx"))),
        "asm": asm_report(),
    }
    pool = concurrent.futures.ThreadPoolExecutor(max(args.threads))
    with threadpool_limits(limits=1, user_api="blas"):
        if "throughput" in args.parts:
            res["throughput"] = probe_throughput(
                torch, args.dims, args.n, args.queries, args.threads, args.repeats, pool
            )
        if "e2e" in args.parts:
            res["e2e"] = probe_e2e(
                torch,
                args.dims,
                args.e2e_data,
                args.n,
                args.queries,
                args.k,
                args.threads,
                args.repeats,
                pool,
                args.e2e_cap,
            )
        if "bound" in args.parts:
            res["bound"] = probe_bound(
                torch, args.dims, args.bound_data, args.n, args.queries, args.k, pool
            )
        if "equalize" in args.parts:
            res["equalize"] = probe_equalize(torch, args.dims, args.n, args.queries, args.k, pool)
    res["loadavg_at_end"] = load()
    name = args.name or ("int8_smoke" if args.smoke else "int8_probe")
    out_dir = Path(tempfile.gettempdir()) / "fastrag_int8_smoke" if args.smoke else RESULTS_DIR
    res = _merge_previous(out_dir / f"{name}.json", res, args.parts)
    md = (
        to_markdown(res)
        if {"throughput", "e2e", "bound"} <= res.keys()
        else "(partial run: see the JSON)"
    )
    jp, mp = write_results(name, res, md, out_dir)
    print(f"wrote {jp} and {mp}")
    return 0


def _merge_previous(path: Path, res: dict[str, Any], parts: list[str]) -> dict[str, Any]:
    """Results of this run on top of the last results file: a run of some parts replaces
    those parts; ``part_runs`` says when, how and under what load each part was measured."""
    run = {
        "date": res["machine"]["date"],
        "commit": res["machine"]["commit"],
        "command": res["command"],
        "loadavg_at_start": res["machine"]["loadavg_at_start"],
        "loadavg_at_end": res["loadavg_at_end"],
    }
    for p in PARTS:
        for row in res.get(p, []):
            row["run_date"] = run["date"]
    res["part_runs"] = {p: [run] for p in PARTS if p in parts}
    if set(PARTS) <= set(parts) or not path.exists():
        return res
    old = json.loads(path.read_text())
    for p in PARTS:
        if p in parts:  # rows of this run replace rows of the same case, others stay
            new_keys = {_row_key(r) for r in res[p]}
            old[p] = [r for r in old.get(p, []) if _row_key(r) not in new_keys] + res[p]
            old.setdefault("part_runs", {}).setdefault(p, []).append(run)
    return _prune_runs(old)


def _prune_runs(res: dict[str, Any]) -> dict[str, Any]:
    """Drop the records of part runs none of whose rows are left."""
    for p, runs in res.get("part_runs", {}).items():
        dates = {row.get("run_date") for row in res.get(p, [])}
        res["part_runs"][p] = [r for r in runs if r["date"] in dates]
    return res


def _row_key(row: dict[str, Any]) -> tuple:
    return tuple(row.get(key) for key in ("data", "dim", "threads", "kernel", "alpha", "cap"))


def flat_cpu_flags() -> set[str]:
    from fastrag._blas import cpu_flags

    return cpu_flags()


if __name__ == "__main__":
    raise SystemExit(main())
