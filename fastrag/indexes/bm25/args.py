"""The arguments :class:`~fastrag.indexes.bm25.BM25Index` takes: the known methods and search
strategies, and one check per argument (a ConfigError naming the bad value and the fix).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real

import numpy as np

from fastrag._checks import readonly
from fastrag._lazy import kernels
from fastrag.errors import ConfigError

BM25_METHODS: tuple[str, ...] = ("lucene", "robertson", "atire", "bm25l", "bm25+")
"""Known BM25 variants (``lucene`` is the default, as in bm25s)."""

SEARCH_STRATEGIES: tuple[str, ...] = ("auto", "maxscore", "touched", "dense")
"""Exact scoring strategies (same results); ``auto`` picks per query, the others are forced
choices for benchmarks (see ``fastrag._kernels.bm25.search``)."""

bm25_search = kernels("bm25.search")
_STRATEGY_NAMES = {
    "auto": "STRATEGY_AUTO",
    "maxscore": "STRATEGY_MAXSCORE",
    "touched": "STRATEGY_TOUCHED",
    "dense": "STRATEGY_DENSE",
}

INT32_MAX = int(np.iinfo(np.int32).max)
_INT32_MIN = int(np.iinfo(np.int32).min)


def check_method(method: object) -> str:
    """``method`` if it is one of :data:`BM25_METHODS`."""
    if not isinstance(method, str) or method not in BM25_METHODS:
        raise ConfigError(
            f"unknown BM25 method {method!r}; known methods: "
            f"{', '.join(BM25_METHODS)} (pass method= one of them; "
            "'lucene' is the default)"
        )
    return method


def check_params(k1: object, b: object, delta: object) -> tuple[float, float, float]:
    """``(k1, b, delta)`` as floats, if each is finite and in its range."""
    for name, v in (("k1", k1), ("b", b), ("delta", delta)):
        if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v):
            raise ConfigError(f"BM25 parameter {name}={v!r} must be a finite number")
    if k1 < 0:
        raise ConfigError(f"BM25 parameter k1={k1!r} must be >= 0 (typical: 1.2 to 2.0)")
    if not 0.0 <= b <= 1.0:
        raise ConfigError(f"BM25 parameter b={b!r} must be within [0, 1] (typical: 0.75)")
    if delta < 0:
        raise ConfigError(f"BM25 parameter delta={delta!r} must be >= 0 (typical: 0.5 to 1)")
    return float(k1), float(b), float(delta)


def check_bm25_params(
    method: str = "lucene", k1: float = 1.5, b: float = 0.75, delta: float = 0.5
) -> dict:
    """The BM25 parameters as :meth:`BM25Index.build` takes them, validated (ConfigError
    naming the bad value and the fix): lets a caller fail before any index is built."""
    k1, b, delta = check_params(k1, b, delta)
    return {"method": check_method(method), "k1": k1, "b": b, "delta": delta}


def check_strategy(strategy: object) -> str:
    """``strategy`` if it is one of :data:`SEARCH_STRATEGIES` (ConfigError otherwise)."""
    if not isinstance(strategy, str) or strategy not in _STRATEGY_NAMES:
        raise ConfigError(
            f"unknown search strategy {strategy!r}; known strategies: "
            f"{', '.join(SEARCH_STRATEGIES)}"
        )
    return strategy


def strategy_code(strategy: object) -> int:
    """The kernels' ``STRATEGY_*`` code of one of :data:`SEARCH_STRATEGIES` (imports them)."""
    return int(getattr(bm25_search, _STRATEGY_NAMES[check_strategy(strategy)]))


def check_window(window: object) -> int:
    """``window`` as the kernels take it: rows per window of the ``maxscore`` search, 0 for
    the automatic choice (``None``)."""
    if window is None:
        return 0
    if isinstance(window, bool) or not isinstance(window, int | np.integer) or window < 1:
        raise ConfigError(
            f"window must be a positive number of rows (or None: chosen by the corpus size); "
            f"got {window!r}"
        )
    return int(window)


def ragged_array(x: object, name: str, dtype: type) -> np.ndarray:
    """``x`` as a read-only, contiguous 1-D array of ``dtype`` (fast path: already is)."""
    arr = x if isinstance(x, np.ndarray) else np.asarray(x)
    if arr.ndim != 1:
        raise ConfigError(f"{name} must be a 1-D integer array; got shape {arr.shape}")
    if arr.dtype != dtype:
        if arr.size and arr.dtype.kind not in "iu":
            raise ConfigError(f"{name} must hold integers; got dtype {arr.dtype}")
        if arr.size and dtype == np.int32 and (arr.min() < _INT32_MIN or arr.max() > INT32_MAX):
            bad = int(arr.min()) if arr.min() < _INT32_MIN else int(arr.max())
            raise ConfigError(
                f"query token id {bad} is outside the vocabulary; drop tokens the "
                "vocabulary does not know before searching"
            )
        arr = arr.astype(dtype)
    elif not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    if arr.flags.writeable:
        arr = readonly(arr)
    return arr


