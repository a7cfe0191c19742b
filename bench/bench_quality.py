"""Retrieval quality of every similarity on public sets, one table each:

* **mixed**: a documentation folder with the same 90 pages in English and Chinese
  (ant-design's docs, MIT, ``bench/data/mixed_docs``; SVG icons in it too), ingested as the
  CLI does (``chunk`` = sentence:256:32), and 120 known-item questions typed as people type
  them (60 per language). A question hits at rank r when the r-th distinct page among the
  hits is the target page in the question's language. Per language: hit@1, hit@5, MRR@10.
* **fastapi**: FastAPI's tutorial (MIT, ``bench/data/fastapi_docs``), 51 pages in each of
  English, French, German, Spanish, Portuguese and Chinese, with 144 hand-written questions
  (24 topics in each language), scored like **mixed**; ``bm25`` with one fixed stemmer per
  language runs too, as the best single-language analyzers.
* **tldr** (held out: never used to tune anything before issue 42): tldr-pages' command pages
  (CC-BY-4.0) in en zh ja ko fr de es ru (the pages present in all eight) plus th and lo, as
  ``bench/data/tldr/build_corpus.py`` rebuilds them from a git snapshot (``--tldr-git``; the
  corpus lands in ``bench/.work/tldr_corpus``), one node per page; 258 hand-written questions
  (``bench/data/tldr/questions.jsonl``: ``dev`` split used while choosing the default
  analyzer, ``heldout`` split run once at the end; ``--split``). Scored like **mixed**, plus
  an ``all`` row (every question of the split) per similarity.
* **vue** (held out, run once at the end): the Vue docs' guide and API pages in en zh ja ko fr
  ru (486 pages, CC BY 4.0, ``bench/data/vue/build_corpus.py`` from git snapshots:
  ``--vue-mirror``), chunked like **mixed**; 132 hand-written questions (22 intents x 6).
* **react** (held out, run once at the end of issue 42's per-language analyzer): react.dev's
  learn and reference pages in en fr es pt zh ja ko ru (1,314 pages, translated or not, CC BY
  4.0, ``bench/data/react/build_corpus.py``: ``--react-mirror``), chunked like **mixed**; 128
  hand-written questions (16 intents x 8, targets translated in all eight).
* **astro** (held out, run once after issue 42's React run): the Astro docs in en fr es pt de
  zh ja ko ru (2,000+ pages as the checkout holds them, CC BY 4.0,
  ``bench/data/astro/build_corpus.py``: ``--astro-mirror``), chunked like **mixed**; 144
  hand-written questions (16 intents x 9, targets translated in all nine).
* **starlight**, **vitepress** (held out, run once after issue 44's language-aware static
  table): the Starlight docs in en fr es de zh ja ko ru (295 pages, MIT,
  ``bench/data/starlight/site.json``: ``--starlight-mirror``; 120 questions, 15
  intents x 8) and the VitePress docs in en zh pt ru es ko ja (246 pages, MIT,
  ``--vitepress-mirror``; 105 questions, 15 x 7), chunked like **mixed**.
* **biome** (held out, run once after the Starlight and VitePress runs): the Biome docs in en
  fr es pl zh ja (every English page, 29-39 a translation; MIT,
  ``bench/data/biome/site.json``: ``--biome-mirror``), chunked like **mixed**; 144
  hand-written questions (24 intents x 6, targets translated in all six).
* **tauri** (held out, run once after the Biome run): the Tauri docs in English and Chinese
  (143 + 69 pages, MIT, ``bench/data/tauri/site.json``: ``--tauri-mirror``), chunked
  like **mixed**; 68 hand-written questions (34 intents x 2, targets in both languages).
* **vuerouter** (held out, run once after the Tauri run) and **pinia** (held out, run once to
  judge nine analyzer variants): the Vue Router and Pinia docs in English and Chinese (MIT,
  ``bench/data/{vuerouter,pinia}/site.json``: ``--vuerouter-mirror``,
  ``--pinia-mirror``), chunked like **mixed**; 60 and 34 questions (30 and 17 intents x 2).
* **vite** (held out, run once to judge ``bm25_fused``): the Vite docs in en zh ja ko
  es pt de from vitejs/vite and its translation repositories (MIT,
  ``bench/data/vite/build_corpus.py``: ``--vite-mirror``), chunked like **mixed**; 140
  questions (20 intents x 7).
* **hexo** (held out, run once: it kept ``bm25`` the default over ``bm25_fused``): the Hexo docs
  and API reference in en zh zh-tw ja ko ru pt th es (MIT, ``bench/data/hexo/site.json``:
  ``--hexo-mirror``), chunked like **mixed**; 144 questions (16 intents x 9).
* **tldr_tw** (held out, kept unseen for the Traditional Chinese segmentation): every
  tldr-pages ``pages.zh_TW`` page of ``common/`` and ``linux/`` with its Simplified Chinese
  and English pages (``bench/data/tldr_tw/build_corpus.py``, ``--tldr-tw-git``), one node per
  page; 111 questions (37 commands x zh-tw, zh, en).
* **react_tw** (held out, run once: it kept ``han_traditional="bigrams"`` the default):
  react.dev's learn and reference pages from the zh-hant, zh-hans and English checkouts (CC BY 4.0,
  ``bench/data/react_tw/build_corpus.py``: ``--react-tw-mirror``), chunked like **mixed**; 72
  questions (24 intents x zh-tw, zh, en).
* **cmrc**: CMRC 2018 dev (848 paragraphs, 3,219 questions), one node per paragraph:
  R@1/3/5 (the paragraph that holds the answer), plus the fusion settings ``hybrid`` was
  tuned with (on this set only).
* **scifact**: BEIR SciFact test (5,183 abstracts, 300 queries; ``--scifact DIR`` holding
  BEIR's ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv`` or ``qrels_test.tsv``, or
  the part of SciFact reachable here, ``bench/data/scifact/build_subset.py``): nDCG@10, with
  bm25s (English stopwords + Snowball stemmer) as the reference.

Every known-item set also gets, per language, the default ``bm25`` minus the best single
analyzer in MRR@10 with a paired bootstrap 95% interval over its questions (how far a
per-language gap could be the sample's luck).

Dense paths use the offline multilingual-e5-small (``[embed]`` extra); vectors are cached in
stores under ``bench/.work/quality`` so re-runs embed only the queries. BM25 speed on CMRC
(``bm25`` vs ``bm25_chinese``, batch of all questions, median of repeats) is measured too.

    python bench/bench_quality.py                       # mixed + cmrc
    python bench/bench_quality.py --scifact /data/scifact --sets mixed,cmrc,scifact
"""

