"""int8 first-pass scores on AVX2 (``VPMADDUBSW`` + ``VPMADDWD``): a GEMM micro-kernel in LLVM
IR, the AVX2 twin of :mod:`vnni` for CPUs without AVX512-VNNI (AMD Zen 1-3, Intel Haswell to
Comet Lake).

``VPMADDUBSW`` multiplies 32 unsigned by 32 signed bytes and adds adjacent pairs into 16
*saturating* int16 lanes; ``STEPS`` such products are added in int16 before ``VPMADDWD``
widens them into int32 accumulators (fewer multiplies per product than widening each step).
Rows take codes in ``[-XMAX, XMAX]`` stored unsigned (``c + XMAX``, at most ``2 XMAX``),
queries ``[-QMAX, QMAX]``, and one int16 lane adds the products of ``2 STEPS`` dimensions: those
``t`` with the same ``t // DIM_STEP`` and ``t % 4 // 2``. The query codes of each such group
sum to at most ``LANE_CAP`` in absolute value (``dense_quant.quantize_queries`` chooses the
query's scale so), and ``LANE_CAP * 2 XMAX <= 32767``, so every int16 sum is exact. Compiled
once per process by llvmlite (numba's code generator; numba cannot emit these from Python),
called through ctypes, which releases the GIL.

``scores_bf16(q8, kq, sq, xp, sx, out, nb, mp, dp, ldc, thr, flags, ldf, bd, w, w2)`` writes,
for query ``i < nb`` and row ``j < mp``, the bfloat16 bits (round to nearest even) of

    a[i, j] = float32(C[i, j] - kq[i]) * (sq[i] * sx[j]),   C[i, j] = sum_t q8[i, t] * xu[j, t]

with ``q8`` the signed query codes (``nb x dp``, row-major), ``xu`` the rows' unsigned codes
packed 8 rows at a time (``xp[j // 8, t // 4, j % 8, t % 4]``), ``kq[i] = XMAX * sum_t q8[i, t]``
(so ``C - kq`` is the exact integer product of the signed codes), ``sq`` / ``sx`` the scales;
and in ``flags[i * ldf + j // NR]`` (uint16), bit ``j % NR`` set when the row's upper end
``a + bd[4 i] w[j] + bd[4 i + 1] w2[j] + bd[4 i + 2] |a|`` (``a`` as bf16, float32 operations
in that order) is at or above ``thr[i]``, so the merge reads only those rows.
``nb`` must be a multiple of ``MR``, ``mp`` of ``NR``, ``dp`` of ``DIM_STEP``. Tiles are ``MR``
queries x ``NR`` rows (docs/dense.md has the measurements that chose them).
"""

from __future__ import annotations

import threading
from typing import Any

from ._llvm import I64, PTR, compile_ir, host_has

MR = 4  # queries per tile
NR = 16  # rows per tile (2 vectors of 8 int32 lanes)
LANES = 8  # rows per packed group
STEPS = 2  # int16 steps of 4 dimensions before widening
XMAX = 127  # row codes in [-XMAX, XMAX], stored as c + XMAX in [0, 2 XMAX]
QMAX = 64  # query codes in [-QMAX, QMAX]
DIM_STEP = 4 * STEPS  # the packed dimension count is a multiple of this
LANE_CAP = 32767 // (2 * XMAX)  # most sum of |query codes| over the dimensions of one lane
assert 2 * QMAX <= LANE_CAP  # one step alone never needs the cap
_G = NR // LANES
_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}


def _splat(value: int, n: int = 8, kind: str = "i32") -> str:
    return "<" + ", ".join([f"{kind} {value}"] * n) + ">"


def _splat_value(a: Any, name: str, value: str, kind: str) -> None:
    """``%name``: the scalar ``value`` (``kind``: i32 or float) in all 8 lanes."""
    vec = f"<8 x {kind}>"
    a(f"  %{name}i = insertelement {vec} undef, {kind} {value}, i32 0")
    a(f"  %{name} = shufflevector {vec} %{name}i, {vec} undef, <8 x i32> zeroinitializer")


def _load_splat(a: Any, name: str, array: str, index: str, kind: str) -> None:
    """``%name``: ``array[index]`` (a ``kind`` pointer argument) in all 8 lanes."""
    a(f"  %{name}p = getelementptr {kind}, {kind}* %{array}, i64 {index}")
    a(f"  %{name}s = load {kind}, {kind}* %{name}p, align 4")
    _splat_value(a, name, f"%{name}s", kind)


