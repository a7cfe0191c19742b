"""Unigram (SentencePiece) ids of whole words in a numba kernel, equal to ``tokenizers``'.

:class:`UnigramWords` holds a vocabulary's code-point trie (built once, in
:mod:`fastrag._kernels.unigram`) and gives each word the ids ``tokenizers``' ``Unigram`` model
gives ``"▁" + word`` (the e5 static table's tokenizer, word by word), at about a microsecond
per word instead of ten.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fastrag._checks import check_int, check_str_list
from fastrag.errors import ConfigError

__all__ = ["CodePointMap", "UnigramWords", "code_point_trie", "code_points"]

METASPACE = 0x2581  # "▁"


def code_points(strings: list[str], *, narrow: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``strings``' code points one after the other (uint32, lone surrogates kept; uint8
    when ``narrow`` and all are ASCII) and where each string starts (int64, ``n + 1``)."""
    joined = "".join(strings)
    if narrow and joined.isascii():
        cps = np.frombuffer(joined.encode("ascii"), np.uint8)
    else:
        cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), np.uint32)
    offsets = np.zeros(len(strings) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, strings), np.int64, count=len(strings)), out=offsets[1:])
    return cps, offsets


def code_point_trie(pieces: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The trie of ``pieces`` (:mod:`fastrag._kernels.trie`): ``(keys, vals, piece)``, its
    hash table of edges sized to them and the id of the piece ending at each node."""
    from fastrag._kernels.trie import build_trie, trie_capacity  # lazy: numba

    cps, offsets = code_points(pieces)
    if ((cps >= 0xD800) & (cps < 0xE000)).any():
        raise ConfigError("pieces must not contain lone surrogates")
    edges = len(cps)  # at most; shared prefixes make far fewer (e5: 505k of 1.39M)
    while True:
        cap = trie_capacity(edges)
        keys = np.full(cap, -1, np.int64)
        vals = np.full(cap, -1, np.int32)
        piece = np.full(edges + 1, -1, np.int32)
        nodes = build_trie(cps, offsets, keys, vals, piece)
        if trie_capacity(nodes - 1) == cap:
            return keys, vals, piece[:nodes]
        edges = nodes - 1  # built again in a table of the right size


class UnigramWords:
    """A Unigram vocabulary's trie; :meth:`encode` gives words' ids.

    Args:
        pieces: the vocabulary's pieces, in id order.
        scores: each piece's log-probability.
        unk: the unknown piece's id.

    Immutable after construction, so one instance serves any number of threads.
    """

    def __init__(self, pieces: Sequence[str], scores: Sequence[float], unk: int) -> None:
        pieces = check_str_list("pieces", list(pieces))
        scores = np.asarray(scores, dtype=np.float64)
        if scores.shape != (len(pieces),):
            raise ConfigError(
                f"scores must be one number per piece ({len(pieces)}), got {scores.shape}"
            )
        if not len(pieces) or not np.isfinite(scores).all():
            raise ConfigError("pieces must not be empty and scores must be finite")
        self.unk = check_int("unk", unk, min=0, max=len(pieces) - 1)
        self._keys, children, piece = code_point_trie(pieces)
        # each slot's child and the piece ending there, one read (fastrag._kernels.unigram)
        child = children.astype(np.int64)
        ends = piece[np.maximum(child, 0)].astype(np.int64) + 1
        self._edges = np.where(child >= 0, child | (ends << 32), -1)
        self._scores = scores
        self._unk_score = float(scores.min()) - 10.0  # tokenizers' K_UNK_PENALTY
        for a in (self._keys, self._edges, self._scores):
            a.flags.writeable = False

    def encode(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids int32, counts int64)``: each word's ids one after the other, and how many
        each has. Words hold no spaces (a space would be a character of the word here, but
        a split for ``tokenizers``); a lone surrogate, which ``tokenizers`` refuses, is an
        unknown character."""
        from fastrag._kernels.unigram import encode_words  # lazy: numba

        words = check_str_list("words", list(words))
        cps, offsets = code_points(words)
        ids = np.empty(len(cps) + len(words), np.int32)
        counts = np.empty(len(words), np.int64)
        n = encode_words(
            cps,
            offsets,
            self._keys,
            self._edges,
            self._scores,
            self.unk,
            self._unk_score,
            METASPACE,
            ids,
            counts,
        )
        return ids[:n], counts


class CodePointMap:
    """A normalization map of code points (``str.translate``'s, as e5's tokenizer table
    gives it) applied to whole batches in a numba kernel.

    Args:
        table: code point -> the code points it becomes (an empty list deletes it).

    Immutable after construction, so one instance serves any number of threads.
    """

    def __init__(self, table: dict[int, Sequence[int]]) -> None:
        if not isinstance(table, dict) or not table:
            raise ConfigError("table must be a non-empty dict of code point -> code points")
        keys = sorted(table)
        if not all(isinstance(k, int) and 0 <= k < 0x110000 for k in keys):
            raise ConfigError("table's keys must be code points (ints in [0, 0x110000))")
        outs = [list(table[k]) for k in keys]
        if not all(isinstance(c, int) and 0 <= c < 0x110000 for out in outs for c in out):
            raise ConfigError("table's values must be lists of code points")
        self._count = np.full(keys[-1] + 1, -1, np.int32)
        self._count[keys] = [len(o) for o in outs]
        self._start = np.zeros(keys[-1] + 1, np.int64)
        self._start[keys] = np.cumsum([0] + [len(o) for o in outs[:-1]])
        self._flat = np.array([c for o in outs for c in o], np.uint32)
        self.translation = {k: "".join(map(chr, o)) for k, o in zip(keys, outs, strict=True)}
        for a in (self._count, self._start, self._flat):
            a.flags.writeable = False

    def apply(self, texts: Sequence[str]) -> list[str]:
        """``texts`` mapped: ``[t.translate(self.translation) for t in texts]``."""
        from fastrag._kernels.unigram import map_code_points  # lazy: numba

        texts = check_str_list("texts", list(texts))
        cps, offsets = code_points(texts, narrow=True)  # ASCII batches as bytes
        out, off, changed = map_code_points(cps, offsets, self._start, self._count, self._flat)
        for i in np.flatnonzero(changed).tolist():
            texts[i] = out[off[i] : off[i + 1]].tobytes().decode("utf-32-le", "surrogatepass")
        return texts
