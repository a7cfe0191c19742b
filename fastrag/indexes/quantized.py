"""Quantised copies of the vectors for the first pass of a batch search: bf16 and int8
encodings, the proven bounds on their score error, the scorers that fill first-pass score
blocks, and whether each pass pays on this CPU (decided once per process).

bf16 (``FlatIndex(bf16="auto")``, with torch installed and a CPU with AMX-BF16): a batch is
first scored with bfloat16 copies of the vectors (torch's oneDNN matmul on the AMX tiles, ~7x
float32 sgemm here). A proven error bound (:func:`bf16_error_bound`: bf16 rounding of both
inputs and of the output, float32 accumulation in both passes) puts each row's exact score in
an interval around its approximate one; the k-th largest lower end is at most the exact k-th
best score, so only rows whose upper end reaches it can belong to the exact top-k. Only those
are scored exactly in float32 (fastrag.indexes.exact): results equal the float32 search's.
The int8 pass (fastrag.indexes.int8: AVX512-VNNI or AVX2) works the same way with centred,
scaled int8 codes.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

import numpy as np

from fastrag._blas import cpu_flags, single_threaded_blas, torch_single_thread
from fastrag._kernels import dense_quant as _quant
from fastrag.errors import ConfigError, missing_extra
from fastrag.indexes.dense_base import PARALLEL_MIN_ELEMENTS
from fastrag.indexes.int8 import best_of, int8_format, int8_probe

_NO_FLAGS = np.zeros((1, 1), np.uint16)
# Unit roundoff of one bf16 rounding.
BF16_U = 2.0**-8


# ------------------------------------------------------------------- bf16: does it pay here?
_BF16_STATE: dict[str, Any] = {}
_BF16_LOCK = threading.Lock()


def _torch() -> Any:
    """torch when installed (imported once), else None."""
    if "torch" not in _BF16_STATE:
        try:
            import torch
        except ImportError:
            torch = None
        _BF16_STATE["torch"] = torch
    return _BF16_STATE["torch"]


def bf16_fast() -> bool:
    """Whether the bf16 first pass pays on this machine (decided once per process).

    Yes with torch and AMX-BF16 tiles; with AVX512_BF16 (no AMX: Zen 4/5, Cooper Lake) a short
    timed probe decides: torch's bf16 matmul against numpy's float32 sgemm on a batch-sized
    problem (about 50 ms); without either, no (bf16 is emulated and slower than float32).
    ``FASTRAG_BF16=0|1`` overrides. :func:`bf16_probe` tells what was decided and why.
    """
    return bf16_probe()["fast"]


def bf16_probe() -> dict[str, Any]:
    """What :func:`bf16_fast` decided: ``fast``, ``reason`` and, when a probe ran, the
    seconds of each matmul."""
    with _BF16_LOCK:
        if "probe" not in _BF16_STATE:
            _BF16_STATE["probe"] = _decide_bf16()
        return _BF16_STATE["probe"]


def _decide_bf16() -> dict[str, Any]:
    forced = os.environ.get("FASTRAG_BF16")
    torch = _torch()
    if torch is None:
        return {"fast": False, "reason": "torch is not installed"}
    if forced in ("0", "1"):
        return {"fast": forced == "1", "reason": f"FASTRAG_BF16={forced}"}
    probe = getattr(getattr(torch, "cpu", None), "_is_amx_tile_supported", None)
    try:
        if probe is not None and probe():
            return {"fast": True, "reason": "AMX-BF16 tiles", "amx": True}
    except Exception:  # noqa: BLE001 - a private probe: any failure means "no AMX"
        pass
    if "avx512_bf16" not in cpu_flags():
        return {"fast": False, "reason": "no AMX and no AVX512_BF16: bf16 would be emulated"}
    return _timed_probe(torch)


def _timed_probe(torch: Any) -> dict[str, Any]:
    """Best of 5, in turn: torch bf16 ``(256, 384) @ (384, 8192)`` against numpy float32 sgemm, on
    one thread (as the search runs them, one per worker), whatever thread counts the process
    has set for torch or BLAS."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((256, 384), dtype=np.float32)
    x = rng.standard_normal((8192, 384), dtype=np.float32)
    qb, xb = torch.from_numpy(q).to(torch.bfloat16), torch.from_numpy(x).to(torch.bfloat16)
    with single_threaded_blas(), torch_single_thread(torch):
        bf16_s, f32_s = best_of([lambda: torch.matmul(qb, xb.T), lambda: q @ x.T])
    fast = bf16_s < 0.8 * f32_s
    return {
        "fast": fast,
        "reason": f"AVX512_BF16 probe, one thread each: bf16 "
        f"{bf16_s * 1e3:.2f} ms vs float32 {f32_s * 1e3:.2f} ms",
        "bf16_s": bf16_s,
        "float32_s": f32_s,
    }


