"""The first passes of FlatIndex (bf16 and int8): same results as the float32 search, error
bounds hold.

The bf16 pass runs on torch (extra ``[amx]``), the int8 pass on CPUs with AVX2 or AVX512-VNNI:
tests that run a pass take the ``torch`` or ``first_pass`` fixture and skip where it cannot run;
the argument checks, the choice between passes and the fallbacks run everywhere. The int8
pass's own kernels, bound and choice are in test_flat_int8.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from fastrag._kernels import dense_quant
from reference import dense_topk_reference

from fastrag.errors import ConfigError, MissingExtraError
from fastrag.indexes import exact as dense_exact
from fastrag.indexes import int8, quantized
from fastrag.indexes.flat import FlatIndex

NEEDS_TORCH = "needs torch: pip install torch (CPU build) or the [amx] extra"


@pytest.fixture
def torch():
    """torch, imported when a test runs (never at collection); the test skips without it."""
    return pytest.importorskip("torch", reason=NEEDS_TORCH)


NEEDS_INT8 = "the int8 pass needs a CPU with AVX2 or AVX512-VNNI"
PLAIN = {"bf16": False, "int8": False}  # float32 only


@pytest.fixture(params=["bf16", "int8"])
def first_pass(request):
    """``(kind, FlatIndex keyword arguments)`` forcing one first pass; skips where that pass
    cannot run (bf16 without torch, int8 without AVX2)."""
    if request.param == "bf16":
        pytest.importorskip("torch", reason=NEEDS_TORCH)
        return "bf16", {"bf16": True, "int8": False}
    if int8.int8_format() is None:
        pytest.skip(NEEDS_INT8)
    return "int8", {"bf16": False, "int8": True}


@pytest.fixture
def small_blocks(monkeypatch):
    """Small blocks: a few thousand rows span many chunks, query blocks and super-batches, and
    two threads run two workers."""
    monkeypatch.setattr(dense_exact, "BLOCKED_PARALLEL_MIN_MACS", 0)
    monkeypatch.setattr(dense_exact, "CORPUS_CHUNK", 256)
    monkeypatch.setattr(dense_exact, "QUERY_BLOCK", 32)
    monkeypatch.setattr(dense_exact, "BF16_SUPER_BATCH", 40)


@pytest.fixture
def calls(monkeypatch):
    """Counts the first-pass searches of each kind and the float32 sgemm passes (and the
    queries they get)."""
    seen = {"bf16": 0, "int8": 0, "blocked": []}
    approx_search, blocked = dense_exact._approx_search, dense_exact._blocked

    def spy_approx(vectors, approx, *args, **kwargs):
        seen["int8" if isinstance(approx, int8.Int8Corpus) else "bf16"] += 1
        return approx_search(vectors, approx, *args, **kwargs)

    def spy_blocked(vectors, queries, *args, **kwargs):
        seen["blocked"].append(queries.shape[0])
        return blocked(vectors, queries, *args, **kwargs)

    monkeypatch.setattr(dense_exact, "_approx_search", spy_approx)
    monkeypatch.setattr(dense_exact, "_blocked", spy_blocked)
    return seen


def assert_same(got, ref, exact_scores=True):
    """Same scores (bit for bit, or a few ulp apart where sums run in another order) and same
    rows, except that two rows whose float32 scores tie may trade places: the float32 search
    sums in the BLAS kernel's order, which differs between CPUs (AVX2 vs AVX-512 sgemm), so a
    near-tie in float64 can rank either way; a missed row would show as a lower score."""
    if exact_scores:
        np.testing.assert_array_equal(got[1], ref[1])
    else:  # float32 sums in another order: a few ulp apart
        np.testing.assert_allclose(got[1], ref[1], rtol=4e-6, atol=1e-6)
    np.testing.assert_array_equal(got[2], ref[2])
    swapped = got[0] != ref[0]
    tol = 0.0 if exact_scores else 4e-6 * np.abs(ref[1][swapped]) + 1e-6
    assert np.all(np.abs(got[1][swapped] - ref[1][swapped]) <= tol), "a row differs at a score"
    assert swapped.mean() < 0.01, f"{int(swapped.sum())} rows traded places: not only ties"
    for i in np.flatnonzero(swapped.any(axis=1)):
        valid = got[0][i] >= 0
        assert len(set(got[0][i][valid])) == int(valid.sum()), f"query {i}: a row twice"


@pytest.mark.parametrize("threads", [1, 2])
def test_random_cosine_equals_float32_search(threads, first_pass, small_blocks, calls):
    kind, opts = first_pass
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6000, 96)).astype(np.float32)
    q = rng.standard_normal((100, 96)).astype(np.float32)
    fast = FlatIndex.from_vectors(x, **opts).search(q, 10, num_threads=threads)
    assert calls[kind] == 3 and calls["blocked"] == []  # 100 queries: 40 + 40 + 20
    plain = FlatIndex.from_vectors(x, **PLAIN).search(q, 10, num_threads=threads)
    assert_same(fast, plain, exact_scores=False)
    ref_rows, ref_scores, _ = dense_topk_reference(x, q, 10, "cosine")
    np.testing.assert_array_equal(fast[0], ref_rows)
    np.testing.assert_allclose(fast[1], ref_scores, rtol=0, atol=2e-6)


def test_dot_with_wide_norms_mask_and_cutoff(first_pass, small_blocks, calls):
    kind, opts = first_pass
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5000, 40)).astype(np.float32)
    x *= rng.lognormal(0.0, 2.0, (5000, 1)).astype(np.float32)  # norms over ~4 decades
    q = rng.standard_normal((40, 40)).astype(np.float32) * 3.0
    mask = rng.random(5000) < 0.6
    fast = FlatIndex.from_vectors(x, "dot", **opts)
    plain = FlatIndex.from_vectors(x, "dot", **PLAIN)
    for kwargs in ({"mask": mask}, {"cutoff": 5.0}, {"mask": mask, "cutoff": 0.0}):
        want = plain.search(q, 25, num_threads=2, **kwargs)
        calls["blocked"].clear()
        assert_same(fast.search(q, 25, num_threads=2, **kwargs), want, exact_scores=False)
        assert calls["blocked"] == [], kwargs
    assert calls[kind] == 3


def _text_embeddings(texts: list[str], dim: int) -> np.ndarray:
    """Embeddings of real text without a model (the model hubs are out of reach): hashed
    character-bigram counts (sublinear), a fixed random projection to ``dim``, unit norm. Like
    model embeddings they share a large common direction and cluster by topic, so the scores
    are high and close together, unlike random vectors."""
    import zlib

    buckets = 4096
    counts = np.zeros((len(texts), buckets), np.float32)
    for i, text in enumerate(texts):
        for j in range(len(text) - 1):
            counts[i, zlib.crc32(text[j : j + 2].encode()) % buckets] += 1.0
    proj = np.random.default_rng(21).standard_normal((buckets, dim)).astype(np.float32)
    x = np.log1p(counts) @ proj
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("dim", [384, 768])
def test_embeddings_of_real_text_equal_float32_search(first_pass, dim):
    """CMRC paragraphs cut into sentences (the corpus) and CMRC questions (the queries), as
    text embeddings: the first pass returns the float32 search's rows and scores."""
    from fastrag.datasets import load_cmrc2018_dev
    from fastrag.eval.loaders import squad_questions

    questions, _, contexts = squad_questions(load_cmrc2018_dev())
    sentences = [s for c in contexts for s in c.split("。") if len(s) >= 8][:6000]
    x = _text_embeddings(sentences, dim)
    q = _text_embeddings(questions[:300], dim)
    index = FlatIndex.from_vectors(x, normalized=True, **first_pass[1])
    got = index.search(q, 10)
    assert list(index._approx) == [first_pass[0]]
    assert_same(got, FlatIndex.from_vectors(x, normalized=True, **PLAIN).search(q, 10))
    assert np.median(got[1][:, 0]) > 0.25  # random unit vectors: ~0.19 (dim 384), ~0.14 (768)


