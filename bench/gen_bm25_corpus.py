"""Seeded BM25 benchmark corpora: tiled CMRC 2018 (Chinese), tiled English prose, and Zipf.

Tiled corpora (``make_corpus``; deterministic for a given ``seed`` and ``n_docs``):

1. Sentences. ``jieba`` / ``cjk``: every CMRC dev context split into sentences (ending at
   。！？!? ; the mark stays with its sentence). ``english``: English prose in paragraphs, split
   into sentences after . ! or ? followed by white space: the English LlamaIndex "Response
   Synthesizer" page of ``shared/seeds/`` (markdown; fenced code dropped) and the docstrings of
   the Python standard library this interpreter ships (modules, classes and functions, files in
   path order; tests, idlelib and site-packages skipped), about 18,000 unique sentences. Only
   unique sentences are kept, in order of appearance.
2. Tokenize each unique sentence once with an analyzer: ``jieba`` (``fastrag``'s
   ``bm25_chinese`` when available), ``cjk`` (``bm25_cjk``: CJK unigrams + bigrams) or
   ``english`` (``bm25``: lowercase, stop words removed, Snowball English stemmer). Token ids
   follow first appearance. The analyzers split at sentence ends (and at white space), so a
   document made of whole sentences tokenizes exactly as the concatenation of its sentences'
   tokens.
3. Documents: a stream of sentence ids made by concatenating independent random permutations
   of all sentences (tiling), cut into documents of ``SENTENCES_PER_DOC`` (uniform) sentences.
   The document layout depends only on the seed, so both CMRC analyzers see the same texts.
   ``scifact``: the sentences of SciFact abstracts (``SCIFACT_DIR``, split as the English
   text; ``english``'s analyzer), with SciFact's claims as the queries.
4. Queries. CMRC: the dev questions, tokenized by the same analyzer. English: held-out
   sentences (a seeded ``ENGLISH_HOLDOUT`` share of the unique sentences, never in a
   document), the first ``ENGLISH_QUERIES`` of them. Tokens outside the corpus vocabulary are
   dropped, and queries left empty are dropped.

Tokenized sentences are cached under ``bench/.work/`` (gitignored); documents are rebuilt from
them in about a second per million documents.

Zipf corpus (``make_zipf_corpus``): no text. Token ids drawn independently from a Zipf law
(exponent ``ZIPF_S``) over ``ZIPF_VOCAB`` ranks, a seeded permutation mapping ranks to ids;
document lengths uniform in ``ZIPF_DOC_LEN``; ``ZIPF_QUERIES`` queries of ``ZIPF_QUERY_LEN``
(uniform) tokens drawn from the same law with their own seed (the same queries at every size).

``make_named_corpus(name, n_docs, seed)`` serves the names in ``CORPORA``.

Usage: ``python bench/gen_bm25_corpus.py --n-docs 200000 --corpus cmrc_jieba`` prints stats.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import WORK_DIR

CMRC_PATH = Path(__file__).resolve().parents[2] / "shared" / "data" / "cmrc2018_dev.json"
SENTENCES_PER_DOC = (5, 15)  # inclusive range; mean 10 sentences ~ 180 jieba tokens
CACHE_VERSION = 1
SEEDS_DIR = Path(__file__).resolve().parents[2] / "shared" / "seeds"
ENGLISH_SEEDS = ("002_66d54c4f055a7260.txt",)  # LlamaIndex "Response Synthesizer", English
ENGLISH_HOLDOUT = 0.1  # share of the unique English sentences held out as queries
ENGLISH_QUERIES = 2000
# SciFact (BEIR) abstracts and claims: the 2,101 abstracts of 9-25 sentences and 237 claims
# that github.com/nice-hku-coder/coder_data (commit a8f2ddf) keeps whole
# (scifact_antonym/corpus_candidate.jsonl, scifact/claim_contradict_topic_relevant.jsonl),
# copied into this folder; the full 5,183-abstract corpus is not reachable from here.
SCIFACT_DIR = Path(os.environ.get("FASTRAG_SCIFACT_DIR", str(WORK_DIR / "scifact")))
SCIFACT_FILES = ("corpus_candidate.jsonl", "claim_contradict_topic_relevant.jsonl")
ZIPF_VOCAB = 1_000_000
ZIPF_S = 1.1
ZIPF_DOC_LEN = (50, 250)  # inclusive range of tokens per document (mean 150)
ZIPF_QUERY_LEN = (2, 10)  # inclusive range of tokens per query (mean 6, as CMRC with jieba)
ZIPF_QUERIES = 2000
_SENT_RE = re.compile(r"[^。！？!?]*[。！？!?]+|[^。！？!?]+")
_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN = re.compile(rf"[{_CJK}]+|[^\W{_CJK}_]+")


def load_cmrc(path: Path | None = None) -> tuple[list[str], list[str]]:
    """Unique contexts (in order) and all questions of the CMRC 2018 dev set."""
    p = Path(path) if path is not None else CMRC_PATH
    if not p.exists():
        try:
            from fastrag.datasets import load_cmrc2018_dev

            raw = load_cmrc2018_dev()
        except Exception as exc:
            raise SystemExit(f"CMRC dev set not found at {p} and not bundled: {exc}") from exc
    else:
        raw = json.loads(p.read_text(encoding="utf-8"))
    contexts, seen, questions = [], set(), []
    for art in raw["data"]:
        for para in art["paragraphs"]:
            if para["context"] not in seen:
                seen.add(para["context"])
                contexts.append(para["context"])
            questions.extend(q["question"] for q in para["qas"])
    return contexts, questions


def english_sentences() -> list[str]:
    """Unique English sentences, in order: the English seed documents, then the docstrings of
    the standard library of this interpreter (see the module docstring)."""
    paragraphs: list[str] = []
    for name in ENGLISH_SEEDS:
        p = SEEDS_DIR / name
        if p.exists():
            text = re.sub(r"```.*?```", "\n\n", p.read_text(encoding="utf-8"), flags=re.S)
            paragraphs.extend(re.split(r"\n\s*\n", text))
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {
        "idlelib",
        "site-packages",
        "dist-packages",
        "lib2to3",
        "turtledemo",
        "ensurepip",
        "__pycache__",
    }
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d for d in dirnames if d not in skip and not d.startswith(("test", "config-"))
        )
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            try:
                tree = ast.parse(Path(dirpath, fn).read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(
                    node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
                ):
                    doc = ast.get_docstring(node)
                    if doc:
                        paragraphs.extend(re.split(r"\n\s*\n", doc))
    out, seen = [], set()
    for para in paragraphs:
        for sent in re.split(r"(?<=[.!?])\s+", " ".join(para.split())):
            if len(sent.split()) >= 3 and sent not in seen:
                seen.add(sent)
                out.append(sent)
    if not out:
        raise SystemExit(f"no English text found under {SEEDS_DIR} or {root}")
    return out


def scifact_text() -> tuple[list[str], list[str]]:
    """Unique sentences of the SciFact abstracts in ``SCIFACT_DIR`` (split as the English
    text) and its claims, which are the queries."""
    paths = [SCIFACT_DIR / f for f in SCIFACT_FILES]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(
            f"SciFact files not found: {', '.join(missing)}; copy {', '.join(SCIFACT_FILES)} "
            "from github.com/nice-hku-coder/coder_data (scifact_antonym/ and scifact/) into "
            f"{SCIFACT_DIR} or set FASTRAG_SCIFACT_DIR"
        )
    out, seen = [], set()
    for line in paths[0].read_text(encoding="utf-8").splitlines():
        text = " ".join(json.loads(line)["text"].split())
        for sent in re.split(r"(?<=[.!?])\s+", text):
            if len(sent.split()) >= 3 and sent not in seen:
                seen.add(sent)
                out.append(sent)
    claims = [json.loads(x)["claim"] for x in paths[1].read_text(encoding="utf-8").splitlines()]
    return out, claims


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, each keeping its closing punctuation; whitespace-only dropped."""
    return [s for s in _SENT_RE.findall(text) if s.strip()]


