"""BM25 against the bar: fastrag vs PISA (pyterrier-pisa), tantivy and bm25s, same tokens.

Issue 13, goal 4 ("PISA is the bar"). For each corpus of ``gen_bm25_corpus.CORPORA`` (``zipf``:
synthetic Zipf token ids; ``cmrc_jieba``: tiled CMRC with fastrag's jieba analyzer;
``english``: tiled English prose with fastrag's English analyzer; ``scifact``: tiled SciFact
abstracts, its claims as queries, files from ``gen_bm25_corpus.SCIFACT_DIR``) and each size,
every system indexes the same pre-analysed token ids and answers the same queries, top-10, so
only retrieval is timed. One process; per repeat each system runs back to back at each thread count
(medians of ``--repeats``; "paired" ratios are medians of per-repeat time ratios).

* **fastrag**: ``BM25Index.search_csr`` on int32 token ids, exact; its top-10 must equal bm25s's
  on every query (checked where bm25s runs, tie-aware, as in ``bench_bm25.py``).
* **bm25s** 0.3.16, numba backend, method lucene, indexed from token ids.
* **PISA** through pyterrier-pisa: each token id becomes the term string ``t<id>``, indexed
  with its tf (``stemmer='none'``, ``stops='none'``: PISA analyses nothing), ``block_simdbp``
  postings. The index files are written here with numpy, byte-identical to what
  ``PisaIndex.toks_indexer(scale=1)`` writes in one batch (checked in ``--smoke``; that indexer
  is a Python loop, minutes per million documents, and with several batches, i.e. more than
  ``batch_size`` (100,000) documents, 0.4.9 can write wrong postings: see
  ``pisa_toks_indexer_matches``). A query is
  ``{term: count}`` with ``query_weighted`` and ``toks_scale=1``, so a repeated query token
  counts twice, as in bm25s. Configurations: query algorithm ``maxscore``,
  ``block_max_maxscore`` or ``block_max_wand``; BM25 computed at query time (``exact``) or
  PISA's quantised impacts precomputed into the index (``precompute_impact=True``, the
  "quantized" scorer, ``quant``). Timed: the extension call ``_pisathon.retrieve`` over all
  queries on prebuilt inputs, i.e. the core of ``PisaRetrieve.transform`` (term strings are
  looked up in PISA's lexicon inside the call; PISA's API takes no ids). The public
  ``.transform(DataFrame)`` (which also converts the query dicts and builds the result
  DataFrame) is timed too, for the fastest configuration. PISA's idf is
  ``max(1e-6, log((N-df+0.5)/(df+0.5)))``, not Lucene's ``log(1+(N-df+0.5)/(df+0.5))``, so its
  top-10 differs from bm25s's: the overlap is reported (mean |intersection| / 10).
* **tantivy** (tantivy-py): one text field of the space-joined ``t<id>`` strings, the
  ``whitespace`` tokenizer (no lowercasing or stemming), term frequencies without positions,
  built in RAM by one writer thread; a query is a boolean OR of term queries (a repeated token
  repeated). tantivy-py answers one query per call, so a Python loop over the queries is timed
  (``count=False`` so block-max WAND can prune); 2 threads are two Python threads over
  alternate queries (``search`` releases the GIL). tantivy's BM25 fixes k1=1.2, b=0.75 (Lucene
  idf, document lengths rounded to one byte), so every system here uses k1=1.2, b=0.75
  (``--k1``/``--b``; ``bench_bm25.py`` uses bm25s's default k1=1.5).

Goals printed as PASS/FAIL: fastrag >= 2x PISA's fastest configuration at 1,000,000 documents,
1 thread, on every corpus; fastrag >= 4x bm25s with jieba tokens at 200,000 documents.

Usage: ``python bench/bench_bm25_pisa.py`` (full: ``--corpora zipf,cmrc_jieba,english
--sizes 200000,1000000 --threads 1,2 --peers pisa,tantivy,bm25s``, about 40 min on 2 busy
cores), ``--smoke`` (tiny, CI). Writes ``bench/results/bm25_pisa.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("DISABLE_TQDM", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_bm25_corpus as gen
from _harness import (
    AVX512_HIDDEN,
    RESULTS_DIR,
    WORK_DIR,
    machine_info,
    markdown_table,
    median,
    write_results,
)
from bench_bm25 import as_lists, bm25s_nbytes, log, timed, verify

import fastrag
from fastrag.indexes.bm25.index import BM25Index
from fastrag.warmup import _bm25_rank

K = 10
PISA_ALGOS = ("maxscore", "block_max_maxscore", "block_max_wand")
PEERS = ("pisa", "tantivy", "bm25s")
INSTALL_HINT = "pip install 'fastrag-engine[bench]'"


def import_peer(name: str):
    """``(module, None)`` or ``(None, reason)`` for a peer library (imported lazily)."""
    mod = {"pisa": "pyterrier_pisa", "tantivy": "tantivy", "bm25s": "bm25s"}[name]
    try:
        return __import__(mod), None
    except Exception as exc:  # noqa: BLE001 - any import failure skips the peer, with why
        return None, f"{mod} not importable ({type(exc).__name__}: {exc}); {INSTALL_HINT}"


# ------------------------------------------------------------------------------------ PISA
def write_pisa_index(values: np.ndarray, offsets: np.ndarray, n_vocab: int, path: Path) -> None:
    """Write the files ``PisaIndex.toks_indexer(scale=1)`` writes for documents ``values`` /
    ``offsets`` (docno = row number, term = ``t<id>``, tf = count), with numpy."""
    import scipy.sparse as sp

    n_docs = offsets.shape[0] - 1
    # copies: sum_duplicates sorts and compacts the index arrays in place
    m = sp.csr_matrix(
        (np.ones(values.shape[0], np.uint32), values.copy(), offsets.copy()),
        shape=(n_docs, n_vocab),
    )
    m.sum_duplicates()
    c = m.tocsc()  # term-major; doc ids ascending within a term
    del m
    df = np.diff(c.indptr)
    present = np.flatnonzero(df)
    names = [f"t{t}" for t in present.tolist()]
    order = sorted(range(len(names)), key=names.__getitem__)  # PISA's lexicon is sorted
    terms = present[order]
    lens = df[terms]
    starts = c.indptr[terms].astype(np.int64)
    total = int(lens.sum())
    new_off = np.zeros(terms.shape[0] + 1, np.int64)
    np.cumsum(lens, out=new_off[1:])
    src = np.repeat(starts - new_off[:-1], lens) + np.arange(total)
    pos = np.arange(total) + np.repeat(np.arange(1, terms.shape[0] + 1), lens)
    heads = new_off[:-1] + np.arange(terms.shape[0])
    path.mkdir(parents=True, exist_ok=True)
    for fname, payload, header in (("inv.docs", c.indices, [1, n_docs]), ("inv.freqs", c.data, [])):
        out = np.empty(total + terms.shape[0], np.uint32)
        out[heads] = lens
        out[pos] = payload[src]
        with open(path / fname, "wb") as f:
            f.write(np.asarray(header, np.uint32).tobytes())
            f.write(out.tobytes())
        del out
    sizes = np.concatenate([[n_docs], np.diff(offsets)]).astype(np.uint32)
    (path / "inv.sizes").write_bytes(sizes.tobytes())
    write_pisa_lexicons(path, [names[i] for i in order], n_docs)


def write_pisa_lexicons(path: Path, terms: list[str], n_docs: int) -> None:
    """The lexicons and meta of a PISA index whose inverted files are in ``path``: ``terms``
    in PISA's (sorted) order, documents named by their row number."""
    import pyterrier_pisa as pp

    with open(path / "fwd.terms", "w") as f:
        f.writelines(t + "\n" for t in terms)
    with open(path / "fwd.documents", "w") as f:
        for lo in range(0, n_docs, 1 << 20):
            f.write("".join(f"{i}\n" for i in range(lo, min(n_docs, lo + (1 << 20)))))
    pp._pisathon.build_binlex(str(path / "fwd.documents"), str(path / "fwd.doclex"))
    pp._pisathon.build_binlex(str(path / "fwd.terms"), str(path / "fwd.termlex"))
    (path / "pt_meta.json").write_text(
        json.dumps(
            {
                "type": "sparse_index",
                "format": "pisa",
                "package_hint": "pyterrier-pisa",
                "stemmer": "none",
            }
        )
    )