def test_exact_ties_keep_the_lower_row(first_pass, small_blocks):
    """Small integers: their dot products are exact in float32 (and exact in bf16; not in int8
    codes scaled by 127/3): scores must be bit-equal to the reference and ties must fall to the
    lower row, as on every path."""
    rng = np.random.default_rng(2)
    x = rng.integers(-3, 4, (3000, 12)).astype(np.float32)
    q = rng.integers(-3, 4, (60, 12)).astype(np.float32)
    got = FlatIndex.from_vectors(x, "dot", **first_pass[1]).search(q, 20, num_threads=2)
    ref = dense_topk_reference(x, q, 20, "dot")
    assert_same(got, (ref[0], ref[1].astype(np.float32), ref[2].astype(np.int32)))


def test_near_duplicates_overflow_to_the_float32_pass(first_pass, small_blocks, calls, monkeypatch):
    """Rows that differ below the first pass's resolution all stay candidates: the queries whose
    candidates outgrow the buffer are searched again in float32, and only those. One worker:
    with two, a worker that happens to take only a chunk of duplicates sees nothing but ties
    for every query, and every query is rightly searched again (1 run in ~300 did)."""
    monkeypatch.setattr(dense_exact, "BF16_CANDIDATES", 64)
    rng = np.random.default_rng(3)
    base = rng.standard_normal(32).astype(np.float32)
    dupes = base + rng.standard_normal((800, 32)).astype(np.float32) * 1e-4
    x = np.concatenate([rng.standard_normal((2000, 32)).astype(np.float32), dupes])
    others = rng.standard_normal((25, 32)).astype(np.float32)
    others -= (others @ base / (base @ base) + 0.5)[:, None] * base  # far from the duplicates
    q = np.concatenate([np.tile(base, (5, 1)), others])  # the first 5 overflow
    got = FlatIndex.from_vectors(x, **first_pass[1]).search(q, 10, num_threads=1)
    assert calls[first_pass[0]] == 1 and calls["blocked"] == [5]
    ref_rows, ref_scores, _ = dense_topk_reference(x, q, 10, "cosine")
    np.testing.assert_array_equal(got[0][5:], ref_rows[5:])
    # the duplicates' scores tie at float32 resolution: their order depends on summation order
    np.testing.assert_allclose(got[1], ref_scores, rtol=0, atol=2e-6)


