"""Compile fastrag's numba kernels ahead of time (``fastrag warmup``), for images and CI.

numba compiles a kernel on its first call for each combination of argument types, and caches
the machine code on disk (``__pycache__`` beside the kernels, or ``NUMBA_CACHE_DIR``). Warm-up
runs small workloads that reach every search path a user's first queries take: BM25 with the
three analyzers, single queries and batches (serial and parallel kernels), filters, the
splitters, exact dense search (fused single-query and blocked batch paths, with and without a
mask) and the evaluation metrics. It also byte-compiles fastrag's Python modules, which
an editable install or ``PYTHONDONTWRITEBYTECODE=1`` leaves to every process start. At the end
it marks the cache ready, so that processes started later call the kernels from their first
query (see :mod:`fastrag._coldstart`).
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from filelock import FileLock, Timeout

import fastrag
import fastrag._kernels as kernels
from fastrag._checks import check_int
from fastrag._coldstart import BUSY_EXIT, ENV, cache_dir, mark_ready, marker, use_kernels
from fastrag._kernels import dense_quant, static_embed, store_check
from fastrag._kernels.fusion import fuse_topk
from fastrag._kernels.topk import topk_rows
from fastrag.analysis import encode_queries
from fastrag.analysis.language import text_language
from fastrag.datasets import load_cmrc2018_dev
from fastrag.errors import ConfigError
from fastrag.eval.loaders import squad_questions
from fastrag.eval.metrics import context_recall, context_relevance
from fastrag.indexes.bm25.index import RANK_MIN_DOCS, BM25Index
from fastrag.indexes.flat import FlatIndex
from fastrag.indexes.hnsw import HNSWIndex, check_index_file
from fastrag.indexes.int8 import Int8Corpus, int8_format
from fastrag.indexes.sparse import SparseIndex

_EN = (
    "Stores are folders of Arrow files. A manifest names every file with its checksum. "
    "Readers never block writers. Running queries in batches is fast."
)


def _bm25_search(log: Callable[[str], None]) -> None:
    """The BM25 search kernels, serial (a few queries) and parallel (a batch), over a small
    index and one large enough for rank directories and impact heads; the arrays are those a
    Retriever passes (:class:`BM25Index` freezes its inputs), so its first queries find them
    compiled."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 12, 400)
    values = rng.integers(0, 300, int(lengths.sum())).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    index = BM25Index.build(values, offsets, 300)
    mask = np.ones(index.n_docs, bool)
    mask[::3] = False
    for n_q in (1, 64):  # serial and parallel kernels
        q_values = np.tile(np.array([5, 17, 250], np.int32), n_q)
        q_offsets = np.arange(0, 3 * n_q + 1, 3, dtype=np.int64)
        index.search_csr(q_values, q_offsets, 10)
        index.search_csr(q_values, q_offsets, 10, mask=mask, cutoff=0.5)
    # a store keeps indexes packed: packing and the per-term decoding of a reopened one
    packed = BM25Index.from_arrays(index.to_arrays(packed=True), index.meta(packed=True))
    packed.search_csr(q_values, q_offsets, 10)
    log("  bm25 search, serial and batch, filters and cut-offs, packed indexes")
    _bm25_rank()
    log("  bm25 rank directories and impact heads (large corpora)")


def _analysis(log: Callable[[str], None]) -> None:
    """Indexing and query analysis of the three BM25 analyzers, the splitters and metadata
    filters (a Retriever's path up to the search kernels)."""
    questions, _, contexts = squad_questions(load_cmrc2018_dev())
    zh = fastrag.Document.from_texts(contexts[:60])
    zh.create_node_group("line", transform=fastrag.LineSplitter())
    for sim in ("bm25", "bm25_chinese", "bm25_cjk"):
        ret = fastrag.Retriever(zh, "line", sim, topk=5)
        ret.prepare()
        encode_queries(questions[:64], ret.bm25_analyzer(), ret.bm25_vocabulary())
        log(f"  {sim}")
    en = fastrag.Document.from_texts(
        [f"{_EN} Item {i}." for i in range(200)], metadatas=[{"n": i} for i in range(200)]
    )
    en.create_node_group(
        "chunk", transform=fastrag.SentenceSplitter, chunk_size=32, chunk_overlap=4
    )
    ret = fastrag.Retriever(en, "chunk", "bm25", topk=5)
    ret.prepare()
    encode_queries(  # a compound: derives the word lists into the cache (compounds.py)
        ["checksum of a file", "running queries", "Datenbankverbindung"],
        ret.bm25_analyzer(),
        ret.bm25_vocabulary(),
    )
    ret.mask("n >= 10")
    log("  bm25 (English), splitters, filters")
    text_language(_EN)  # derives the language model into the cache (language.py)
    log("  language detection")


