"""Document length without the Han pairs and sub-words (Lucene's ``discountOverlaps``), tried
on the known-item sets with a standalone BM25 (Lucene idf, k1 1.5, b 0.75) over the chunks
``bench_quality.py`` stored; ``base`` reproduces ``bm25``'s MRR@10 exactly. Not kept
(``docs/guide/languages.md``).

    python bench/ab_doc_length.py base|words [sets]   # run bench_quality.py --sets ... first
"""

import json
import sys

import numpy as np
from _harness import RESULTS_DIR
from bench_quality import BUILT_CORPORA, KNOWN_ITEM_SETS, _work

import fastrag as fr
from fastrag.analysis.mixed import MixedAnalyzer

MODE = sys.argv[1]
if MODE not in ("base", "words"):
    raise SystemExit("usage: ab_doc_length.py base|words [sets]")
SETS = (
    sys.argv[2].split(",")
    if len(sys.argv) > 2
    else [
        "mixed",
        "fastapi",
        "tldr",
        "vue",
        "react",
        "astro",
        "starlight",
        "vitepress",
        "biome",
        "tauri",
        "vuerouter",
    ]
)
A = MixedAnalyzer()
B = MixedAnalyzer(han_bigrams=False, han_search=False)
k1, b = 1.5, 0.75
out = {}
for name in SETS:
    root = KNOWN_ITEM_SETS[name]
    corpus = BUILT_CORPORA.get(name, root / "corpus")
    qs = [json.loads(line) for line in (root / "questions.jsonl").open()]
    doc = fr.Document(str(corpus), store=str(_work(name)), show_progress=False)
    group = "root" if name == "tldr" else "chunk"
    nodes = list(doc.group(group))
    texts = [n.text for n in nodes]
    pages = [doc.source_path(n.metadata["file_path"]).removesuffix(".md") for n in nodes]
    vocab, ids, offs = A.encode_chunk(texts)
    n = len(texts)
    V = len(vocab)
    rows = np.repeat(np.arange(n), np.diff(offs))
    pair, tf = np.unique(ids.astype(np.int64) * n + rows, return_counts=True)
    col, row = pair // n, pair % n  # sorted by term, then row
    indptr = np.concatenate([[0], np.cumsum(np.bincount(col, minlength=V))])
    dl = np.diff(offs).astype(float)
    if MODE != "base":
        dl = np.diff(B.encode_chunk(texts)[2]).astype(float)
    avg = dl.mean()
    df = np.diff(indptr)
    idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
    w = tf / (tf + k1 * (1 - b + b * dl[row] / avg)) * idf[col]
    index = {t: i for i, t in enumerate(vocab)}
    qv, qids, qoffs = A.encode_query_chunk([q["question"] for q in qs])
    rr = []
    for i, q in enumerate(qs):
        toks = [qv[j] for j in qids[qoffs[i] : qoffs[i + 1]]]
        cols = [index[t] for t in toks if t in index]
        s = np.zeros(n)
        for c in cols:
            s[row[indptr[c] : indptr[c + 1]]] += w[indptr[c] : indptr[c + 1]]
        top = np.argsort(-s, kind="stable")[:50]
        seen = []
        for d in top:
            if s[d] <= 0:
                break
            if pages[d] not in seen:
                seen.append(pages[d])
        t = f"{q['lang']}/{q['target']}"
        r = seen.index(t) + 1 if t in seen else None
        rr.append(1 / r if r and r <= 10 else 0.0)
    out[name] = {"langs": [q["lang"] for q in qs], "rr": {"bm25": rr}}
    print(name, round(sum(rr) / len(rr), 3), flush=True)
(RESULTS_DIR / f"quality_variants_doc_length_{MODE}.json").write_text(json.dumps(out))
