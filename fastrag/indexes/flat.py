"""Exact dense top-k: ``FlatIndex`` and the blocked search it shares with ``HNSWIndex``.

Batch search multiplies a block of queries by a chunk of the corpus with BLAS sgemm
(``numpy.matmul``), keeping the product fat (many queries x a few thousand rows), and a numba
kernel merges each score block into per-query top-k heaps. Threads split the corpus (each with
single-threaded BLAS, its own score buffer and heaps; merged at the end), so they meet once per
search. Score buffers are fixed ``QUERY_BLOCK x CORPUS_CHUNK`` blocks and queries go in
super-batches, so memory does not grow with the corpus or the query count.
One or a few queries take a fused numba pass instead (dot products and top-k while streaming
the corpus once, ``prange`` over corpus blocks): that path is bound by memory bandwidth.

bf16 first pass (``FlatIndex(bf16="auto")``, with torch installed and a CPU with AMX-BF16): a
batch is first scored with bfloat16 copies of the vectors (torch's oneDNN matmul on the AMX
tiles, ~7x float32 sgemm here). A proven error bound (``bf16_error_bound``: bf16 rounding of
both inputs and of the output, float32 accumulation in both passes) puts each row's exact
score in an interval around its approximate one; the k-th largest lower end is at most the
exact k-th best score, so only rows whose upper end reaches it can belong to the exact top-k.
Only those are scored exactly in float32: results equal the float32 search's. A query with
too many such rows (many near-equal scores) is searched again on the float32 path.

Scores are "higher is better": ``dot`` is the inner product; ``cosine`` is the inner product of
vectors normalised once at insert (queries are normalised per call). A zero vector stays zero:
its cosine score with anything is 0 (the convention of faiss ``normalize_L2`` and sklearn).
Results are best first, ties broken by the lower row; missing hits are padded with row -1 and
score -inf, and ``counts[i]`` says how many hits query ``i`` has.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import math
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from fastrag._checks import check_int
from fastrag._kernels import dense as _dense
from fastrag.errors import ConfigError

METRICS = ("cosine", "dot")

# Block sizes of the sgemm path: 1,024 queries x 1,024 corpus rows (a 4 MiB float32 score
# block, merged while it is still in cache). Measured on one thread at dim 768 (sgemm + merge,
# effective GFLOP/s): 512 x 1024 148, 1024 x 1024 160, 1024 x 2048 159, 1024 x 4096 156,
# 1024 x 512 156; the merge costs 2-3.5% of the sgemm time.
QUERY_BLOCK = 1024
CORPUS_CHUNK = 1024
# Queries handled per pass over the corpus: bounds heap memory for huge query batches.
QUERY_SUPER_BATCH = 16384
# Up to this many queries, the fused streaming kernel beats skinny sgemm (measured on 200k x 384,
# one thread: fused 1.3-1.4x faster at 8-16 queries, even at ~24, slower from 32).
FUSED_MAX_QUERIES = 16
# Below this many corpus bytes the fused scan runs on one thread (a parallel region would cost
# more than it saves; on a busy machine a thread wake-up can cost a scheduler tick).
FUSED_PARALLEL_MIN_BYTES = 8 * 2**20
# Norm checks and normalisation of fewer elements than this (32 MiB) run on the calling thread:
# a parallel region costs more than it saves below that, and much more on a busy machine.
PARALLEL_MIN_ELEMENTS = 2**23
# Below this many multiply-adds (~1 ms of sgemm) the sgemm path runs one worker.
BLOCKED_PARALLEL_MIN_MACS = 64 * 2**20
# A mask allowing at most this fraction of rows is searched by gathering the allowed rows.
GATHER_FRACTION = 0.25
# |squared norm - 1| below this counts as already normalised (float32 rounding is ~1e-6).
NORM_TOLERANCE = 1e-4
# bf16 first pass: unit roundoff of one bf16 rounding; largest k; candidate buffer per query
# and worker (at least 16 k); queries per pass over the corpus (bounds the buffers' memory).
BF16_U = 2.0**-8
BF16_MAX_K = 256
BF16_CANDIDATES = 1024
BF16_SUPER_BATCH = 4096
# int8 first pass, "auto": the corpus's median relative quantisation error ||x - s c|| / ||x||
# times sqrt(dim) predicts how many candidates the int8 bound lets through (scores of unit
# vectors spread ~1/sqrt(dim)). Above the first limit the bf16 pass is faster where it pays,
# above the second float32 alone beats int8 (docs/dense.md; measured on Gaussian rows with 8
# dims scaled 1-4x: 0.14-0.27 at dim 384, 0.21-0.41 at 768).
INT8_BF16_ABOVE = 0.29
INT8_FLOAT32_ABOVE = 0.36

SearchResult = tuple[np.ndarray, np.ndarray, np.ndarray]


# --------------------------------------------------------------------------------- validation
def check_metric(metric: Any) -> str:
    if metric not in METRICS:
        raise ConfigError(f"unknown metric {metric!r}; use one of {list(METRICS)}")
    return metric


def check_k(k: Any) -> int:
    return check_int("k", k, min=1, note="the number of hits per query")


def check_dim(dim: Any) -> int:
    return check_int("dim", dim, min=1, note="the embedding size")


def check_cutoff(cutoff: Any) -> float:
    """``cutoff`` as a float threshold (``-inf`` for None); hits need ``score >= cutoff``."""
    if cutoff is None:
        return -math.inf
    if isinstance(cutoff, bool) or not isinstance(cutoff, (int, float, np.number)):
        raise ConfigError(f"cutoff={cutoff!r} must be a number or None")
    if math.isnan(cutoff):
        raise ConfigError("cutoff=nan is not a threshold; pass a number or None")
    return float(cutoff)


def check_num_threads(num_threads: Any) -> int | None:
    return check_int("num_threads", num_threads, min=1, none="a default")


def as_matrix(vectors: Any, dim: int | None, what: str = "vectors") -> np.ndarray:
    """A 2-D float32 C-contiguous view (no copy when possible) of ndarray or Arrow vectors.

    Arrow ``fixed_size_list<float32>`` arrays (also chunked, also sliced) become zero-copy,
    read-only numpy views when they have one chunk and no nulls.
    """
    if not isinstance(vectors, np.ndarray):
        vectors = _arrow_to_numpy(vectors, what)
    if vectors.ndim != 2:
        raise ConfigError(
            f"{what} must be a 2-D array (n, dim), got shape {vectors.shape}; "
            "reshape a single vector with v[None, :]"
        )
    if dim is not None and vectors.shape[1] != dim:
        raise ConfigError(
            f"{what} have dim {vectors.shape[1]} but the index has dim {dim}; "
            "use the same embedding model for the corpus and the queries"
        )
    if vectors.dtype.kind not in "fiu":
        raise ConfigError(f"{what} must be numeric (float32), got dtype {vectors.dtype}")
    return np.ascontiguousarray(vectors, dtype=np.float32)


def _arrow_to_numpy(vectors: Any, what: str) -> np.ndarray:
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - pyarrow is a core dependency
        pa = None
    if pa is not None and isinstance(vectors, (pa.Array, pa.ChunkedArray)):
        if isinstance(vectors, pa.ChunkedArray):
            vectors = vectors.combine_chunks() if vectors.num_chunks != 1 else vectors.chunk(0)
        if not pa.types.is_fixed_size_list(vectors.type):
            raise ConfigError(
                f"{what} must be a fixed_size_list<float32> Arrow array, got {vectors.type}"
            )
        if vectors.null_count:
            raise ConfigError(f"{what} contain {vectors.null_count} null vectors; embed them first")
        width = vectors.type.list_size
        flat = vectors.values.slice(vectors.offset * width, len(vectors) * width)
        return flat.to_numpy(zero_copy_only=False).reshape(len(vectors), width)
    try:
        return np.asarray(vectors)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what} must be an array of shape (n, dim): {exc}") from exc


def check_finite(sq_norms: np.ndarray, what: str) -> None:
    bad = np.flatnonzero(~np.isfinite(sq_norms))
    if bad.size:
        raise ConfigError(
            f"{what} row {int(bad[0])} contains NaN or inf ({bad.size} bad rows in all); "
            "embeddings must be finite: check the embedder's output for those rows"
        )


def prepare_vectors(
    vectors: np.ndarray, metric: str, what: str = "vectors", copy: bool = False
) -> np.ndarray:
    """Check finiteness and, for cosine, normalise (no copy when already normalised)."""
    small = vectors.size < PARALLEL_MIN_ELEMENTS
    sq = np.empty(vectors.shape[0], np.float64)
    if vectors.shape[0]:
        (_dense.row_sq_norms_serial if small else _dense.row_sq_norms)(vectors, sq)
    check_finite(sq, what)
    if metric == "cosine" and not np.all((np.abs(sq - 1.0) <= NORM_TOLERANCE) | (sq == 0.0)):
        out = np.empty(vectors.shape, np.float32)
        (_dense.normalize_rows_serial if small else _dense.normalize_rows)(vectors, sq, out)
        return out
    return vectors.copy() if copy else vectors


def prepare_queries(queries: Any, dim: int, metric: str) -> np.ndarray:
    """Queries as (n_q, dim) float32, finite, normalised for cosine; a 1-D query is one row."""
    if not isinstance(queries, np.ndarray):
        queries = _arrow_to_numpy(queries, "queries")
    if queries.ndim == 1:
        queries = queries[None, :]
    q = as_matrix(queries, dim, "queries")
    out = np.empty(q.shape, np.float32)
    bad = _dense.prepare_queries(q, metric == "cosine", out)
    if bad >= 0:
        sq = np.zeros(q.shape[0])
        sq[bad] = np.nan
        check_finite(sq, "queries")  # raises, naming the row
    return out


def check_mask(mask: Any, n: int) -> np.ndarray | None:
    if mask is None:
        return None
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.ndim != 1:
        raise ConfigError(
            f"mask must be a 1-D boolean array (one flag per row), got dtype {mask.dtype} "
            f"and shape {mask.shape}"
        )
    if mask.shape[0] != n:
        raise ConfigError(
            f"mask has {mask.shape[0]} entries but the index has {n} rows; "
            "build the mask over the same rows as the index"
        )
    return mask


# ---------------------------------------------------------------------------------- threads
_BLAS_LOCK = threading.Lock()
_BLAS_STATE: dict[str, Any] = {"controller": None, "users": 0, "ctx": None}
_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def _blas_controller() -> Any:
    if _BLAS_STATE["controller"] is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - threadpoolctl is optional
            _BLAS_STATE["controller"] = False
        else:
            _BLAS_STATE["controller"] = ThreadpoolController()
    return _BLAS_STATE["controller"]


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[bool]:
    """Hold BLAS at one thread (process-wide, re-entrant); yields False without threadpoolctl."""
    with _BLAS_LOCK:
        controller = _blas_controller()
        if controller and _BLAS_STATE["users"] == 0:
            _BLAS_STATE["ctx"] = controller.limit(limits=1, user_api="blas")
        _BLAS_STATE["users"] += 1
    try:
        yield bool(controller)
    finally:
        with _BLAS_LOCK:
            _BLAS_STATE["users"] -= 1
            if _BLAS_STATE["users"] == 0 and _BLAS_STATE["ctx"] is not None:
                _BLAS_STATE["ctx"].restore_original_limits()
                _BLAS_STATE["ctx"] = None


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        import numba

        _POOL = concurrent.futures.ThreadPoolExecutor(
            max_workers=numba.config.NUMBA_NUM_THREADS, thread_name_prefix="fastrag-dense"
        )
    return _POOL


@contextlib.contextmanager
def numba_threads(num_threads: int | None) -> Iterator[int]:
    """Run numba parallel kernels on ``num_threads`` threads (default: all); yields the count."""
    import numba

    if num_threads is None:
        yield numba.get_num_threads()
        return
    old = numba.get_num_threads()
    n = min(num_threads, numba.config.NUMBA_NUM_THREADS)
    numba.set_num_threads(n)
    try:
        yield n
    finally:
        numba.set_num_threads(old)


# ------------------------------------------------------------------------- bf16 first pass
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


_BLAS_CHECKED = False


def _check_blas_once() -> None:
    """Warn once per process when a BLAS kernel is older than the CPU (fastrag._blas)."""
    global _BLAS_CHECKED
    if not _BLAS_CHECKED:
        _BLAS_CHECKED = True
        from fastrag._blas import check_blas

        check_blas()


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
    import os

    from fastrag._blas import cpu_flags

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
    """Best of 3: torch bf16 ``(256, 384) @ (384, 8192)`` against numpy float32 sgemm, each on
    one thread (as the search runs them, one per worker), whatever thread counts the process
    has set for torch or BLAS."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((256, 384), dtype=np.float32)
    x = rng.standard_normal((8192, 384), dtype=np.float32)
    qb, xb = torch.from_numpy(q).to(torch.bfloat16), torch.from_numpy(x).to(torch.bfloat16)
    with single_threaded_blas(), _torch_single_thread(torch):
        bf16_s = _best_of_3(lambda: torch.matmul(qb, xb.T))
        f32_s = _best_of_3(lambda: q @ x.T)
    fast = bf16_s < 0.8 * f32_s
    return {
        "fast": fast,
        "reason": f"AVX512_BF16 probe, one thread each: bf16 "
        f"{bf16_s * 1e3:.2f} ms vs float32 {f32_s * 1e3:.2f} ms",
        "bf16_s": bf16_s,
        "float32_s": f32_s,
    }