from __future__ import annotations

import argparse
import json
import math
import runpy
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import BENCH_DIR, RESULTS_DIR, WORK_DIR, machine_info

import fastrag as fr
from fastrag.datasets import load_cmrc2018_dev
from fastrag.eval.loaders import squad_questions

# held-out sets whose corpus is rebuilt from git snapshots (``bench/data/<set>/site.json`` or
# ``build_corpus.py``): name -> (title, what ``--<name>-mirror`` holds)
BUILT_SETS = {
    "tldr": ("tldr-pages in ten languages", "a tldr-pages/tldr git dir"),
    "vue": ("Vue docs in six languages", "a folder of vuejs/docs + translation git dirs"),
    "react": ("React docs in eight languages", "a folder of reactjs/react.dev + translations"),
    "astro": ("Astro docs in nine languages", "a folder holding the withastro/docs git dir"),
    "starlight": ("Starlight docs in eight languages", "a folder holding withastro/starlight"),
    "vitepress": ("VitePress docs in seven languages", "a folder holding vuejs/vitepress"),
    "biome": ("Biome docs in six languages", "a folder holding biomejs/website"),
    "tauri": ("Tauri docs in English and Chinese", "a folder holding tauri-apps/tauri-docs"),
    "vuerouter": ("Vue Router docs in English and Chinese", "a folder holding vuejs/router"),
    "pinia": ("Pinia docs in English and Chinese", "a folder holding vuejs/pinia"),
    "vite": ("Vite docs in seven languages", "a folder of vitejs/vite + vitejs/docs-* dirs"),
    "hexo": ("Hexo docs in nine languages", "a folder holding hexojs/site"),
    "tldr_tw": ("tldr-pages in Traditional Chinese", "a tldr-pages/tldr git dir"),
    "react_tw": ("React docs in Traditional Chinese", "a folder of reactjs/react.dev + zh dirs"),
}
# built sets whose source is a git dir (``--<name>-git``), not a folder of mirrors
GIT_SETS = {"tldr": "--tldr-git", "tldr_tw": "--tldr-tw-git"}
KNOWN_ITEM_SETS = {
    "mixed": BENCH_DIR / "data" / "mixed_docs",
    "fastapi": BENCH_DIR / "data" / "fastapi_docs",
    **{name: BENCH_DIR / "data" / name for name in BUILT_SETS},
}
BUILT_CORPORA = {name: WORK_DIR / f"{name}_corpus" for name in BUILT_SETS}
# the fastapi set also runs bm25 with one fixed stemmer: the best single-language analyzers
FIXED_STEMMERS = [
    f"bm25:stemmer={lang}" for lang in ("english", "french", "german", "spanish", "portuguese")
]
BM25_SIMS = ["bm25", "bm25_english", "bm25_chinese", "bm25_cjk"]
DENSE_SIMS = ["cosine", "hybrid"]