def _ir() -> str:
    lines: list[str] = []
    a = lines.append
    v8i, v8f, v16s, v32b = "<8 x i32>", "<8 x float>", "<16 x i16>", "<32 x i8>"
    a(f"declare {v16s} @llvm.x86.avx2.pmadd.ub.sw({v32b}, {v32b})")
    a(f"declare {v8i} @llvm.x86.avx2.pmadd.wd({v16s}, {v16s})")
    a(f"declare {v8f} @llvm.fabs.v8f32({v8f})")
    a(
        "define void @scores_bf16(i8* %q, i32* %kq, float* %sq, i8* %xp, float* %sx, i16* %out,"
        " i64 %nb, i64 %mp, i64 %dp, i64 %ldc, float* %thr, i16* %flags, i64 %ldf, float* %bd,"
        " float* %w, float* %w2) {"
    )
    a("entry:")
    a(f"  %ksteps = udiv i64 %dp, {DIM_STEP}")
    a("  %grp = shl i64 %dp, 3")  # bytes per 8 packed rows
    a("  br label %jl")
    a("jl:")  # tiles of NR rows
    a("  %j = phi i64 [0, %entry], [%jn, %jl_next]")
    a("  %xbase = mul i64 %j, %dp")  # (j / 8) * 8 * dp
    a("  br label %il")
    a("il:")  # tiles of MR queries
    a("  %i = phi i64 [0, %jl], [%in, %il_end]")
    a("  %qbase = mul i64 %i, %dp")
    a("  br label %kl")
    a("kl:")  # STEPS x 4 dimensions per iteration
    a("  %k = phi i64 [0, %il], [%kn, %kl]")
    for r in range(MR):
        for g in range(_G):
            a(f"  %acc{r}_{g} = phi {v8i} [zeroinitializer, %il], [%nacc{r}_{g}, %kl]")
    a(f"  %kx = mul i64 %k, {STEPS * 32}")
    a(f"  %kd = mul i64 %k, {DIM_STEP}")
    for s in range(STEPS):
        for g in range(_G):
            n = f"{s}_{g}"
            a(f"  %xg{n} = mul i64 %grp, {g}")
            a(f"  %xo{n} = add i64 %xbase, %xg{n}")
            a(f"  %xk{n} = add i64 %xo{n}, %kx")
            a(f"  %xa{n} = add i64 %xk{n}, {32 * s}")
            a(f"  %xp{n} = getelementptr i8, i8* %xp, i64 %xa{n}")
            a(f"  %xc{n} = bitcast i8* %xp{n} to {v32b}*")
            a(f"  %xv{n} = load {v32b}, {v32b}* %xc{n}, align 1")
    for r in range(MR):
        a(f"  %qr{r} = mul i64 %dp, {r}")
        a(f"  %qo{r} = add i64 %qbase, %qr{r}")
        for s in range(STEPS):
            n = f"{r}_{s}"
            a(f"  %qk{n} = add i64 %qo{r}, %kd")
            a(f"  %qa{n} = add i64 %qk{n}, {4 * s}")
            a(f"  %qp{n} = getelementptr i8, i8* %q, i64 %qa{n}")
            a(f"  %qc{n} = bitcast i8* %qp{n} to i32*")
            a(f"  %qw{n} = load i32, i32* %qc{n}, align 1")
            _splat_value(a, f"qb{n}", f"%qw{n}", "i32")
            a(f"  %qv{n} = bitcast {v8i} %qb{n} to {v32b}")
        for g in range(_G):
            for s in range(STEPS):
                n = f"{r}_{g}_{s}"
                a(
                    f"  %p{n} = call {v16s} @llvm.x86.avx2.pmadd.ub.sw({v32b} %xv{s}_{g},"
                    f" {v32b} %qv{r}_{s})"
                )
                prev = "zeroinitializer" if s == 0 else f"%t{r}_{g}_{s - 1}"
                a(f"  %t{n} = add {v16s} {prev}, %p{n}")
            a(
                f"  %w{r}_{g} = call {v8i} @llvm.x86.avx2.pmadd.wd({v16s} %t{r}_{g}_{STEPS - 1},"
                f" {v16s} {_splat(1, 16, 'i16')})"
            )
            a(f"  %nacc{r}_{g} = add {v8i} %acc{r}_{g}, %w{r}_{g}")
    a("  %kn = add i64 %k, 1")
    a("  %kc = icmp ult i64 %kn, %ksteps")
    a("  br i1 %kc, label %kl, label %store")
    a("store:")
    for g in range(_G):
        a(f"  %sj{g} = add i64 %j, {LANES * g}")
        a(f"  %sp{g} = getelementptr float, float* %sx, i64 %sj{g}")
        a(f"  %sc{g} = bitcast float* %sp{g} to {v8f}*")
        a(f"  %sxv{g} = load {v8f}, {v8f}* %sc{g}, align 4")
        for arr in ("w", "w2"):  # the rows' error weights
            a(f"  %{arr}p{g} = getelementptr float, float* %{arr}, i64 %sj{g}")
            a(f"  %{arr}c{g} = bitcast float* %{arr}p{g} to {v8f}*")
            a(f"  %{arr}v{g} = load {v8f}, {v8f}* %{arr}c{g}, align 4")
    for r in range(MR):
        a(f"  %ri{r} = add i64 %i, {r}")
        _load_splat(a, f"kv{r}", "kq", f"%ri{r}", "i32")  # per query: offset, scale, threshold
        _load_splat(a, f"qf{r}", "sq", f"%ri{r}", "float")
        _load_splat(a, f"tv{r}", "thr", f"%ri{r}", "float")
        a(f"  %bi{r} = shl i64 %ri{r}, 2")
        for c, name in enumerate(("cf", "cs", "cr")):  # the query's bound coefficients
            a(f"  %{name}i{r} = add i64 %bi{r}, {c}")
            _load_splat(a, f"{name}{r}", "bd", f"%{name}i{r}", "float")
        a(f"  %orow{r} = mul i64 %ri{r}, %ldc")
        for g in range(_G):
            n = f"{r}_{g}"
            a(f"  %d{n} = sub {v8i} %nacc{n}, %kv{r}")
            a(f"  %f{n} = sitofp {v8i} %d{n} to {v8f}")
            a(f"  %s{n} = fmul {v8f} %qf{r}, %sxv{g}")
            a(f"  %v{n} = fmul {v8f} %f{n}, %s{n}")
            # round to nearest even bf16: add 0x7fff plus the lowest kept bit, keep the top half
            a(f"  %b{n} = bitcast {v8f} %v{n} to {v8i}")
            a(f"  %h{n} = lshr {v8i} %b{n}, " + _splat(16))
            a(f"  %l{n} = and {v8i} %h{n}, " + _splat(1))
            a(f"  %e{n} = add {v8i} %b{n}, " + _splat(0x7FFF))
            a(f"  %e2{n} = add {v8i} %e{n}, %l{n}")
            a(f"  %u{n} = lshr {v8i} %e2{n}, " + _splat(16))
            a(f"  %o{n} = trunc {v8i} %u{n} to <8 x i16>")
            a(f"  %oo{n} = add i64 %orow{r}, %sj{g}")
            a(f"  %op{n} = getelementptr i16, i16* %out, i64 %oo{n}")
            a(f"  %oc{n} = bitcast i16* %op{n} to <8 x i16>*")
            a(f"  store <8 x i16> %o{n}, <8 x i16>* %oc{n}, align 2")
            # which rows' upper ends, a + cf w + cs w2 + cr |a| (float32, in this order),
            # reach the query's threshold: bit t of the tile's mask for row t
            a(f"  %rb{n} = shl {v8i} %u{n}, " + _splat(16))
            a(f"  %rf{n} = bitcast {v8i} %rb{n} to {v8f}")
            a(f"  %ab{n} = call {v8f} @llvm.fabs.v8f32({v8f} %rf{n})")
            a(f"  %m1{n} = fmul {v8f} %cf{r}, %wv{g}")
            a(f"  %s1{n} = fadd {v8f} %rf{n}, %m1{n}")
            a(f"  %m2{n} = fmul {v8f} %cs{r}, %w2v{g}")
            a(f"  %s2{n} = fadd {v8f} %s1{n}, %m2{n}")
            a(f"  %m3{n} = fmul {v8f} %cr{r}, %ab{n}")
            a(f"  %s3{n} = fadd {v8f} %s2{n}, %m3{n}")
            a(f"  %c{n} = fcmp oge {v8f} %s3{n}, %tv{r}")
            a(f"  %cb{n} = bitcast <8 x i1> %c{n} to i8")
            a(f"  %cw{n} = zext i8 %cb{n} to i16")
            a(f"  %cx{n} = shl i16 %cw{n}, {LANES * g}")
            prev = "0" if g == 0 else f"%cc{r}_{g - 1}"
            a(f"  %cc{n} = or i16 {prev}, %cx{n}")
        a(f"  %fr{r} = mul i64 %ri{r}, %ldf")
        a(f"  %ft{r} = udiv i64 %j, {NR}")
        a(f"  %fo{r} = add i64 %fr{r}, %ft{r}")
        a(f"  %fp{r} = getelementptr i16, i16* %flags, i64 %fo{r}")
        a(f"  store i16 %cc{r}_{_G - 1}, i16* %fp{r}, align 2")
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


def available() -> bool:
    """Whether this CPU runs AVX2 (``VPMADDUBSW`` on 256-bit vectors)."""
    return host_has("avx2")


def scores_bf16() -> Any:
    """The compiled kernel as a ctypes function (compiled on first call; AVX2 only)."""
    with _LOCK:
        if "fn" not in _STATE:
            _STATE["fn"] = _compile()
        return _STATE["fn"]


def _compile() -> Any:
    if not available():
        raise RuntimeError("the AVX2 int8 kernel needs a CPU with AVX2")
    return compile_ir(
        _ir(), "scores_bf16", [PTR] * 6 + [I64] * 4 + [PTR, PTR, I64, PTR, PTR, PTR], _STATE
    )
