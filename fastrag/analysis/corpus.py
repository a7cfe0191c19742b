"""Corpus tokenization into token-id arrays, serially or in worker processes.

``tokenize_corpus(texts, analyzer)`` returns a :class:`TokenizedCorpus`: ``vocab`` (token ->
id, ids in order of first occurrence in the corpus), ``values`` (int32 token ids of all texts,
concatenated) and ``offsets`` (int64, ``len(texts) + 1``): text ``i`` has
``values[offsets[i]:offsets[i + 1]]``.

Texts are processed in chunks of about ``chunk_chars`` characters. Each chunk becomes a local
vocabulary plus local ids (``Analyzer.encode_chunk``); the parent maps each chunk's distinct
tokens to global ids once and remaps its ids with one numpy gather, so no list of lists of
str is ever held for the whole corpus. With ``num_workers > 0`` chunks run in worker
processes (each loads the analyzer's dictionary once, in its initializer) and come back in
order; the result is identical to ``num_workers=0`` because the vocabulary order (first
occurrence) does not depend on where chunks are cut.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastrag._checks import check_int
from fastrag.analysis.base import Analyzer, CallableAnalyzer
from fastrag.analysis.registry import get_analyzer
from fastrag.analysis.vocabtable import VocabTable
from fastrag.errors import ConfigError

__all__ = ["TokenizedCorpus", "encode_queries", "tokenize_corpus"]

DEFAULT_CHUNK_CHARS = 1 << 20


@dataclass
class TokenizedCorpus:
    """Token ids of a corpus as ragged arrays plus the vocabulary."""

    vocab: dict[str, int]
    values: np.ndarray
    offsets: np.ndarray
    _inverse: list[str] | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_docs(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])

    def ids(self, i: int) -> np.ndarray:
        """Token ids of text ``i``."""
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def tokens(self, i: int) -> list[str]:
        """Tokens of text ``i`` as strings (decoded through the vocabulary)."""
        if self._inverse is None or len(self._inverse) != len(self.vocab):
            inv = [""] * len(self.vocab)
            for tok, j in self.vocab.items():
                inv[j] = tok
            self._inverse = inv
        inv = self._inverse
        return [inv[j] for j in self.ids(i).tolist()]

    def lengths(self) -> np.ndarray:
        """Number of tokens of each text (int64)."""
        return np.diff(self.offsets)


# --------------------------------------------------------------------------------------------
# worker side

_WORKER_ANALYZER: Analyzer | None = None


def _init_worker(analyzer: Analyzer) -> None:
    global _WORKER_ANALYZER
    _WORKER_ANALYZER = analyzer
    analyzer.warmup()


def _encode_in_worker(texts: list[str]) -> tuple[object, np.ndarray, np.ndarray]:
    """One chunk in a worker. The local vocabulary travels back as one NUL-joined str (one
    pickle blob instead of one object per token) unless a token contains NUL."""
    assert _WORKER_ANALYZER is not None
    vocab, ids, offsets = _WORKER_ANALYZER.encode_chunk(texts)
    joined = "\x00".join(vocab)
    if joined.count("\x00") == len(vocab) - 1:
        return (joined, len(vocab)), ids, offsets
    return vocab, ids, offsets


def _unpack_vocab(vocab: tuple[str, int] | list[str]) -> list[str]:
    if isinstance(vocab, list):
        return vocab
    joined, n = vocab
    return joined.split("\x00") if n else []


# --------------------------------------------------------------------------------------------
# parent side


def _check_texts(texts: Any, what: str) -> Sequence[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise ConfigError(
            f"{what} must be a list of str, got {type(texts).__name__}"
            + (" (wrap a single text in a list)" if isinstance(texts, str) else "")
        )
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ConfigError(
                f"{what}[{i}] is a {type(t).__name__} ({t!r:.40}), not a str; "
                "convert or drop it before tokenizing"
            )
    return texts


def _check_vocab(vocab: Any) -> dict[str, int]:
    if not isinstance(vocab, dict):
        raise ConfigError(f"vocab must be a dict[str, int] or None, got {type(vocab).__name__}")
    if vocab:
        ids = np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab))
        if ids.min() < 0 or ids.max() != len(vocab) - 1 or len(np.unique(ids)) != len(vocab):
            raise ConfigError(
                f"vocab ids must be exactly 0..{len(vocab) - 1} (one id per token); got ids "
                f"from {ids.min()} to {ids.max()} for {len(vocab)} tokens"
            )
    return vocab


def _chunks(texts: Sequence[str], chunk_chars: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    size = 0
    for t in texts:
        chunk.append(t)
        size += len(t) + 1
        if size >= chunk_chars:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _resolve(analyzer: Any) -> Analyzer:
    return get_analyzer(analyzer)


def _unpacked(result):
    vocab, ids, offsets = result
    return _unpack_vocab(vocab), ids, offsets


def _default_start_method() -> str:
    """``fork`` where it is available and safe enough (Linux, no other Python threads
    running): workers then inherit the loaded dictionary and compiled kernels instead of
    importing and loading them again; ``spawn`` otherwise."""
    import sys
    import threading

    if (
        sys.platform.startswith("linux")
        and "fork" in multiprocessing.get_all_start_methods()
        and threading.active_count() == 1
    ):
        return "fork"
    return "spawn"


def _map_chunks(
    analyzer: Analyzer,
    chunks: Iterator[list[str]],
    num_workers: int,
    mp_context: str | None,
) -> Iterator[tuple[list[str], np.ndarray, np.ndarray]]:
    """Encoded chunks, in order: serially, or in a pool with a bounded window in flight."""
    if num_workers == 0:
        for chunk in chunks:
            yield analyzer.encode_chunk(chunk)
        return
    if isinstance(analyzer, CallableAnalyzer):
        analyzer.check_picklable()
    ctx = multiprocessing.get_context(mp_context or _default_start_method())
    with ProcessPoolExecutor(
        max_workers=num_workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(analyzer,),
    ) as pool:
        window: deque = deque()
        for chunk in chunks:
            window.append(pool.submit(_encode_in_worker, chunk))
            if len(window) >= 2 * num_workers:
                yield _unpacked(window.popleft().result())
        while window:
            yield _unpacked(window.popleft().result())


def _merge_vocab(vocab: dict[str, int] | VocabTable, local_vocab: list[str]) -> np.ndarray:
    """Add ``local_vocab``'s new tokens to ``vocab`` (in order) and return the global id of
    each local token (int32), with C-level dict operations only."""
    if isinstance(vocab, VocabTable):
        return vocab.add(local_vocab)
    n = len(local_vocab)
    if not vocab:
        vocab.update(zip(local_vocab, range(n), strict=True))
        return np.arange(n, dtype=np.int32)
    found = list(map(vocab.get, local_vocab))
    missing = [t for t, g in zip(local_vocab, found, strict=True) if g is None]
    if missing:
        base = len(vocab)
        vocab.update(zip(missing, range(base, base + len(missing)), strict=True))
    return np.fromiter(map(vocab.__getitem__, local_vocab), dtype=np.int32, count=n)


def tokenize_corpus(
    texts: Sequence[str],
    analyzer: str | Analyzer | Callable[[str], list[str]],
    num_workers: int = 0,
    vocab: dict[str, int] | None = None,
    *,
    chunk_chars: int | None = None,
    mp_context: str | None = None,
) -> TokenizedCorpus:
    """Tokenize ``texts`` into int32 token ids (see the module docstring).

    ``vocab``: an existing vocabulary to extend (it is copied, not modified): its tokens keep
    their ids and new tokens get the next ids. ``num_workers``: worker processes (0 = in this
    process). ``chunk_chars``: characters per chunk (default 1,048,576, smaller when that would
    leave workers idle). ``mp_context``: the workers' start method ('fork', 'spawn',
    'forkserver'); None picks 'fork' on Linux when no other thread runs, else 'spawn'. The
    output does not depend on it, nor on ``num_workers`` or ``chunk_chars``.
    """
    out_vocab: dict[str, int] = dict(_check_vocab(vocab)) if vocab is not None else {}
    return tokenize_into(
        texts,
        analyzer,
        out_vocab,
        num_workers=num_workers,
        chunk_chars=chunk_chars,
        mp_context=mp_context,
    )


def tokenize_into(
    texts: Sequence[str],
    analyzer: str | Analyzer | Callable[[str], list[str]],
    vocab: dict[str, int] | VocabTable,
    num_workers: int = 0,
    *,
    chunk_chars: int | None = None,
    mp_context: str | None = None,
) -> TokenizedCorpus:
    """:func:`tokenize_corpus` extending ``vocab`` in place (it must be a vocabulary this
    function built, ids ``0..len-1``; only its type is checked), so a corpus tokenized in parts
    holds one vocabulary, not a copy per part. The result's ``vocab`` is ``vocab``: a
    :class:`~fastrag.analysis.vocabtable.VocabTable` keeps a large vocabulary compact."""
    if not isinstance(vocab, dict | VocabTable):
        raise ConfigError(
            f"vocab must be a dict[str, int] or a VocabTable to extend (start with {{}}), got "
            f"{type(vocab).__name__}"
        )
    texts = _check_texts(texts, "texts")
    an = _resolve(analyzer)
    check_int("num_workers", num_workers, min=0, note="0 = tokenize in this process")
    check_int("chunk_chars", chunk_chars, min=1, none=True)
    out_vocab = vocab

    if chunk_chars is None:
        chunk_chars = DEFAULT_CHUNK_CHARS
        if num_workers > 0:
            total = sum(len(t) + 1 for t in texts)
            # at least ~4 chunks per worker so they start together and finish together
            chunk_chars = max(4096, min(chunk_chars, total // (4 * num_workers) + 1))

    n = len(texts)
    offsets = np.zeros(n + 1, dtype=np.int64)
    parts: list[np.ndarray] = []
    doc = 0
    pos = 0
    for local_vocab, ids, offs in _map_chunks(
        an, _chunks(texts, chunk_chars), num_workers, mp_context
    ):
        mapping = _merge_vocab(out_vocab, local_vocab)
        n_chunk = len(offs) - 1
        offsets[doc + 1 : doc + n_chunk + 1] = offs[1:] + pos
        if len(ids):
            parts.append(mapping[ids])
        doc += n_chunk
        pos += int(offs[-1])
    if doc != n:  # pragma: no cover - internal invariant
        raise RuntimeError(f"tokenized {doc} texts, expected {n}")
    values = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    return TokenizedCorpus(
        vocab=out_vocab, values=values.astype(np.int32, copy=False), offsets=offsets
    )


def encode_queries(
    queries: Sequence[str],
    analyzer: str | Analyzer | Callable[[str], list[str]],
    vocab: Mapping[str, int],
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of ``queries`` (``Analyzer.encode_query_chunk``) under a fixed ``vocab`` (a
    dict, or a :class:`~fastrag.analysis.vocabtable.VocabTable`); tokens not in it are
    dropped.

    Returns ``(values int32, offsets int64[len(queries) + 1])``; repeated query tokens are
    kept (BM25 scorers decide whether repeats count).
    """
    queries = _check_texts(queries, "queries")
    an = _resolve(analyzer)
    if not isinstance(vocab, dict | VocabTable):
        raise ConfigError(
            f"vocab must be a dict[str, int] or a VocabTable, got {type(vocab).__name__}"
        )
    if len(queries) == 0:
        return np.zeros(0, np.int32), np.zeros(1, np.int64)
    local_vocab, ids, offs = an.encode_query_chunk(list(queries))
    if isinstance(vocab, VocabTable):
        mapping = vocab.find(local_vocab).astype(np.int64)
    else:
        get = vocab.get
        mapping = np.fromiter(
            (get(t, -1) for t in local_vocab), dtype=np.int64, count=len(local_vocab)
        )
    gids = mapping[ids] if len(ids) else np.zeros(0, np.int64)
    keep = gids >= 0
    kept = np.zeros(len(gids) + 1, dtype=np.int64)
    np.cumsum(keep, out=kept[1:])
    return gids[keep].astype(np.int32), kept[offs]


def default_num_workers() -> int:
    """A sensible worker count for this machine (usable CPUs, at most 8)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(8, n))