EMBEDDERS = ("e5", "static-e5-small", "static-minilm")
EMBEDDER = "e5"  # --embedder


def _embedder():
    """The dense paths' embedder (``--embedder``): the default e5-small, or a static table
    distilled from e5-small or MiniLM (built into the cache on first use)."""
    if EMBEDDER == "e5":
        from fastrag.embeddings.local import default_embedding

        return default_embedding()
    from fastrag.embeddings.named import embedder_by_name

    return embedder_by_name(EMBEDDER)


def _work(name: str) -> Path:
    """The store of set ``name`` for the current embedder (vectors differ per embedder)."""
    base = WORK_DIR / "quality"
    return base / name if EMBEDDER == "e5" else base / EMBEDDER / name


def _page_ranks(hits, page_of) -> list[str]:
    """Distinct pages of ``hits`` in rank order."""
    seen: dict[str, None] = {}
    for h in hits:
        seen.setdefault(page_of(h), None)
    return list(seen)


# -- mixed-language known items ---------------------------------------------------------------
def _similarity(spec: str) -> tuple[str, dict]:
    """``"bm25"``, ``"bm25:stemmer=french+stopwords=none"`` or ``"hybrid:weights=0.8/0.2"``
    -> (similarity, options)."""
    sim, _, opts = spec.partition(":")
    pairs = dict(kv.split("=", 1) for kv in opts.split("+") if kv)
    words = {"none": None, "true": True, "false": False}
    out = {k: words.get(v.lower(), v) for k, v in pairs.items()}
    if "weights" in out:  # hybrid:weights=0.8/0.2
        out["weights"] = [float(w) for w in out["weights"].split("/")]
    if "depth" in out:  # bm25_fused:depth=20
        out["depth"] = int(out["depth"])
    return sim, out


def _retriever_options(spec: str) -> tuple[str, dict]:
    """``_similarity``, analyzer options (``han_search``, ``compounds``, ...) as an analyzer."""
    sim, opts = _similarity(spec)
    if set(opts) - {"stemmer", "weights", "coverage", "depth", "fusion"}:
        opts = {"analyzer": fr.get_analyzer(sim, **opts)}
    return sim, opts