def _bm25_rank() -> None:
    """An index large enough for rank directories (a term in every document), searched."""
    n = RANK_MIN_DOCS
    values = np.empty(2 * n, np.int32)
    values[0::2] = 0
    values[1::2] = 1 + np.arange(n, dtype=np.int32) % 997
    index = BM25Index.build(values, np.arange(0, 2 * n + 1, 2, dtype=np.int64), 998)
    index.build_rank_directories()
    for n_q in (1, 64):  # serial and parallel kernels
        index.search_csr(
            np.tile(np.array([5, 0], np.int32), n_q),
            np.arange(0, 2 * n_q + 1, 2, dtype=np.int64),
            10,
        )


def _dense(log: Callable[[str], None]) -> None:
    rng = np.random.default_rng(0)
    int8 = int8_format() is not None
    for n, dim in ((2_000, 64), (8_192, 256)):  # serial and parallel paths
        for first in [False, True] if int8 else [False]:  # float32 only, int8 first pass
            idx = FlatIndex(dim, bf16=False, int8=first)
            idx.add(rng.standard_normal((n, dim)).astype(np.float32))
            mask = np.ones(n, dtype=bool)
            mask[::3] = False
            for q in (
                rng.standard_normal(dim).astype(np.float32),
                rng.standard_normal((64, dim)).astype(np.float32),
            ):
                idx.search(q, 10)
                idx.search(q, 10, mask=mask)
                idx.search(q, 10, cutoff=0.0)
    if int8:  # the parallel conversion runs only on large corpora
        corpus = Int8Corpus(8)
        rows = np.ones((64, 8), np.float32)
        corpus.update(rows)
        arrays = corpus.arrays
        dense_quant.to_int8(
            rows, 0, *arrays[:4], arrays.center, arrays.sigma, (1.0, 1, corpus.fmt.lanes, 0.0)
        )
    log("  exact dense search" + (" (float32 and int8 first pass)" if int8 else ""))
    for n_q in (2, 64):  # a custom similarity's score matrix, serial and parallel top-k
        scores = rng.standard_normal((n_q, 300)).astype(np.float32)
        rows = np.empty((n_q, 10), np.int64)
        topk_rows(scores, 10, rows, np.empty((n_q, 10), np.float32), np.empty(n_q, np.int32))
    sparse = SparseIndex.from_dicts([{"a": 1.0, f"t{i % 7}": 0.5} for i in range(300)])
    for queries in ([{"a": 1.0}], [{"a": 0.5, "t3": 1.0}] * 64):
        sparse.search(queries, 10)
        sparse.search(queries, 10, mask=np.arange(300) % 2 == 0, cutoff=0.1)
    log("  custom-similarity top-k, sparse search")
    n = 4 * 10
    fuse_topk(
        np.repeat(np.arange(4, dtype=np.int64), 10),
        rng.integers(0, 30, n).astype(np.int64),
        rng.random(n),
        5,
        np.full((4, 5), -1, np.int64),
        np.zeros((4, 5), np.float32),
        np.zeros(4, np.int32),
    )
    log("  fusion of ranked lists (hybrid, bm25_fused)")
    if importlib.util.find_spec("hnswlib") is not None:
        hnsw = HNSWIndex(16, M=8)
        hnsw.add(rng.standard_normal((500, 16)).astype(np.float32))
        for q in (rng.standard_normal(16), rng.standard_normal((64, 16))):
            hnsw.search(q.astype(np.float32), 10)
            hnsw.search(q.astype(np.float32), 10, cutoff=0.0)
        log("  HNSW search")