@pytest.mark.parametrize("k", [1, 10, 16, 17])
def test_first_block_bar_and_integer_screen_keep_every_top_row(first_pass, k):
    """Default blocks of 1,024 rows: a query's first block sets its bar from the k-th largest
    maximum of its groups of 64 (k <= 16 groups), and once the bar is positive scores are
    screened on their int16 bits. A near-duplicate cluster spread over every group of the first
    block (ties at bf16 resolution), rows scoring below zero and a second cluster further on:
    the top-k is the true (float64) top-k up to float32 rounding, row for row where the
    true scores are not tied at float32 resolution."""
    rng = np.random.default_rng(9)
    dim = 48
    x = rng.standard_normal((5000, dim)).astype(np.float32)
    bases = rng.standard_normal((2, dim)).astype(np.float32)
    x[0:1024:4] = bases[0] + rng.standard_normal((256, dim)).astype(np.float32) * 0.01
    x[1:1024:8] = -bases[0]  # far below zero for the cluster's queries
    x[3000:3400] = bases[1] + rng.standard_normal((400, dim)).astype(np.float32) * 0.01
    # planted: k-1 rows close to `plant`, one row clearly behind them, in k different groups of
    # the first block; everything else scores far lower. A bar from the (k-1)-th group maximum
    # would pass over the k-th row for good.
    plant = rng.standard_normal(dim).astype(np.float32)
    side = rng.standard_normal(dim).astype(np.float32)
    side -= (side @ plant) / (plant @ plant) * plant
    groups = 64 * np.arange(min(k, 16)) + 2
    x[groups[:-1]] = plant + rng.standard_normal((len(groups) - 1, dim)).astype(np.float32) * 1e-3
    x[groups[-1]] = 0.8 * plant + 0.6 * side * np.linalg.norm(plant) / np.linalg.norm(side)
    near = np.repeat(bases, 12, axis=0) + rng.standard_normal((24, dim)).astype(np.float32) * 0.05
    others = rng.standard_normal((13, dim)).astype(np.float32)
    q = np.concatenate([bases, near, plant[None], others])
    assert q.shape[0] > dense_exact.FUSED_MAX_QUERIES  # the batch path, where the bf16 pass runs
    for metric in ("cosine", "dot"):
        index = FlatIndex.from_vectors(x, metric, **first_pass[1])
        got = index.search(q, k)
        assert list(index._approx) == [first_pass[0]]  # the first pass ran
        xs = index.vectors.astype(np.float64)
        q64 = q.astype(np.float64)
        if metric == "cosine":
            q64 /= np.linalg.norm(q64, axis=1, keepdims=True)
        true_rows, true_scores = _float64_topk(xs, q64, k + 1)
        for i in range(q.shape[0]):  # the true top-k, up to ties at float32 resolution
            tol = 1e-6 * np.abs(true_scores[i]).max()
            s64 = xs[got[0][i]] @ q64[i]
            np.testing.assert_allclose(np.sort(s64)[::-1], true_scores[i][:k], rtol=0, atol=tol)
            gaps = np.abs(np.diff(true_scores[i])) > 4 * tol
            untied = np.ones(k + 1, bool)
            untied[:-1] &= gaps
            untied[1:] &= gaps
            np.testing.assert_array_equal(got[0][i][untied[:k]], true_rows[i][:k][untied[:k]])