def _best_of_3(fn: Any) -> float:
    """Seconds of the fastest of three calls of ``fn``, after one warm-up call."""
    import time

    fn()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def check_bf16(bf16: Any) -> bool | str:
    if not (isinstance(bf16, bool) or (isinstance(bf16, str) and bf16 == "auto")):
        raise ConfigError(f"bf16={bf16!r} must be 'auto', True or False")
    if bf16 is True and _torch() is None:
        from fastrag.errors import missing_extra

        raise missing_extra("torch", "amx", "FlatIndex(bf16=True)")
    return bf16


# ------------------------------------------------------------------------- int8 first pass
_INT8_STATE: dict[str, Any] = {}
_INT8_LOCK = threading.Lock()


def int8_probe() -> dict[str, Any]:
    """Whether the int8 first pass pays on this machine (decided once per process): ``fast``,
    ``reason`` and, when a probe ran, the seconds of each product.

    No without AVX512-VNNI; with it a short timed probe (~20 ms): the int8 kernel against
    numpy's float32 sgemm on a batch-sized problem, both on one thread; yes when int8 takes
    under half the float32 time. ``FASTRAG_INT8=0|1`` overrides.
    """
    with _INT8_LOCK:
        if "probe" not in _INT8_STATE:
            _INT8_STATE["probe"] = _decide_int8()
        return _INT8_STATE["probe"]


