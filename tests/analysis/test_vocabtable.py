"""VocabTable, the compact vocabulary of a corpus tokenized part by part: the ids a dict filled
with ``setdefault`` gives, the arrays ``encode_vocab`` writes, byte for byte, and terms that
share a hash kept apart."""

from __future__ import annotations

import random

import numpy as np
import pytest

from fastrag.analysis import tokenize_corpus
from fastrag.analysis.corpus import tokenize_into
from fastrag.analysis.vocabtable import VocabTable
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


class _Clash(str):
    """A token whose hash is one of two values: most tokens share a hash with others."""

    def __hash__(self) -> int:
        return len(self) % 2


def test_tokens_that_share_a_hash_keep_their_own_ids():
    table, want = VocabTable(), {}
    for part in _parts(3, 40, "xyz"):
        tokens = [_Clash(t) for t in part]
        np.testing.assert_array_equal(
            table.add(tokens), [want.setdefault(t, len(want)) for t in tokens]
        )
    assert table.to_dict() == {str(t): i for t, i in want.items()} and len(want) > 300


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
