"""VocabTable, the compact vocabulary of a corpus tokenized part by part: the ids a dict filled
with ``setdefault`` gives, the arrays ``encode_vocab`` writes, byte for byte, and terms that
share a hash kept apart."""

from __future__ import annotations

import random

import numpy as np
import pytest

import fastrag.analysis.vocabtable as vocabtable_mod
from fastrag.analysis import tokenize_corpus
from fastrag.analysis.corpus import encode_queries, tokenize_into
from fastrag.analysis.vocabtable import VocabTable
from fastrag.errors import ConfigError, StoreError
from fastrag.indexes.vocab import decode_vocab, encode_vocab


def _parts(seed: int, n_parts: int, alphabet: str) -> list[list[str]]:
    """Lists of distinct tokens (an analyzer's local vocabularies), many repeated across."""
    rng = random.Random(seed)
    parts = []
    for _ in range(n_parts):
        words = (
            "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5))) for _ in range(400)
        )
        parts.append(list(dict.fromkeys(words)))
    return parts


@pytest.mark.parametrize("alphabet", ["abcd", "aé東😀", "ab\x00c"])
def test_ids_and_arrays_equal_a_dicts(alphabet):
    """ASCII, multi-byte UTF-8, and tokens holding NUL (the separator of the fast path):
    each part's ids, ``to_dict``, ``term`` and ``arrays`` equal the dict's and encode_vocab's."""
    table, want = VocabTable(), {}
    for part in _parts(7, 120, alphabet):
        got = table.add(part)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, [want.setdefault(t, len(want)) for t in part])
    assert len(table) == len(want) > 500
    assert table.to_dict() == want
    inverse = {i: t for t, i in want.items()}
    assert [table.term(i) for i in range(len(want))] == [inverse[i] for i in range(len(want))]
    blob, offsets = table.arrays()
    want_blob, want_offsets = encode_vocab(want)
    assert blob.dtype == np.uint8 and offsets.dtype == np.int64
    assert blob.tobytes() == want_blob.tobytes()
    np.testing.assert_array_equal(offsets, want_offsets)
    assert decode_vocab(blob, offsets) == want
    assert table.nbytes < 40 * len(want) + (1 << 17)  # a dict takes ~120 bytes a term
    held = blob.nbytes + offsets.nbytes + 12 * len(want)  # bytes, offsets, hashes and ids
    table.freeze()  # read-only, its arrays trimmed to what they hold
    assert table.nbytes == held and table.to_dict() == want
    with pytest.raises(ConfigError, match="read-only"):
        table.add(["new"])


def _weak_hash(blob: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """A hash with two values: most terms share one with others."""
    return (np.diff(offsets) % 2).astype(np.int64)


def test_terms_that_share_a_hash_keep_their_own_ids(monkeypatch):
    """Ids by bytes, not by hash: adding, finding, and a table read back from its arrays."""
    monkeypatch.setattr(vocabtable_mod, "hash_terms", _weak_hash)
    table, want = VocabTable(), {}
    for part in _parts(3, 40, "xyz"):
        np.testing.assert_array_equal(
            table.add(part), [want.setdefault(t, len(want)) for t in part]
        )
    assert table.to_dict() == want and len(want) > 300
    stored = VocabTable.from_arrays(*table.arrays())
    assert dict(stored.items()) == want
    np.testing.assert_array_equal(stored.find([*want, "nope"]), [*want.values(), -1])


def test_the_hash_is_fnv1a_of_the_utf8_bytes():
    """The same in every process (Python's str hash is not): FNV-1a's published values."""
    blob, offsets = np.frombuffer(b"afoobar", np.uint8), np.array([0, 0, 1, 7])
    got = vocabtable_mod.hash_terms(blob, offsets).view(np.uint64).tolist()
    assert got == [0xCBF29CE484222325, 0xAF63DC4C8601EC8C, 0x85944171F73967E8]


def test_a_stored_table_reads_like_the_dict_and_is_read_only():
    want = {t: i for i, t in enumerate(["b", "a", "東京", "", "ab\x00c"])}
    stored = VocabTable.from_arrays(*encode_vocab(want))
    assert len(stored) == 5 and list(stored) == list(want) and dict(stored.items()) == want
    assert stored["東京"] == 2 and stored.get("zz", -1) == -1 and "" in stored
    assert "zz" not in stored and 3 not in stored
    with pytest.raises(KeyError):
        stored["zz"]
    with pytest.raises(ConfigError, match="read-only"):
        stored.add(["c"])


@pytest.mark.parametrize(
    ("blob", "offsets", "message"),
    [
        (b"ab", [0, 1, 3], "offsets are out of range"),
        (b"ab", [0, 2, 1], "offsets are out of range"),
        (b"a\xff", [0, 1, 2], "not valid UTF-8"),
        ("é".encode(), [0, 1, 2], "ends inside a character"),
        (b"abab", [0, 2, 4], "duplicate terms"),
    ],
)
def test_damaged_arrays_raise_store_error(blob, offsets, message):
    with pytest.raises(StoreError, match=message):
        VocabTable.from_arrays(np.frombuffer(blob, np.uint8), np.array(offsets, np.int64))


def test_an_empty_part_and_term_out_of_range():
    table = VocabTable()
    assert table.add([]).tolist() == [] and len(table) == 0
    assert table.add(["b", "a"]).tolist() == [0, 1]
    assert table.add(["a", "c", "b"]).tolist() == [1, 2, 0]
    assert table.term(2) == "c"
    with pytest.raises(IndexError, match="term id 3 outside 0..2"):
        table.term(3)


def test_tokenize_into_a_table_gives_the_dicts_ids():
    texts = ["Stores keep Arrow files", "stores keep 東京 data", "files of Arrow and data"] * 3
    whole = tokenize_corpus(texts, "bm25")
    table = VocabTable()
    parts = [tokenize_into(texts[i : i + 2], "bm25", table) for i in range(0, len(texts), 2)]
    assert all(p.vocab is table for p in parts) and table.to_dict() == whole.vocab
    np.testing.assert_array_equal(np.concatenate([p.values for p in parts]), whole.values)


def test_queries_encode_the_same_through_a_stored_table():
    texts = ["Stores keep Arrow files", "stores keep 東京 data", "files of Arrow and data"]
    vocab = tokenize_corpus(texts, "bm25").vocab
    stored = VocabTable.from_arrays(*encode_vocab(vocab))
    queries = ["arrow files", "東京 unknown", "", "data data stores"]
    for got, want in zip(
        encode_queries(queries, "bm25", stored), encode_queries(queries, "bm25", vocab), strict=True
    ):
        np.testing.assert_array_equal(got, want)


def test_threads_find_in_one_stored_table_at_once():
    """A stored table is shared by a service's threads: lookups hold no state."""
    from concurrent.futures import ThreadPoolExecutor

    want = {f"term{i}é" if i % 3 else f"t{i}": i for i in range(5000)}
    stored = VocabTable.from_arrays(*encode_vocab(want))
    queries = [[*list(want)[k::7], f"absent{k}"] for k in range(7)]
    expect = [[want.get(t, -1) for t in q] for q in queries]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda k: stored.find(queries[k % 7]).tolist(), range(200)))
    assert got == [expect[k % 7] for k in range(200)]