def test_error_bound_holds_when_rounding_errors_add_up(torch):
    """Entries just below a bf16 rounding midpoint all round the same way, so the errors of
    the products add up instead of cancelling: the bound used for the window must still hold
    for what torch's bf16 matmul returns."""
    rng = np.random.default_rng(4)
    dim = 512
    step = 2.0**-7  # bf16 spacing in [1, 2)
    x = (1.0 + step * (rng.integers(0, 64, (300, dim)) + 0.499)).astype(np.float32)
    q = (1.0 + step * (rng.integers(0, 64, (40, dim)) + 0.499)).astype(np.float32)
    x[::2] *= -1.0
    corpus = quantized.Bf16Corpus(dim)
    corpus.update(x)
    q_bits = np.empty(q.shape, np.uint16)
    dense_quant.to_bf16_serial(q, q_bits, np.empty(q.shape[0], np.float32))
    approx = (
        quantized._as_torch_bf16(torch, q_bits) @ quantized._as_torch_bf16(torch, corpus.bits).T
    )
    approx = approx.float().numpy().astype(np.float64)
    exact = q.astype(np.float64) @ x.T.astype(np.float64)
    coef, rel = quantized.bf16_error_bound(q)
    np.testing.assert_allclose(
        corpus.norms, np.linalg.norm(x.astype(np.float64), axis=1), rtol=1e-6
    )
    assert (corpus.norms >= np.linalg.norm(x.astype(np.float64), axis=1)).all()  # rounded up
    bound = coef[:, None] * corpus.norms[None, :] + rel * np.abs(approx)
    gap = np.abs(approx - exact)
    assert (gap <= bound).all()
    assert (gap / bound).max() > 0.25  # the test does push the errors towards the bound


def test_incremental_add_updates_the_approximate_copy(first_pass, small_blocks):
    kind, opts = first_pass
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3000, 24)).astype(np.float32)
    q = rng.standard_normal((30, 24)).astype(np.float32)
    index = FlatIndex(24, **opts)
    index.add(x[:1000])
    index.search(q, 5)
    index.add(x[1000:])  # the best rows for these queries are mostly among the new ones
    got = index.search(q, 5)
    assert index._approx[kind].n == 3000
    ref_rows, _, _ = dense_topk_reference(x, q, 5, "cosine")
    np.testing.assert_array_equal(got[0], ref_rows)


