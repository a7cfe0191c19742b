"""int8 first-pass scores on AVX512-VNNI (``VPDPBUSD``): a GEMM micro-kernel in LLVM IR.

numba cannot emit ``VPDPBUSD`` (LLVM only forms it from the intrinsic), so this kernel is LLVM
IR compiled by llvmlite, numba's own code generator: no new dependency. It is compiled once per
process on first use (30-50 ms), not cached like the numba kernels, and called through ctypes,
which releases the GIL, so search workers run it in parallel.

``scores_bf16(q8, kq, sq, xp, sx, out, nb, mp, dp)`` writes, for query ``i < nb`` and row
``j < mp``, the bfloat16 bits (round to nearest even) of

    a[i, j] = float32(C[i, j] - kq[i]) * (sq[i] * sx[j]),   C[i, j] = sum_t q8[i, t] * xu[j, t]

with ``q8`` the signed int8 query codes (``nb x dp``, row-major), ``xu = x8 + 128`` the rows'
unsigned codes packed 16 rows at a time (``xp[j // 16, t // 4, j % 16, t % 4]``),
``kq[i] = 128 * sum_t q8[i, t]`` (so ``C - kq`` is the exact integer dot product ``q8 . x8``),
``sq`` / ``sx`` the scales. ``nb`` must be a multiple of ``MR``, ``mp`` of ``NR``, ``dp`` of 4.
Tiles are ``MR`` queries x ``NR`` rows: 24 accumulators, one 64-byte load per 16 rows and one
broadcast per query for each 4 dimensions (4 x 6 ``VPDPBUSD``), ~93% of the instruction's peak
on one Zen 4/5 core (``docs/dense.md``).
"""

from __future__ import annotations

import threading
from typing import Any

from ._llvm import I64, PTR, compile_ir, host_has

MR = 6  # queries per tile
NR = 64  # rows per tile (4 vectors of 16 int32 lanes)
_NV = NR // 16
_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}