def _decode_pisa(path: Path) -> dict[str, tuple[list[int], list[int]]]:
    """term -> (doc ids, tfs) of a PISA index's inv.docs / inv.freqs / fwd.terms."""
    docs = np.fromfile(path / "inv.docs", np.uint32)[2:]
    freqs = np.fromfile(path / "inv.freqs", np.uint32)
    out, i = {}, 0
    for term in (path / "fwd.terms").read_text().split():
        n = int(docs[i])
        out[term] = (docs[i + 1 : i + 1 + n].tolist(), freqs[i + 1 : i + 1 + n].tolist())
        i += n + 1
    return out


def pisa_toks_indexer_matches(values, offsets, path: Path) -> dict:
    """Index the same documents with ``toks_indexer`` and compare every file with
    ``write_pisa_index``'s. One batch (``batch_size >= n_docs``): with several batches
    pyterrier-pisa 0.4.9 can write wrong postings (seen: terms of later batches given the last
    document of the previous batch as an extra posting), so the multi-batch index is only
    compared term by term (``multibatch_terms_differ``, for the record)."""
    import pyterrier_pisa as pp

    n_docs = offsets.shape[0] - 1

    def docs():
        for i in range(n_docs):
            t, c = np.unique(values[offsets[i] : offsets[i + 1]], return_counts=True)
            yield {
                "docno": str(i),
                "toks": {f"t{a}": b for a, b in zip(t.tolist(), c.tolist(), strict=True)},
            }

    out: dict = {}
    for batch in (n_docs, max(1, n_docs // 3)):
        ref = path.parent / f"toks_indexer_{batch}"
        shutil.rmtree(ref, ignore_errors=True)
        dt, _ = timed(
            lambda r=ref, bs=batch: (
                pp.PisaIndex(str(r), stemmer="none", stops="none", batch_size=bs)
                .toks_indexer(scale=1.0)
                .index(docs())
            )
        )
        if batch == n_docs:
            names = (
                "inv.docs",
                "inv.freqs",
                "inv.sizes",
                "fwd.terms",
                "fwd.documents",
                "fwd.termlex",
                "fwd.doclex",
            )
            differ = [n for n in names if (ref / n).read_bytes() != (path / n).read_bytes()]
            out |= {
                "files": list(names),
                "files_differ": differ,
                "identical": not differ,
                "toks_indexer_s": dt,
            }
        else:
            ours, theirs = _decode_pisa(path), _decode_pisa(ref)
            out["multibatch_batch_size"] = batch
            out["multibatch_terms_differ"] = sum(theirs.get(t) != v for t, v in ours.items())
        shutil.rmtree(ref, ignore_errors=True)
    return out


def pisa_queries(qv: np.ndarray, qo: np.ndarray) -> list[tuple[int, dict[str, float]]]:
    """``(query index, {term: count})`` for each query, as ``PisaRetrieve.transform`` passes
    them to the extension (weights already float and scaled by ``toks_scale=1``)."""
    out = []
    for i in range(qo.shape[0] - 1):
        t, c = np.unique(qv[qo[i] : qo[i + 1]], return_counts=True)
        out.append((i, {f"t{a}": float(b) for a, b in zip(t.tolist(), c.tolist(), strict=True)}))
    return out


def pisa_core(ctxt, algo: str, inp: list, threads: int):
    """One ``_pisathon.retrieve`` call over all queries (what ``transform`` calls)."""
    import pyterrier_pisa as pp

    shape = (len(inp) * K,)
    qidx = np.empty(shape, np.int32)
    docnos = np.empty(shape, object)
    ranks = np.empty(shape, np.int32)
    scores = np.empty(shape, np.float32)
    size = pp._pisathon.retrieve(
        ctxt,
        algo,
        inp,
        k=K,
        threads=threads,
        query_weighted=1,
        pretokenised=True,
        result_qidxs=qidx,
        result_docnos=docnos,
        result_ranks=ranks,
        result_scores=scores,
    )
    return qidx[:size], docnos[:size]


def pisa_top(out, n_q: int) -> list[list[int]]:
    qidx, docnos = out
    tops: list[list[int]] = [[] for _ in range(n_q)]
    for q, d in zip(qidx.tolist(), docnos.tolist(), strict=True):
        tops[q].append(int(d))
    return tops


# --------------------------------------------------------------------------------- tantivy
def build_tantivy(values: np.ndarray, offsets: np.ndarray, n_vocab: int, heap_mb: int):
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("body", stored=False, tokenizer_name="whitespace", index_option="freq")
    sb.add_integer_field("row", stored=False, indexed=False, fast=True)
    schema = sb.build()
    index = tantivy.Index(schema)  # in RAM
    writer = index.writer(heap_mb * 2**20, 1)
    names = [f"t{i}" for i in range(n_vocab)]
    get = names.__getitem__
    for i in range(offsets.shape[0] - 1):
        body = " ".join(map(get, values[offsets[i] : offsets[i + 1]].tolist()))
        writer.add_document(tantivy.Document(body=body, row=i))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    return index, schema, names


def tantivy_queries(schema, names: list[str], qv: np.ndarray, qo: np.ndarray) -> list:
    import tantivy

    term, should = tantivy.Query.term_query, tantivy.Occur.Should
    return [
        tantivy.Query.boolean_query(
            [
                (should, term(schema, "body", names[t], index_option="freq"))
                for t in qv[qo[i] : qo[i + 1]].tolist()
            ]
        )
        for i in range(qo.shape[0] - 1)
    ]


def tantivy_search(searcher, queries: list, threads: int, pool) -> list:
    def run(qs):
        return [searcher.search(q, K, count=False).hits for q in qs]

    if threads == 1:
        return run(queries)
    parts = list(pool.map(run, [queries[j::threads] for j in range(threads)]))
    out = [None] * len(queries)
    for j, part in enumerate(parts):
        out[j::threads] = part
    return out


def tantivy_top(searcher, hits: list) -> list[list[int]]:
    return [searcher.fast_field_values("row", [a for _, a in h]) if h else [] for h in hits]


# ------------------------------------------------------------------------------- one block
def overlap(ref: list[list[int]], got: list[list[int]]) -> float:
    """Mean over queries of |ref top-10 & got top-10| / min(10, |ref|) (queries whose
    reference is empty are skipped)."""
    vals = [len(set(r) & set(g[:K])) / min(K, len(r)) for r, g in zip(ref, got, strict=True) if r]
    return float(np.mean(vals)) if vals else float("nan")


def packed_reload(index: BM25Index, folder: Path) -> tuple[BM25Index, dict[str, int], float]:
    """``index`` saved packed (``to_arrays(packed=True)``: block-codec postings, as a store
    keeps it) as ``.npy`` files in ``folder`` and opened memory-mapped, as a reopened store
    does. Returns ``(opened index, file bytes by part, open seconds)``; parts: packed doc-id
    gaps and tf codes, per-block skip entries (last doc id, word offset, widths), per-term
    offsets and bounds, per-document lengths."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays, meta = index.to_arrays(packed=True), index.meta(packed=True)
    for n, a in arrays.items():
        np.save(folder / f"{n}.npy", np.ascontiguousarray(a))
    size = {n: (folder / f"{n}.npy").stat().st_size for n in arrays}
    t0 = time.perf_counter()
    opened = BM25Index.from_arrays(
        {n: np.load(folder / f"{n}.npy", mmap_mode="r") for n in arrays}, meta
    )
    open_s = time.perf_counter() - t0
    parts = {
        "words": size["words"],
        "skip": sum(size[n] for n in ("blk_last", "blk_word", "blk_dw", "blk_tw")),
        "terms": size["indptr"] + size["term_max"] + size.get("stats_df", 0),
        "doc_lengths": size["doc_len"],
    }
    return opened, parts, open_s


def bench_block(name: str, n_docs: int, args, peers: dict) -> dict:
    """Every system on corpus ``name`` with ``n_docs`` documents."""
    load0 = list(os.getloadavg())
    t_block = time.perf_counter()
    dt, corpus = timed(lambda: gen.make_named_corpus(name, n_docs, args.seed))
    values, offsets, n_vocab = corpus["values"], corpus["offsets"], corpus["n_vocab"]
    qv, qo = gen.corpus_queries(corpus, args.max_queries)
    n_q = qo.shape[0] - 1
    res: dict = {
        "corpus": name,
        "analyzer": corpus["analyzer"],
        "n_docs": n_docs,
        "n_vocab": n_vocab,
        "tokens_per_doc": round(corpus["tokens_per_doc"], 1),
        "n_queries": n_q,
        "tokens_per_query": round(float(qv.shape[0] / n_q), 2),
        "corpus_s": dt,
        "loadavg_at_start": load0,
        "build_s": {},
        "bytes": {},
        "skipped": {},
    }
    log(
        f"[{name} {n_docs:,}] "
        + json.dumps(
            {
                k: res[k]
                for k in ("analyzer", "n_vocab", "tokens_per_doc", "n_queries", "tokens_per_query")
            },
            ensure_ascii=False,
        )
    )
    threads = args.thread_list
    warm_n = min(n_q, 300)  # queries of the untimed warm-up call of each system
    runners: dict[str, object] = {}  # key -> fn(threads) -> raw output
    warmers: dict[str, object] = {}  # key -> fn(threads): the same on the first warm_n queries
    tops: dict[str, object] = {}  # key -> fn(raw output) -> list of top-10 row lists

    # ---- fastrag (a tiny build, then warmup's index with rank directories and heads, first
    # compile or load the cached kernels: the timed build of the directories is the build)
    BM25Index.build(values[: offsets[2]], offsets[:3], n_vocab, k1=args.k1, b=args.b)
    _bm25_rank()
    gc.collect()
    dt, index = timed(lambda: BM25Index.build(values, offsets, n_vocab, k1=args.k1, b=args.b))
    res["build_s"]["fastrag"], res["bytes"]["fastrag"] = dt, index.nbytes
    # the rank directories and impact heads a search builds on first use, built here to time
    # them apart
    dt_rank, rank_bytes = timed(index.build_rank_directories)
    res["build_s"]["fastrag_rank"], res["bytes"]["fastrag_rank"] = dt_rank, rank_bytes
    res["bytes"]["fastrag_heads"] = index.head_nbytes
    res["postings"] = int(index.indptr[-1])
    # What a store keeps and a reopened store searches: the packed files, memory-mapped; a
    # term's postings are decoded on the first query that holds it (the cold pass below).
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    packed_dir = Path(tempfile.mkdtemp(prefix=f"fastrag_{name}_{n_docs}_", dir=WORK_DIR))
    dt_pack, (index, parts, open_s) = timed(lambda: packed_reload(index, packed_dir))
    res["build_s"]["fastrag_pack"], res["bytes"]["fastrag_codec"] = dt_pack, parts
    res["open_s"] = open_s
    gc.collect()
    res["cold_s"], _ = timed(lambda: index.search_csr(qv, qo, K, num_threads=1))
    res["cold_s_rank"], _ = timed(index.build_rank_directories)
    log(
        f"  fastrag packed: {sum(parts.values()) / res['postings']:.2f} B/posting, pack + save "
        f"{dt_pack:.2f} s, open {open_s * 1e3:.1f} ms, first pass over the queries (decoding "
        f"their terms) {res['cold_s']:.2f} s"
    )
    runners["fastrag"] = lambda t: index.search_csr(qv, qo, K, num_threads=t)
    warmers["fastrag"] = lambda t: index.search_csr(
        qv[: qo[warm_n]], qo[: warm_n + 1], K, num_threads=t
    )
    tops["fastrag"] = lambda o: [o[0][i, : int(o[2][i])].tolist() for i in range(n_q)]
    log(
        f"  fastrag build {dt:.2f} s, {index.nbytes / 2**20:,.0f} MiB; rank directories and "
        f"heads {dt_rank:.2f} s, {rank_bytes / 2**20:,.1f} MiB (heads "
        f"{index.head_nbytes / 2**20:,.1f})"
    )

    # ---- bm25s
    bm = None
    q_lists = [qv[qo[i] : qo[i + 1]].tolist() for i in range(n_q)]
    if "bm25s" in peers and n_docs > args.bm25s_max_docs:
        res["skipped"]["bm25s"] = f"n_docs > --bm25s-max-docs {args.bm25s_max_docs:,}"
    elif "bm25s" in peers:
        bm25s = peers["bm25s"]
        docs = as_lists(values, offsets)
        vocab = {str(t): i for i, t in enumerate(corpus["vocab"].tolist())}
        bm = bm25s.BM25(
            method="lucene", k1=args.k1, b=args.b, backend="numpy" if args.smoke else "numba"
        )
        gc.collect()
        dt, _ = timed(lambda: bm.index((docs, vocab), show_progress=False))
        del docs, vocab
        gc.collect()
        res["build_s"]["bm25s"], res["bytes"]["bm25s"] = dt, bm25s_nbytes(bm)
        runners["bm25s"] = lambda t: bm.retrieve(q_lists, k=K, show_progress=False, n_threads=t)
        warmers["bm25s"] = lambda t: bm.retrieve(
            q_lists[:warm_n], k=K, show_progress=False, n_threads=t
        )
        tops["bm25s"] = lambda o: np.asarray(o[0]).tolist()
        log(f"  bm25s build {dt:.2f} s")

    # ---- PISA
    pisa_dir = None
    if "pisa" in peers:
        pp = peers["pisa"]  # (pp.log_level(False) fails in 0.4.9: _pisathon has no log_level)
        WORK_DIR.mkdir(parents=True, exist_ok=True)
        pisa_dir = Path(tempfile.mkdtemp(prefix=f"pisa_{name}_{n_docs}_", dir=WORK_DIR))
        path = pisa_dir / "index"
        dt, _ = timed(lambda: write_pisa_index(values, offsets, n_vocab, path))
        res["build_s"]["pisa_files"] = dt
        if args.pisa_check_build:
            res["pisa_build_check"] = pisa_toks_indexer_matches(values, offsets, path)
            log(f"  PISA files vs toks_indexer: {res['pisa_build_check']}")
        pidx = pp.PisaIndex(str(path), stemmer="none", stops="none", threads=1)
        inp = pisa_queries(qv, qo)
        retrievers = {}
        for quant in ("exact", "quant"):
            dt, retr = timed(
                lambda q=quant: pidx.bm25(
                    k1=args.k1,
                    b=args.b,
                    num_results=K,
                    threads=1,
                    query_weighted=True,
                    toks_scale=1.0,
                    precompute_impact=q == "quant",
                )
            )
            retrievers[quant] = retr
            res["build_s"][f"pisa_prepare_{quant}"] = dt  # wand data + compression
            for algo in PISA_ALGOS:
                key = f"pisa:{algo}:{quant}"
                runners[key] = lambda t, c=retr._ctxt, a=algo: pisa_core(c, a, inp, t)
                warmers[key] = lambda t, c=retr._ctxt, a=algo: pisa_core(c, a, inp[:warm_n], t)
                tops[key] = lambda o: pisa_top(o, n_q)
        # wand data + compressed postings of each configuration (files *.q0.bmw.64*, *.q1.*)
        res["bytes"]["pisa"] = {
            q: sum(
                f.stat().st_size for f in path.iterdir() if f".q{int(q == 'quant')}.bmw." in f.name
            )
            for q in ("exact", "quant")
        }
        log(
            f"  PISA files {res['build_s']['pisa_files']:.1f} s, prepare "
            f"{res['build_s']['pisa_prepare_exact']:.1f} / "
            f"{res['build_s']['pisa_prepare_quant']:.1f} s"
        )

    # ---- tantivy
    pool = ThreadPoolExecutor(max(threads))
    searcher = None
    if "tantivy" in peers:
        dt, (tindex, schema, names) = timed(
            lambda: build_tantivy(values, offsets, n_vocab, args.tantivy_heap_mb)
        )
        searcher = tindex.searcher()
        tq = tantivy_queries(schema, names, qv, qo)
        del names
        res["build_s"]["tantivy"] = dt
        res["tantivy_segments"] = searcher.num_segments
        runners["tantivy"] = lambda t: tantivy_search(searcher, tq, t, pool)
        warmers["tantivy"] = lambda t: tantivy_search(searcher, tq[:warm_n], t, pool)
        tops["tantivy"] = lambda o: tantivy_top(searcher, o)
        log(f"  tantivy build {dt:.1f} s, {searcher.num_segments} segment(s)")

    # ---- retrieval: warm-up, then interleaved repeats
    for t in threads:
        for fn in warmers.values():
            fn(t)
    runs: dict[str, list[float]] = {}
    first: dict[str, object] = {}
    for _ in range(args.repeats):
        for t in threads:
            for key, fn in runners.items():
                gc.disable()
                dt, out = timed(lambda f=fn, t=t: f(t))
                gc.enable()
                runs.setdefault(f"{key}@{t}t", []).append(dt)
                if t == threads[0]:
                    first[key] = out
                del out
    res["runs_s"] = runs
    res["qps"] = {k: n_q / median(ts) for k, ts in runs.items()}
    log("  q/s " + "  ".join(f"{k}={v:,.0f}" for k, v in res["qps"].items()))

    # ---- public PISA API for the fastest configuration
    if "pisa" in peers:
        import pandas as pd

        df = pd.DataFrame({"qid": [str(i) for i in range(n_q)], "query_toks": [d for _, d in inp]})
        res["pisa_transform_qps"] = {}
        for t in threads:
            best = max(
                (k for k in runs if k.startswith("pisa") and k.endswith(f"@{t}t")),
                key=res["qps"].get,
            )
            _, algo, quant = best.split("@")[0].split(":")
            retr = pidx.bm25(
                k1=args.k1,
                b=args.b,
                num_results=K,
                threads=t,
                query_weighted=True,
                toks_scale=1.0,
                precompute_impact=quant == "quant",
                query_algorithm=algo,
            )
            retr.transform(df.iloc[:warm_n])
            ts = [timed(lambda r=retr: r.transform(df))[0] for _ in range(args.repeats)]
            res["pisa_transform_qps"][f"{best.split('@')[0]}@{t}t"] = n_q / median(ts)
        log(f"  PISA .transform(df) q/s {res['pisa_transform_qps']}")

    # ---- result checks: fastrag == bm25s; overlaps with bm25s's top-10
    ref = tops["fastrag"](first["fastrag"])
    if bm is not None:
        b_ids, b_scores = first["bm25s"]
        res["verify_vs_bm25s"] = verify(
            index, first["fastrag"], np.asarray(b_ids), np.asarray(b_scores), qv, qo
        )
        log(f"  fastrag vs bm25s: {res['verify_vs_bm25s']}")
        res["overlap_reference"] = "bm25s"
        ref = tops["bm25s"](first["bm25s"])
        counts = first["fastrag"][2]
        ref = [r[: int(c)] for r, c in zip(ref, counts, strict=True)]  # drop zero-score filler
    else:
        res["overlap_reference"] = "fastrag (bm25s not run; equal to bm25s where both run)"
    res["overlap_top10"] = {k: overlap(ref, tops[k](first[k])) for k in runners if k != "bm25s"}
    if "pisa" in peers:  # the algorithms are rank-safe: same top-10 set per query?
        res["pisa_algorithms_same_top10"] = {}
        for quant in ("exact", "quant"):
            sets = [
                [set(x) for x in tops[k](first[k])]
                for k in (f"pisa:{al}:{quant}" for al in PISA_ALGOS)
            ]
            res["pisa_algorithms_same_top10"][quant] = float(
                np.mean([s[1:] == s[:-1] for s in zip(*sets, strict=True)])
            )
    if len(threads) > 1:
        f1 = first["fastrag"]
        f2 = index.search_csr(qv, qo, K, num_threads=threads[-1])
        res["fastrag_threads_identical"] = all(
            np.array_equal(a, b) for a, b in zip(f1, f2, strict=True)
        )
    log(
        f"  top-10 overlap with {res['overlap_reference'].split()[0]}: "
        + "  ".join(f"{k}={v:.3f}" for k, v in res["overlap_top10"].items())
    )

    pool.shutdown()
    shutil.rmtree(packed_dir, ignore_errors=True)  # mapped pages stay readable until unmapped
    if pisa_dir is not None:
        res["bytes"]["pisa_dir"] = sum(f.stat().st_size for f in (pisa_dir / "index").iterdir())
        del retrievers, pidx
        gc.collect()
        shutil.rmtree(pisa_dir, ignore_errors=True)
    res["loadavg_at_end"] = list(os.getloadavg())
    res["block_s"] = time.perf_counter() - t_block
    return res


# ----------------------------------------------------------------------------------- report
def pisa_best(r: dict, t: int) -> tuple[str | None, float | None]:
    """PISA's fastest configuration at ``t`` threads and its q/s."""
    cands = [
        (v, k.split("@")[0])
        for k, v in r.get("qps", {}).items()
        if k.startswith("pisa") and k.endswith(f"@{t}t")
    ]
    if not cands:
        return None, None
    v, k = max(cands)
    return k.removeprefix("pisa:"), v


def paired(r: dict, a: str, b: str) -> float:
    """Median over repeats of ``b``'s time / ``a``'s time in the same repeat."""
    ta, tb = r["runs_s"].get(a), r["runs_s"].get(b)
    return median([y / x for x, y in zip(ta, tb, strict=True)]) if ta and tb else float("nan")


def ratio(a, b) -> float:
    return a / b if a and b else float("nan")


def goals(payload: dict) -> list[dict]:
    """The two goals of issue 13 / goal 4, evaluated on what this run measured."""
    out = []
    for corpus in payload["args"]["corpora"].split(","):
        rows = [r for r in payload["blocks"] if r["corpus"] == corpus and r["n_docs"] == 1_000_000]
        if not rows:
            out.append(
                {
                    "goal": f"fastrag >= 2x PISA fastest, {corpus}, 1M docs, 1 thread",
                    "status": "NOT MEASURED",
                }
            )
            continue
        r = rows[0]
        cfg, best = pisa_best(r, 1)
        x = ratio(r["qps"].get("fastrag@1t"), best)
        out.append(
            {
                "goal": f"fastrag >= 2x PISA fastest, {corpus}, 1M docs, 1 thread",
                "pisa_config": cfg,
                "ratio": x,
                "paired": paired(r, "fastrag@1t", f"pisa:{cfg}@1t") if cfg else None,
                "status": "PASS" if x >= 2 else "FAIL",
            }
        )
    rows = [
        r
        for r in payload["blocks"]
        if r["corpus"] == "cmrc_jieba" and r["n_docs"] == 200_000 and "bm25s@1t" in r["qps"]
    ]
    if rows:
        x = ratio(rows[0]["qps"]["fastrag@1t"], rows[0]["qps"]["bm25s@1t"])
        out.append(
            {
                "goal": "fastrag >= 4x bm25s, cmrc_jieba, 200k docs, 1 thread",
                "ratio": x,
                "paired": paired(rows[0], "fastrag@1t", "bm25s@1t"),
                "status": "PASS" if x >= 4 else "FAIL",
            }
        )
    else:
        out.append(
            {
                "goal": "fastrag >= 4x bm25s, cmrc_jieba, 200k docs, 1 thread",
                "status": "NOT MEASURED",
            }
        )
    return out


def render(payload: dict) -> str:
    m, a = payload["machine"], payload["args"]
    lines = ["# BM25: fastrag vs PISA, tantivy and bm25s (same tokens, top-10)", ""]
    lines.append(
        f"Machine: {m['cpu']} ({m.get('cpu_class', '?')}), {m['usable_cores']} usable cores, "
        "load average "
        f"(1/5/15 min) at start {[round(x, 2) for x in m['loadavg_at_start']]}, at end "
        f"{[round(x, 2) for x in payload.get('loadavg_at_end', [])]}; python {m['python']}, "
        f"numpy {m['numpy']}, numba {m.get('numba')}, bm25s {m.get('bm25s')}, pyterrier-pisa "
        f"{m.get('pyterrier-pisa')}, tantivy {m.get('tantivy')}; fastrag commit {m['commit']}. "
        f"k1={a['k1']}, b={a['b']} for every system (tantivy's are fixed at 1.2/0.75). "
        f"Medians of {a['repeats']} interleaved repeats; wall {payload.get('wall_s', 0):.0f} s. "
        "The machine is shared with other jobs: absolute q/s drift, ratios are measured back "
        "to back in one process (paired = median of per-repeat time ratios)."
    )
    lines.append("")
    for i, r in enumerate(payload.get("runs", [])):
        ra = r["args"]
        lines.append(
            f"- run {i}: corpora {ra['corpora']}, sizes {ra['sizes']}, peers "
            f"{ra['peers']}, bm25s up to {ra['bm25s_max_docs']:,} docs; load at start "
            f"{[round(x, 2) for x in r['machine']['loadavg_at_start']]}, at end "
            f"{[round(x, 2) for x in r['loadavg_at_end'] or []]}; wall "
            f"{r['wall_s'] or 0:.0f} s; {r['machine']['date']}"
        )
    if payload.get("runs"):
        lines.append("")
    for s, why in payload.get("peers_skipped", {}).items():
        lines.append(f"**{s} skipped**: {why}")
        lines.append("")
    lines.append("## Goals")
    lines.append("")
    for g in payload.get("goals", []):
        extra = (
            ""
            if "ratio" not in g
            else (
                f": {g['ratio']:.2f}x"
                + (f" (paired {g['paired']:.2f}x)" if g.get("paired") else "")
                + (f" vs PISA {g['pisa_config']}" if g.get("pisa_config") else "")
            )
        )
        lines.append(f"- **{g['status']}** {g['goal']}{extra}")
    lines.append("")
    lines.append("## Queries/s (top-10)")
    lines.append("")
    rows = []
    for r in payload["blocks"]:
        for t in a["thread_list"]:
            cfg, best = pisa_best(r, t)
            q = r["qps"]
            f = q.get(f"fastrag@{t}t")
            rows.append(
                [
                    r["corpus"],
                    r["n_docs"],
                    t,
                    f,
                    best,
                    cfg,
                    q.get(f"tantivy@{t}t"),
                    q.get(f"bm25s@{t}t"),
                    ratio(f, best),
                    paired(r, f"fastrag@{t}t", f"pisa:{cfg}@{t}t") if cfg else None,
                    ratio(f, q.get(f"tantivy@{t}t")),
                    ratio(f, q.get(f"bm25s@{t}t")),
                    paired(r, f"fastrag@{t}t", f"bm25s@{t}t"),
                ]
            )
    lines.append(
        markdown_table(
            [
                "corpus",
                "docs",
                "threads",
                "fastrag",
                "PISA fastest",
                "PISA config",
                "tantivy",
                "bm25s",
                "fastrag / PISA",
                "paired",
                "fastrag / tantivy",
                "fastrag / bm25s",
                "paired",
            ],
            rows,
        )
    )
    lines.append("")
    lines.append(
        "## PISA configurations (q/s; `exact`: BM25 at query time, `quant`: "
        "precomputed quantised impacts)"
    )
    lines.append("")
    keys = [f"{al}:{qu}" for qu in ("exact", "quant") for al in PISA_ALGOS]
    rows = [
        [r["corpus"], r["n_docs"], t]
        + [r["qps"].get(f"pisa:{k}@{t}t") for k in keys]
        + [
            next(
                (v for k, v in r.get("pisa_transform_qps", {}).items() if k.endswith(f"@{t}t")),
                None,
            )
        ]
        for r in payload["blocks"]
        for t in a["thread_list"]
        if "pisa_transform_qps" in r
    ]
    if rows:
        lines.append(
            markdown_table(
                ["corpus", "docs", "threads"] + keys + ["fastest via .transform(df)"], rows
            )
        )
        lines.append("")
        lines.append(
            "The configuration columns time `_pisathon.retrieve` (the extension call "
            "inside `PisaRetrieve.transform`) on prebuilt query dicts; the last "
            "column times the public `.transform(DataFrame)` of the fastest one, "
            "which also converts the query dicts and builds the result DataFrame."
        )
        lines.append("")
    lines.append("## Top-10 overlap with bm25s (mean |intersection| / 10) and exactness")
    lines.append("")
    okeys = ["fastrag", "pisa:maxscore:exact", "pisa:maxscore:quant", "tantivy"]
    rows = []
    for r in payload["blocks"]:
        o = r.get("overlap_top10", {})
        v = r.get("verify_vs_bm25s")
        agree = r.get("pisa_algorithms_same_top10", {})
        rows.append(
            [r["corpus"], r["n_docs"], r["n_queries"]]
            + [o.get(k) for k in okeys]
            + [
                agree.get("exact"),
                agree.get("quant"),
                ("yes" if v["identical"] else f"NO {v}") if v else "not run",
                r["overlap_reference"].split()[0],
            ]
        )
    lines.append(
        markdown_table(
            [
                "corpus",
                "docs",
                "queries",
                "fastrag",
                "PISA exact",
                "PISA quant",
                "tantivy",
                "PISA algos same top-10 (exact)",
                "(quant)",
                "fastrag top-10 == bm25s",
                "reference",
            ],
            rows,
        )
    )
    lines.append("")
    lines.append(
        'PISA\'s overlap is shown for maxscore; "PISA algos same top-10" is the share of '
        "queries on which the three algorithms return the same top-10 set. Overlap "
        "divides by min(10, matches) when a query matches fewer than 10 documents. "
        "fastrag's overlap is below 1 only through exact-score ties at 10th place: "
        'the tie-aware check ("fastrag top-10 == bm25s") finds no position whose '
        "score differs. tantivy's small gap comes from its one-byte document lengths; "
        "PISA's from its idf (terms in more than half the documents score ~0) and, "
        "for `quant`, 8-bit impacts."
    )
    lines.append("")
    lines.append(
        "Threads: tantivy-py answers one query per call (a Python loop; 2 threads are "
        "two Python threads, the search releases the GIL); PISA's retrieve loop takes "
        "the GIL per query to read its dict and to make the docno strings. With a "
        "1-minute load above 2 on these 2 cores, the 2-thread figures had no spare "
        "core: compare systems at 1 thread there."
    )
    lines.append("")
    lines.append("## Corpora, builds, load")
    lines.append("")
    rows = []
    for r in payload["blocks"]:
        b = r["build_s"]
        rows.append(
            [
                r["corpus"],
                r["analyzer"],
                r["n_docs"],
                r["n_vocab"],
                r["tokens_per_doc"],
                r["tokens_per_query"],
                b.get("fastrag"),
                b.get("bm25s"),
                b.get("pisa_files"),
                b.get("pisa_prepare_exact"),
                b.get("pisa_prepare_quant"),
                b.get("tantivy"),
                r.get("tantivy_segments"),
                r["bytes"]["fastrag"] / 2**20,
                b.get("fastrag_rank"),
                (r["bytes"].get("fastrag_rank") or 0) / 2**20,
                (r["bytes"].get("fastrag_heads") or 0) / 2**20,
                (r["bytes"].get("pisa", {}).get("quant") or 0) / 2**20 or None,
                f"{r['loadavg_at_start'][0]:.2f} -> {r['loadavg_at_end'][0]:.2f}",
                r["block_s"],
            ]
        )
    lines.append(
        markdown_table(
            [
                "corpus",
                "analyzer",
                "docs",
                "vocab",
                "tok/doc",
                "tok/query",
                "fastrag build s",
                "bm25s build s",
                "PISA files s",
                "PISA prepare exact s",
                "PISA prepare quant s",
                "tantivy build s",
                "tantivy segments",
                "fastrag MiB",
                "rank dirs + heads s",
                "rank dirs + heads MiB",
                "of which heads MiB",
                "PISA quant MiB",
                "load 1-min start -> end",
                "block wall s",
            ],
            rows,
        )
    )
    lines.append("")
    sized = [r for r in payload["blocks"] if "fastrag_codec" in r.get("bytes", {})]
    if sized:
        lines.append(
            "Index bytes per posting (skip data and per-term and per-document arrays "
            "included). fastrag stores its index packed (`to_arrays(packed=True)`, the "
            "`.npy` files measured here: 128 postings per block, bit widths per block, "
            "weights recomputed bit-identically from tf codes and document lengths) and "
            "searched the files memory-mapped; in memory a term's postings are decoded to "
            "an int32 doc id and a float32 weight each (the unpacked column, plus the rank "
            "directories and heads built on first use) on the first query that holds the "
            "term. Open: `from_arrays` on the memory-mapped files; first pass: the whole "
            "query set once on the freshly opened index (1 thread, decoding included), then "
            "its rank directories. PISA: the block_simdbp postings plus wand data of each "
            "configuration."
        )
        lines.append("")
        rows = []
        for r in sized:
            n, by = r["postings"], r["bytes"]
            codec = by["fastrag_codec"]
            pisa = by.get("pisa", {})
            rows.append(
                [
                    r["corpus"],
                    r["n_docs"],
                    n,
                    (by["fastrag"] + by.get("fastrag_rank", 0)) / n,
                    sum(codec.values()) / n,
                    codec["words"] / n,
                    codec["skip"] / n,
                    (codec["terms"] + codec["doc_lengths"]) / n,
                    pisa["exact"] / n if "exact" in pisa else None,
                    pisa["quant"] / n if "quant" in pisa else None,
                    r.get("open_s", float("nan")) * 1e3,
                    r.get("cold_s"),
                    r.get("cold_s_rank"),
                ]
            )
        lines.append(
            markdown_table(
                [
                    "corpus",
                    "docs",
                    "postings",
                    "fastrag unpacked in memory (+ rank dirs, heads)",
                    "fastrag packed (stored)",
                    "of which packed",
                    "skip entries",
                    "term and doc arrays",
                    "PISA exact",
                    "PISA quant",
                    "open ms",
                    "first pass s",
                    "+ rank dirs s",
                ],
                rows,
            )
        )
        lines.append("")
    lines.append(
        "Build times are not compared: PISA's files are written by this script with "
        'numpy (byte-identical to `toks_indexer`, checked in `--smoke`); "prepare" is '
        "PISA's wand data + compression. tantivy is timed from token ids (string join "
        "in Python + indexing, one writer thread). fastrag's rank directories "
        "(bitmaps of the terms in >= 1/16 of the documents) and impact heads (their "
        "heaviest 1/32 postings), derived at load, not saved, are built on first use; "
        "here before the timed searches."
    )
    for r in payload["blocks"]:
        if r["skipped"]:
            lines.append("")
            lines.append(f"{r['corpus']} {r['n_docs']:,}: skipped {r['skipped']}")
    return "\n".join(lines)


def plot(payload: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    corpora = list(dict.fromkeys(r["corpus"] for r in payload["blocks"]))
    fig, axes = plt.subplots(1, len(corpora), figsize=(5.5 * len(corpora), 4.2), squeeze=False)
    systems = (
        ("fastrag", "fastrag"),
        ("pisa", "PISA fastest"),
        ("tantivy", "tantivy"),
        ("bm25s", "bm25s"),
    )
    for ax, corpus in zip(axes[0], corpora, strict=True):
        groups = [
            (r, t)
            for r in payload["blocks"]
            if r["corpus"] == corpus
            for t in payload["args"]["thread_list"]
        ]
        x = np.arange(len(groups))
        w = 0.8 / len(systems)
        for j, (key, label) in enumerate(systems):
            ys = [
                (pisa_best(r, t)[1] if key == "pisa" else r["qps"].get(f"{key}@{t}t")) or 0
                for r, t in groups
            ]
            ax.bar(x + (j - 1.5) * w, ys, w, label=label)
        ax.set_xticks(x, [f"{r['n_docs'] // 1000:,}k\n{t} thr" for r, t in groups])
        ax.set_yscale("log")
        ax.set_ylabel("queries / s (top-10)")
        ax.set_title(corpus)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.legend(
        *axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=len(systems), fontsize=9
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)


def merge(paths: list[str]) -> dict:
    """One payload from several runs' JSON (e.g. a run cut short and a run of the rest):
    blocks concatenated in size then corpus order; each run's args, machine, wall time and
    end load kept under ``runs``."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    payload = dict(runs[0])
    order = {c: i for i, c in enumerate(gen.CORPORA)}
    payload["blocks"] = sorted(
        (b | {"run": i} for i, r in enumerate(runs) for b in r["blocks"]),
        key=lambda b: (b["n_docs"], order.get(b["corpus"], 99)),
    )
    payload["runs"] = [
        {
            "file": str(p),
            "args": r["args"],
            "machine": r["machine"],
            "wall_s": r.get("wall_s"),
            "loadavg_at_end": r.get("loadavg_at_end"),
        }
        for p, r in zip(paths, runs, strict=True)
    ]
    corpora = sorted({b["corpus"] for b in payload["blocks"]}, key=lambda c: order.get(c, 99))
    payload["args"] = runs[0]["args"] | {"corpora": ",".join(corpora)}
    payload["wall_s"] = sum(r.get("wall_s") or 0 for r in runs)
    payload["loadavg_at_end"] = runs[-1].get("loadavg_at_end")
    payload["peers_skipped"] = {k: v for r in runs for k, v in r["peers_skipped"].items()}
    payload["goals"] = goals(payload)
    return payload


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--peers",
        default="pisa,tantivy,bm25s",
        help=f"comma-separated subset of {','.join(PEERS)} (fastrag always runs)",
    )
    ap.add_argument(
        "--corpora",
        default="zipf,cmrc_jieba,english",
        help=f"comma-separated subset of {','.join(gen.CORPORA)}",
    )
    ap.add_argument("--sizes", default="200000,1000000", help="documents per corpus")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k1", type=float, default=1.2)
    ap.add_argument("--b", type=float, default=0.75)
    ap.add_argument("--max-queries", type=int, default=0, help="0: all of the corpus's queries")
    ap.add_argument(
        "--bm25s-max-docs", type=int, default=1_000_000, help="skip bm25s above this many documents"
    )
    ap.add_argument("--tantivy-heap-mb", type=int, default=2000)
    ap.add_argument(
        "--pisa-check-build",
        action="store_true",
        help="compare the PISA files with toks_indexer's (slow; on in --smoke)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="tiny run for CI")
    ap.add_argument("--out", default=None, help="results directory (default bench/results)")
    ap.add_argument(
        "--name", default=None, help="results file name (default bm25_pisa, or bm25_pisa_smoke)"
    )
    ap.add_argument(
        "--hide-avx512",
        action="store_true",
        help="run on the AVX2 paths: the process restarts with AVX-512 hidden (CPUID faulting)",
    )
    ap.add_argument("--from-json", help="re-render the Markdown and plot of a results JSON")
    ap.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="merge these results JSONs into --out (blocks of several runs)",
    )
    args = ap.parse_args(argv)
    if args.hide_avx512 and os.environ.get(AVX512_HIDDEN) != "1":
        from _avx2only import hide_avx512_env

        rest = sys.argv[1:] if argv is None else argv
        os.execve(
            sys.executable, [sys.executable, __file__, *rest], {**os.environ, **hide_avx512_env()}
        )
    if args.merge:
        payload = merge(args.merge)
        out = Path(args.out) if args.out else RESULTS_DIR
        name = args.name or "bm25_pisa"
        jp, mp = write_results(name, payload, render(payload), out)
        plot(payload, out / f"{name}.png")
        log(f"merged {len(args.merge)} runs into {jp} and {mp}")
        return
    if args.from_json:
        jp = Path(args.from_json)
        payload = json.loads(jp.read_text())
        jp.with_suffix(".md").write_text(render(payload) + "\n")
        plot(payload, jp.with_suffix(".png"))
        return
    if args.smoke:
        args.sizes, args.repeats, args.max_queries, args.pisa_check_build = "3000", 2, 200, True
    args.thread_list = [int(t) for t in args.threads.split(",") if t]
    unknown = set(args.peers.split(",")) - set(PEERS) - {""}
    if unknown:
        raise SystemExit(f"unknown peers {sorted(unknown)}; use a subset of {','.join(PEERS)}")
    peers, skipped = {}, {}
    for p in [p for p in args.peers.split(",") if p]:
        mod, why = import_peer(p)
        if mod is None:
            skipped[p] = why
            log(f"skipping {p}: {why}")
        else:
            peers[p] = mod
    t0 = time.perf_counter()
    payload: dict = {
        "args": vars(args),
        "machine": machine_info(
            ["bm25s", "pyterrier-pisa", "pyterrier", "tantivy", "pandas", "scipy"]
        ),
        "fastrag_file": fastrag.__file__,
        "peers_skipped": skipped,
        "blocks": [],
    }
    out = Path(args.out) if args.out else RESULTS_DIR
    name = args.name or ("bm25_pisa_smoke" if args.smoke else "bm25_pisa")
    for n_docs in sorted(int(s) for s in args.sizes.split(",") if s):
        for corpus in [c for c in args.corpora.split(",") if c]:
            payload["blocks"].append(bench_block(corpus, n_docs, args, peers))
            gc.collect()
            payload["loadavg_at_end"] = list(os.getloadavg())
            payload["wall_s"] = time.perf_counter() - t0
            payload["goals"] = goals(payload)
            write_results(name, payload, render(payload), out)  # partial results survive
    md = render(payload)
    jp, mp = write_results(name, payload, md, out)
    if not args.smoke:
        plot(payload, out / f"{name}.png")
    print(md)
    log(f"wrote {jp} and {mp} in {payload['wall_s']:.0f} s")
    bad = [
        (r["corpus"], r["n_docs"])
        for r in payload["blocks"]
        if r.get("verify_vs_bm25s") and not r["verify_vs_bm25s"]["identical"]
    ]
    if bad:
        raise SystemExit(f"fastrag's top-10 differs from bm25s's for {bad}")
    broken = [
        (r["corpus"], r["n_docs"])
        for r in payload["blocks"]
        if not r.get("pisa_build_check", {"identical": True})["identical"]
    ]
    if broken:
        raise SystemExit(f"PISA files differ from toks_indexer's for {broken}")


if __name__ == "__main__":
    main()
