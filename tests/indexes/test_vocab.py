"""A BM25 vocabulary as the two arrays a store keeps: UTF-8 bytes and offsets."""

from __future__ import annotations

import numpy as np
import pytest

from fastrag.errors import StoreError
from fastrag.indexes.vocab import decode_vocab, encode_vocab

TERMS = ["get", "", "josé", "région", "東京", "京都", "🙂x", "ß", "a" * 300, "\x00nul", "кот"]


def test_terms_are_their_utf8_bytes_in_id_order_and_decode_back():
    vocab = {t: i for i, t in enumerate(TERMS)}
    shuffled = dict(sorted(vocab.items(), key=lambda kv: kv[0]))  # ids, not insertion, order
    blob, offsets = encode_vocab(shuffled)
    assert blob.dtype == np.uint8 and offsets.dtype == np.int64
    assert blob.tobytes() == b"".join(t.encode("utf-8") for t in TERMS)
    lens = [len(t.encode("utf-8")) for t in TERMS]
    assert offsets.tolist() == np.concatenate([[0], np.cumsum(lens)]).tolist()
    assert decode_vocab(blob, offsets) == vocab
    empty_blob, empty_off = encode_vocab({})
    assert empty_blob.size == 0 and empty_off.tolist() == [0]
    assert decode_vocab(empty_blob, empty_off) == {}


def test_a_term_that_is_not_utf8_fails_the_write_and_damage_fails_the_read():
    with pytest.raises(UnicodeEncodeError):
        encode_vocab({"ok": 0, "\ud800": 1})
    blob, offsets = encode_vocab({"東京": 0, "x": 1})
    bad = blob.copy()
    bad[1] = 0xFF
    with pytest.raises(StoreError, match="not valid UTF-8"):
        decode_vocab(bad, offsets)
    with pytest.raises(StoreError, match="duplicate"):
        decode_vocab(np.frombuffer(b"xx", dtype=np.uint8), np.array([0, 1, 2]))
