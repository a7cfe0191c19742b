"""The int8 first pass (fastrag.indexes.int8): the kernels' integer products, the centred codes
and their proven bound, results equal to the top-k of the scores the search reports (near-ties
included), snapshots under concurrent growth, the probe cached per CPU and the per-corpus
verdict. Runs wherever a kernel does (AVX2; AVX512-VNNI machines test both kernels)."""

from __future__ import annotations

import concurrent.futures
import json

import numpy as np
import pytest
from fastrag._kernels import avx2, dense_quant, vnni
from fastrag._kernels import dense as dense_kernels

from fastrag.errors import ConfigError
from fastrag.indexes import exact as dense_exact
from fastrag.indexes import int8, quantized
from fastrag.indexes.flat import FlatIndex

FORMATS = {"avx2": (int8.AVX2, avx2), "avx512-vnni": (int8.VNNI, vnni)}
NO_FLAGS = np.zeros((1, 1), np.uint8)


@pytest.fixture(params=sorted(FORMATS))
def fmt(request):
    """One int8 kernel format; skips where the CPU cannot run it."""
    f, module = FORMATS[request.param]
    if not module.available():
        pytest.skip(f"this CPU cannot run the {request.param} kernel")
    return f


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(dense_exact, "BLOCKED_PARALLEL_MIN_MACS", 0)
    monkeypatch.setattr(dense_exact, "CORPUS_CHUNK", 256)
    monkeypatch.setattr(dense_exact, "QUERY_BLOCK", 32)
    monkeypatch.setattr(dense_exact, "BF16_SUPER_BATCH", 40)