def check_bf16(bf16: Any) -> bool | str:
    """``bf16`` (``"auto"``, True or False); True needs torch."""
    if not (isinstance(bf16, bool) or (isinstance(bf16, str) and bf16 == "auto")):
        raise ConfigError(f"bf16={bf16!r} must be 'auto', True or False")
    if bf16 is True and _torch() is None:
        raise missing_extra("torch", "amx", "FlatIndex(bf16=True)")
    return bf16


def check_int8(int8: Any) -> bool | str:
    """``int8`` (``"auto"``, True or False); True needs AVX2 or AVX512-VNNI."""
    if not (isinstance(int8, bool) or (isinstance(int8, str) and int8 == "auto")):
        raise ConfigError(f"int8={int8!r} must be 'auto', True or False")
    if int8 is True and int8_format() is None:
        raise ConfigError(
            "int8=True needs a CPU with AVX2 or AVX512-VNNI; use int8='auto' to fall back "
            "to bf16 or float32 elsewhere"
        )
    return int8


def first_pass(bf16: bool | str, int8: bool | str) -> str | None:
    """Which first pass a batch search uses: ``"int8"``, ``"bf16"`` or None (float32 only).

    An explicit True wins; with both ``"auto"``: bf16 on AMX-BF16 tiles (faster than the int8
    kernel), else int8 where :func:`int8_probe` says it pays, else bf16 where
    :func:`bf16_probe` does."""
    if int8 is True:
        return "int8"
    if bf16 is True:
        return "bf16"
    if bf16 == "auto" and _may_have_amx() and bf16_probe().get("amx"):
        return "bf16"
    if int8 == "auto" and int8_probe()["fast"]:
        return "int8"
    if bf16 == "auto" and bf16_fast():
        return "bf16"
    return None


def _may_have_amx() -> bool:
    """False only where the CPU's flags are known and lack AMX-BF16: the bf16 probe (which
    imports torch, ~1 s) is then not needed to choose the int8 pass."""
    flags = cpu_flags()
    return not flags or "amx_bf16" in flags


# -------------------------------------------------------------------------------- encodings
def _aligned_bits(shape: tuple[int, int]) -> np.ndarray:
    """An uninitialised uint16 array starting on a 64-byte boundary: oneDNN's AMX kernels run
    at half speed on operands that do not (measured: 730 vs 1,350 GFLOP/s at dim 768)."""
    nbytes = shape[0] * shape[1] * 2
    raw = np.empty(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start : start + nbytes].view(np.uint16).reshape(shape)