def _ir() -> str:
    lines: list[str] = []
    a = lines.append
    v16i, v16f = "<16 x i32>", "<16 x float>"
    a(f"declare {v16i} @llvm.x86.avx512.vpdpbusd.512({v16i}, {v16i}, {v16i})")
    a(
        "define void @scores_bf16(i8* %q, i32* %kq, float* %sq, i8* %xp, float* %sx, i16* %out,"
        " i64 %nb, i64 %mp, i64 %dp, i64 %ldc) {"
    )
    a("entry:")
    a("  %k4n = lshr i64 %dp, 2")
    a("  %grp = shl i64 %dp, 4")  # bytes per 16 packed rows
    a("  br label %jl")
    a("jl:")  # tiles of NR rows
    a("  %j = phi i64 [0, %entry], [%jn, %jl_next]")
    a("  %xbase = mul i64 %j, %dp")  # (j / 16) * 16 * dp
    a("  br label %il")
    a("il:")  # tiles of MR queries
    a("  %i = phi i64 [0, %jl], [%in, %il_end]")
    a("  %qbase = mul i64 %i, %dp")
    a("  br label %kl")
    a("kl:")
    a("  %k = phi i64 [0, %il], [%kn, %kl]")
    for r in range(MR):
        for g in range(_NV):
            a(f"  %acc{r}_{g} = phi {v16i} [zeroinitializer, %il], [%nacc{r}_{g}, %kl]")
    a("  %kb = shl i64 %k, 6")
    for g in range(_NV):
        a(f"  %xo{g} = add i64 %xbase, %kb")
        a(f"  %xg{g} = mul i64 %grp, {g}")
        a(f"  %xa{g} = add i64 %xo{g}, %xg{g}")
        a(f"  %xp{g} = getelementptr i8, i8* %xp, i64 %xa{g}")
        a(f"  %xc{g} = bitcast i8* %xp{g} to {v16i}*")
        a(f"  %xv{g} = load {v16i}, {v16i}* %xc{g}, align 1")
    a("  %k4 = shl i64 %k, 2")
    for r in range(MR):
        a(f"  %qr{r} = mul i64 %dp, {r}")
        a(f"  %qo{r} = add i64 %qbase, %qr{r}")
        a(f"  %qa{r} = add i64 %qo{r}, %k4")
        a(f"  %qp{r} = getelementptr i8, i8* %q, i64 %qa{r}")
        a(f"  %qc{r} = bitcast i8* %qp{r} to i32*")
        a(f"  %qw{r} = load i32, i32* %qc{r}, align 1")
        a(f"  %qi{r} = insertelement {v16i} undef, i32 %qw{r}, i32 0")
        a(f"  %qb{r} = shufflevector {v16i} %qi{r}, {v16i} undef, {v16i} zeroinitializer")
        for g in range(_NV):
            a(
                f"  %nacc{r}_{g} = call {v16i} @llvm.x86.avx512.vpdpbusd.512({v16i} %acc{r}_{g},"
                f" {v16i} %xv{g}, {v16i} %qb{r})"
            )
    a("  %kn = add i64 %k, 1")
    a("  %kc = icmp ult i64 %kn, %k4n")
    a("  br i1 %kc, label %kl, label %store")
    a("store:")
    for g in range(_NV):
        a(f"  %sj{g} = add i64 %j, {16 * g}")
        a(f"  %sp{g} = getelementptr float, float* %sx, i64 %sj{g}")
        a(f"  %sc{g} = bitcast float* %sp{g} to {v16f}*")
        a(f"  %sxv{g} = load {v16f}, {v16f}* %sc{g}, align 4")
    for r in range(MR):
        a(f"  %ri{r} = add i64 %i, {r}")
        a(f"  %kp{r} = getelementptr i32, i32* %kq, i64 %ri{r}")
        a(f"  %ks{r} = load i32, i32* %kp{r}, align 4")
        a(f"  %kv{r}i = insertelement {v16i} undef, i32 %ks{r}, i32 0")
        a(f"  %kv{r} = shufflevector {v16i} %kv{r}i, {v16i} undef, {v16i} zeroinitializer")
        a(f"  %qsp{r} = getelementptr float, float* %sq, i64 %ri{r}")
        a(f"  %qs{r} = load float, float* %qsp{r}, align 4")
        a(f"  %qv{r}i = insertelement {v16f} undef, float %qs{r}, i32 0")
        a(f"  %qv{r} = shufflevector {v16f} %qv{r}i, {v16f} undef, {v16i} zeroinitializer")
        a(f"  %orow{r} = mul i64 %ri{r}, %ldc")
        for g in range(_NV):
            n = f"{r}_{g}"
            a(f"  %d{n} = sub {v16i} %nacc{n}, %kv{r}")
            a(f"  %f{n} = sitofp {v16i} %d{n} to {v16f}")
            a(f"  %s{n} = fmul {v16f} %qv{r}, %sxv{g}")
            a(f"  %v{n} = fmul {v16f} %f{n}, %s{n}")
            # round to nearest even bf16: add 0x7fff plus the lowest kept bit, keep the top half
            a(f"  %b{n} = bitcast {v16f} %v{n} to {v16i}")
            a(f"  %h{n} = lshr {v16i} %b{n}, " + _splat(16))
            a(f"  %l{n} = and {v16i} %h{n}, " + _splat(1))
            a(f"  %e{n} = add {v16i} %b{n}, " + _splat(0x7FFF))
            a(f"  %e2{n} = add {v16i} %e{n}, %l{n}")
            a(f"  %t{n} = lshr {v16i} %e2{n}, " + _splat(16))
            a(f"  %w{n} = trunc {v16i} %t{n} to <16 x i16>")
            a(f"  %oo{n} = add i64 %orow{r}, %sj{g}")
            a(f"  %op{n} = getelementptr i16, i16* %out, i64 %oo{n}")
            a(f"  %oc{n} = bitcast i16* %op{n} to <16 x i16>*")
            a(f"  store <16 x i16> %w{n}, <16 x i16>* %oc{n}, align 2")
    a("  br label %il_end")
    a("il_end:")
    a(f"  %in = add i64 %i, {MR}")
    a("  %ic = icmp ult i64 %in, %nb")
    a("  br i1 %ic, label %il, label %jl_next")
    a("jl_next:")
    a(f"  %jn = add i64 %j, {NR}")
    a("  %jc = icmp ult i64 %jn, %mp")
    a("  br i1 %jc, label %jl, label %done")
    a("done:")
    a("  ret void")
    a("}")
    return "\n".join(lines)


def _splat(value: int) -> str:
    return "<" + ", ".join([f"i32 {value}"] * 16) + ">"


def available() -> bool:
    """Whether this CPU runs ``VPDPBUSD`` on 512-bit vectors (AVX512-VNNI and AVX512BW)."""
    return host_has("avx512vnni", "avx512bw")


def scores_bf16() -> Any:
    """The compiled kernel as a ctypes function (compiled on first call; AVX512-VNNI only)."""
    with _LOCK:
        if "fn" not in _STATE:
            _STATE["fn"] = _compile()
        return _STATE["fn"]


def _compile() -> Any:
    if not available():
        raise RuntimeError("the int8 kernel needs a CPU with AVX512-VNNI")
    return compile_ir(_ir(), "scores_bf16", [PTR] * 6 + [I64] * 4, _STATE)