def run_known_items(name: str, sims: list[str], smoke: bool, split: str = "all") -> dict:
    """Known-item search over a multi-language docs folder: ``corpus/<lang>/<page>.md``."""
    root = KNOWN_ITEM_SETS[name]
    corpus = BUILT_CORPORA.get(name, root / "corpus")
    questions = [json.loads(line) for line in (root / "questions.jsonl").open()]
    if split != "all":
        questions = [q for q in questions if q.get("split", split) == split]
    if smoke:
        per_lang: dict[str, list] = defaultdict(list)
        for q in questions:
            per_lang[q["lang"]].append(q)
        questions = [q for qs in per_lang.values() for q in qs[:5]]
    work = _work(name)
    dense = any(_similarity(s)[0] in DENSE_SIMS for s in sims)
    doc = fr.Document(
        str(corpus), store=str(work), embed=_embedder() if dense else None, show_progress=False
    )
    group = "root" if name in GIT_SETS else "chunk"  # tldr pages are short: one node each
    if group not in doc.group_names:
        doc.create_node_group(
            "chunk", transform=fr.SentenceSplitter(chunk_size=256, chunk_overlap=32)
        )
    n_chunks = len(doc.group(group))

    def page_of(hit) -> str:
        return doc.source_path(hit.metadata["file_path"]).removesuffix(".md")

    out: dict = {
        "chunks": n_chunks,
        "questions": len(questions),
        "split": split,
        "rows": [],
        "langs": [q["lang"] for q in questions],
        "rr": {},  # similarity -> reciprocal rank@10 of each question (0 past 10)
    }
    for spec in sims:
        sim, opts = _retriever_options(spec)
        ret = fr.Retriever(doc, group, sim, topk=50, **opts)
        t0 = time.perf_counter()
        results = ret.batch([q["question"] for q in questions])
        took = time.perf_counter() - t0
        per = defaultdict(lambda: {"n": 0, "h1": 0, "h5": 0, "rr": 0.0})
        rrs = out["rr"][spec] = []
        for q, hits in zip(questions, results, strict=True):
            pages = _page_ranks(hits, page_of)
            target = f"{q['lang']}/{q['target']}"
            rank = pages.index(target) + 1 if target in pages else None
            rrs.append(1.0 / rank if rank and rank <= 10 else 0.0)
            rr = rrs[-1]
            for key in (q["lang"], "all"):
                s = per[key]
                s["n"] += 1
                s["h1"] += rank == 1
                s["h5"] += rank is not None and rank <= 5
                s["rr"] += rr
        for lang, s in sorted(per.items()):
            out["rows"].append(
                {
                    "similarity": spec,
                    "lang": lang,
                    "n": s["n"],
                    "hit@1": s["h1"] / s["n"],
                    "hit@5": s["h5"] / s["n"],
                    "mrr@10": s["rr"] / s["n"],
                    "batch_s": took,
                }
            )
        print(
            f"{name} {spec}: "
            + ", ".join(
                f"{r['lang']} hit@5 {r['hit@5']:.3f}"
                for r in out["rows"]
                if r["similarity"] == spec
            ),
            flush=True,
        )
    return out


# -- CMRC 2018 dev ----------------------------------------------------------------------------
def _recall(results, gold_rows, ks=(1, 3, 5)) -> dict:
    out = {}
    for k in ks:
        out[f"R@{k}"] = float(
            np.mean([g in r[:k] for r, g in zip(results, gold_rows, strict=True)])
        )
    return out


def _load_cmrc(path: Path | None) -> tuple[dict, str]:
    """CMRC 2018 as SQuAD JSON: the bundled dev set, or a file in SQuAD or CMRC's own
    format (``context_text`` / ``qas[].query_text``, as the trial set ships)."""
    if path is None:
        return load_cmrc2018_dev(), "dev"
    raw = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(raw, list):
        raw = {
            "data": [
                {
                    "title": a.get("title", ""),
                    "paragraphs": [
                        {
                            "context": a["context_text"],
                            "qas": [
                                {
                                    "id": q["query_id"],
                                    "question": q["query_text"],
                                    "answers": [{"text": t} for t in q["answers"]],
                                }
                                for q in a["qas"]
                            ],
                        }
                    ],
                }
                for a in raw
            ]
        }
    return raw, path.stem