def _local_jieba(text: str) -> list[str]:
    import jieba

    return [t.lower() for t in jieba.lcut(text) if re.search(r"\w", t)]


def _local_cjk(text: str) -> list[str]:
    out: list[str] = []
    for run in _CJK_RUN.findall(text.lower()):
        if "\u3400" <= run[0] <= "\ufaff" and not run[0].isascii():
            out.extend(run)
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
        else:
            out.append(run)
    return out


def _local_english(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def get_tokenizer(kind: str):
    """``(callable str -> list[str], name)`` for ``kind`` in {"jieba", "cjk", "english"}:
    fastrag's analyzer when ``fastrag.analysis`` provides it, else a small local equivalent."""
    name = {"jieba": "bm25_chinese", "cjk": "bm25_cjk", "english": "bm25", "scifact": "bm25"}
    name = name.get(kind)
    if name is None:
        raise SystemExit(f"unknown analyzer kind {kind!r}; use jieba, cjk, english or scifact")
    try:
        from fastrag.analysis import get_analyzer

        fn = get_analyzer(name)
        fn("测试" if kind in ("jieba", "cjk") else "tests")
        return fn, f"fastrag.analysis:{name}"
    except Exception:  # noqa: BLE001 - any failure: use the local twin
        local = {"jieba": _local_jieba, "cjk": _local_cjk, "english": _local_english}
        local["scifact"] = _local_english
        return local[kind], f"local:{kind}"


def _ragged(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(lists) + 1, np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    values = np.fromiter((t for x in lists for t in x), np.int32, count=int(offsets[-1]))
    return values, offsets


def tokenized_sentences(kind: str, refresh: bool = False) -> dict:
    """Token ids of every unique corpus sentence and of the queries (cached in bench/.work)."""
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    tok, used = get_tokenizer(kind)
    ident = getattr(tok, "identity", None)
    ident = ident() if callable(ident) else used
    if kind == "english":  # the text depends on the interpreter's standard library
        all_sents = english_sentences()
        ident += hashlib.sha1("\n".join(all_sents).encode()).hexdigest()
    elif kind == "scifact":
        sents, questions = scifact_text()
        ident += hashlib.sha1("\n".join(sents + questions).encode()).hexdigest()
    key = hashlib.sha1(ident.encode()).hexdigest()[:10]
    cache = WORK_DIR / f"bm25_sentences_{kind}_v{CACHE_VERSION}_{key}.npz"
    if cache.exists() and not refresh:
        z = np.load(cache, allow_pickle=False)
        return {k: z[k] for k in z.files} | {"analyzer": str(z["analyzer"])}
    if kind == "english":
        held = np.random.default_rng(0).random(len(all_sents)) < ENGLISH_HOLDOUT
        sents = [s for s, h in zip(all_sents, held, strict=True) if not h]
        questions = [s for s, h in zip(all_sents, held, strict=True) if h]
    elif kind != "scifact":
        contexts, questions = load_cmrc()
        sents, seen = [], set()
        for c in contexts:
            for s in split_sentences(c):
                if s not in seen:
                    seen.add(s)
                    sents.append(s)
    t0 = time.perf_counter()
    vocab: dict[str, int] = {}
    sent_ids = [[vocab.setdefault(t, len(vocab)) for t in tok(s)] for s in sents]
    tok_s = time.perf_counter() - t0
    q_ids = [[vocab[t] for t in tok(q) if t in vocab] for q in questions]
    keep = [i for i, q in enumerate(q_ids) if q]
    if kind == "english":
        keep = keep[:ENGLISH_QUERIES]
    sv, so = _ragged(sent_ids)
    qv, qo = _ragged([q_ids[i] for i in keep])
    out = {
        "sent_values": sv,
        "sent_offsets": so,
        "q_values": qv,
        "q_offsets": qo,
        "q_source": np.asarray(keep, np.int64),
        "vocab": np.asarray(list(vocab), dtype=str),
        "n_chars": np.int64(sum(map(len, sents))),
        "tokenize_s": np.float64(tok_s),
        "analyzer": np.asarray(used),
    }
    np.savez(cache, **out)
    out["analyzer"] = used
    return out


def document_layout(n_docs: int, n_sentences: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(sentence ids, doc offsets)``: documents as runs of a tiled, shuffled sentence stream."""
    rng = np.random.default_rng(seed)
    lo, hi = SENTENCES_PER_DOC
    sizes = rng.integers(lo, hi + 1, n_docs)
    doc_offsets = np.zeros(n_docs + 1, np.int64)
    np.cumsum(sizes, out=doc_offsets[1:])
    total = int(doc_offsets[-1])
    reps = -(-total // n_sentences)
    stream = np.concatenate([rng.permutation(n_sentences) for _ in range(reps)])[:total]
    return stream.astype(np.int32), doc_offsets


def make_corpus(n_docs: int, kind: str = "jieba", seed: int = 0) -> dict:
    """The tokenized benchmark corpus: ``values`` int32, ``offsets`` int64 ``[n_docs+1]``,
    ``n_vocab``, queries ``q_values``/``q_offsets``, ``vocab`` (token strings) and stats."""
    ts = tokenized_sentences(kind)
    sv, so = ts["sent_values"], ts["sent_offsets"]
    sent_len = np.diff(so)
    stream, doc_sent_off = document_layout(n_docs, sent_len.shape[0], seed)
    tok_per_slot = sent_len[stream]
    slot_off = np.zeros(stream.shape[0] + 1, np.int64)
    np.cumsum(tok_per_slot, out=slot_off[1:])
    offsets = slot_off[doc_sent_off]
    values = np.empty(int(slot_off[-1]), np.int32)
    chunk = 1 << 18  # sentence slots per chunk: bounded temporary memory
    for s0 in range(0, stream.shape[0], chunk):
        sl = stream[s0 : s0 + chunk]
        lens = tok_per_slot[s0 : s0 + chunk]
        starts = np.repeat(so[sl] - np.cumsum(lens) + lens, lens)
        idx = starts + np.arange(int(lens.sum()), dtype=np.int64)
        values[slot_off[s0] : slot_off[s0] + idx.shape[0]] = sv[idx]
    return {
        "values": values,
        "offsets": offsets,
        "n_vocab": int(ts["vocab"].shape[0]),
        "q_values": ts["q_values"],
        "q_offsets": ts["q_offsets"],
        "q_source": ts["q_source"],
        "vocab": ts["vocab"],
        "analyzer": ts["analyzer"],
        "n_docs": n_docs,
        "seed": seed,
        "tokens_per_doc": float(values.shape[0] / n_docs),
        "tokens_per_query": float(ts["q_values"].shape[0] / (ts["q_offsets"].shape[0] - 1)),
        "n_queries": int(ts["q_offsets"].shape[0] - 1),
    }


def _zipf_ids(rng, cdf: np.ndarray, rank_to_id: np.ndarray, out: np.ndarray) -> None:
    """Fill ``out`` with token ids drawn from the law ``cdf`` (inverse CDF, in chunks)."""
    chunk = 1 << 22
    for s0 in range(0, out.shape[0], chunk):
        u = rng.random(min(chunk, out.shape[0] - s0))
        ranks = np.minimum(np.searchsorted(cdf, u, side="right"), cdf.shape[0] - 1)
        out[s0 : s0 + u.shape[0]] = rank_to_id[ranks]


def make_zipf_corpus(
    n_docs: int, seed: int = 0, n_vocab: int = ZIPF_VOCAB, s: float = ZIPF_S
) -> dict:
    """Synthetic Zipf corpus with the same keys as ``make_corpus`` (see the module docstring);
    about 20 s per million documents."""
    cdf = np.cumsum(np.arange(1, n_vocab + 1, dtype=np.float64) ** -s)
    cdf /= cdf[-1]
    rank_to_id = np.random.default_rng([seed, 7]).permutation(n_vocab).astype(np.int32)
    rng = np.random.default_rng(seed)
    lo, hi = ZIPF_DOC_LEN
    offsets = np.zeros(n_docs + 1, np.int64)
    np.cumsum(rng.integers(lo, hi + 1, n_docs), out=offsets[1:])
    values = np.empty(int(offsets[-1]), np.int32)
    _zipf_ids(rng, cdf, rank_to_id, values)
    rq = np.random.default_rng([seed, 1])  # queries do not depend on n_docs
    q_offsets = np.zeros(ZIPF_QUERIES + 1, np.int64)
    np.cumsum(
        rq.integers(ZIPF_QUERY_LEN[0], ZIPF_QUERY_LEN[1] + 1, ZIPF_QUERIES), out=q_offsets[1:]
    )
    q_values = np.empty(int(q_offsets[-1]), np.int32)
    _zipf_ids(rq, cdf, rank_to_id, q_values)
    return {
        "values": values,
        "offsets": offsets,
        "n_vocab": n_vocab,
        "q_values": q_values,
        "q_offsets": q_offsets,
        "vocab": np.arange(n_vocab).astype(str),
        "analyzer": f"synthetic:zipf(s={s},V={n_vocab:,})",
        "n_docs": n_docs,
        "seed": seed,
        "tokens_per_doc": float(values.shape[0] / n_docs),
        "tokens_per_query": float(q_values.shape[0] / ZIPF_QUERIES),
        "n_queries": ZIPF_QUERIES,
    }


CORPORA = {
    "zipf": make_zipf_corpus,
    "cmrc_jieba": lambda n_docs, seed=0: make_corpus(n_docs, "jieba", seed),
    "cmrc_cjk": lambda n_docs, seed=0: make_corpus(n_docs, "cjk", seed),
    "scifact": lambda n_docs, seed=0: make_corpus(n_docs, "scifact", seed),
    "english": lambda n_docs, seed=0: make_corpus(n_docs, "english", seed),
}


def make_named_corpus(name: str, n_docs: int, seed: int = 0) -> dict:
    """The corpus ``name`` (a key of ``CORPORA``) with ``n_docs`` documents."""
    if name not in CORPORA:
        raise SystemExit(f"unknown corpus {name!r}; use one of {', '.join(CORPORA)}")
    return CORPORA[name](n_docs, seed=seed) | {"corpus": name}


def corpus_queries(corpus: dict, max_queries: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The corpus's ragged queries ``(q_values, q_offsets)``, the first ``max_queries`` only
    when given."""
    qv, qo = corpus["q_values"], corpus["q_offsets"]
    if max_queries and qo.shape[0] - 1 > max_queries:
        qo = qo[: max_queries + 1]
        qv = qv[: qo[-1]]
    return qv, qo


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-docs", type=int, default=200_000)
    ap.add_argument("--corpus", choices=list(CORPORA), default="cmrc_jieba")
    ap.add_argument(
        "--analyzer",
        choices=["jieba", "cjk", "english"],
        help="tiled corpus by analyzer (same as --corpus cmrc_jieba, cmrc_cjk, ...)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--refresh", action="store_true", help="re-tokenize the sentences")
    a = ap.parse_args(argv)
    name = {"english": "english"}.get(a.analyzer, f"cmrc_{a.analyzer}") if a.analyzer else a.corpus
    kind = {"cmrc_jieba": "jieba", "cmrc_cjk": "cjk", "english": "english"}.get(name)
    if a.refresh and kind:
        tokenized_sentences(kind, refresh=True)
    t0 = time.perf_counter()
    c = make_named_corpus(name, a.n_docs, a.seed)
    print(
        json.dumps(
            {
                k: c[k]
                for k in (
                    "analyzer",
                    "n_docs",
                    "n_vocab",
                    "tokens_per_doc",
                    "n_queries",
                    "tokens_per_query",
                    "seed",
                )
            }
            | {"build_s": round(time.perf_counter() - t0, 2)},
            ensure_ascii=False,
        )
    )


if __name__ == "__main__":
    main()