def test_auto_follows_the_cpu_and_small_batches_skip_it(torch, calls, monkeypatch):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2000, 16)).astype(np.float32)
    index = FlatIndex.from_vectors(x, int8=False)  # bf16="auto"
    monkeypatch.setattr(quantized, "bf16_fast", lambda: False)
    index.search(rng.standard_normal((40, 16)), 5)
    assert calls["bf16"] == 0 and index._approx == {}
    monkeypatch.setattr(quantized, "bf16_fast", lambda: True)
    index.search(rng.standard_normal((16, 16)), 5)  # fused path: no bf16 copy needed
    index.search(rng.standard_normal((40, 16)), 300)  # k above BF16_MAX_K
    assert calls["bf16"] == 0 and index._approx == {}
    index.search(rng.standard_normal((40, 16)), 5)
    assert calls["bf16"] == 1 and index._approx["bf16"].n == 2000


def test_torch_thread_count_is_restored(torch):
    rng = np.random.default_rng(7)
    index = FlatIndex.from_vectors(rng.standard_normal((3000, 16)).astype(np.float32), bf16=True)
    before = torch.get_num_threads()
    index.search(rng.standard_normal((50, 16)), 5, num_threads=1)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad", ["yes", 1, None, 0.5])
def test_bad_bf16_argument(bad):
    with pytest.raises(ConfigError, match="bf16=.* must be 'auto', True or False"):
        FlatIndex(8, bf16=bad)


def test_bf16_true_without_torch_names_the_extra(monkeypatch):
    monkeypatch.setitem(quantized._BF16_STATE, "torch", None)
    with pytest.raises(MissingExtraError, match=r"fastrag-engine\[amx\]"):
        FlatIndex(8, bf16=True)
    assert FlatIndex(8, bf16="auto").bf16 == "auto"  # auto just falls back


def test_without_torch_auto_is_not_fast_and_searches_in_float32(calls, monkeypatch):
    """No torch (simulated, so this runs whether torch is installed or not): the probe says
    no, and a batch that would take the bf16 pass is searched exactly in float32."""
    monkeypatch.setattr(quantized, "_BF16_STATE", {"torch": None})
    assert quantized.bf16_fast() is False
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2000, 16)).astype(np.float32)
    q = rng.standard_normal((40, 16)).astype(np.float32)
    index = FlatIndex.from_vectors(x, "dot", int8=False)
    got = index.search(q, 5)
    assert calls["bf16"] == 0 and calls["blocked"] == [40] and index._approx == {}
    ref_rows, ref_scores, _ = dense_topk_reference(x, q, 5, "dot")
    np.testing.assert_array_equal(got[0], ref_rows)
    np.testing.assert_allclose(got[1], ref_scores, rtol=0, atol=1e-5)


def _fresh_probe(monkeypatch, torch_obj, flags):
    monkeypatch.setattr(quantized, "_BF16_STATE", {"torch": torch_obj})
    monkeypatch.setattr(quantized, "cpu_flags", lambda: set(flags))
    monkeypatch.delenv("FASTRAG_BF16", raising=False)


class _FakeTorch:
    """Only what the decision reads: ``torch.cpu._is_amx_tile_supported``."""

    def __init__(self, amx: bool) -> None:
        self.cpu = type("cpu", (), {"_is_amx_tile_supported": staticmethod(lambda: amx)})


