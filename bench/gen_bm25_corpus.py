"""Seeded BM25 benchmark corpus: CMRC 2018 dev sentences, tiled and shuffled into documents.

Recipe (deterministic for a given ``seed`` and ``n_docs``):

1. Split every CMRC dev context into sentences (ending at 。！？!? ; the mark stays with its
   sentence), keep the unique ones in order of appearance.
2. Tokenize each unique sentence once with an analyzer: ``jieba`` (``fastrag``'s
   ``bm25_chinese`` when available) or ``cjk`` (``bm25_cjk``: CJK unigrams + bigrams). Token ids
   follow first appearance. Both analyzers split at sentence-ending punctuation, so a document
   made of whole sentences tokenizes exactly as the concatenation of its sentences' tokens.
3. Documents: a stream of sentence ids made by concatenating independent random permutations
   of all sentences (tiling), cut into documents of ``SENTENCES_PER_DOC`` (uniform) sentences.
   The document layout depends only on the seed, so both analyzers see the same texts.
4. Queries: the CMRC dev questions, tokenized by the same analyzer; tokens outside the
   corpus vocabulary are dropped, and questions left empty are dropped.

Tokenized sentences are cached under ``bench/.work/`` (gitignored); documents are rebuilt from
them in about a second per million documents.

Usage: ``python bench/gen_bm25_corpus.py --n-docs 200000 --analyzer jieba`` prints stats.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import WORK_DIR

CMRC_PATH = Path(__file__).resolve().parents[2] / "shared" / "data" / "cmrc2018_dev.json"
SENTENCES_PER_DOC = (5, 15)  # inclusive range; mean 10 sentences ~ 180 jieba tokens
CACHE_VERSION = 1
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
            out.extend(run[i:i + 2] for i in range(len(run) - 1))
        else:
            out.append(run)
    return out


def get_tokenizer(kind: str):
    """``(callable str -> list[str], name)`` for ``kind`` in {"jieba", "cjk"}: fastrag's
    analyzer when ``fastrag.analysis`` provides it, else a small local equivalent."""
    name = {"jieba": "bm25_chinese", "cjk": "bm25_cjk"}.get(kind)
    if name is None:
        raise SystemExit(f"unknown analyzer kind {kind!r}; use jieba or cjk")
    try:
        from fastrag.analysis import get_analyzer

        fn = get_analyzer(name)
        fn("测试")
        return fn, f"fastrag.analysis:{name}"
    except Exception:  # noqa: BLE001 - any failure: use the local twin
        return (_local_jieba if kind == "jieba" else _local_cjk), f"local:{kind}"


def _ragged(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(lists) + 1, np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    values = np.fromiter((t for x in lists for t in x), np.int32, count=int(offsets[-1]))
    return values, offsets


def tokenized_sentences(kind: str, refresh: bool = False) -> dict:
    """Token ids of every unique CMRC sentence and of the questions (cached in bench/.work)."""
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    tok, used = get_tokenizer(kind)
    ident = getattr(tok, "identity", None)
    key = hashlib.sha1((ident() if callable(ident) else used).encode()).hexdigest()[:10]
    cache = WORK_DIR / f"bm25_sentences_{kind}_v{CACHE_VERSION}_{key}.npz"
    if cache.exists() and not refresh:
        z = np.load(cache, allow_pickle=False)
        return {k: z[k] for k in z.files} | {"analyzer": str(z["analyzer"])}
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
    sv, so = _ragged(sent_ids)
    qv, qo = _ragged([q_ids[i] for i in keep])
    out = {"sent_values": sv, "sent_offsets": so, "q_values": qv, "q_offsets": qo,
           "q_source": np.asarray(keep, np.int64), "vocab": np.asarray(list(vocab), dtype=str),
           "n_chars": np.int64(sum(map(len, sents))), "tokenize_s": np.float64(tok_s),
           "analyzer": np.asarray(used)}
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
        sl = stream[s0:s0 + chunk]
        lens = tok_per_slot[s0:s0 + chunk]
        starts = np.repeat(so[sl] - np.cumsum(lens) + lens, lens)
        idx = starts + np.arange(int(lens.sum()), dtype=np.int64)
        values[slot_off[s0]:slot_off[s0] + idx.shape[0]] = sv[idx]
    return {"values": values, "offsets": offsets, "n_vocab": int(ts["vocab"].shape[0]),
            "q_values": ts["q_values"], "q_offsets": ts["q_offsets"], "vocab": ts["vocab"],
            "analyzer": ts["analyzer"], "n_docs": n_docs, "seed": seed,
            "tokens_per_doc": float(values.shape[0] / n_docs),
            "tokens_per_query": float(ts["q_values"].shape[0] / (ts["q_offsets"].shape[0] - 1)),
            "n_queries": int(ts["q_offsets"].shape[0] - 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-docs", type=int, default=200_000)
    ap.add_argument("--analyzer", choices=["jieba", "cjk"], default="jieba")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--refresh", action="store_true", help="re-tokenize the sentences")
    a = ap.parse_args(argv)
    if a.refresh:
        tokenized_sentences(a.analyzer, refresh=True)
    t0 = time.perf_counter()
    c = make_corpus(a.n_docs, a.analyzer, a.seed)
    print(json.dumps({k: c[k] for k in ("analyzer", "n_docs", "n_vocab", "tokens_per_doc",
                                         "n_queries", "tokens_per_query", "seed")}
                     | {"build_s": round(time.perf_counter() - t0, 2)}, ensure_ascii=False))


if __name__ == "__main__":
    main()
