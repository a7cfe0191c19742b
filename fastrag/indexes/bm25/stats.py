"""Corpus statistics of BM25 weights (:class:`BM25Stats`): shards of one corpus built with
the merged statistics of all of them score exactly as the whole corpus would.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastrag.errors import ConfigError
from fastrag.indexes.bm25.args import check_corpus, raise_bad_token
from fastrag.indexes.bm25.backend import backend


@dataclass(frozen=True, eq=False)
class BM25Stats:
    """Corpus statistics BM25 weights depend on: ``n_docs``, ``n_tokens`` (sum of document
    lengths; ``avgdl = n_tokens / n_docs``) and ``df`` (int64 ``[n_vocab]``, documents that
    contain each term)."""

    n_docs: int
    n_tokens: int
    df: np.ndarray

    @property
    def avgdl(self) -> float:
        """Average document length in tokens."""
        return self.n_tokens / self.n_docs if self.n_docs else 0.0

    @property
    def n_vocab(self) -> int:
        """Vocabulary size (terms)."""
        return int(self.df.shape[0])

    @classmethod
    def from_tokens(cls, values: np.ndarray, offsets: np.ndarray, n_vocab: int) -> BM25Stats:
        """Statistics of a ragged token-id corpus (``values`` int32, ``offsets`` int64)."""
        values, offsets, n_vocab = check_corpus(values, offsets, n_vocab)
        df = document_frequencies(values, offsets, n_vocab)
        return cls(int(offsets.shape[0] - 1), int(offsets[-1] - offsets[0]), df)

    @classmethod
    def merge(cls, parts: list[BM25Stats]) -> BM25Stats:
        """Statistics of the union of disjoint corpora (e.g. the shards of one corpus)."""
        parts = list(parts)
        if not parts:
            raise ConfigError("BM25Stats.merge needs at least one BM25Stats; got none")
        sizes = {p.n_vocab for p in parts}
        if len(sizes) != 1:
            raise ConfigError(
                f"BM25Stats.merge needs one shared vocabulary; got n_vocab values {sorted(sizes)}"
            )
        df = np.zeros(parts[0].n_vocab, np.int64)
        for p in parts:
            df += p.df
        return cls(sum(p.n_docs for p in parts), sum(p.n_tokens for p in parts), df)


def document_frequencies(values: np.ndarray, offsets: np.ndarray, n_vocab: int) -> np.ndarray:
    """Per-term document frequencies of a checked corpus (kernels, or NumPy while they
    compile); ConfigError for a token id outside the vocabulary."""
    df, bad = backend().document_frequencies(values, offsets, n_vocab)
    raise_bad_token(bad, values, n_vocab)
    return df


def check_stats(stats: object, local_df: np.ndarray, n_docs: int, n_tokens: int) -> BM25Stats:
    """``stats`` as int64 statistics, if they cover a corpus of ``n_docs`` documents,
    ``n_tokens`` tokens and document frequencies ``local_df``."""
    if not isinstance(stats, BM25Stats):
        raise ConfigError(f"stats must be a BM25Stats; got {type(stats).__name__}")
    if stats.n_vocab != local_df.shape[0]:
        raise ConfigError(
            f"stats cover {stats.n_vocab} terms but n_vocab={local_df.shape[0]}; "
            "use statistics of the same vocabulary"
        )
    if stats.n_docs < n_docs or stats.n_tokens < n_tokens or bool(np.any(stats.df < local_df)):
        raise ConfigError(
            "stats do not cover this corpus (fewer documents, tokens or document "
            "frequencies than it has); merge the statistics of every shard, "
            "this one included, with BM25Stats.merge"
        )
    return BM25Stats(
        int(stats.n_docs), int(stats.n_tokens), np.ascontiguousarray(stats.df, dtype=np.int64)
    )