def _as_int_array(x: object, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ConfigError(f"{name} must be a 1-D integer array; got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ConfigError(f"{name} must hold integers; got dtype {arr.dtype}")
    return arr


def check_offsets(offsets: object, n_values: int, name: str, min_len: int) -> np.ndarray:
    """Ragged ``offsets`` as int64: at least ``min_len`` entries, non-decreasing, within
    ``[0, n_values]``."""
    off = _as_int_array(offsets, name).astype(np.int64, copy=False)
    if off.shape[0] < min_len:
        raise ConfigError(
            f"{name} needs at least {min_len} entries (n + 1 for n items); got {off.shape[0]}"
        )
    if off.shape[0] and (off[0] < 0 or off[-1] > n_values):
        raise ConfigError(
            f"{name} spans [{off[0]}, {off[-1]}] but the values array has "
            f"{n_values} entries; offsets must lie within [0, {n_values}]"
        )
    if off.shape[0] > 1 and bool(np.any(off[1:] < off[:-1])):
        i = int(np.argmax(off[1:] < off[:-1]))
        raise ConfigError(
            f"{name} must be non-decreasing; {name}[{i + 1}]={off[i + 1]} < {name}[{i}]={off[i]}"
        )
    return off


def check_corpus(
    values: object, offsets: object, n_vocab: object
) -> tuple[np.ndarray, np.ndarray, int]:
    """A ragged token-id corpus as read-only int32 ``values`` and int64 ``offsets``, with its
    vocabulary size (token ids are range-checked here only when they need a cast)."""
    if (
        isinstance(n_vocab, bool)
        or not isinstance(n_vocab, Integral)
        or not (1 <= n_vocab <= INT32_MAX)
    ):
        raise ConfigError(
            f"n_vocab={n_vocab!r} must be an int in [1, {INT32_MAX}] (the "
            "vocabulary size, max token id + 1)"
        )
    vals = _as_int_array(values, "values")
    if vals.dtype != np.int32:
        if vals.size and (vals.min() < 0 or vals.max() >= n_vocab):
            bad = int(vals[(vals < 0) | (vals >= n_vocab)][0])
            raise ConfigError(
                f"token id {bad} is outside the vocabulary [0, {n_vocab}); "
                "map tokens to ids below n_vocab"
            )
        vals = vals.astype(np.int32)
    off = check_offsets(offsets, vals.shape[0], "offsets", 2)
    return (
        readonly(np.ascontiguousarray(vals)),
        readonly(np.ascontiguousarray(off)),
        int(n_vocab),
    )


def check_queries(
    q_values: object, q_offsets: object, n_vocab: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """Ragged queries as read-only int32 token ids (all in ``[0, n_vocab)``) and int64 offsets
    (None when ``q_offsets`` is None: one query)."""
    qv = _as_int_array(q_values, "q_values")
    if q_offsets is None:
        lo, hi = 0, qv.shape[0]
        qo = None
    else:
        qo = check_offsets(q_offsets, qv.shape[0], "q_offsets", 1)
        lo, hi = (int(qo[0]), int(qo[-1])) if qo.shape[0] else (0, 0)
    if hi > lo:
        used = qv[lo:hi]
        mn, mx = int(used.min()), int(used.max())
        if mn < 0 or mx >= n_vocab:
            bad = mn if mn < 0 else mx
            raise ConfigError(
                f"query token id {bad} is outside the vocabulary [0, {n_vocab}); "
                "drop tokens the vocabulary does not know before searching"
            )
    return readonly(np.ascontiguousarray(qv, dtype=np.int32)), (
        None if qo is None else readonly(np.ascontiguousarray(qo))
    )


def token_batch(queries: object) -> tuple[np.ndarray, np.ndarray]:
    """``(q_values, q_offsets)`` of a batch of token-id queries: a sequence of token-id
    sequences, or one 1-D sequence of token ids (a batch of one)."""
    if isinstance(queries, np.ndarray) and queries.ndim == 1 and queries.dtype.kind in "iu":
        queries = [queries]
    elif isinstance(queries, (str, bytes)) or not isinstance(queries, Sequence | np.ndarray):
        raise ConfigError(
            f"queries must be a list of token-id lists (one per query), got "
            f"{type(queries).__name__}; tokenize and map text to ids first"
        )
    elif len(queries) and all(isinstance(t, Integral) for t in queries):
        queries = [queries]
    parts = []
    for i, q in enumerate(queries):
        arr = np.asarray(q)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise ConfigError(
                f"queries[{i}] must be a 1-D sequence of token ids (ints), got "
                f"{type(q).__name__} of dtype {arr.dtype} and shape {arr.shape}"
            )
        parts.append(arr)
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([p.shape[0] for p in parts], out=offsets[1:])
    values = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return values, offsets


def raise_query_error(err: int, qv: np.ndarray, qo: np.ndarray, n_vocab: int) -> None:
    """Turn a kernel's ``check_queries`` code into the error it stands for."""
    if err >= 0:
        raise ConfigError(
            f"query token id {int(qv[err])} is outside the vocabulary "
            f"[0, {n_vocab}); drop tokens the vocabulary does not know before "
            "searching"
        )
    check_offsets(qo, qv.shape[0], "q_offsets", 1)  # raises with the precise message
    raise ConfigError(f"q_offsets entry {-2 - err} is invalid")  # pragma: no cover


def raise_bad_token(bad: int, values: np.ndarray, n_vocab: int) -> None:
    """Raise for the token id at ``values[bad]`` when ``bad >= 0`` (a build kernel's code)."""
    if bad >= 0:
        raise ConfigError(
            f"token id {int(values[bad])} at values[{bad}] is outside the "
            f"vocabulary [0, {n_vocab}); map tokens to ids below n_vocab"
        )
