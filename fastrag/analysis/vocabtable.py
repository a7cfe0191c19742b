"""A vocabulary (term -> id, ids in order of first addition) held as flat arrays: the terms'
UTF-8 bytes with their offsets (the arrays a store keeps) and the terms' hashes, sorted, with
their ids. About 30 bytes a term where a ``dict[str, int]`` takes ~120: a corpus tokenized part
by part into a packed index keeps a vocabulary of millions of terms in tens of MB, and a stored
index is searched through its arrays, never decoded into a dict."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from fastrag.errors import ConfigError, StoreError
from fastrag.indexes.vocab import check_vocab_arrays, decode_vocab

# hits whose bytes are compared at once: the comparison's index arrays stay near 1 MB
_COMPARE_TERMS = 1 << 14
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def hash_terms(blob: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The 64-bit FNV-1a hash of each term ``blob[offsets[i]:offsets[i + 1]]`` (int64), the
    same in every process; one pass over the bytes, the terms longest first."""
    lengths = np.diff(offsets)
    order = np.argsort(-lengths, kind="stable")
    longest_first = lengths[order]
    starts = np.asarray(offsets[:-1])[order]
    h = np.full(len(lengths), _FNV_OFFSET, dtype=np.uint64)
    neg = -longest_first  # ascending: the terms longer than p are the first searchsorted(-p)
    for p in range(int(longest_first[0]) if len(lengths) else 0):
        k = int(np.searchsorted(neg, -p, side="left"))
        head = h[:k]
        head ^= blob[starts[:k] + p]
        head *= _FNV_PRIME
    out = np.empty_like(h)
    out[order] = h
    return out.view(np.int64)