def run_cmrc(sims: list[str], smoke: bool, repeats: int, path: Path | None = None) -> dict:
    squad, split = _load_cmrc(path)
    questions, gold, contexts = squad_questions(squad)
    if smoke:
        keep = [i for i, g in enumerate(gold) if g < 60]
        questions, gold, contexts = (
            [questions[i] for i in keep],
            [gold[i] for i in keep],
            contexts[:60],
        )
    work = _work(("cmrc_smoke" if smoke else "cmrc") + f"_{split}")
    doc = fr.Document.from_texts(
        contexts,
        metadatas=[{"p": i} for i in range(len(contexts))],
        store=str(work),
        embed=_embedder(),
    )
    out: dict = {
        "split": split,
        "paragraphs": len(contexts),
        "questions": len(questions),
        "rows": [],
        "fusion": [],
        "speed": [],
    }

    def run(sim, **kw):
        ret = fr.Retriever(doc, "root", sim, topk=5, **kw)
        t = ret.batch_arrow(questions, columns=["metadata"])
        rows = [[] for _ in questions]
        for qi, meta in zip(t["query_idx"].to_pylist(), t["metadata"].to_pylist(), strict=True):
            rows[qi].append(json.loads(meta)["p"])
        return ret, _recall(rows, gold)

    for sim in sims:
        name, opts = _retriever_options(sim)
        _, rec = run(name, **opts)
        out["rows"].append({"similarity": sim, **rec})
        print(f"cmrc {sim}: {rec}", flush=True)
    if "hybrid" in sims and not smoke and split == "dev":
        for fusion, weights, depth in [
            ("rrf", [0.5, 0.5], 50),
            ("rrf", [0.6, 0.4], 50),
            ("relative", [0.5, 0.5], 50),
            ("relative", [0.7, 0.3], 50),
            ("relative", [0.6, 0.4], 20),
            ("relative", [0.6, 0.4], 100),
            ("relative", [0.8, 0.2], 50),
            ("relative", [0.85, 0.15], 50),
            ("relative", [0.9, 0.1], 50),
        ]:
            _, rec = run("hybrid", fusion=fusion, weights=weights, depth=depth)
            out["fusion"].append({"fusion": fusion, "weights": weights, "depth": depth, **rec})
            print(f"cmrc hybrid {fusion} {weights} {depth}: {rec}", flush=True)
    # BM25 speed: the two analyzers interleaved round by round (load drifts alike for both)
    rets = {sim: fr.Retriever(doc, "root", sim, topk=5) for sim in ("bm25", "bm25_chinese")}
    times: dict[str, list[float]] = {sim: [] for sim in rets}
    for ret in rets.values():
        ret.batch_arrow(questions)
    for _ in range(repeats):
        for sim, ret in rets.items():
            t0 = time.perf_counter()
            ret.batch_arrow(questions)
            times[sim].append(time.perf_counter() - t0)
    for sim, ts in times.items():
        med = float(np.median(ts))
        out["speed"].append(
            {"similarity": sim, "batch_ms": 1000 * med, "qps": len(questions) / med}
        )
    return out


# -- BEIR SciFact -----------------------------------------------------------------------------
def _ndcg10(ranked: list[str], rel: dict[str, int]) -> float:
    dcg = sum(rel.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted(rel.values(), reverse=True)[:10]
    return dcg / sum(g / math.log2(i + 2) for i, g in enumerate(ideal))


def run_scifact(root: Path, sims: list[str]) -> dict:
    corpus = [json.loads(line) for line in (root / "corpus.jsonl").open()]
    queries = [json.loads(line) for line in (root / "queries.jsonl").open()]
    qrels_path = root / "qrels" / "test.tsv"
    if not qrels_path.exists():
        qrels_path = root / "qrels_test.tsv"
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for i, line in enumerate(qrels_path.open()):
        parts = line.split()
        if i == 0 and not parts[-1].isdigit():
            continue
        qrels[parts[0]][parts[-2]] = int(parts[-1])
    queries = [q for q in queries if q["_id"] in qrels]
    texts = [(d.get("title", "") + " " + d["text"]).strip() for d in corpus]
    ids = [d["_id"] for d in corpus]
    qtexts = [q["text"] for q in queries]
    out: dict = {"docs": len(corpus), "queries": len(queries), "folder": str(root), "rows": []}

    def score(ranked_lists) -> float:
        return float(
            np.mean(
                [_ndcg10(r, qrels[q["_id"]]) for q, r in zip(queries, ranked_lists, strict=True)]
            )
        )

    try:
        import bm25s
        import Stemmer

        stem = Stemmer.Stemmer("english")
        model = bm25s.BM25()
        model.index(
            bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False),
            show_progress=False,
        )
        res, _ = model.retrieve(
            bm25s.tokenize(qtexts, stopwords="en", stemmer=stem, show_progress=False),
            k=10,
            show_progress=False,
        )
        out["rows"].append(
            {
                "similarity": "bm25s (en stopwords + stemmer)",
                "nDCG@10": score([[ids[j] for j in r] for r in res]),
            }
        )
    except ImportError:
        pass
    doc = fr.Document.from_texts(
        texts,
        metadatas=[{"id": i} for i in ids],
        store=str(_work(f"scifact_{root.resolve().name}")),
        embed=_embedder(),
    )
    for sim in sims:
        name, opts = _retriever_options(sim)
        res = fr.Retriever(doc, "root", name, topk=10, **opts).batch(qtexts)
        out["rows"].append(
            {
                "similarity": sim,
                "nDCG@10": score([[h.metadata["id"] for h in hits] for hits in res]),
            }
        )
        print(f"scifact {sim}: {out['rows'][-1]['nDCG@10']:.4f}", flush=True)
    return out


