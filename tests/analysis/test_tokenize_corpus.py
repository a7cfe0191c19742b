"""tokenize_corpus / encode_queries: ids equal the analyzer's tokens, workers equal serial."""

from __future__ import annotations

import numpy as np
import pytest

from fastrag.analysis import (
    ChineseAnalyzer,
    encode_queries,
    get_analyzer,
    tokenize_corpus,
)
from fastrag.errors import ConfigError


def space_split(text: str) -> list[str]:  # module level: picklable for workers
    return text.split()


def _first_occurrence_vocab(token_lists: list[list[str]]) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for toks in token_lists:
        for t in toks:
            vocab.setdefault(t, len(vocab))
    return vocab


@pytest.mark.parametrize("name", ["bm25_chinese", "bm25_cjk", "bm25"])
def test_ids_decode_to_analyzer_tokens(cmrc, name):
    contexts, questions, _ = cmrc
    texts = contexts[:300] + ["", "，。"] + questions[:200]
    an = get_analyzer(name, stemmer="english") if name == "bm25" else get_analyzer(name)
    expected = [an(t) for t in texts]
    # small chunks: many chunk boundaries, same result as one chunk
    for chunk_chars in (None, 5_000):
        tc = tokenize_corpus(texts, an, chunk_chars=chunk_chars)
        assert tc.values.dtype == np.int32 and tc.offsets.dtype == np.int64
        assert len(tc) == len(texts) and tc.offsets[0] == 0
        assert tc.vocab == _first_occurrence_vocab(expected)
        assert [tc.tokens(i) for i in range(len(texts))] == expected
        assert tc.n_tokens == sum(map(len, expected))


def test_chinese_jieba_segmenter_same_ids(cmrc):
    contexts, _, _ = cmrc
    a = tokenize_corpus(contexts[:100], ChineseAnalyzer(segmenter="jieba"))
    b = tokenize_corpus(contexts[:100], ChineseAnalyzer(segmenter="fast"))
    assert a.vocab == b.vocab
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.offsets, b.offsets)


@pytest.mark.slow  # worker processes: ~50 s on 2 busy cores
def test_workers_equal_serial(cmrc):
    contexts, questions, _ = cmrc
    texts = contexts[:400] + questions[:400]
    for an in (get_analyzer("bm25_chinese"), get_analyzer(space_split)):
        serial = tokenize_corpus(texts, an, num_workers=0, chunk_chars=20_000)
        par = tokenize_corpus(texts, an, num_workers=2)
        assert par.vocab == serial.vocab
        np.testing.assert_array_equal(par.values, serial.values)
        np.testing.assert_array_equal(par.offsets, serial.offsets)
    # spawned workers start from scratch: unpickle the analyzer, load the dictionary
    spawned = tokenize_corpus(texts[:60], "bm25_chinese", num_workers=1, mp_context="spawn")
    serial = tokenize_corpus(texts[:60], "bm25_chinese")
    assert spawned.vocab == serial.vocab
    np.testing.assert_array_equal(spawned.values, serial.values)


def test_vocab_extension_and_queries():
    an = get_analyzer("bm25", stemmer=None)  # vocabulary mechanics: whole words read easier
    base = tokenize_corpus(["red apple", "green apple"], an)
    assert base.vocab == {"red": 0, "apple": 1, "green": 2}
    more = tokenize_corpus(["green pear", "apple"], an, vocab=base.vocab)
    assert more.vocab == {"red": 0, "apple": 1, "green": 2, "pear": 3}
    assert base.vocab == {"red": 0, "apple": 1, "green": 2}  # the input is not modified
    np.testing.assert_array_equal(more.values, [2, 3, 1])
    np.testing.assert_array_equal(more.offsets, [0, 2, 3])

    qv, qo = encode_queries(["apple pie", "", "kiwi", "RED red apple"], an, more.vocab)
    np.testing.assert_array_equal(qv, [1, 0, 0, 1])  # unknown tokens dropped, repeats kept
    np.testing.assert_array_equal(qo, [0, 1, 1, 1, 4])
    assert qv.dtype == np.int32 and qo.dtype == np.int64
    qv, qo = encode_queries([], an, more.vocab)
    assert len(qv) == 0 and list(qo) == [0]

    empty = tokenize_corpus([], an)
    assert empty.vocab == {} and len(empty.values) == 0 and list(empty.offsets) == [0]


def test_errors():
    an = get_analyzer("bm25")
    with pytest.raises(ConfigError, match=r"texts must be a list of str, got str \(wrap a single"):
        tokenize_corpus("one text", an)
    with pytest.raises(ConfigError, match=r"texts\[1\] is a int \(7\), not a str"):
        tokenize_corpus(["a", 7], an)
    with pytest.raises(ConfigError, match=r"num_workers must be an int >= 0.*got -1"):
        tokenize_corpus(["a"], an, num_workers=-1)
    with pytest.raises(ConfigError, match=r"chunk_chars must be None or an int >= 1, got 0"):
        tokenize_corpus(["a"], an, chunk_chars=0)
    with pytest.raises(ConfigError, match=r"vocab ids must be exactly 0\.\.1"):
        tokenize_corpus(["a"], an, vocab={"x": 0, "y": 5})
    with pytest.raises(ConfigError, match=r"vocab must be a dict\[str, int\] or None, got list"):
        tokenize_corpus(["a"], an, vocab=["x"])
    with pytest.raises(ConfigError, match=r"unknown analyzer 'nope'"):
        tokenize_corpus(["a"], "nope")
    with pytest.raises(ConfigError, match=r"queries\[0\] is a NoneType"):
        encode_queries([None], an, {})
    with pytest.raises(ConfigError, match=r"cannot be pickled .* use num_workers=0"):
        tokenize_corpus(["a b"], lambda t: t.split(), num_workers=1)


def odd_tokens(text: str) -> list[str]:  # empty and NUL-containing tokens
    return ["", text, "a\x00b", ""] if text else [""]


def test_workers_odd_tokens():
    texts = ["x", "", "y\x00z", "x"]
    serial = tokenize_corpus(texts, odd_tokens)
    par = tokenize_corpus(texts, odd_tokens, num_workers=2, chunk_chars=1)
    assert par.vocab == serial.vocab == {"": 0, "x": 1, "a\x00b": 2, "y\x00z": 3}
    np.testing.assert_array_equal(par.values, serial.values)
    only_empty = tokenize_corpus(["", ""], odd_tokens, num_workers=1, chunk_chars=1)
    assert only_empty.vocab == {"": 0}
    assert [only_empty.tokens(i) for i in range(2)] == [[""], [""]]


def test_tokenize_into_extends_one_vocabulary_and_rejects_a_non_dict():
    """Parts tokenized into one vocabulary: the same ids as the whole corpus at once."""
    from fastrag.analysis.corpus import tokenize_into

    texts = ["alpha beta", "beta gamma", "delta alpha", "gamma epsilon"]
    whole = tokenize_corpus(texts, "bm25")
    vocab: dict[str, int] = {}
    first = tokenize_into(texts[:2], "bm25", vocab)
    second = tokenize_into(texts[2:], "bm25", vocab)
    assert first.vocab is vocab and second.vocab is vocab and vocab == whole.vocab
    np.testing.assert_array_equal(np.concatenate([first.values, second.values]), whole.values)
    with pytest.raises(ConfigError, match=r"vocab must be a dict\[str, int\] or a VocabTable"):
        tokenize_into(["a"], "bm25", None)