def _utf8(tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes, offsets)`` of ``tokens`` in UTF-8 (uint8, int64[n + 1])."""
    n = len(tokens)
    offsets = np.zeros(n + 1, dtype=np.int64)
    joined = "\x00".join(tokens)
    data = joined.encode("utf-8")
    blob = np.frombuffer(data, dtype=np.uint8)
    if joined.count("\x00") == n - 1:
        # no token holds NUL, and UTF-8 has no 0 byte but NUL's: the separators split it
        ends = np.flatnonzero(blob == 0)
        offsets[1:n] = ends - np.arange(n - 1)
        offsets[n] = blob.size - (n - 1)
        return blob[blob != 0] if n > 1 else blob, offsets
    sizes = np.fromiter((len(t.encode("utf-8")) for t in tokens), np.int64, count=n)
    np.cumsum(sizes, out=offsets[1:])
    return np.frombuffer("".join(tokens).encode("utf-8"), dtype=np.uint8), offsets


class VocabTable(Mapping[str, int]):
    """A vocabulary of unique terms, read like a ``dict[str, int]`` (``in``, ``[]``, ``get``,
    iteration in id order). :meth:`add` gives each of a list of terms its id, adding the new
    ones, as a dict filled with ``setdefault`` in the same order would; :meth:`find` looks
    many up at once. A table nobody adds to may be read from many threads; one read from a
    store (:meth:`from_arrays`) is read-only."""

    def __init__(self) -> None:
        self._n = 0
        self._bytes = np.zeros(1 << 16, dtype=np.uint8)
        self._size = 0  # bytes used
        self._offsets = np.zeros(1 << 12, dtype=np.int64)
        self._keys = np.zeros(0, dtype=np.int64)  # hash of each term, sorted
        self._ids = np.zeros(0, dtype=np.int32)  # the id of each key
        self._frozen = False

    @classmethod
    def from_arrays(cls, blob: np.ndarray, offsets: np.ndarray) -> VocabTable:
        """The read-only table of the arrays ``fastrag.indexes.vocab.encode_vocab`` wrote (kept,
        not copied: memory maps stay maps); StoreError when they are damaged (dtypes, offsets,
        invalid UTF-8, a term cut inside a character, duplicate terms)."""
        off = check_vocab_arrays(blob, offsets)
        if off.dtype != np.int64:
            off = off.astype(np.int64)
        try:
            bytes(blob).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StoreError(f"BM25 vocabulary is not valid UTF-8: {exc}") from exc
        inner = off[(off > 0) & (off < blob.size)]
        if inner.size and np.any((blob[inner] & 0xC0) == 0x80):
            raise StoreError("BM25 vocabulary is not valid UTF-8: a term ends inside a character")
        table = cls()
        table._n, table._size = len(off) - 1, int(blob.size)
        table._bytes, table._offsets = blob, off
        keys = hash_terms(blob, off)
        order = np.argsort(keys, kind="stable")
        table._keys, table._ids = keys[order], order.astype(np.int32)
        same_key = np.flatnonzero(table._keys[1:] == table._keys[:-1])
        if same_key.size:
            first, second = table._ids[same_key], table._ids[same_key + 1]
            if np.any(table._equal(first, blob, off, second)):
                raise StoreError("BM25 vocabulary has duplicate terms")
        table._frozen = True
        return table

    def freeze(self) -> None:
        """Make the table read-only (:meth:`add` raises), e.g. before threads share it; its
        arrays shrink to what they hold."""
        if not self._frozen:
            self._bytes = self._bytes[: self._size].copy()
            self._offsets = self._offsets[: self._n + 1].copy()
            self._frozen = True

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[str]:
        return (self.term(i) for i in range(self._n))

    def __getitem__(self, term: str) -> int:
        if not isinstance(term, str):
            raise KeyError(term)
        i = int(self.find([term])[0])
        if i < 0:
            raise KeyError(term)
        return i

    def __contains__(self, term: object) -> bool:
        return isinstance(term, str) and int(self.find([term])[0]) >= 0

    def __repr__(self) -> str:
        return f"VocabTable({self._n:,} terms, {self.nbytes:,} bytes)"

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held (their capacity)."""
        return sum(a.nbytes for a in (self._bytes, self._offsets, self._keys, self._ids))

    def term(self, i: int) -> str:
        """The term of id ``i``."""
        if not 0 <= i < self._n:
            raise IndexError(f"term id {i} outside 0..{self._n - 1}")
        lo, hi = self._offsets[i], self._offsets[i + 1]
        return self._bytes[lo:hi].tobytes().decode("utf-8")

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(bytes, offsets)`` as ``fastrag.indexes.vocab.encode_vocab`` writes them (copies)."""
        return self._bytes[: self._size].copy(), self._offsets[: self._n + 1].copy()

    def to_dict(self) -> dict[str, int]:
        """The vocabulary as ``{term: id}``."""
        return decode_vocab(self._bytes[: self._size], self._offsets[: self._n + 1])

    def find(self, tokens: Sequence[str]) -> np.ndarray:
        """The id of each of ``tokens`` (int32), -1 for those not in the table."""
        if not len(tokens):
            return np.zeros(0, dtype=np.int32)
        blob, offs = _utf8(tokens)
        return self._find(hash_terms(blob, offs), blob, offs)

    def add(self, tokens: Sequence[str]) -> np.ndarray:
        """The id of each of ``tokens`` (distinct terms; int32), new ones added in order."""
        if self._frozen:
            raise ConfigError("this VocabTable is read-only (read from a store, or frozen)")
        if not len(tokens):
            return np.zeros(0, dtype=np.int32)
        blob, offs = _utf8(tokens)
        keys = hash_terms(blob, offs)
        ids = self._find(keys, blob, offs)
        new = np.flatnonzero(ids < 0)
        if new.size:
            ids[new] = self._append(new, keys, blob, offs)
        return ids

    def _find(self, keys: np.ndarray, blob: np.ndarray, offs: np.ndarray) -> np.ndarray:
        """Ids of the terms already held (-1 for the others)."""
        ids = np.full(len(keys), -1, dtype=np.int32)
        if not self._n:
            return ids
        pos = np.searchsorted(self._keys, keys)
        np.minimum(pos, len(self._keys) - 1, out=pos)
        hit = np.flatnonzero(self._keys[pos] == keys)
        cand = self._ids[pos[hit]]
        same = self._equal(cand, blob, offs, hit)
        ids[hit[same]] = cand[same]
        for i in hit[~same].tolist():  # another term with the same 64-bit hash
            ids[i] = self._find_slow(int(keys[i]), blob[offs[i] : offs[i + 1]])
        return ids

    def _equal(self, cand: np.ndarray, blob: np.ndarray, offs: np.ndarray, hit: np.ndarray):
        """Whether term ``cand[j]`` equals ``blob``'s term ``hit[j]`` (offsets ``offs``)."""
        held = self._offsets
        g_lo, l_lo = held[cand], offs[hit]
        size = offs[hit + 1] - l_lo
        same = (held[cand + 1] - g_lo) == size
        for lo in range(0, len(hit), _COMPARE_TERMS):
            j = lo + np.flatnonzero(same[lo : lo + _COMPARE_TERMS])
            lengths = size[j]
            total = int(lengths.sum())
            if not total:
                continue
            first = np.repeat(np.cumsum(lengths) - lengths, lengths)
            within = np.arange(total, dtype=np.int64) - first
            differ = (
                self._bytes[np.repeat(g_lo[j], lengths) + within]
                != blob[np.repeat(l_lo[j], lengths) + within]
            )
            owner = np.repeat(np.arange(len(j)), lengths)
            same[j[np.bincount(owner, weights=differ, minlength=len(j)) > 0]] = False
        return same

    def _find_slow(self, key: int, term: np.ndarray) -> int:
        lo = int(np.searchsorted(self._keys, key, side="left"))
        hi = int(np.searchsorted(self._keys, key, side="right"))
        for i in self._ids[lo:hi].tolist():
            a, b = self._offsets[i], self._offsets[i + 1]
            if np.array_equal(self._bytes[a:b], term):
                return i
        return -1

    def _append(self, new: np.ndarray, keys: np.ndarray, blob: np.ndarray, offs: np.ndarray):
        """Add tokens ``new`` (indexes into ``keys``/``offs``, in order); their ids."""
        first = self._n
        sizes = offs[new + 1] - offs[new]
        total = int(sizes.sum())
        self._reserve(len(new), total)
        starts = np.repeat(offs[new] - (np.cumsum(sizes) - sizes), sizes)
        self._bytes[self._size : self._size + total] = blob[starts + np.arange(total)]
        np.cumsum(sizes, out=self._offsets[first + 1 : first + len(new) + 1])
        self._offsets[first + 1 : first + len(new) + 1] += self._size
        self._size += total
        self._n += len(new)
        ids = np.arange(first, self._n, dtype=np.int32)
        order = np.argsort(keys[new], kind="stable")
        add = keys[new][order]
        at = np.searchsorted(self._keys, add, side="right")
        self._keys = np.insert(self._keys, at, add)
        self._ids = np.insert(self._ids, at, ids[order])
        return ids

    def _reserve(self, terms: int, size: int) -> None:
        if self._n + terms + 1 > len(self._offsets):
            grown = np.zeros(max(2 * len(self._offsets), self._n + terms + 1), np.int64)
            grown[: self._n + 1] = self._offsets[: self._n + 1]
            self._offsets = grown
        if self._size + size > len(self._bytes):
            grown = np.zeros(max(2 * len(self._bytes), self._size + size), np.uint8)
            grown[: self._size] = self._bytes[: self._size]
            self._bytes = grown