def test_auto_decides_by_amx_then_avx512_bf16_probe_then_no(monkeypatch):
    _fresh_probe(monkeypatch, _FakeTorch(amx=True), {"avx512f"})
    assert quantized.bf16_probe() == {"fast": True, "reason": "AMX-BF16 tiles", "amx": True}
    _fresh_probe(monkeypatch, _FakeTorch(amx=False), {"avx512f", "avx2"})
    assert quantized.bf16_probe()["fast"] is False
    assert "emulated" in quantized.bf16_probe()["reason"]
    _fresh_probe(monkeypatch, _FakeTorch(amx=False), {"avx512f", "avx512_bf16"})
    monkeypatch.setattr(quantized, "_timed_probe", lambda torch: {"fast": True, "reason": "probe"})
    assert quantized.bf16_fast() is True and quantized.bf16_probe()["reason"] == "probe"
    monkeypatch.setattr(quantized, "_BF16_STATE", {"torch": _FakeTorch(amx=True)})
    monkeypatch.setenv("FASTRAG_BF16", "0")
    assert quantized.bf16_probe() == {"fast": False, "reason": "FASTRAG_BF16=0"}


@pytest.mark.parametrize("bad", ["yes", 1, None, 0.5])
def test_bad_int8_argument(bad):
    with pytest.raises(ConfigError, match="int8=.* must be 'auto', True or False"):
        FlatIndex(8, int8=bad)


def test_first_pass_prefers_amx_then_int8_then_bf16(monkeypatch):
    """The choice, with both probes simulated: explicit True wins, AMX bf16 beats the int8
    kernel, int8 beats AVX512_BF16 where its probe says it pays; nothing where neither does."""
    probes = {}
    monkeypatch.setattr(quantized, "_may_have_amx", lambda: True)
    monkeypatch.setattr(quantized, "bf16_probe", lambda: probes["bf16"])
    monkeypatch.setattr(quantized, "int8_probe", lambda: probes["int8"])
    cases = [  # (bf16 probe, int8 fast) -> choice for ("auto", "auto")
        ({"fast": True, "amx": True}, True, "bf16"),
        ({"fast": True}, True, "int8"),
        ({"fast": True}, False, "bf16"),
        ({"fast": False}, True, "int8"),
        ({"fast": False}, False, None),
    ]
    for bf16_probe, int8_fast, want in cases:
        probes["bf16"], probes["int8"] = bf16_probe, {"fast": int8_fast}
        assert quantized.first_pass("auto", "auto") == want, (bf16_probe, int8_fast)
        assert quantized.first_pass(True, "auto") == "bf16"
        assert quantized.first_pass("auto", True) == "int8"
        assert quantized.first_pass(False, "auto") == ("int8" if int8_fast else None)
        assert quantized.first_pass("auto", False) == ("bf16" if bf16_probe["fast"] else None)
        assert quantized.first_pass(False, False) is None


def test_choosing_int8_without_amx_flags_never_imports_torch(monkeypatch):
    """Where the CPU's flags are known and lack AMX-BF16, choosing the int8 pass runs only the
    int8 probe: the bf16 probe (and torch's import) is left for when it decides something."""
    monkeypatch.setattr(quantized, "cpu_flags", lambda: {"avx512f", "avx512_vnni", "avx512_bf16"})
    monkeypatch.setattr(quantized, "int8_probe", lambda: {"fast": True})

    def no_bf16_probe():
        raise AssertionError("bf16 probe ran")

    monkeypatch.setattr(quantized, "bf16_probe", no_bf16_probe)
    assert quantized.first_pass("auto", "auto") == "int8"
    monkeypatch.setattr(quantized, "cpu_flags", lambda: {"avx512f", "amx_bf16"})
    with pytest.raises(AssertionError, match="bf16 probe ran"):
        quantized.first_pass("auto", "auto")
    monkeypatch.setattr(quantized, "cpu_flags", lambda: set())  # unknown: ask the probe
    with pytest.raises(AssertionError, match="bf16 probe ran"):
        quantized.first_pass("auto", "auto")


def test_the_timed_probe_measures_both_matmuls(torch, monkeypatch):
    got = quantized._timed_probe(torch)
    assert got["bf16_s"] > 0 and got["float32_s"] > 0
    assert got["fast"] == (got["bf16_s"] < 0.8 * got["float32_s"])