class Bf16Corpus:
    """bfloat16 bits (uint16) of the first ``n`` stored rows, and their norms (float32)."""

    def __init__(self, dim: int) -> None:
        self.bits = _aligned_bits((0, dim))
        self.norms = np.empty(0, np.float32)
        self.n = 0

    def update(self, vectors: np.ndarray) -> None:
        """Convert the rows of ``vectors`` not converted yet (vectors only ever grow)."""
        n, dim = vectors.shape
        if n > self.bits.shape[0]:
            cap = max(n, 2 * self.bits.shape[0])
            bits = _aligned_bits((cap, dim))
            bits[: self.n] = self.bits[: self.n]
            norms = np.empty(cap, np.float32)
            norms[: self.n] = self.norms[: self.n]
            self.bits, self.norms = bits, norms
        if n > self.n:
            new = vectors[self.n : n]
            convert = _quant.to_bf16_serial if new.size < PARALLEL_MIN_ELEMENTS else _quant.to_bf16
            convert(new, self.bits[self.n : n], self.norms[self.n : n])
            self.n = n


def _as_torch_bf16(torch: Any, bits: np.ndarray) -> Any:
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)


def bf16_error_bound(queries: np.ndarray) -> tuple[np.ndarray, float]:
    """``(coef, rel)``: the exact score of query ``i`` and a row of norm ``n`` lies within
    ``coef[i] * n + rel * |approx|`` of its bf16-pass score ``approx``.

    ``coef``: both inputs rounded to bf16 (relative error ``u`` each, so ``2u + u**2`` of
    ``sum |q_j x_j| <= ||q|| ||x||``) and float32 accumulation in the bf16 pass and in the
    rescoring (``d 2**-24`` each), times 1.01. ``rel``: the bf16 rounding of the output,
    doubled for safety.
    """
    dim = queries.shape[1]
    q_norm = np.sqrt(np.einsum("ij,ij->i", queries, queries, dtype=np.float64))
    scale = (2 * BF16_U + BF16_U**2 + 2.0 * dim * 2.0**-24) * 1.01
    return scale * q_norm, 2 * BF16_U / (1 - 2 * BF16_U)


# ---------------------------------------------------------------------------------- scorers
class Bf16Scorer:
    """First-pass scores of a query batch from torch's bf16 matmul (oneDNN), in blocks of at
    most ``query_block`` queries x ``chunk`` rows."""

    def __init__(
        self, approx: Bf16Corpus, queries: np.ndarray, query_block: int, chunk: int
    ) -> None:
        self.torch = _torch()
        q_bits = _aligned_bits(queries.shape)
        _quant.to_bf16_serial(queries, q_bits, np.empty(queries.shape[0], np.float32))
        self.coef, self.rel = bf16_error_bound(queries)
        self.coef2 = np.zeros_like(self.coef)  # one weight: the row's norm
        self.qt = _as_torch_bf16(self.torch, q_bits)
        self.xt = _as_torch_bf16(self.torch, approx.bits[: approx.n])
        self.query_block = query_block
        self.chunk = chunk
        self.shift = np.zeros(queries.shape[0], np.float64)  # no constant left out
        self.shift_err = self.shift
        self.exact_lows = False
        self.e_all = np.zeros(2, np.float64)  # no tile flags: no threshold to keep
        self.thr = np.zeros(1, np.float32)

    def running(self) -> contextlib.AbstractContextManager:
        return torch_single_thread(self.torch)

    def worker(self) -> Any:
        self.torch.set_num_threads(1)  # this thread's OpenMP pool: one thread per worker
        qb = min(self.query_block, self.qt.shape[0])
        out = self.torch.empty((qb * self.chunk,), dtype=self.torch.bfloat16)
        return out, out.view(self.torch.int16).numpy().view(np.uint16)

    def tiles(self, state: Any, nb: int) -> tuple[np.ndarray, int]:
        """No tile flags: the merge reads every score."""
        return _NO_FLAGS, 0

    def score(self, state: Any, c0: int, m: int, q0: int, nb: int) -> np.ndarray:
        out, out_bits = state
        self.torch.mm(self.qt[q0 : q0 + nb], self.xt[c0 : c0 + m].T, out=out[: nb * m].view(nb, m))
        return out_bits[: nb * m].reshape(nb, m)