# -- report -----------------------------------------------------------------------------------
def mrr_grid(rows: list[dict]) -> list[str]:
    """MRR@10 as a similarity x language grid, the best of each column in bold."""
    langs = sorted({r["lang"] for r in rows} - {"all"}) + ["all"]
    sims = list(dict.fromkeys(r["similarity"] for r in rows))
    cell = {(r["similarity"], r["lang"]): r["mrr@10"] for r in rows}
    best = {la: max(cell.get((s, la), 0.0) for s in sims) for la in langs}
    out = ["MRR@10:", "", "| similarity | " + " | ".join(langs) + " |"]
    out.append("|---" * (len(langs) + 1) + "|")
    for s in sims:
        vals = []
        for la in langs:
            v = cell.get((s, la))
            text = "" if v is None else f"{v:.3f}"
            vals.append(f"**{text}**" if v is not None and v == best[la] else text)
        out.append(f"| {s} | " + " | ".join(vals) + " |")
    return out


def bootstrap_gap(
    default: list[float], best: list[float], resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of ``default - best`` over paired questions and its percentile 95% interval
    from ``resamples`` bootstrap resamples of the questions (fixed seed: reproducible)."""
    d = np.asarray(default, np.float64) - np.asarray(best, np.float64)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), (resamples, len(d)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(d.mean()), float(lo), float(hi)


def gap_table(m: dict, subject: str = "bm25") -> list[str]:
    """Per language: ``subject`` (the default ``bm25``, or ``bm25_fused``) minus the best
    other single BM25 analyzer (by MRR@10 there), with its paired bootstrap 95% interval;
    [] without per-question ranks or rivals."""
    rr, langs = m.get("rr", {}), m.get("langs", [])
    rivals = [s for s in rr if s != subject and s in BM25_SIMS]
    if subject not in rr or not rivals:
        return []
    what = "Default `bm25`" if subject == "bm25" else f"`{subject}`"
    out = [
        f"{what} minus the best single analyzer in each language (MRR@10; paired "
        "bootstrap 95% interval over the questions, 2,000 resamples):",
        "",
        f"| lang | questions | best other | {subject} - best | 95% interval |",
        "|---|---|---|---|---|",
    ]
    for lang in sorted(set(langs)) + ["all"]:
        idx = [i for i, la in enumerate(langs) if lang in ("all", la)]

        def mrr(s: str, idx: list[int] = idx) -> float:
            return sum(rr[s][i] for i in idx) / len(idx)

        best = max(rivals, key=mrr)
        gap, lo, hi = bootstrap_gap([rr[subject][i] for i in idx], [rr[best][i] for i in idx])
        out.append(f"| {lang} | {len(idx)} | {best} | {gap:+.3f} | {lo:+.3f} to {hi:+.3f} |")
    return [*out, ""]


def pool_known_items(runs: list[dict]) -> dict | None:
    """The per-question ranks of several known-item runs as one run (the similarities all
    of them ran), for a per-language gap table over more questions; None for fewer than
    two runs with ranks."""
    runs = [m for m in runs if m.get("rr")]
    if len(runs) < 2:
        return None
    sims = [s for s in runs[0]["rr"] if all(s in m["rr"] for m in runs)]
    return {
        "langs": [la for m in runs for la in m["langs"]],
        "rr": {s: [r for m in runs for r in m["rr"][s]] for s in sims},
    }


def merge_results(paths: list[Path]) -> tuple[dict, dict]:
    """The sets of several saved result files as one results dict, and the first file's
    machine with each file's commit; a set in two files is an error (which run's ranks
    would count?)."""
    results: dict = {}
    info: dict = {}
    commits: list[str] = []
    for path in paths:
        data = json.loads(path.read_text(encoding="utf-8"))
        info = info or dict(data.get("machine", {}))
        commits.append(f"{path.stem} at {data.get('machine', {}).get('commit')}")
        for name, m in data.items():
            if name == "machine":
                continue
            if name in results:
                raise ValueError(f"set {name!r} is in more than one of {[str(p) for p in paths]}")
            results[name] = m
    return results, {**info, "commit": "; ".join(commits)}


def report(results: dict, info: dict) -> str:
    lines = [
        "# Retrieval quality by similarity",
        "",
        f"CPU: {info.get('cpu')}; commit {info.get('commit')}; {time.strftime('%Y-%m-%d')}; "
        f"cosine and hybrid embed with {EMBEDDER}",
        "",
    ]
    titles = {
        "mixed": "Mixed-language docs (ant-design en + zh, known items)",
        "fastapi": "FastAPI tutorial in six languages (en fr de es pt zh, known items)",
        **{name: f"{title} (held out; known items)" for name, (title, _) in BUILT_SETS.items()},
    }
    for name, title in titles.items():
        if name not in results:
            continue
        m = results[name]
        lines += [
            f"## {title}",
            "",
            f"{m['chunks']} nodes, {m['questions']} questions (split {m.get('split', 'all')});"
            " page-level ranks.",
            "",
            "| similarity | lang | hit@1 | hit@5 | MRR@10 |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['similarity']} | {r['lang']} | {r['hit@1']:.3f} | {r['hit@5']:.3f} "
            f"| {r['mrr@10']:.3f} |"
            for r in m["rows"]
        ]
        lines += ["", *mrr_grid(m["rows"]), ""]
        lines += gap_table(m) + gap_table(m, "bm25_fused")
    pooled = pool_known_items([results[n] for n in titles if n in results])
    if pooled:
        names = ", ".join(n for n in titles if n in results)
        lines += [
            f"## Pooled: every question of {names}",
            "",
            *gap_table(pooled),
            *gap_table(pooled, "bm25_fused"),
        ]
    if "cmrc" in results:
        c = results["cmrc"]
        lines += [
            f"## CMRC 2018 {c['split']}",
            "",
            f"{c['paragraphs']} paragraphs, {c['questions']} questions.",
            "",
            "| similarity | R@1 | R@3 | R@5 |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r['similarity']} | {r['R@1']:.4f} | {r['R@3']:.4f} | {r['R@5']:.4f} |"
            for r in c["rows"]
        ]
        if c["fusion"]:
            lines += [
                "",
                "Hybrid fusion settings (tuned here):",
                "",
                "| fusion | weights | depth | R@1 | R@5 |",
                "|---|---|---|---|---|",
            ]
            lines += [
                f"| {r['fusion']} | {r['weights']} | {r['depth']} | {r['R@1']:.4f} "
                f"| {r['R@5']:.4f} |"
                for r in c["fusion"]
            ]
        lines += [
            "",
            "BM25 speed (all questions as one batch, median):",
            "",
            "| similarity | batch ms | queries/s |",
            "|---|---|---|",
        ]
        lines += [
            f"| {r['similarity']} | {r['batch_ms']:.1f} | {r['qps']:.0f} |" for r in c["speed"]
        ]
        lines.append("")
    if "scifact" in results:
        s = results["scifact"]
        lines += [
            "## SciFact (BEIR format)",
            "",
            f"{s['docs']} docs, {s['queries']} queries, from `{s.get('folder', '?')}`.",
            "",
            "| similarity | nDCG@10 |",
            "|---|---|",
        ]
        lines += [f"| {r['similarity']} | {r['nDCG@10']:.4f} |" for r in s["rows"]]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sets",
        default="mixed,cmrc",
        help="mixed, fastapi, tldr, vue, react, astro, starlight, vitepress, biome, tauri, "
        "vuerouter, pinia, vite, hexo, tldr_tw, react_tw, cmrc, scifact (comma list)",
    )
    ap.add_argument("--similarities", default=",".join(BM25_SIMS + DENSE_SIMS))
    ap.add_argument("--scifact", type=Path, help="a BEIR SciFact folder")
    ap.add_argument(
        "--cmrc",
        type=Path,
        help="a CMRC 2018 file (default: the bundled dev set; "
        "e.g. cmrc2018_trial.json for a held-out check)",
    )
    for name, (_, holds) in BUILT_SETS.items():
        flag = GIT_SETS.get(name, f"--{name.replace('_', '-')}-mirror")
        ap.add_argument(flag, dest=f"{name}_source", help=f"{holds}: (re)build that corpus first")
    ap.add_argument(
        "--merge",
        help="result files (comma list of names in bench/results, or paths): write one "
        "report of their sets, pooled, without running anything",
    )
    ap.add_argument("--split", default="dev", help="tldr question split: dev, heldout or all")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--smoke", action="store_true", help="a few questions, no fusion sweep")
    ap.add_argument("--out", default="quality")
    ap.add_argument(
        "--embedder", choices=EMBEDDERS, default="e5", help="the embedder of cosine and hybrid"
    )
    args = ap.parse_args()
    global EMBEDDER
    EMBEDDER = args.embedder
    if args.merge:
        paths = [Path(f) for f in args.merge.split(",") if f.strip()]
        paths = [p if p.exists() else RESULTS_DIR / p.with_suffix(".json").name for p in paths]
        try:
            results, info = merge_results(paths)
        except (OSError, ValueError) as exc:
            ap.error(str(exc))
        write_results(args.out, results, info)
        return 0
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    sims = [s.strip() for s in args.similarities.split(",") if s.strip()]
    unknown = set(sets) - {"mixed", "cmrc", "scifact", *KNOWN_ITEM_SETS}
    if unknown:
        ap.error(f"unknown sets {sorted(unknown)}")
    if "scifact" in sets and not args.scifact:
        ap.error("--sets scifact needs --scifact DIR (a BEIR SciFact folder)")
    results: dict = {}
    if "mixed" in sets:
        results["mixed"] = run_known_items("mixed", sims, args.smoke)
    if "fastapi" in sets:
        results["fastapi"] = run_known_items("fastapi", sims + FIXED_STEMMERS, args.smoke)
    for name in BUILT_SETS:
        source = getattr(args, f"{name}_source")
        if name not in sets:
            continue
        if source:
            folder = KNOWN_ITEM_SETS[name]
            if (folder / "site.json").exists():
                git_corpus = runpy.run_path(str(BENCH_DIR / "data" / "git_corpus.py"))
                git_corpus["build_site"](folder, Path(source), BUILT_CORPORA[name])
            else:
                build = runpy.run_path(str(folder / "build_corpus.py"))["build"]
                build(source if name in GIT_SETS else Path(source), BUILT_CORPORA[name])
        if not BUILT_CORPORA[name].is_dir():
            flag = GIT_SETS.get(name, f"--{name.replace('_', '-')}-mirror")
            ap.error(f"no {name} corpus at {BUILT_CORPORA[name]}; pass {flag} DIR to build it")
        results[name] = run_known_items(name, sims, args.smoke, args.split)
    if "cmrc" in sets:
        results["cmrc"] = run_cmrc(sims, args.smoke, args.repeats, args.cmrc)
    if "scifact" in sets:
        results["scifact"] = run_scifact(args.scifact, [s for s in sims if s != "bm25_chinese"])
    write_results(
        args.out + ("_smoke" if args.smoke else ""), results, machine_info(["numpy", "numba"])
    )
    return 0


def write_results(name: str, results: dict, info: dict) -> None:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps({"machine": info, **results}, indent=1))
    text = report(results, info)
    (RESULTS_DIR / f"{name}.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    raise SystemExit(main())
