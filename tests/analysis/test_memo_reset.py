"""The analyzers' memos (span tokens, stems, query compound parts) are replaced by a fresh one
when full: every text tokenizes as with an unbounded memo, including the spans an earlier
batch memoised and the call that found the memo full (it raised KeyError before)."""

from __future__ import annotations

import gc
import random
import tracemalloc

import pytest
from memo_threads import errors_while_releasing

import fastrag.analysis.chinese as chinese_mod
import fastrag.analysis.english as english_mod
import fastrag.analysis.mixed as mixed_mod
from fastrag.analysis import get_analyzer, tokenize_corpus

WORDS = (
    "Datenbankverbindung hochladen running runs runner configured configuration servers "
    "Passwort ändern Benutzerkonten files filed filing élèves écoles cherche dépôts "
    "búsqueda archivos обновления пакетов 数据库 连接 上传 文件 配置 服务器 かなカナ 한국어"
).split()


def _batches(seed: int = 4, n: int = 12) -> list[list[str]]:
    """Batches of texts mixing words every batch repeats with words new in each batch."""
    rng = random.Random(seed)
    out = []
    for b in range(n):
        fresh = [f"{rng.choice(WORDS)}{b}x{i}" for i in range(40)]
        out.append([" ".join(rng.sample(WORDS, 8) + rng.sample(fresh, 6)) for _ in range(30)])
    return out


def _corpus(an, batches):
    """The batches tokenized as a corpus, then each text alone (``an(text)``)."""
    vocab: dict[str, int] = {}
    values, offsets = [], []
    for texts in batches:
        part = tokenize_corpus(texts, an, vocab=vocab)
        vocab = part.vocab
        values.append(part.values.tolist())
        offsets.append(part.offsets.tolist())
    return vocab, values, offsets, [an(t) for texts in batches for t in texts]


@pytest.mark.parametrize(
    ("name", "mod", "cap"),
    [
        ("bm25", mixed_mod, "SPAN_CACHE"),
        ("bm25_english", english_mod, "STEM_CACHE"),
        ("bm25_chinese", chinese_mod, "SPAN_CACHE"),
    ],
)
def test_a_full_memo_is_replaced_without_changing_tokens(monkeypatch, name, mod, cap):
    batches = _batches()
    want = _corpus(get_analyzer(name), batches)
    monkeypatch.setattr(mod, cap, 50)  # far below one batch's distinct spans
    an = get_analyzer(name)
    assert _corpus(an, batches) == want
    memo = {"bm25": "_cache", "bm25_english": "_stem_cache", "bm25_chinese": "_cache"}[name]
    assert 0 < len(getattr(an, memo)) <= 50 + 30 * 14  # one batch's spans at most


def test_a_full_query_memo_is_replaced_without_changing_query_tokens(monkeypatch):
    queries = [t for b in _batches(seed=7) for t in b[:5]]
    want = [get_analyzer("bm25").encode_query_chunk(queries[i : i + 10]) for i in range(0, 60, 10)]
    monkeypatch.setattr(mixed_mod, "QUERY_CACHE", 20)
    monkeypatch.setattr(mixed_mod, "SPAN_CACHE", 30)
    an = get_analyzer("bm25")
    got = [an.encode_query_chunk(queries[i : i + 10]) for i in range(0, 60, 10)]
    for (v1, i1, o1), (v2, i2, o2) in zip(got, want, strict=True):
        assert v1 == v2 and i1.tolist() == i2.tolist() and o1.tolist() == o2.tolist()
    assert len(an._qcache) <= 20 + 10 * 14


@pytest.mark.parametrize(
    ("name", "memos"),
    [
        ("bm25", ("_cache", "_qcache")),
        ("bm25_english", ("_stem_cache",)),
        ("bm25_chinese", ("_cache",)),
    ],
)
def test_a_released_memo_is_empty_and_tokens_stay_the_same(name, memos):
    """``release_memo`` (called by a one-shot build once it has tokenized its corpus) empties
    the memos; the next texts and queries tokenize as before."""
    batches = _batches(seed=9)
    an = get_analyzer(name)
    want = _corpus(an, batches)
    queries = [t for texts in batches[:3] for t in texts]
    want_q = an.encode_query_chunk(queries)
    assert all(len(getattr(an, m)) for m in memos)
    an.release_memo()
    assert all(getattr(an, m) == {} for m in memos)
    assert _corpus(an, batches) == want
    got_q = an.encode_query_chunk(queries)
    assert got_q[0] == want_q[0] and got_q[1].tolist() == want_q[1].tolist()


@pytest.mark.parametrize("name", ["bm25", "bm25_chinese"])
def test_the_span_memo_keeps_no_tuple_for_a_span_that_is_its_own_token(name):
    """A log's spans are mostly their own tokens (ids, numbers, unstemmed words): the memo
    keeps such a span as its key alone. 50,000 distinct spans, half words the stemmer leaves
    alone, half numbers: the memo frees under 60 bytes a span (``bm25`` 86 with a 1-tuple
    each; ``bm25_chinese`` 143, with a lowercased copy too)."""
    an = get_analyzer(name)
    texts = [
        " ".join(f"{'n' if j % 2 else ''}{i * 100 + j:07d}" for j in range(100)) for i in range(500)
    ]
    tracemalloc.start()
    try:
        vocab, ids, _ = an.encode_chunk(texts)  # vocab holds the span strings themselves
        first = [vocab[i] for i in ids[:4].tolist()]
        assert first == ["0000000", "n0000001", "0000002", "n0000003"]
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        n = len(an._cache)
        an.release_memo()
        gc.collect()
        freed = held - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(vocab) == 50_000 and n in (50_000, 50_001)  # jieba's " " tokens: one more
    assert freed / n < 60, freed / n


@pytest.mark.parametrize("name", ["bm25", "bm25_english", "bm25_chinese"])
def test_threads_tokenizing_while_the_memo_is_released_get_the_same_tokens(name):
    """Threads share one analyzer: while they tokenize, another thread releases its memo
    again and again; every result equals the single-threaded one."""
    batches = _batches(seed=11)
    an = get_analyzer(name)
    want = [_encoded(an, texts) for texts in batches]

    def work() -> None:
        for _ in range(3):
            for texts, expected in zip(batches, want, strict=True):
                assert _encoded(an, texts) == expected

    assert errors_while_releasing(an, work) == []


def _encoded(an, texts: list[str]) -> list[list[str]]:
    vocab, ids, offsets = an.encode_chunk(texts)
    return [[vocab[i] for i in ids[offsets[k] : offsets[k + 1]]] for k in range(len(texts))]