def _static_embed(log: Callable[[str], None]) -> None:
    """StaticEmbedding's pooling kernel, with the argument kinds it gets (a read-only,
    memory-mapped int8 table), its word cache's gather and e5's tokenizing kernels."""
    rows = np.zeros((4, 8), dtype=np.int8)
    rows.flags.writeable = False
    out = np.empty((2, 8), dtype=np.float32)
    ids, offsets = np.array([1, 2, 3], np.int32), np.array([0, 1, 3], np.int64)
    static_embed.pool_rows(rows, np.ones(4, np.float32), ids, offsets, out)
    two = np.ones(2, np.int64)
    static_embed.gather_spans(np.zeros(4, np.int32), two, two, np.array([1, 0], np.int64))
    log("  static embedding pooling, cached words' ids")
    from fastrag.embeddings.unigram import CodePointMap, UnigramWords  # lazy: numba
    from fastrag.embeddings.wordpiece import AsciiWordPiece  # lazy: numba

    UnigramWords(["<unk>", "\u2581a", "b"], [0.0, -1.0, -2.0], 0).encode(["ab", "a\u2581b"])
    AsciiWordPiece({"[UNK]": 0, "a": 1, "##b": 2}, 0).encode(["ab", "A!"])
    cmap = CodePointMap({1: [], 0xFF21: [0x41]})
    cmap.apply(["a\x01"])  # ASCII batches as bytes
    cmap.apply(["\uff21"])  # the rest as UTF-32
    log("  static embedding tokenizing (unigram, code-point map, ASCII WordPiece)")


def _metrics(log: Callable[[str], None]) -> None:
    retrieved = [["猫坐在垫子上。今天天气很好。", "A cat sat on the mat."]] * 16
    reference = [["猫坐在垫子上。"]] * 16
    context_relevance(retrieved, reference)
    context_recall(retrieved, reference)
    log("  evaluation metrics")


def _store_checks(log: Callable[[str], None]) -> None:
    """The structure checks of untrusted store files: metadata JSON, and an HNSW file when
    hnswlib is installed."""
    meta = "".join(
        f'{{"file_name": "f{i}.md", "page": {i}, "tags": ["a", null]}}' for i in range(16)
    ).encode()
    offsets = np.arange(0, len(meta) + 1, len(meta) // 16, dtype=np.int64)
    store_check.check_json_objects(np.frombuffer(meta, np.uint8), offsets, 512, 4300)
    if importlib.util.find_spec("hnswlib") is not None:
        idx = HNSWIndex(8, M=4)
        idx.add(np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32))
        with tempfile.TemporaryDirectory() as tmp:
            idx.save(f"{tmp}/index.bin")  # save checks what it wrote
            check_index_file(f"{tmp}/index.bin", 8)
    log("  store structure checks")


def _compile_bytecode(folders: list[Path]) -> tuple[int, list[str]]:
    """Byte-compile the ``.py`` files under ``folders`` into their ``__pycache__`` (as a
    regular ``pip install`` does); returns the number of modules compiled and the files that
    could not be written (a read-only install), which are left as they are."""
    done, failed = 0, []
    for folder in folders:
        for src in sorted(Path(folder).rglob("*.py")):
            if "__pycache__" in src.parts:
                continue
            try:
                # the kind the interpreter writes (py_compile picks hash-based ones when
                # SOURCE_DATE_EPOCH is set); the write is atomic, so warm-ups may race
                py_compile.compile(
                    str(src),
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
                )
                done += 1
            except (OSError, py_compile.PyCompileError) as exc:
                failed.append(f"{src}: {exc}")
    return done, failed