def _decide_int8() -> dict[str, Any]:
    import os

    from fastrag._kernels import vnni

    forced = os.environ.get("FASTRAG_INT8")
    if not vnni.available():
        return {"fast": False, "reason": "no AVX512-VNNI"}
    if forced in ("0", "1"):
        return {"fast": forced == "1", "reason": f"FASTRAG_INT8={forced}"}
    rng = np.random.default_rng(0)
    q = rng.standard_normal((258, 384), dtype=np.float32)
    x = rng.standard_normal((8192, 384), dtype=np.float32)
    corpus = Int8Corpus(384)
    corpus.update(x)
    scorer = _Int8Scorer(corpus, q)
    out = np.empty((scorer.codes.shape[0], 1024), np.uint16)  # whatever the block sizes

    def int8() -> None:
        for c0 in range(0, 8192, 1024):
            scorer.score(out, c0, 1024, 0, q.shape[0])

    with single_threaded_blas():
        int8_s = _best_of_3(int8)
        f32_s = _best_of_3(lambda: q @ x.T)
    return {
        "fast": int8_s < 0.5 * f32_s,
        "reason": f"AVX512-VNNI probe, one thread each: "
        f"int8 {int8_s * 1e3:.2f} ms vs float32 {f32_s * 1e3:.2f} ms",
        "int8_s": int8_s,
        "float32_s": f32_s,
    }


