"""The int8 first pass of exact dense search: the kernel this CPU runs (AVX512-VNNI or AVX2),
the centred int8 copy of the vectors, its proven error bound, the scorer that fills first-pass
score blocks, and whether the pass pays on this machine (a short timed probe, cached per CPU).

Rows are centred on the corpus mean before they are quantised (``kernels/dense_quant.py``):
embedding models give vectors a large common component
(multilingual-e5-small: ``||mean|| = 0.89`` of unit rows), which would otherwise take most of
each row's code range. The constant ``q . mean`` is the same for every row of a query, so the
first pass ranks ``q . (x - mean)`` and only the exact float32 rescoring sees whole scores
(docs/dense.md has the bound and the measurements).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from fastrag._blas import cpu_flags, single_threaded_blas
from fastrag._cache import cache_root
from fastrag._kernels import avx2, vnni
from fastrag._kernels import dense_quant as _quant
from fastrag.errors import ConfigError
from fastrag.indexes.dense_base import PARALLEL_MIN_ELEMENTS

# The first-pass score is rounded to bf16 on output: relative error 2**-8, doubled for safety.
REL = 2 * 2.0**-8 / (1 - 2 * 2.0**-8)
# The mean and spreads are fitted on the rows present at the first copy and fitted again (all
# rows re-encoded) each time the corpus has grown this many times since.
REFIT_GROWTH = 4
FIT_SAMPLE = 65_536
# Bumped whenever the kernels or the probe change what a cached probe result means.
PROBE_VERSION = 3
# The pass is used where its kernel runs at least this many times float32 sgemm's speed (the
# merge and the exact rescoring of the candidates take the rest), and kept for a corpus while
# its searches take under PAYS_BELOW of the float32 search they replace (estimated from the
# kernel time and the probe's ratio).
MIN_KERNEL_RATIO = 1.5
PAYS_BELOW = 0.9


@dataclass(frozen=True)
class Int8Format:
    """How one kernel wants the codes: ``lanes`` rows per packed group, ``tile`` rows and ``mr``
    queries per kernel tile, row codes in ``[-xmax, xmax]`` stored as ``c + offset``, query
    codes in ``[-qmax, qmax]``, the packed dimension a multiple of ``dim_step``; with
    ``lane_cap``, a query's codes sum to at most that in absolute value over each group of
    dimensions one int16 lane of the kernel adds (``avx2``: the same ``t // dim_step`` and
    ``t % 4 // 2``)."""

    name: str
    kernel: Any
    flags: bool  # the kernel flags the tiles holding a score at or above a threshold
    lanes: int
    tile: int
    mr: int
    xmax: int
    offset: int
    qmax: int
    dim_step: int
    lane_cap: int = 0  # 0: no cap


VNNI = Int8Format("avx512-vnni", vnni, False, 16, vnni.NR, vnni.MR, 127, 128, 127, 4)
AVX2 = Int8Format(
    "avx2",
    avx2,
    True,
    avx2.LANES,
    avx2.NR,
    avx2.MR,
    avx2.XMAX,
    avx2.XMAX,
    avx2.QMAX,
    avx2.DIM_STEP,
    avx2.LANE_CAP,
)


def int8_format() -> Int8Format | None:
    """The int8 kernel this CPU runs: AVX512-VNNI where it has it, else AVX2, else None.
    ``FASTRAG_INT8_KERNEL=avx2`` chooses the AVX2 kernel on a VNNI machine (tests, bench)."""
    chosen = os.environ.get("FASTRAG_INT8_KERNEL", "")
    if chosen not in ("", "auto", "avx2"):
        raise ConfigError(
            f"FASTRAG_INT8_KERNEL={chosen!r}: use 'avx2' (the AVX2 kernel on a VNNI machine) or "
            "leave it unset (the best kernel this CPU runs)"
        )
    if chosen != "avx2" and vnni.available():
        return VNNI
    return AVX2 if avx2.available() else None


# ------------------------------------------------------------------------------ the copy
class Int8Arrays(NamedTuple):
    """One consistent version of the copy: a search reads all of it from one snapshot."""

    packed: np.ndarray  # (rows // lanes, dp // 4, lanes, 4) uint8
    scales: np.ndarray  # per row, float32 (0 past n: such rows score 0)
    weights: np.ndarray  # per row: ||dx|| + 2 d 2**-24 ||x||, rounded up
    weights2: np.ndarray  # per row: ||s c||, rounded up
    center: np.ndarray  # (dim,) float32
    sigma: np.ndarray  # (dim,) float32, all > 0
    n: int


def fit_center(vectors: np.ndarray, sample: int = FIT_SAMPLE) -> tuple[np.ndarray, np.ndarray]:
    """The mean of up to ``sample`` evenly spread rows (float32), and per-dimension spreads,
    all 1.

    Spreads other than 1 are supported by the codes and the bound, but measured to lose:
    queries share the corpus's anisotropy, so what dividing the rows by their spreads takes
    from the rows' error it adds, squared, to the queries' (median bound radius at 100k x 384,
    spreads to the power 0 / 0.5 / 1: e5 0.0079 / 0.0080 / 0.0086, MiniLM 0.0206 / 0.0213 /
    0.0224, Gaussian rows with a common component and 8 dims at 4x 0.031 / 0.042 / 0.072)."""
    step = max(1, vectors.shape[0] // sample)
    center = np.asarray(vectors[::step], np.float64).mean(axis=0)
    return center.astype(np.float32), np.ones(vectors.shape[1], np.float32)


class Int8Corpus:
    """int8 codes of the first ``n`` stored rows, packed for this CPU's kernel, with their
    scales and error weights (``_kernels.dense_quant.to_int8``). ``arrays`` is replaced whole
    when it changes shape or meaning, so a search holding one version stays consistent."""

    def __init__(self, dim: int, fmt: Int8Format | None = None) -> None:
        fmt = fmt or int8_format()
        if fmt is None:
            raise RuntimeError("the int8 first pass needs a CPU with AVX2 or AVX512-VNNI")
        self.fmt = fmt
        self.dim = dim
        self.dp = -(-dim // fmt.dim_step) * fmt.dim_step
        self.n = 0
        self.fit_n = 0
        self.verdict: dict[str, Any] | None = None
        self.arrays = self._alloc(0, np.zeros(dim, np.float32), np.ones(dim, np.float32))

    def record(self, wall_s: float, kernel_s: float, workers: int) -> None:
        """What one batch search with this copy measured: its wall time and the seconds its
        ``workers`` spent in the int8 kernel. The float32 search it replaced would have taken
        about the kernel's share times the probe's sgemm/int8 ratio; the copy keeps a verdict
        (:meth:`pays`) until the corpus doubles. A verdict :meth:`confirm` measured stands; an
        estimate that turns a paying pass into one that does not clears the verdict instead, so
        the next large batch measures both paths (the estimate rests on a short probe)."""
        if not _STATE.setdefault("warm", False):
            _STATE["warm"] = True  # the first search of a process loads kernels: no verdict
            return
        v = self.verdict
        if v is not None and "float32_s" in v and self.n < 2 * v["n"]:
            return
        ratio = int8_probe().get("ratio") or 2.0
        f32_s = kernel_s / max(1, workers) * ratio * 1.05  # + the float32 merge
        pays = wall_s < PAYS_BELOW * f32_s
        if not pays and v is not None and v["pays"] and self.n < 2 * v["n"]:
            self.verdict = None
            return
        self.verdict = {"pays": pays, "n": self.n, "int8_s": wall_s, "float32_s_estimate": f32_s}

    def confirm(self, int8_s: float, float32_s: float) -> None:
        """The wall times of the pass and of the float32 path on the same queries, measured one
        after the other: the verdict compares them (until the corpus doubles)."""
        if self.verdict is not None and self.verdict["n"] == self.n:
            pays = int8_s < PAYS_BELOW * float32_s
            self.verdict = {**self.verdict, "pays": pays, "int8_s": int8_s, "float32_s": float32_s}

    def unmeasured(self) -> bool:
        """No search has measured the pass on this corpus yet, or it has doubled since."""
        v = self.verdict
        return v is None or self.n >= 2 * v["n"]

    def pays(self) -> bool:
        """False when the last measured search here took at least ``PAYS_BELOW`` of the float32
        search's time, estimated and then measured (many near-equal scores: too many rows to
        rescore), until the corpus has doubled since."""
        v = self.verdict
        return v is None or v["pays"] or self.n >= 2 * v["n"]

    def _alloc(self, cap: int, center: np.ndarray, sigma: np.ndarray) -> Int8Arrays:
        cap = -(-cap // self.fmt.tile) * self.fmt.tile  # the kernel reads whole tiles of rows
        lanes = self.fmt.lanes
        packed = np.full((cap // lanes, self.dp // 4, lanes, 4), self.fmt.offset, np.uint8)
        zeros = [np.zeros(cap, np.float32) for _ in range(3)]
        return Int8Arrays(packed, *zeros, center, sigma, 0)

    def update(self, vectors: np.ndarray) -> None:
        """Encode the rows of ``vectors`` not encoded yet (vectors only ever grow)."""
        n = vectors.shape[0]
        if n <= self.n:
            return
        arrays = self.arrays
        if self.fit_n == 0 or n >= REFIT_GROWTH * self.fit_n:
            arrays = self._alloc(n, *fit_center(vectors))
            start = 0
            self.fit_n = n
        else:
            start = self.n
            if n > arrays.scales.shape[0]:
                grown = self._alloc(max(n, 2 * arrays.scales.shape[0]), arrays.center, arrays.sigma)
                rows = self.n
                groups = -(-rows // self.fmt.lanes)
                grown.packed[:groups] = arrays.packed[:groups]
                for old, new in zip(arrays[1:4], grown[1:4], strict=True):
                    new[:rows] = old[:rows]
                arrays = grown
        self._encode(vectors[start:n], start, arrays)
        self.arrays = Int8Arrays(*arrays[:6], n)
        self.n = n

    def _encode(self, rows: np.ndarray, row0: int, arrays: Int8Arrays) -> None:
        fmt = (
            float(self.fmt.xmax),
            self.fmt.offset,
            self.fmt.lanes,
            float(np.linalg.norm(arrays.center.astype(np.float64))),
        )
        convert = _quant.to_int8_serial if rows.size < PARALLEL_MIN_ELEMENTS else _quant.to_int8
        convert(rows, row0, *arrays[:4], arrays.center, arrays.sigma, fmt)


def int8_error_coef(q_norms: np.ndarray, q_errors: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(coef, coef2)``: the exact score ``s`` of query ``q`` and a row ``x`` with error
    weights ``w``, ``w2`` lies within ``coef[i] * w + coef2[i] * w2 + REL * |a|`` of
    ``q . mean`` plus its first-pass score ``a``.

    With ``x = mean + sigma * s c + dx`` and ``q * sigma = t e + dq`` (``t e``: the query's
    scaled codes, whose product with ``s c`` the kernel computes exactly in integers),
    ``q . x - q . mean - t s (e . c) = q . dx + dq . (s c)``, so the error is at most
    ``||q|| ||dx|| + ||dq|| ||s c||``; ``w`` also holds the float32 rescoring's accumulation
    error. Both times 1.01 (float64 rounding of the norms).
    """
    return q_norms * 1.01, q_errors * 1.01


# ---------------------------------------------------------------------------------- scorer
class Int8Scorer:
    """First-pass scores of a query batch from this CPU's int8 kernel, in blocks of at most
    ``query_block`` queries (rounded down to whole tiles) x ``chunk`` rows."""

    def __init__(
        self, approx: Int8Corpus, queries: np.ndarray, query_block: int, chunk: int
    ) -> None:
        fmt = approx.fmt
        arrays = approx.arrays  # one version for the whole search
        self.fn = fmt.kernel.scores_bf16()
        self.packed, self.row_scales = arrays.packed, arrays.scales
        self.weights = (arrays.weights, arrays.weights2)
        self.lanes = fmt.lanes
        self.dp = approx.dp
        self.mr = fmt.mr
        self.tile = fmt.tile
        n_q, n_dims = queries.shape
        n_pad = -(-n_q // self.mr) * self.mr
        self.codes = np.zeros((n_pad, approx.dp), np.int8)
        self.offsets = np.zeros(n_pad, np.int32)
        self.scales = np.zeros(n_pad, np.float32)
        self.q_norms = np.empty(n_q, np.float64)
        self.q_errors = np.empty(n_q, np.float64)
        _quant.quantize_queries(
            queries,
            arrays.sigma,
            float(fmt.qmax),
            fmt.offset,
            fmt.dim_step,
            fmt.lane_cap,
            self.codes,
            self.offsets,
            self.scales,
            self.q_norms,
            self.q_errors,
        )
        self.coef, self.coef2 = int8_error_coef(self.q_norms, self.q_errors)
        self.rel = REL
        # float32 twins of the bound for the kernel's row test (an upper end slightly too high
        # only costs the merge's exact test): per query cf, c2f, relf, rounded up
        self.bound = np.zeros((n_pad, 4), np.float32)
        for col, values in enumerate((self.coef, self.coef2, np.full(n_q, REL))):
            self.bound[:n_q, col] = _round_up32(values * (1.0 + 2.0**-20))
        self.flags = fmt.flags
        n = arrays.n
        self.e_all = np.array(
            [arrays.weights[:n].max(initial=0.0), arrays.weights2[:n].max(initial=0.0)],
            np.float64,
        )
        self.thr = np.full(n_pad, -np.inf, np.float32)  # shared by the workers: see score()
        # the constant the first pass leaves out, q . mean, within shift_err (float64 sums)
        center = arrays.center.astype(np.float64)
        q64 = queries.astype(np.float64)
        self.shift = q64 @ center
        self.shift_err = (n_dims + 2) * 2.0**-50 * np.linalg.norm(q64, axis=1) * np.linalg.norm(
            center
        ) + 2.0**-100
        self.exact_lows = True
        self.query_block = query_block // self.mr * self.mr
        self.chunk = chunk

    def running(self) -> Any:
        return contextlib.nullcontext()

    def worker(self) -> Any:
        qb = min(self.query_block, self.codes.shape[0])
        tiles = -(-self.chunk // self.tile)
        return np.empty((qb, tiles * self.tile), np.uint16), np.ones((qb, tiles), np.uint16)

    def tiles(self, state: Any, nb: int) -> tuple[np.ndarray, int]:
        """The row flags of the last block (per tile, bit ``t`` for its row ``t``) and the tile
        width (0: no flags, read all)."""
        return state[1][:nb], (self.tile if self.flags else 0)

    def score(self, state: Any, c0: int, m: int, q0: int, nb: int) -> np.ndarray:
        """Scores of queries ``q0 + i`` (``i < nb``) and rows ``c0 + j`` (``j < m``) as bf16
        bits. Where the kernel flags rows, it tests their upper ends against ``thr``, which
        every worker's merge raises: any worker's k-th largest lower end bounds the exact k-th
        best score from below, so a threshold from another worker is as valid as one's own (x86
        reads and writes aligned floats whole)."""
        out, flags = state
        nb_pad = -(-nb // self.mr) * self.mr
        m_pad = -(-m // self.tile) * self.tile
        # the kernel does not check bounds: a wrong call would corrupt memory, so refuse it
        if (
            nb_pad > out.shape[0]
            or m_pad > out.shape[1]
            or c0 % self.lanes
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
            self.packed[c0 // self.lanes].ctypes.data,
            self.row_scales[c0:].ctypes.data,
            out.ctypes.data,
            nb_pad,
            m_pad,
            self.dp,
            out.shape[1],
            *(
                (
                    self.thr[q0:].ctypes.data,
                    flags.ctypes.data,
                    flags.shape[1],
                    self.bound[q0:].ctypes.data,
                    self.weights[0][c0:].ctypes.data,
                    self.weights[1][c0:].ctypes.data,
                )
                if self.flags
                else ()
            ),
        )
        return out[:nb]


def _round_up32(x: np.ndarray) -> np.ndarray:
    """float64 values -> the float32 at or above each."""
    t = x.astype(np.float32)
    return np.where(t.astype(np.float64) < x, np.nextafter(t, np.float32(np.inf)), t)


# ------------------------------------------------------------------ does it pay here?
_STATE: dict[str, Any] = {}
_LOCK = threading.Lock()


def best_of(fns: list[Any], n: int = 5) -> list[float]:
    """Seconds of the fastest of ``n`` calls of each of ``fns``, called in turn (a slow spell of
    a shared machine hits all of them), after one warm-up call each."""
    for fn in fns:
        fn()
    times = [math.inf] * len(fns)
    for _ in range(n):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i] = min(times[i], time.perf_counter() - t0)
    return times


def int8_probe() -> dict[str, Any]:
    """Whether the int8 first pass pays on this machine: ``fast``, ``kernel``, ``reason`` and,
    when a probe ran, the seconds of each search (``int8_s``, ``float32_s``) and ``cached``.

    No without AVX2. Otherwise a short timed probe (~50 ms) times the int8 kernel against numpy's
    float32 sgemm on one thread; yes when the kernel is at least ``MIN_KERNEL_RATIO`` times
    faster (``ratio``). Whether the pass then pays on a given corpus is measured on its own
    searches (:meth:`Int8Corpus.record`). The result is kept for the process and in a cache file
    per CPU model, flags and library versions (:func:`probe_cache_path`).
    ``FASTRAG_INT8=0|1`` overrides.
    """
    with _LOCK:
        if "probe" not in _STATE:
            _STATE["probe"] = _decide()
        return _STATE["probe"]


def _decide() -> dict[str, Any]:
    fmt = int8_format()
    forced = os.environ.get("FASTRAG_INT8")
    if fmt is None:
        return {"fast": False, "kernel": None, "reason": "no AVX2: no int8 kernel for this CPU"}
    if forced in ("0", "1"):
        return {"fast": forced == "1", "kernel": fmt.name, "reason": f"FASTRAG_INT8={forced}"}
    key = probe_key(fmt)
    path = probe_cache_path()
    cached = _read_cache(path, key)
    if cached is not None:
        return {**cached, "cached": True}
    result = _timed_probe(fmt)
    _write_cache(path, key, result)
    return {**result, "cached": False}


def probe_key(fmt: Int8Format) -> str:
    """What a cached probe result is valid for: CPU model and flags, kernel, library versions."""
    import llvmlite
    import numba

    flags = ",".join(sorted(f for f in cpu_flags() if f.startswith(("avx", "amx", "fma"))))
    return "|".join(
        [
            _cpu_model(),
            flags,
            fmt.name,
            f"probe{PROBE_VERSION}",
            f"numpy{np.__version__}",
            f"numba{numba.__version__}",
            f"llvmlite{llvmlite.__version__}",
        ]
    )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def probe_cache_path() -> Path:
    """``$FASTRAG_CACHE_DIR`` or ``$XDG_CACHE_HOME/fastrag`` (``~/.cache/fastrag``), file
    ``cpu_probe.json``."""
    return cache_root() / "cpu_probe.json"


def _read_cache(path: Path, key: str) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
        entry = data.get(key) if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None
    if isinstance(entry, dict) and isinstance(entry.get("fast"), bool):
        return entry
    return None


def _write_cache(path: Path, key: str, result: dict[str, Any]) -> None:
    """Add ``key`` to the cache file atomically (a lost race only costs a probe)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = json.loads(path.read_text())
            data = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            data = {}
        data[key] = result
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cpu_probe.", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: the probe runs once per process instead


def _timed_probe(fmt: Int8Format) -> dict[str, Any]:
    """Best of 5, one thread each: the int8 kernel on 258 queries x 8,192 random rows (dim 384,
    in the search's 1,024-row chunks) against numpy's float32 sgemm on the same problem."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((258, 384), dtype=np.float32)
    x = rng.standard_normal((8192, 384), dtype=np.float32)
    corpus = Int8Corpus(384, fmt)
    corpus.update(x)
    scorer = Int8Scorer(corpus, q, 1024, 1024)
    state = scorer.worker()

    def int8() -> None:
        for c0 in range(0, 8192, 1024):
            scorer.score(state, c0, 1024, 0, q.shape[0])

    with single_threaded_blas():
        int8_s, f32_s = best_of([int8, lambda: q @ x.T])
    ratio = f32_s / int8_s if int8_s > 0 else math.inf
    fast = ratio >= MIN_KERNEL_RATIO
    return {
        "fast": fast,
        "kernel": fmt.name,
        "reason": f"{fmt.name} kernel probe, one thread: int8 {int8_s * 1e3:.2f} ms vs float32 "
        f"sgemm {f32_s * 1e3:.2f} ms ({ratio:.2f}x"
        + (")" if fast else f", under the {MIN_KERNEL_RATIO}x the pass needs)"),
        "int8_s": int8_s,
        "float32_s": f32_s,
        "ratio": ratio,
    }
