"""A BM25 vocabulary (term -> id) as two arrays a store keeps: the terms' UTF-8 bytes and
their offsets."""

from __future__ import annotations

import numpy as np

from fastrag.errors import StoreError

__all__ = ["check_vocab_arrays", "decode_vocab", "encode_vocab"]


def encode_vocab(vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes, offsets)`` of ``vocab`` (ids ``0..n-1``): term ``i`` is
    ``bytes[offsets[i]:offsets[i + 1]]`` in UTF-8; ``bytes`` uint8, ``offsets`` int64."""
    tokens = [""] * len(vocab)
    for tok, i in vocab.items():
        tokens[i] = tok
    # no bytes object per term: a large vocabulary's would cost ~45 bytes each at once
    sizes = (len(t) if t.isascii() else len(t.encode("utf-8")) for t in tokens)
    offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(sizes, dtype=np.int64, count=len(tokens)), out=offsets[1:])
    return np.frombuffer("".join(tokens).encode("utf-8"), dtype=np.uint8), offsets


def check_vocab_arrays(blob: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The offsets of :func:`encode_vocab`'s arrays as an array, once their dtypes and ranges
    are checked (StoreError when damaged)."""
    off = np.asarray(offsets)
    if blob.dtype != np.uint8 or blob.ndim != 1 or off.dtype.kind not in "iu":
        raise StoreError(
            f"BM25 vocabulary arrays have dtypes {blob.dtype} and {off.dtype}, "
            "expected uint8 and integers"
        )
    if (
        off.ndim != 1
        or len(off) == 0
        or off[0] != 0
        or off[-1] != blob.size
        or np.any(np.diff(off) < 0)
    ):
        raise StoreError("BM25 vocabulary offsets are out of range")
    return off


def decode_vocab(blob: np.ndarray, offsets: np.ndarray) -> dict[str, int]:
    """The vocabulary :func:`encode_vocab` wrote; StoreError when the arrays are damaged
    (wrong dtypes, offsets out of range, invalid UTF-8, duplicate terms)."""
    off = check_vocab_arrays(blob, offsets)
    data = bytes(blob)
    o = off.tolist()
    try:
        vocab = {data[o[i] : o[i + 1]].decode("utf-8"): i for i in range(len(o) - 1)}
    except UnicodeDecodeError as exc:
        raise StoreError(f"BM25 vocabulary is not valid UTF-8: {exc}") from exc
    if len(vocab) != len(o) - 1:
        raise StoreError("BM25 vocabulary has duplicate terms")
    return vocab