def embedding_like(
    n: int, dim: int, seed: int, common: float = 0.9, strong: float = 5.0
) -> np.ndarray:
    """Unit rows shaped like sentence-model output: a large common component (``||mean||``
    near ``common``), a few strong directions, and groups of near-duplicates (every row has 3
    perturbed copies and every 50th an exact one: ties in the reported scores)."""
    rng = np.random.default_rng(seed)
    mean = rng.standard_normal(dim)
    mean *= common / np.linalg.norm(mean)
    scale = np.ones(dim)
    scale[rng.choice(dim, 6, replace=False)] = strong
    base = rng.standard_normal((n // 4, dim)) * scale / np.sqrt(dim) * 0.5
    rows = np.concatenate([base + 0.02 * rng.standard_normal(base.shape) * i for i in range(4)])
    rows[::50] = rows[1::50]
    rows = rows[:n] + mean
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def reported_topk(x: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-k of the scores the search reports (its fixed-order products), ties by row:
    every row scored, brute force."""
    n_q, n = q.shape[0], x.shape[0]
    rows = np.tile(np.arange(n, dtype=np.int64), (n_q, 1))
    scores = np.empty((n_q, n), np.float32)
    counts = np.full(n_q, n, np.int32)
    dense_kernels.exact_final_scores(x, q, rows, scores, counts, -np.inf)
    return rows[:, :k], scores[:, :k]


def kernel_scores(corpus: int8.Int8Corpus, q: np.ndarray) -> tuple[np.ndarray, int8.Int8Scorer]:
    """What the kernel returns for every query and row (as float64), one call per chunk."""
    scorer = int8.Int8Scorer(corpus, q, 64, 256)
    state = scorer.worker()
    scorer.thr[:] = -np.inf  # flag every tile
    out = np.empty((q.shape[0], corpus.n))
    for c0 in range(0, corpus.n, 256):
        m = min(256, corpus.n - c0)
        for q0 in range(0, q.shape[0], scorer.query_block):
            nb = min(scorer.query_block, q.shape[0] - q0)
            bits = scorer.score(state, c0, m, q0, nb)[:, :m]
            out[q0 : q0 + nb, c0 : c0 + m] = (bits.astype(np.uint32) << 16).view(np.float32)
    return out, scorer


def bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (nearest even), as float32."""
    b = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32)


def lane_sums(fmt: int8.Int8Format, codes: np.ndarray) -> np.ndarray:
    """Sum of |codes| over each group of dimensions one int16 lane of the kernel adds."""
    dims = np.arange(codes.shape[1])
    lane = dims // fmt.dim_step * 2 + dims % 4 // 2
    out = np.zeros((codes.shape[0], lane.max() + 1), np.int64)
    np.add.at(out.T, lane, np.abs(codes.astype(np.int64)).T)
    return out


def capped(fmt: int8.Int8Format, q: np.ndarray) -> np.ndarray:
    """``q`` with each lane's codes scaled down (towards zero) to the format's lane cap."""
    if not fmt.lane_cap:
        return q
    dims = np.arange(q.shape[1])
    lane = dims // fmt.dim_step * 2 + dims % 4 // 2
    over = np.maximum(lane_sums(fmt, q) / fmt.lane_cap, 1.0)[:, lane]
    return np.trunc(q / over).astype(q.dtype)


def test_kernel_integer_products_are_exact_at_the_code_extremes(fmt):
    """Codes at their extremes (every int16 lane of the AVX2 kernel at its limit: row codes at
    ``2 xmax`` stored, query codes summing to the lane cap) and random ones: the kernel's
    ``C - kq`` is the exact integer product, rounded once."""
    rng = np.random.default_rng(1)
    dim, n, n_q = 96, 2 * fmt.tile, 2 * fmt.mr
    x = rng.integers(-fmt.xmax, fmt.xmax + 1, (n, dim))
    x[0], x[1] = fmt.xmax, -fmt.xmax
    q = capped(fmt, rng.integers(-fmt.qmax, fmt.qmax + 1, (n_q, dim)))
    q[0] = fmt.qmax
    if fmt.lane_cap:  # per lane: two codes at qmax, the rest up to the cap
        group = np.arange(dim) % fmt.dim_step
        q[0] = np.where(group < 4, fmt.qmax, 0)  # dims 0, 1 are one lane's, 2, 3 the other's
        q[0, (group == 4) | (group == 6)] = fmt.lane_cap - 2 * fmt.qmax
        assert (lane_sums(fmt, q[:1]) == fmt.lane_cap).all()
        assert fmt.lane_cap * (fmt.xmax + fmt.offset) <= 32767 < (fmt.lane_cap + 1) * 2 * fmt.xmax
    q[1] = -q[0]
    corpus = int8.Int8Corpus(dim, fmt)
    packed = corpus._alloc(n, corpus.arrays.center, corpus.arrays.sigma).packed
    for r in range(n):
        for t in range(dim):
            packed[r // fmt.lanes, t // 4, r % fmt.lanes, t % 4] = x[r, t] + fmt.offset
    codes = np.zeros((n_q, corpus.dp), np.int8)
    codes[:, :dim] = q
    offsets = (fmt.offset * q.sum(axis=1)).astype(np.int32)
    out = np.empty((n_q, n), np.uint16)
    extra = (np.full(n_q, -np.inf, np.float32), np.empty((n_q, n // fmt.tile), np.uint16))
    bound, weights = np.zeros((n_q, 4), np.float32), np.zeros(n, np.float32)
    fmt.kernel.scores_bf16()(
        codes.ctypes.data,
        offsets.ctypes.data,
        np.ones(n_q, np.float32).ctypes.data,
        packed.ctypes.data,
        np.ones(n, np.float32).ctypes.data,
        out.ctypes.data,
        n_q,
        n,
        corpus.dp,
        n,
        *(
            (extra[0].ctypes.data, extra[1].ctypes.data, n // fmt.tile)
            + (bound.ctypes.data, weights.ctypes.data, weights.ctypes.data)
            if fmt.flags
            else ()
        ),
    )
    exact = (q @ x.T).astype(np.float32)  # |C| < 2**24: float32 holds it
    np.testing.assert_array_equal((out.astype(np.uint32) << 16).view(np.float32), bf16(exact))
    assert exact[0, 0] == fmt.xmax * q[0].sum()
    if fmt.flags:
        assert (extra[1] == 0xFFFF).all()  # every row's upper end is at or above -inf


@pytest.mark.parametrize("shape", ["embedding", "one lane", "spread"])
def test_query_codes_keep_every_int16_lane_exact(fmt, shape):
    """The query codes stay within ``[-qmax, qmax]`` and, where the kernel adds several
    dimensions in one int16 lane, within the lane cap, also for queries whose weight sits in
    one lane; the scale grows only as much as the cap needs (codes reach it or ``qmax``)."""
    rng = np.random.default_rng(7)
    dim = 100
    if shape == "embedding":
        q = embedding_like(50, dim, 8)
    elif shape == "one lane":
        q = 0.01 * rng.standard_normal((50, dim)).astype(np.float32)
        q[:, [0, 1, 4, 5]] = rng.choice([-1.0, 1.0], (50, 4))  # one AVX2 lane, all large
    else:
        q = rng.standard_normal((50, dim)).astype(np.float32)
    corpus = int8.Int8Corpus(dim, fmt)
    corpus.update(embedding_like(64, dim, 9))
    scorer = int8.Int8Scorer(corpus, q, 64, 256)
    codes = scorer.codes[:50, :dim].astype(np.int64)
    assert np.abs(codes).max(axis=1).max() <= fmt.qmax
    reach = np.abs(codes).max(axis=1) == fmt.qmax
    if fmt.lane_cap:
        sums = lane_sums(fmt, codes)
        assert sums.max() <= fmt.lane_cap
        reach |= sums.max(axis=1) >= fmt.lane_cap - fmt.dim_step // 2  # rounding: +-2
        if shape == "one lane":
            assert (np.abs(codes).max(axis=1) <= fmt.qmax // 2).all()  # the cap set the scale
    assert reach.all()
    y = q.astype(np.float64) * corpus.arrays.sigma
    err = np.linalg.norm(y - scorer.scales[:50, None].astype(np.float64) * codes, axis=1)
    assert (err <= scorer.q_errors).all()


@pytest.mark.parametrize("shape", ["embedding", "dominant", "midpoints"])
def test_the_bound_holds_for_what_the_kernel_returns(fmt, shape, monkeypatch):
    """|approximate score - (q . x - q . mean)| <= coef w + coef2 w2 + rel |a| for every pair,
    on model-like rows, rows with a few 30x dimensions, and rows whose entries sit just below
    rounding midpoints of their codes (centring off, so all errors of a row share a sign and
    add up: the bound is approached)."""
    rng = np.random.default_rng(2)
    dim = 100
    if shape == "embedding":
        x, q = embedding_like(1200, dim, 3), embedding_like(40, dim, 4)
    elif shape == "dominant":
        x = rng.standard_normal((1200, dim)).astype(np.float32)
        x[:, :3] *= 30.0
        q = rng.standard_normal((40, dim)).astype(np.float32)
    else:
        monkeypatch.setattr(
            int8, "fit_center", lambda v: (np.zeros(dim, np.float32), np.ones(dim, np.float32))
        )
        step = 2.0**-7
        x = (step * (rng.integers(10, fmt.xmax - 1, (1200, dim)) + 0.499)).astype(np.float32)
        x[:, 0] = fmt.xmax * step  # the largest entry fixes the row scale at exactly step
        x[::2] *= -1.0
        q = (step * (rng.integers(10, fmt.qmax - 1, (40, dim)) + 0.499)).astype(np.float32)
        q[:, 0] = fmt.qmax * step
    corpus = int8.Int8Corpus(dim, fmt)
    corpus.update(x)
    approx, scorer = kernel_scores(corpus, q)
    center = corpus.arrays.center.astype(np.float64)
    q64 = q.astype(np.float64)
    exact = q64 @ x.astype(np.float64).T - (q64 @ center)[:, None]
    w, w2 = (a[: corpus.n].astype(np.float64) for a in scorer.weights)
    bound = scorer.coef[:, None] * w + scorer.coef2[:, None] * w2 + scorer.rel * np.abs(approx)
    gap = np.abs(approx - exact)
    assert (gap <= bound).all(), (gap / bound).max()
    if shape == "midpoints":
        assert (gap / bound).max() > 0.3  # the errors do add up towards the bound


def test_avx2_row_flags_are_the_upper_end_test_and_bound_the_merge():
    """The AVX2 kernel's flags: bit ``t`` of a tile's mask is set exactly where the row's upper
    end, ``a + cf w + c2f w2 + relf |a|`` in float32, reaches the query's threshold; and every
    row whose exact (float64) upper end reaches the bar the threshold was lowered from is
    flagged."""
    if not avx2.available():
        pytest.skip("this CPU cannot run the avx2 kernel")
    rng = np.random.default_rng(11)
    dim, n = 100, 256  # one chunk of kernel_scores' scorer
    corpus = int8.Int8Corpus(dim, int8.AVX2)
    corpus.update(embedding_like(n, dim, 12))
    q = embedding_like(24, dim, 13)
    approx, scorer = kernel_scores(corpus, q)
    bars = np.quantile(approx, 0.97, axis=1) + rng.normal(0, 0.01, q.shape[0])
    e_all = corpus.arrays.weights[:n].max(), corpus.arrays.weights2[:n].max()
    for i, bar in enumerate(bars):
        scorer.thr[i] = dense_quant.lowered_bar(
            bar, scorer.coef[i] * e_all[0] + scorer.coef2[i] * e_all[1]
        )
    state = scorer.worker()
    bits = scorer.score(state, 0, n, 0, q.shape[0])[:, :n]
    flags, win = scorer.tiles(state, q.shape[0])
    got = (flags[:, :, None].astype(np.uint32) >> np.arange(win, dtype=np.uint32)) & 1
    a = (bits.astype(np.uint32) << 16).view(np.float32)
    cf, c2f, relf = (scorer.bound[: q.shape[0], c, None] for c in range(3))
    w, w2 = (v[:n] for v in scorer.weights)
    upper = a + cf * w + c2f * w2 + relf * np.abs(a)
    assert upper.dtype == np.float32
    np.testing.assert_array_equal(
        got.reshape(q.shape[0], -1).astype(bool), upper >= scorer.thr[: q.shape[0], None]
    )
    a64 = a.astype(np.float64)
    e = scorer.coef[:, None] * w + scorer.coef2[:, None] * w2 + scorer.rel * np.abs(a64)
    needed = a64 + e >= bars[:, None]
    assert needed.any() and not needed.all()
    assert (got.reshape(q.shape[0], -1).astype(bool) | ~needed).all()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("metric", ["cosine", "dot"])
@pytest.mark.parametrize("merge", ["tiles", "groups", "groups-bounds-only"])
def test_results_are_the_top_k_of_the_reported_scores(
    fmt, threads, metric, merge, small_blocks, monkeypatch
):
    """Model-like rows with near-duplicates and exact duplicates: the int8 search returns
    exactly the top-k of the scores it reports (brute force over every row), ties by row.
    ``merge``: the kernel's tile flags (AVX2), or the screening of groups of 64 scores that
    the VNNI and bf16 passes use, with and without exact lower ends (bf16's)."""
    if merge != "tiles":
        monkeypatch.setattr(int8.Int8Scorer, "tiles", lambda self, state, nb: (NO_FLAGS, 0))
    if merge == "groups-bounds-only":
        real_init = int8.Int8Scorer.__init__

        def init(self, *args):
            real_init(self, *args)
            self.exact_lows = False

        monkeypatch.setattr(int8.Int8Scorer, "__init__", init)
    x = embedding_like(3000, 64, 5)
    if metric == "dot":
        x *= np.random.default_rng(6).lognormal(0.0, 0.5, (3000, 1)).astype(np.float32)
    q = np.concatenate([embedding_like(36, 64, 7), x[100:104]])  # 4 queries equal to rows
    index = FlatIndex.from_vectors(x, metric, bf16=False, int8=True)
    index._approx["int8"] = int8.Int8Corpus(64, fmt)
    got_rows, got_scores, counts = index.search(q, 10, num_threads=threads)
    want_rows, want_scores = reported_topk(index.vectors, q, 10)
    np.testing.assert_array_equal(got_rows, want_rows)
    np.testing.assert_array_equal(got_scores, want_scores)
    assert (counts == 10).all() and index._approx["int8"].n == 3000


def test_centring_narrows_the_bound_on_model_like_vectors(fmt, monkeypatch):
    """With a common component of 0.9 (multilingual-e5's is 0.89), codes of the centred rows
    leave a bound well under that of codes of the raw rows (1.8x here; on e5-small's vectors of
    real text 2.2x: 0.0079 against 0.0173)."""
    x, q = embedding_like(2000, 96, 8, strong=1.0), embedding_like(20, 96, 9, strong=1.0)

    def median_bound() -> float:
        corpus = int8.Int8Corpus(96, fmt)
        corpus.update(x)
        scorer = int8.Int8Scorer(corpus, q, 64, 256)
        w, w2 = scorer.weights
        return float(np.median(scorer.coef[:, None] * w[:2000] + scorer.coef2[:, None] * w2[:2000]))

    centred = median_bound()
    monkeypatch.setattr(
        int8, "fit_center", lambda v: (np.zeros(96, np.float32), np.ones(96, np.float32))
    )
    raw = median_bound()
    assert raw > 1.6 * centred, (raw, centred)


def test_rows_past_n_score_zero_and_bad_blocks_are_refused(fmt):
    rng = np.random.default_rng(10)
    n = fmt.tile + 6
    x = rng.standard_normal((n, 10)).astype(np.float32)  # dims padded to the kernel's step
    q = rng.standard_normal((fmt.mr + 1, 10)).astype(np.float32)
    corpus = int8.Int8Corpus(10, fmt)
    corpus.update(x)
    assert corpus.arrays.scales.shape[0] == 2 * fmt.tile and (corpus.arrays.scales[n:] == 0).all()
    scorer = int8.Int8Scorer(corpus, q, 64, 2 * fmt.tile)
    out, flags = scorer.worker()
    block = scorer.score((out, flags), 0, 2 * fmt.tile, 0, q.shape[0])
    assert (block[:, n:] == 0).all()
    for state, c0, m in [
        ((out[: fmt.mr], flags), 0, n),  # mr + 1 queries need 2 mr rows of output
        ((out[:, : fmt.tile], flags), 0, n),  # n rows need two tiles of columns
        ((out, flags), 3, n - 3),  # not a group of lanes
    ]:
        with pytest.raises(RuntimeError, match="int8 block out of range"):
            scorer.score(state, c0, m, 0, q.shape[0])


def test_growth_refits_and_a_search_keeps_its_snapshot(fmt, small_blocks):
    """Rows added in steps: the mean and spreads are fitted again once the corpus has grown
    REFIT_GROWTH times (every row re-encoded, in new arrays), results stay exact at every step,
    and a scorer made before the refit still reads the arrays it started with."""
    x = embedding_like(6000, 48, 11)
    q = embedding_like(40, 48, 12)
    index = FlatIndex(48, bf16=False, int8=True)
    index._approx["int8"] = corpus = int8.Int8Corpus(48, fmt)
    index.add(x[:1000])
    index.search(q, 5)
    first = corpus.arrays
    before = int8.Int8Scorer(corpus, q, 32, 256)
    for stop in (3000, 4000, 6000):
        index.add(x[1000:stop])
        got = index.search(q, 5)
        want = reported_topk(index.vectors, q, 5)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        refit = stop >= int8.REFIT_GROWTH * 1000
        assert (corpus.arrays.center is first.center) == (not refit), stop
    assert corpus.fit_n == 6000 and before.packed is first.packed
    assert not np.array_equal(corpus.arrays.center, first.center)


def test_many_threads_search_while_the_kernel_compiles_once(fmt, monkeypatch):
    module = fmt.kernel
    monkeypatch.setattr(module, "_STATE", {})
    compiled = []
    real = module._compile

    def spy():
        compiled.append(1)
        return real()

    monkeypatch.setattr(module, "_compile", spy)
    monkeypatch.setattr(int8, "int8_format", lambda: fmt)
    x = embedding_like(3000, 64, 13)
    qs = [embedding_like(40, 64, 20 + i) for i in range(8)]
    want = [reported_topk(x, q, 10) for q in qs]
    index = FlatIndex.from_vectors(x, bf16=False, int8=True)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda q: index.search(q, 10, num_threads=2), qs))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g[0], w[0])
    assert compiled == [1] and index._approx["int8"].n == 3000


# ------------------------------------------------------------------ probe and verdict
@pytest.fixture
def fresh_probe(monkeypatch, tmp_path):
    monkeypatch.setattr(int8, "_STATE", {})
    monkeypatch.setenv("FASTRAG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FASTRAG_INT8", raising=False)
    return tmp_path


def test_probe_is_cached_per_cpu_and_survives_a_damaged_cache(fresh_probe, monkeypatch):
    if int8.int8_format() is None:
        pytest.skip("no int8 kernel on this CPU")
    runs = []
    monkeypatch.setattr(
        int8,
        "_timed_probe",
        lambda fmt: runs.append(fmt.name) or {"fast": True, "kernel": fmt.name, "ratio": 2.5},
    )
    first = int8.int8_probe()
    assert first["fast"] is True and first["cached"] is False and len(runs) == 1
    data = json.loads((fresh_probe / "cpu_probe.json").read_text())
    assert list(data) == [int8.probe_key(int8.int8_format())]
    monkeypatch.setattr(int8, "_STATE", {})  # a new process on the same machine
    again = int8.int8_probe()
    assert again["cached"] is True and again["ratio"] == 2.5 and len(runs) == 1
    (fresh_probe / "cpu_probe.json").write_text("{not json")
    monkeypatch.setattr(int8, "_STATE", {})
    assert int8.int8_probe()["cached"] is False and len(runs) == 2
    assert json.loads((fresh_probe / "cpu_probe.json").read_text())  # rewritten whole
    assert not list(fresh_probe.glob(".cpu_probe.*"))  # no temporary file left


def test_probe_without_kernel_with_override_and_timed(fresh_probe, monkeypatch):
    monkeypatch.setattr(int8, "int8_format", lambda: None)
    monkeypatch.setenv("FASTRAG_INT8", "1")  # no override without the instructions
    assert int8.int8_probe()["fast"] is False
    assert "no AVX2" in int8.int8_probe()["reason"]
    monkeypatch.undo()
    if int8.int8_format() is None:
        pytest.skip("no int8 kernel on this CPU")
    monkeypatch.setattr(int8, "_STATE", {})
    monkeypatch.setenv("FASTRAG_INT8", "0")
    assert int8.int8_probe()["reason"] == "FASTRAG_INT8=0"
    got = int8._timed_probe(int8.int8_format())
    assert got["int8_s"] > 0 and got["float32_s"] > 0
    assert got["fast"] == (got["ratio"] >= int8.MIN_KERNEL_RATIO)


def test_a_corpus_where_the_pass_does_not_pay_falls_back_until_it_doubles(monkeypatch):
    """The verdict measured on the corpus's own search: when the int8 search took at least
    PAYS_BELOW of the float32 time it replaced, the next searches take the float32 path, until
    the corpus has doubled; int8=True keeps the pass whatever the verdict."""
    if int8.int8_format() is None:
        pytest.skip("no int8 kernel on this CPU")
    seen = []
    approx_search = dense_exact._approx_search

    def spy(vectors, approx, *args):
        seen.append(type(approx).__name__)
        return approx_search(vectors, approx, *args)

    monkeypatch.setattr(dense_exact, "_approx_search", spy)
    monkeypatch.setattr(quantized, "first_pass", lambda bf16, int8_: "int8")
    monkeypatch.setattr(int8, "int8_probe", lambda: {"fast": True, "ratio": 2.0})
    monkeypatch.setattr(int8, "PAYS_BELOW", 0.0)  # no search can pay
    monkeypatch.setattr(dense_exact, "VERDICT_MIN_QUERIES", 1)
    monkeypatch.setitem(int8._STATE, "warm", True)
    x = embedding_like(4000, 32, 14)
    q = embedding_like(40, 32, 15)
    index = FlatIndex(32, bf16=False)  # int8="auto"
    index.add(x[:2000])
    want = reported_topk(x[:2000], q, 5)
    for _ in range(2):
        np.testing.assert_array_equal(index.search(q, 5)[0], want[0])
    verdict = index._approx["int8"].verdict
    assert verdict["pays"] is False and verdict["float32_s"] > 0
    assert seen == ["Int8Corpus"] * 2  # the pilot, then its queries timed again with float32
    index.add(x[2000:])  # doubled: measured again
    index.search(q, 5)
    assert seen == ["Int8Corpus"] * 4
    forced = FlatIndex.from_vectors(x, bf16=False, int8=True)
    for _ in range(2):
        forced.search(q, 5)
    assert seen == ["Int8Corpus"] * 7  # its first batch measures too (pilot, timed again)


def test_a_verdict_against_the_pass_is_measured_and_a_measured_one_stands(monkeypatch):
    """An estimate against the pass is checked against the float32 path's measured time
    (``confirm``), and a measured verdict is not overturned by later estimates; an estimate
    that turns a paying pass into one that does not clears the verdict (measure again)."""
    if int8.int8_format() is None:
        pytest.skip("no int8 kernel on this CPU")
    monkeypatch.setattr(int8, "int8_probe", lambda: {"fast": True, "ratio": 2.0})
    monkeypatch.setitem(int8._STATE, "warm", True)
    corpus = int8.Int8Corpus(32)
    corpus.update(embedding_like(500, 32, 16))
    corpus.record(1.0, 0.5, 1)  # float32 estimated at 0.5 * 2.0 * 1.05 = 1.05 s: under 0.9
    assert corpus.verdict["pays"] is False and "float32_s" not in corpus.verdict
    corpus.confirm(0.9, 1.5)  # measured: 0.9 s against 1.5 s pays
    assert corpus.verdict["pays"] is True and corpus.verdict["float32_s"] == 1.5
    corpus.record(5.0, 0.1, 1)
    assert corpus.pays() and corpus.verdict["int8_s"] == 0.9  # the measured verdict stands
    other = int8.Int8Corpus(32)
    other.update(embedding_like(500, 32, 16))
    other.record(0.5, 0.5, 1)
    assert other.verdict["pays"] is True and not other.unmeasured()
    other.record(1.0, 0.5, 1)  # a change of mind on an estimate
    assert other.verdict is None and other.unmeasured()
    other.record(1.0, 0.5, 1)
    other.confirm(1.0, 1.0)  # as slow as float32: does not pay
    assert other.verdict["pays"] is False and other.unmeasured() is False


def test_int8_true_needs_a_kernel_and_the_kernel_can_be_chosen(monkeypatch):
    monkeypatch.setattr(int8, "int8_format", lambda: None)
    monkeypatch.setattr(quantized, "int8_format", lambda: None)
    with pytest.raises(ConfigError, match="int8=True needs a CPU with AVX2 or AVX512-VNNI"):
        FlatIndex(8, int8=True)
    assert FlatIndex(8).int8 == "auto"  # auto just falls back
    monkeypatch.undo()
    monkeypatch.setenv("FASTRAG_INT8_KERNEL", "avx2")
    assert int8.int8_format() is (int8.AVX2 if avx2.available() else None)
    monkeypatch.setenv("FASTRAG_INT8_KERNEL", "vnni")
    with pytest.raises(ConfigError, match="FASTRAG_INT8_KERNEL='vnni': use 'avx2'"):
        int8.int8_format()


def test_two_processes_probing_at_once_leave_one_whole_cache_file(tmp_path):
    """Two processes on one machine probe at once with an empty cache: both get an answer, the
    cache file is whole JSON holding this CPU's key, and no temporary file is left."""
    import os
    import subprocess
    import sys

    if int8.int8_format() is None:
        pytest.skip("no int8 kernel on this CPU")
    env = {**os.environ, "FASTRAG_CACHE_DIR": str(tmp_path)}
    env.pop("FASTRAG_INT8", None)
    code = "from fastrag.indexes.int8 import int8_probe; print(int8_probe()['fast'])"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and set(outs) <= {"True", "False"}
    data = json.loads((tmp_path / "cpu_probe.json").read_text())
    assert list(data) == [int8.probe_key(int8.int8_format())]
    assert not list(tmp_path.glob(".cpu_probe.*"))
