"""A group's text column as token ids, a part of ``TOKENIZE_ROWS`` texts at a time: joined into
one corpus for an index built in memory, or read part by part into a packed BM25 index, so a
large group's tokens are never held whole."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from fastrag.analysis import TokenizedCorpus, tokenize_corpus
from fastrag.analysis.corpus import tokenize_into
from fastrag.analysis.vocabtable import VocabTable
from fastrag.indexes.bm25.stream import count_postings

TOKENIZE_ROWS = 16384  # texts converted to Python strings at a time for tokenizing
# the same for a one-shot build streamed into its packed index (fastrag ingest): with the C heap
# trimmed after each part, a 50 MB log's index build peaks 14 MiB lower at 4096 than at 16384,
# and 4-5 MiB lower again at 2048 (1024 would save 2-3 MiB more, for 4% more CPU)
STREAM_ROWS = 2048


def token_parts(
    columns: Iterable[pa.ChunkedArray],
    analyzer,
    num_workers: int,
    after_part: Callable[[], object] | None = None,
    rows: int | None = None,
    table: bool = False,
) -> Iterator[tuple[TokenizedCorpus, int]]:
    """``(corpus, vocabulary size)`` of each ``rows`` (default :data:`TOKENIZE_ROWS`) texts
    of ``columns`` (the
    pieces of one text column, in order, each read when reached): one vocabulary (every
    part's ``vocab``) grows from part to part, ids following first occurrence as for the whole
    column; each part's offsets start at 0. ``after_part`` is called once a part's texts are
    let go (e.g. to trim the C heap). ``table``: the vocabulary is a :class:`VocabTable`
    (compact) instead of a dict."""
    rows = rows or TOKENIZE_ROWS
    vocab: dict[str, int] | VocabTable = VocabTable() if table else {}
    pieces = iter(columns)
    while (column := next(pieces, None)) is not None:
        for lo in range(0, len(column), rows):
            texts = column.slice(lo, rows).to_pylist()
            part = tokenize_into(texts, analyzer, vocab, num_workers=num_workers)
            del texts
            if after_part is not None:
                after_part()
            yield part, len(vocab)
        del column  # before the next piece is read: one piece's texts at a time


def tokenize_column(column: pa.ChunkedArray, analyzer, num_workers: int) -> TokenizedCorpus:
    """``tokenize_corpus`` of a text column, ``TOKENIZE_ROWS`` texts at a time (the same
    corpus), so a large group is never a list of strings whole."""
    if len(column) <= TOKENIZE_ROWS:
        return tokenize_corpus(column.to_pylist(), analyzer, num_workers=num_workers)
    return join_parts([part for part, _ in token_parts([column], analyzer, num_workers)])


def join_parts(parts: list[TokenizedCorpus]) -> TokenizedCorpus:
    """The corpus of :func:`token_parts`' parts, in order (``parts`` is emptied)."""
    vocab = parts[-1].vocab
    offsets = [np.zeros(1, dtype=np.int64)]
    base = 0
    for part in parts:
        offsets.append(part.offsets[1:] + base)
        base += int(part.offsets[-1])
    values = [part.values for part in parts]
    parts.clear()
    return TokenizedCorpus(
        vocab=vocab, values=_join(values, np.int32), offsets=np.concatenate(offsets)
    )


def _join(parts: list[np.ndarray], dtype) -> np.ndarray:
    """``np.concatenate(parts)``, emptying ``parts`` as they are copied: the pages of the
    result are touched part by part, so memory peaks at the result plus one part, not twice
    the result."""
    out = np.empty(sum(len(p) for p in parts), dtype)
    pos = 0
    parts.reverse()
    while parts:
        part = parts.pop()
        out[pos : pos + len(part)] = part
        pos += len(part)
    return out


class TokenStream:
    """The token parts of a text column (given as its pieces in order:
    ``NodeGroup.text_parts()``), tokenized ahead only until they hold ``min_postings``
    postings. ``large``: whether they do; then iterating gives the parts as
    ``(values, offsets, n_vocab)`` (for ``stream.pack_token_parts``), each tokenized when
    asked for, and ``vocab`` is the vocabulary (a :class:`VocabTable`: ~30 bytes a term, where
    a dict takes ~120); else :meth:`whole` is the corpus (its vocabulary a dict).
    ``after_part`` and ``rows``: as for :func:`token_parts`."""

    def __init__(
        self,
        columns: Iterable[pa.ChunkedArray],
        analyzer,
        num_workers: int,
        min_postings: int,
        after_part: Callable[[], object] | None = None,
        rows: int | None = None,
    ) -> None:
        self._parts = token_parts(columns, analyzer, num_workers, after_part, rows, table=True)
        self._held: list[tuple[TokenizedCorpus, int]] = []
        self._analyzer, self._workers = analyzer, num_workers
        self.vocab = VocabTable()
        postings = 0
        for part, n_vocab in self._parts:
            self._held.append((part, n_vocab))
            self.vocab = part.vocab  # one table for all parts: it grows as they are read
            if n_vocab:
                postings += count_postings(part.values, part.offsets, n_vocab)
            if postings >= min_postings:
                break
        self.large = postings >= min_postings

    def whole(self) -> TokenizedCorpus:
        """The column's corpus (for a stream that is not ``large``: all of it is read)."""
        if self.large:
            raise RuntimeError("a large TokenStream is read part by part")
        if not self._held:  # no rows
            return tokenize_corpus([], self._analyzer, num_workers=self._workers)
        parts = [part for part, _ in self._held]
        self._held.clear()
        corpus = join_parts(parts)
        return TokenizedCorpus(
            vocab=corpus.vocab.to_dict(), values=corpus.values, offsets=corpus.offsets
        )

    def take_vocab(self) -> VocabTable:
        """The vocabulary, handed over: the stream keeps none (so it is freed with its
        taker's reference)."""
        vocab, self.vocab = self.vocab, VocabTable()
        return vocab

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        while self._held:
            part, n_vocab = self._held.pop(0)
            yield part.values, part.offsets, n_vocab
        for part, n_vocab in self._parts:
            yield part.values, part.offsets, n_vocab