def test_the_timed_probe_times_one_thread_each_whatever_the_process_set(torch, monkeypatch):
    """A process that set torch to 1 thread (and BLAS to 2) used to compare 1-thread bf16 with
    2-thread sgemm, so the answer flipped with the load; the search runs both per thread."""
    from threadpoolctl import threadpool_info, threadpool_limits

    seen = []
    real = torch.matmul

    def matmul(*args, **kwargs):
        blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
        seen.append((torch.get_num_threads(), blas))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "matmul", matmul)
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with threadpool_limits(limits=2, user_api="blas"):
            quantized._timed_probe(torch)
            after = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
        assert torch.get_num_threads() == 2 and set(after) <= {2}
    finally:
        torch.set_num_threads(saved)
    assert len(seen) == 6 and all(t == 1 and set(b) <= {1} for t, b in seen), seen  # 1 + 5


@pytest.mark.slow
@pytest.mark.parametrize(
    "n,dim", [(100_000, 384), (100_000, 768), (1_000_000, 384), (1_000_000, 768)]
)
def test_at_scale_with_near_duplicate_clusters_equals_float32(first_pass, n, dim):
    """Corpus sizes and dims of real use, with clusters of near-duplicates whose scores differ
    by 1e-5..1e-4: far below what bf16 can tell apart (2**-8), above float32's noise. On
    whatever bf16 path this CPU has (AMX, AVX512_BF16, or emulated), the bf16 pass returns a
    top-10 with the same float64 scores as the float32 search's, and the same rows wherever
    the scores are not tied at float32 resolution."""
    rng = np.random.default_rng(n + dim)
    x = rng.standard_normal((n, dim), dtype=np.float32)
    bases = x[:40].copy()
    for i, b in enumerate(bases):  # 40 clusters of 300 rows each
        lo = 1000 + 300 * i
        x[lo : lo + 300] = b + rng.standard_normal((300, dim), dtype=np.float32) * 0.03
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = np.concatenate([bases[:32], rng.standard_normal((32, dim), dtype=np.float32)])
    q64 = q.astype(np.float64) / np.linalg.norm(q.astype(np.float64), axis=1, keepdims=True)
    fast = FlatIndex.from_vectors(x, "cosine", normalized=True, **first_pass[1])
    exact = FlatIndex.from_vectors(x, "cosine", normalized=True, **PLAIN)
    got, ref = fast.search(q, 10), exact.search(q, 10)
    assert list(fast._approx) == [first_pass[0]]  # the first pass ran
    true_rows, true_scores = _float64_topk(x, q64, 11)
    for i in range(q.shape[0]):
        for found in (got, ref):  # both searches: the true top-10 up to float32 rounding
            s64 = x[found[0][i]].astype(np.float64) @ q64[i]
            np.testing.assert_allclose(np.sort(s64)[::-1], true_scores[i][:10], rtol=0, atol=3e-6)
            np.testing.assert_allclose(found[1][i], s64, rtol=0, atol=3e-6)
        gaps = np.abs(np.diff(true_scores[i])) > 1e-5  # and the true rows, where not near-tied
        untied = np.ones(11, bool)
        untied[:-1] &= gaps
        untied[1:] &= gaps
        np.testing.assert_array_equal(got[0][i][untied[:10]], true_rows[i][:10][untied[:10]])


def _float64_topk(x: np.ndarray, q64: np.ndarray, k: int, chunk: int = 100_000):
    """The exact top-``k`` (rows, scores) in float64, in chunks of rows."""
    best_s = np.full((q64.shape[0], 0), -np.inf)
    best_r = np.zeros((q64.shape[0], 0), np.int64)
    for lo in range(0, x.shape[0], chunk):
        s = q64 @ x[lo : lo + chunk].astype(np.float64).T
        s_all = np.concatenate([best_s, s], axis=1)
        r_all = np.concatenate(
            [best_r, np.broadcast_to(np.arange(lo, lo + s.shape[1]), s.shape)], axis=1
        )
        top = np.argsort(-s_all, axis=1, kind="stable")[:, :k]
        best_s = np.take_along_axis(s_all, top, axis=1)
        best_r = np.take_along_axis(r_all, top, axis=1)
    return best_r, best_s