def _bytecode(log: Callable[[str], None]) -> None:
    done, failed = _compile_bytecode([Path(fastrag.__file__).parent, Path(kernels.__file__).parent])
    log(
        f"  bytecode of {done} modules"
        + (
            f" ({len(failed)} not writable, left to the interpreter: {failed[0]}"
            + (" ..." if len(failed) > 1 else "")
            + ")"
            if failed
            else ""
        )
    )


# Each stage with its rough compile time in seconds (2-core AMD EPYC, empty cache): what
# plan_jobs balances the processes of a parallel warm-up by.
STAGES: dict[str, tuple[Callable[[Callable[[str], None]], None], float]] = {
    "bm25_search": (_bm25_search, 35.0),
    "analysis": (_analysis, 23.0),
    "dense": (_dense, 27.0),
    "metrics": (_metrics, 8.0),
    "static_embed": (_static_embed, 4.0),
    "store_checks": (_store_checks, 5.0),
    "bytecode": (_bytecode, 1.0),
}


def plan_jobs(jobs: int) -> list[list[str]]:
    """The stages of :data:`STAGES` spread over at most ``jobs`` processes: the longest first,
    each onto the process with the least work so far."""
    jobs = check_int("jobs", jobs, min=1, fix="use 1 to compile in this process")
    groups: list[list[str]] = [[] for _ in range(min(jobs, len(STAGES)))]
    load = [0.0] * len(groups)
    for name, (_, cost) in sorted(STAGES.items(), key=lambda kv: -kv[1][1]):
        i = load.index(min(load))
        groups[i].append(name)
        load[i] += cost
    return groups


def run_stages(names: list[str], verbose: bool = True) -> None:
    """Run the named warm-up stages in this process, in :data:`STAGES` order."""
    unknown = sorted(set(names) - set(STAGES))
    if unknown:
        raise ConfigError(f"unknown warm-up stages {unknown}; choose from {list(STAGES)}")
    log = (lambda line: print(line, flush=True)) if verbose else (lambda _: None)
    use_kernels()  # compile here, never the NumPy path of a cold process
    for name in STAGES:
        if name in names:
            s0 = time.perf_counter()
            STAGES[name][0](log)
            log(f"    {name}: {time.perf_counter() - s0:.1f} s")


def _run_parallel(groups: list[list[str]], verbose: bool) -> None:
    """Each group of stages in its own process; raises if any of them fails."""
    env = {**os.environ, ENV: "0"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", f"from fastrag.warmup import run_stages; run_stages({g!r})"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for g in groups
    ]
    failed = []
    for group, proc in zip(groups, procs, strict=True):
        out, _ = proc.communicate()
        if verbose and proc.returncode == 0:
            print(out, end="", flush=True)
        if proc.returncode != 0:
            failed.append(f"stages {group} exited with {proc.returncode}:\n{out[-3000:]}")
    if failed:
        raise RuntimeError("the warm-up failed: " + "\n".join(failed))


def warmup(verbose: bool = True, jobs: int = 1) -> float:
    """Run every kernel path once so numba compiles and caches it, in ``jobs`` processes at
    once (1: in this process); returns the seconds it took (a second call, or one with a warm
    cache, takes a few seconds)."""
    groups = plan_jobs(jobs)
    t0 = time.perf_counter()
    if len(groups) == 1:
        run_stages(groups[0], verbose)
    else:
        _run_parallel(groups, verbose)
    mark_ready()
    return time.perf_counter() - t0


def background_warmup() -> None:
    """The background compile (:mod:`fastrag._coldstart` starts it): :func:`warmup` under a
    lock, then the ready marker; exits with ``BUSY_EXIT`` when another process holds the
    lock."""
    lock = FileLock(str(cache_dir() / "fastrag-warmup.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        sys.exit(BUSY_EXIT)
    try:
        if marker().exists():
            return
        t0 = time.perf_counter()
        warmup(verbose=False)
        mark_ready()
        # the line fastrag._coldstart.remaining_compile_s reads back
        print(
            f"{time.strftime('%Y-%m-%d %H:%M:%S')} fastrag warmup {os.getpid()}: "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
    finally:
        lock.release()