def check_int8(int8: Any) -> bool | str:
    if not (isinstance(int8, bool) or (isinstance(int8, str) and int8 == "auto")):
        raise ConfigError(f"int8={int8!r} must be 'auto', True or False")
    if int8 is True:
        from fastrag._kernels import vnni

        if not vnni.available():
            raise ConfigError(
                "int8=True needs a CPU with AVX512-VNNI (Intel Ice Lake or later, "
                "AMD Zen 4 or later); use int8='auto' to fall back to bf16 or "
                "float32 elsewhere"
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
    from fastrag._blas import cpu_flags

    flags = cpu_flags()
    return not flags or "amx_bf16" in flags


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
            convert = _dense.to_bf16_serial if new.size < PARALLEL_MIN_ELEMENTS else _dense.to_bf16
            convert(new, self.bits[self.n : n], self.norms[self.n : n])
            self.n = n


@contextlib.contextmanager
def _torch_single_thread(torch: Any) -> Iterator[None]:
    """Hold torch at one thread (process-wide, re-entrant: the last search out restores)."""
    with _BLAS_LOCK:
        if _BF16_STATE.get("users", 0) == 0:
            _BF16_STATE["saved_threads"] = torch.get_num_threads()
            torch.set_num_threads(1)
        _BF16_STATE["users"] = _BF16_STATE.get("users", 0) + 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _BF16_STATE["users"] -= 1
            if _BF16_STATE["users"] == 0:
                torch.set_num_threads(_BF16_STATE["saved_threads"])


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


class Int8Corpus:
    """int8 codes of the first ``n`` stored rows, packed for the VNNI kernel, with their scales
    and error weights (``_dense.to_int8``)."""

    def __init__(self, dim: int) -> None:
        from fastrag._kernels import vnni

        self.dim = dim
        self.dp = -(-dim // 4) * 4
        self._tile = vnni.NR
        self.packed = np.full((0, self.dp // 4, 16, 4), 128, np.uint8)
        self.scales = np.zeros(0, np.float32)
        self.weights = np.zeros(0, np.float32)
        self.weights2 = np.zeros(0, np.float32)
        self.n = 0
        self.residual = 0.0

    def update(self, vectors: np.ndarray) -> None:
        """Convert the rows of ``vectors`` not converted yet (vectors only ever grow)."""
        n = vectors.shape[0]
        if n > self.packed.shape[0] * 16:
            cap = max(n, 2 * self.packed.shape[0] * 16)
            cap = -(-cap // self._tile) * self._tile  # the kernel reads whole tiles of rows
            packed = np.full((cap // 16,) + self.packed.shape[1:], 128, np.uint8)
            packed[: self.packed.shape[0]] = self.packed
            self.packed = packed
            for name in ("scales", "weights", "weights2"):
                grown = np.zeros(cap, np.float32)  # rows past n: scale 0, so they score 0
                grown[: self.n] = getattr(self, name)[: self.n]
                setattr(self, name, grown)
        if n > self.n:
            new = vectors[self.n : n]
            convert = _dense.to_int8_serial if new.size < PARALLEL_MIN_ELEMENTS else _dense.to_int8
            convert(new, self.n, self.packed, self.scales, self.weights, self.weights2)
            self.n = n
            self.residual = self.median_residual()

    def median_residual(self, sample: int = 65_536) -> float:
        """Median over (up to ``sample`` evenly spread) rows of ``||x - s c|| / ||x||``."""
        step = max(1, self.n // sample)
        w = self.weights[: self.n : step].astype(np.float64)
        w2 = self.weights2[: self.n : step].astype(np.float64)
        norm = w2 - w  # ||x|| (1 - 2 d 2**-24), near enough for a median
        ok = norm > 0
        return float(np.median(w[ok] / norm[ok])) if ok.any() else 0.0


def int8_error_coef(q_norms: np.ndarray, q_errors: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(coef, coef2)``: the exact score of query ``i`` and a row with error weights ``w``,
    ``w2`` (``_dense.to_int8``) lies within ``coef[i] * w + coef2[i] * w2 + rel * |a|`` of its
    int8-pass score ``a`` (``rel`` as for bf16: the bf16 rounding of ``a``, doubled).

    With ``q = q' + dq`` and ``x = x' + dx`` (``q'``, ``x'`` the scaled codes, whose dot
    product the kernel computes exactly in integers), ``q.x - q'.x' = q.dx + dq.x'``, so
    ``|q.x - q'.x'| <= ||q|| ||dx|| + ||dq|| (||x|| + ||dx||)``; ``w`` also holds the float32
    rescoring's accumulation error. Both times 1.01.
    """
    return q_norms * 1.01, q_errors * 1.01


class _Bf16Scorer:
    """First-pass scores of a query batch from torch's bf16 matmul (oneDNN)."""

    def __init__(self, approx: Bf16Corpus, queries: np.ndarray) -> None:
        self.torch = _torch()
        q_bits = _aligned_bits(queries.shape)
        _dense.to_bf16_serial(queries, q_bits, np.empty(queries.shape[0], np.float32))
        self.coef, self.rel = bf16_error_bound(queries)
        self.coef2 = np.zeros_like(self.coef)  # one weight: the row's norm
        self.qt = _as_torch_bf16(self.torch, q_bits)
        self.xt = _as_torch_bf16(self.torch, approx.bits[: approx.n])
        self.query_block = QUERY_BLOCK

    def running(self) -> contextlib.AbstractContextManager:
        return _torch_single_thread(self.torch)

    def worker(self) -> Any:
        self.torch.set_num_threads(1)  # this thread's OpenMP pool: one thread per worker
        qb = min(self.query_block, self.qt.shape[0])
        out = self.torch.empty((qb * CORPUS_CHUNK,), dtype=self.torch.bfloat16)
        return out, out.view(self.torch.int16).numpy().view(np.uint16)

    def score(self, state: Any, c0: int, m: int, q0: int, nb: int) -> np.ndarray:
        out, out_bits = state
        self.torch.mm(self.qt[q0 : q0 + nb], self.xt[c0 : c0 + m].T, out=out[: nb * m].view(nb, m))
        return out_bits[: nb * m].reshape(nb, m)


class _Int8Scorer:
    """First-pass scores of a query batch from the AVX512-VNNI int8 kernel."""

    def __init__(self, approx: Int8Corpus, queries: np.ndarray) -> None:
        from fastrag._kernels import vnni

        self.fn = vnni.scores_bf16()
        # the arrays as of now: a concurrent add may replace them (rows below n never change)
        self.packed, self.row_scales = approx.packed, approx.scales
        self.dp = approx.dp
        self.mr = vnni.MR
        self.tile = vnni.NR
        n_q, dim = queries.shape
        n_pad = -(-n_q // self.mr) * self.mr
        self.codes = np.zeros((n_pad, approx.dp), np.int8)
        self.offsets = np.zeros(n_pad, np.int32)
        self.scales = np.zeros(n_pad, np.float32)
        self.q_norms = np.empty(n_q, np.float64)
        self.q_errors = np.empty(n_q, np.float64)
        _dense.quantize_queries(
            queries, self.codes, self.offsets, self.scales, self.q_norms, self.q_errors
        )
        self.coef, self.coef2 = int8_error_coef(self.q_norms, self.q_errors)
        self.rel = 2 * BF16_U / (1 - 2 * BF16_U)
        self.query_block = QUERY_BLOCK // self.mr * self.mr

    def running(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def worker(self) -> Any:
        qb = min(self.query_block, self.codes.shape[0])
        return np.empty((qb, CORPUS_CHUNK), np.uint16)

    def score(self, out: np.ndarray, c0: int, m: int, q0: int, nb: int) -> np.ndarray:
        nb_pad = -(-nb // self.mr) * self.mr
        m_pad = -(-m // self.tile) * self.tile
        # the kernel does not check bounds: a wrong call would corrupt memory, so refuse it
        if (
            nb_pad > out.shape[0]
            or m_pad > out.shape[1]
            or c0 % 16
            or q0 + nb_pad > self.codes.shape[0]
            or c0 + m_pad > self.row_scales.shape[0]
        ):
            raise RuntimeError(
                f"int8 block out of range: rows {c0}+{m}, queries {q0}+{nb}, buffer {out.shape}"
            )
        self.fn(
            self.codes[q0].ctypes.data,
            self.offsets[q0:].ctypes.data,
            self.scales[q0:].ctypes.data,
            self.packed[c0 // 16].ctypes.data,
            self.row_scales[c0:].ctypes.data,
            out.ctypes.data,
            nb_pad,
            m_pad,
            self.dp,
            out.shape[1],
        )
        return out[:nb]


def _approx_search(
    vectors: np.ndarray,
    approx: Bf16Corpus | Int8Corpus,
    queries: np.ndarray,
    k: int,
    mask: np.ndarray | None,
    n_threads: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact heaps of ``queries`` (at most BF16_SUPER_BATCH) via a bf16 or int8 first pass."""
    n_q, dim = queries.shape
    n = vectors.shape[0]
    scorer = (
        _Int8Scorer(approx, queries)
        if isinstance(approx, Int8Corpus)
        else _Bf16Scorer(approx, queries)
    )
    cap = max(BF16_CANDIDATES, 16 * k)
    n_chunks = -(-n // CORPUS_CHUNK)
    n_workers = min(n_threads, n_chunks)
    if n_q * n * dim < BLOCKED_PARALLEL_MIN_MACS:
        n_workers = 1
    weights = (
        (approx.weights, approx.weights2)
        if isinstance(approx, Int8Corpus)
        else (approx.norms, approx.norms)
    )
    args = (scorer, weights, n_q, k, mask, cap, n, n_chunks)
    with scorer.running():
        if n_workers <= 1:
            parts = [_approx_worker(*args, iter(range(n_chunks)))]
        else:
            chunk_ids = itertools.count()
            jobs = [_pool().submit(_approx_worker, *args, chunk_ids) for _ in range(n_workers)]
            parts = [job.result() for job in jobs]
    low_s, low_r = _new_heaps((n_q, k))
    _dense.merge_candidates(
        np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts]), low_s, low_r
    )
    over = np.logical_or.reduce([p[4] for p in parts])
    heap_s, heap_r = _new_heaps((n_q, k))
    _dense.rescore_candidates(
        vectors,
        queries,
        low_s,
        np.stack([p[2] for p in parts]),
        np.stack([p[3] for p in parts]),
        np.stack([p[5] for p in parts]),
        over,
        heap_s,
        heap_r,
    )
    if over.any():
        redo = np.flatnonzero(over)
        heap_s[redo], heap_r[redo] = _blocked(vectors, queries[redo], k, mask, None, n_threads)
    return heap_s, heap_r


def _approx_worker(
    scorer: _Bf16Scorer | _Int8Scorer,
    weights: tuple[np.ndarray, np.ndarray],
    n_q: int,
    k: int,
    mask: np.ndarray | None,
    cap: int,
    n: int,
    n_chunks: int,
    chunk_ids: Iterator[int],
) -> tuple[np.ndarray, ...]:
    """Heaps of lower ends and candidates of all queries over the chunks this worker takes."""
    heap_s, heap_r = _new_heaps((n_q, k))
    cand_s = np.empty((n_q, cap), np.float32)
    cand_r = np.empty((n_q, cap), np.int64)
    n_cand = np.zeros(n_q, np.int64)
    over = np.zeros(n_q, np.bool_)
    state = scorer.worker()
    qb = min(scorer.query_block, n_q)
    use_mask = mask is not None
    mask_arg = mask if use_mask else _EMPTY_MASK
    for c in chunk_ids:
        if c >= n_chunks:
            break
        c0 = c * CORPUS_CHUNK
        m = min(CORPUS_CHUNK, n - c0)
        for q0 in range(0, n_q, qb):
            nb = min(qb, n_q - q0)
            block = scorer.score(state, c0, m, q0, nb)
            _dense.merge_block_bf16(
                block,
                m,
                c0,
                weights[0][c0 : c0 + m],
                weights[1][c0 : c0 + m],
                mask_arg,
                use_mask,
                q0,
                scorer.coef,
                scorer.coef2,
                scorer.rel,
                heap_s,
                heap_r,
                cand_s,
                cand_r,
                n_cand,
                over,
            )
    return heap_s, heap_r, cand_s, cand_r, over, n_cand


# ------------------------------------------------------------------------------ exact search
_EMPTY_ROWS = np.zeros(0, np.int64)
_EMPTY_MASK = np.zeros(0, np.bool_)


def _new_heaps(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    return (np.full(shape, -np.inf, np.float32), np.full(shape, _dense.ROW_SENTINEL, np.int64))


def exact_search(
    vectors: np.ndarray,
    queries: np.ndarray,
    k: int,
    mask: np.ndarray | None = None,
    cutoff: float = -math.inf,
    rows: np.ndarray | None = None,
    num_threads: int | None = None,
    approx: Bf16Corpus | None = None,
) -> SearchResult:
    """Exact top-k of prepared ``queries`` against ``vectors`` (both float32 C-contiguous).

    ``mask`` (bool, one per row) restricts the candidates; ``rows`` (ascending int64) instead
    lists the only candidate rows. ``approx`` (bf16 bits of ``vectors``) enables the bf16
    first pass for batches. Returns ``(rows, scores, counts)`` with width ``k``.
    """
    n_q = queries.shape[0]
    out_rows = np.empty((n_q, k), np.int64)
    out_scores = np.empty((n_q, k), np.float32)
    counts = np.empty(n_q, np.int32)
    n_cand = rows.shape[0] if rows is not None else vectors.shape[0]
    if mask is not None:
        n_cand = min(n_cand, int(np.count_nonzero(mask)))
        if (
            rows is None
            and n_q > FUSED_MAX_QUERIES
            and n_cand <= GATHER_FRACTION * vectors.shape[0]
        ):
            rows, mask = np.flatnonzero(mask).astype(np.int64), None
    kk = max(1, min(k, n_cand))  # heap size: never more than the candidates
    cut = float(np.float32(cutoff))  # compare as float32, like the scores
    use_bf16 = (
        approx is not None
        and rows is None
        and n_q > FUSED_MAX_QUERIES
        and kk <= BF16_MAX_K
        and approx.n == vectors.shape[0]
    )
    super_batch = BF16_SUPER_BATCH if use_bf16 else QUERY_SUPER_BATCH
    with numba_threads(num_threads) as n_threads:
        for s0 in range(0, n_q, super_batch):
            qs = queries[s0 : s0 + super_batch]
            if n_cand == 0:
                heap_s, heap_r = _new_heaps((qs.shape[0], kk))
            elif qs.shape[0] <= FUSED_MAX_QUERIES:
                heap_s, heap_r = _fused(vectors, qs, kk, mask, rows, n_threads)
            elif use_bf16:
                heap_s, heap_r = _approx_search(vectors, approx, qs, kk, mask, n_threads)
            else:
                heap_s, heap_r = _blocked(vectors, qs, kk, mask, rows, n_threads)
            sl = slice(s0, s0 + qs.shape[0])
            _dense.finalize_topk(heap_s, heap_r, cut, out_rows[sl], out_scores[sl], counts[sl])
            _dense.exact_final_scores(vectors, qs, out_rows[sl], out_scores[sl], counts[sl], cut)
    return out_rows, out_scores, counts


def _fused(
    vectors: np.ndarray,
    queries: np.ndarray,
    k: int,
    mask: np.ndarray | None,
    rows: np.ndarray | None,
    n_threads: int,
) -> tuple[np.ndarray, np.ndarray]:
    n_pos = rows.shape[0] if rows is not None else vectors.shape[0]
    rows_arg = rows if rows is not None else _EMPTY_ROWS
    mask_arg = mask if mask is not None else _EMPTY_MASK
    if n_threads == 1 or n_pos * vectors.shape[1] * 4 < FUSED_PARALLEL_MIN_BYTES:
        heap_s, heap_r = _new_heaps((queries.shape[0], k))
        _dense.fused_search_serial(
            vectors, queries, rows_arg, rows is not None, mask_arg, mask is not None, heap_s, heap_r
        )
        return heap_s, heap_r
    block = max(1024, -(-n_pos // (16 * n_threads)))
    n_blocks = -(-n_pos // block)
    cand_s, cand_r = _new_heaps((n_blocks, queries.shape[0], k))
    _dense.fused_search(
        vectors,
        queries,
        rows_arg,
        rows is not None,
        mask_arg,
        mask is not None,
        block,
        cand_s,
        cand_r,
    )
    heap_s, heap_r = _new_heaps((queries.shape[0], k))
    _dense.merge_candidates(cand_s, cand_r, heap_s, heap_r)
    return heap_s, heap_r


def _blocked(
    vectors: np.ndarray,
    queries: np.ndarray,
    k: int,
    mask: np.ndarray | None,
    rows: np.ndarray | None,
    n_threads: int,
) -> tuple[np.ndarray, np.ndarray]:
    """sgemm + merge over corpus chunks; ``n_threads`` workers pull chunks in ascending order.

    Each worker runs single-threaded BLAS and the ``nogil`` merge kernel on its own heaps, so
    threads meet once per search instead of once per block (robust on a busy machine).
    """
    n_pos = rows.shape[0] if rows is not None else vectors.shape[0]
    n_chunks = -(-n_pos // CORPUS_CHUNK)
    n_workers = min(n_threads, n_chunks)
    if queries.shape[0] * n_pos * vectors.shape[1] < BLOCKED_PARALLEL_MIN_MACS:
        n_workers = 1
    with single_threaded_blas() as blas_pinned:
        if n_workers <= 1 or not blas_pinned:
            return _blocked_worker(vectors, queries, k, mask, rows, iter(range(n_chunks)))
        chunk_ids = itertools.count()  # next() is atomic under the GIL
        jobs = [
            _pool().submit(_blocked_worker, vectors, queries, k, mask, rows, chunk_ids, n_chunks)
            for _ in range(n_workers)
        ]
        parts = [job.result() for job in jobs]
    heap_s, heap_r = _new_heaps((queries.shape[0], k))
    _dense.merge_candidates(
        np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts]), heap_s, heap_r
    )
    return heap_s, heap_r


def _blocked_worker(
    vectors: np.ndarray,
    queries: np.ndarray,
    k: int,
    mask: np.ndarray | None,
    rows: np.ndarray | None,
    chunk_ids: Iterator[int],
    n_chunks: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    n_q = queries.shape[0]
    heap_s, heap_r = _new_heaps((n_q, k))
    n_pos = rows.shape[0] if rows is not None else vectors.shape[0]
    qb = min(QUERY_BLOCK, n_q)
    buf = np.empty(qb * CORPUS_CHUNK, np.float32)
    gathered = np.empty((CORPUS_CHUNK, vectors.shape[1]), np.float32) if rows is not None else None
    use_mask = mask is not None
    mask_arg = mask if use_mask else _EMPTY_MASK
    for c in chunk_ids:
        if n_chunks is not None and c >= n_chunks:
            break
        c0 = c * CORPUS_CHUNK
        m = min(CORPUS_CHUNK, n_pos - c0)
        if rows is not None:
            row_map = rows[c0 : c0 + m]
            corpus = np.take(vectors, row_map, axis=0, out=gathered[:m])
        else:
            row_map = _EMPTY_ROWS
            corpus = vectors[c0 : c0 + m]
        for q0 in range(0, n_q, qb):
            nb = min(qb, n_q - q0)
            scores = buf[: nb * m].reshape(nb, m)
            np.matmul(queries[q0 : q0 + nb], corpus.T, out=scores)
            _dense.merge_block_serial(
                scores, m, c0, row_map, rows is not None, mask_arg, use_mask, q0, heap_s, heap_r
            )
    return heap_s, heap_r


# --------------------------------------------------------------------------------- FlatIndex
class FlatIndex:
    """Exact dense index: every query is scored against every (allowed) vector.

    ``metric="cosine"`` normalises vectors once at insert (zero vectors stay zero and score 0);
    ``"dot"`` keeps them as given. Vectors must be finite. ``search`` returns
    ``(rows int64 (n_q, k), scores float32 (n_q, k), counts int32 (n_q,))``, best first, ties
    by the lower row, padded with row -1 and score -inf.

    ``int8`` / ``bf16``: score batches (more than 16 queries, k <= 256) first with int8 or
    bfloat16 copies of the vectors, then the rows a proven error bound cannot rule out exactly
    in float32 (same results; docs/dense.md). ``int8="auto"`` (default) uses int8 on CPUs with
    AVX512-VNNI where a short probe says it pays, unless the CPU has AMX-BF16 (bf16 is faster
    there) or the corpus has a few dominant dimensions (its quantisation error is then too wide:
    bf16 instead, where that pays); ``True`` forces it (VNNI needed). ``bf16="auto"`` uses bf16
    with torch (the ``[amx]`` extra) on AMX-BF16, or on AVX512_BF16 where a probe says it pays;
    ``True`` forces it. ``False`` turns a pass off. The copy (int8: 1 byte per value, bf16: 2)
    is made on the first such batch and kept.
    """

    def __init__(
        self, dim: int, metric: str = "cosine", bf16: bool | str = "auto", int8: bool | str = "auto"
    ) -> None:
        self.dim = check_dim(dim)
        self.metric = check_metric(metric)
        if bf16 is True and int8 is True:  # before either asks for its extra or its CPU
            raise ConfigError("bf16=True and int8=True: choose one first pass (or 'auto')")
        self.bf16 = check_bf16(bf16)
        self.int8 = check_int8(int8)
        self._buf = np.empty((0, self.dim), np.float32)
        self._n = 0
        self._owned = True
        self._approx: dict[str, Bf16Corpus | Int8Corpus] = {}
        self._approx_lock = threading.Lock()

    @classmethod
    def from_vectors(
        cls,
        vectors: Any,
        metric: str = "cosine",
        normalized: bool = False,
        bf16: bool | str = "auto",
        int8: bool | str = "auto",
    ) -> FlatIndex:
        """An index over ``vectors`` (ndarray or Arrow ``fixed_size_list<float32>``).

        Float32 C-contiguous input is used in place (also read-only memory such as an Arrow
        buffer or a memory map) when no normalisation is needed: ``metric="dot"``, already
        unit-norm rows, or ``normalized=True``, which trusts the caller and skips the
        finiteness check and normalisation pass (for vectors this index wrote before).
        """
        vectors = as_matrix(vectors, None)
        index = cls(vectors.shape[1], metric, bf16, int8)
        if not normalized:
            vectors = prepare_vectors(vectors, index.metric)
        index._buf = vectors
        index._n = vectors.shape[0]
        index._owned = False
        return index

    @property
    def n(self) -> int:
        """Number of vectors in the index."""
        return self._n

    def __len__(self) -> int:
        return self._n

    @property
    def vectors(self) -> np.ndarray:
        """The stored (normalised, for cosine) vectors, read-only, shape ``(n, dim)``."""
        view = self._buf[: self._n]
        view.flags.writeable = False
        return view

    def add(self, vectors: Any) -> None:
        """Append ``vectors`` (n, dim); their rows are ``self.n .. self.n + len - 1``."""
        vectors = prepare_vectors(as_matrix(vectors, self.dim), self.metric)
        m = vectors.shape[0]
        if m == 0:
            return
        need = self._n + m
        if not self._owned or need > self._buf.shape[0]:
            cap = max(need, 2 * self._buf.shape[0] if self._owned else need, 1024)
            buf = np.empty((cap, self.dim), np.float32)
            buf[: self._n] = self._buf[: self._n]
            self._buf, self._owned = buf, True
        self._buf[self._n : need] = vectors
        self._n = need

    def search(
        self,
        queries: Any,
        k: int,
        *,
        mask: Any = None,
        cutoff: float | None = None,
        num_threads: int | None = None,
    ) -> SearchResult:
        """Exact top-``k`` rows for each query (a (n_q, dim) batch or one (dim,) vector).

        ``mask`` (bool, one per row) keeps only the allowed rows; ``cutoff`` drops hits
        scoring below it; ``num_threads`` caps the threads used (default: all).
        """
        k = check_k(k)
        q = prepare_queries(queries, self.dim, self.metric)
        mask = check_mask(mask, self._n)
        cut = check_cutoff(cutoff)
        vectors = self._buf[: self._n]
        _check_blas_once()
        return exact_search(
            vectors,
            q,
            k,
            mask,
            cut,
            num_threads=check_num_threads(num_threads),
            approx=self._approx_copy(q.shape[0], k),
        )

    def _approx_copy(self, n_queries: int, k: int) -> Bf16Corpus | Int8Corpus | None:
        """The bf16 or int8 copy of the vectors, brought up to date, when this search would
        use a first pass."""
        if n_queries <= FUSED_MAX_QUERIES or k > BF16_MAX_K or self._n == 0:
            return None
        kind = first_pass(self.bf16, self.int8)
        if kind is None:
            return None
        with self._approx_lock:
            copy = self._updated_copy(kind)
            if kind == "int8" and self.int8 == "auto":  # is the int8 bound narrow enough?
                spread = copy.residual * math.sqrt(self.dim)
                if spread > INT8_BF16_ABOVE and self.bf16 == "auto" and bf16_fast():
                    return self._updated_copy("bf16")
                if spread > INT8_FLOAT32_ABOVE:
                    return None
            return copy

    def _updated_copy(self, kind: str) -> Bf16Corpus | Int8Corpus:
        if kind not in self._approx:
            self._approx[kind] = (Int8Corpus if kind == "int8" else Bf16Corpus)(self.dim)
        self._approx[kind].update(self._buf[: self._n])
        return self._approx[kind]

    def __repr__(self) -> str:
        return f"FlatIndex(dim={self.dim}, metric={self.metric!r}, n={self._n})"
