"""The BM25 path: the group's BM25 index over the analyzer's tokens (built once, kept in the
store), queries encoded with its vocabulary; a stored index found damaged is rebuilt once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from fastrag.analysis import encode_queries
from fastrag.errors import ConfigError, StoreError
from fastrag.indexes.base import Hits
from fastrag.indexes.bm25.args import check_bm25_params
from fastrag.retrieval.paths.base import SearchPath

__all__ = ["BM25_PARAMS", "BM25Path", "BM25Prepared"]

BM25_PARAMS = ("method", "k1", "b", "delta")


class BM25Prepared(NamedTuple):
    """A group's BM25 index, its vocabulary (token -> id) and the analyzer of its tokens."""

    doc: Any
    group: Any
    index: Any
    vocab: Mapping[str, int]  # a dict, or a stored index's VocabTable
    analyzer: Any


class BM25Path(SearchPath):
    """Exact BM25 over the analyzer's tokens (``method``, ``k1``, ``b``, ``delta``)."""

    kind = "bm25"
    analyzed = True
    shard = "bm25"
    param_names = BM25_PARAMS

    @classmethod
    def check(cls, params: Mapping[str, Any], similarity: str) -> dict[str, Any]:
        unknown = set(params) - set(BM25_PARAMS)
        if unknown:
            raise ConfigError(
                f"unknown BM25 parameters {sorted(unknown)}; known: {list(BM25_PARAMS)}"
            )
        check_bm25_params(**params)
        return dict(params)

    def bm25_params(self) -> dict[str, Any]:
        """The BM25 parameters among the state's (hybrid's include its fusion options)."""
        return {p: v for p, v in self.state.params.items() if p in BM25_PARAMS}

    def prepare(self, doc: Any, group: Any) -> BM25Prepared:
        analyzer = self.state.analyzer()
        index, vocab = doc.derived.bm25(group, analyzer, self.bm25_params(), self.state.num_workers)
        return BM25Prepared(doc, group, index, vocab, analyzer)

    def lexicons(self, doc: Any, group: Any) -> list[tuple[Any, Any]]:
        prepared = self.prepare(doc, group)
        return [(prepared.analyzer, prepared.vocab)]

    def store(self, doc: Any, group: Any) -> None:
        """Build and store the index (``doc.derived.store_bm25``): one streamed into the store
        is not loaded."""
        doc.derived.store_bm25(
            group, self.state.analyzer(), self.bm25_params(), self.state.num_workers
        )

    def search(
        self, prepared: BM25Prepared, queries: Sequence[str], k: int, mask: Any, *, fused=False
    ) -> Hits:
        """:meth:`SearchPath.search`; ``fused``: no cut-off (hybrid cuts the fused scores)."""
        doc, group, index, vocab, analyzer = prepared
        cutoff = None if fused else self.state.cutoff_for(None)
        for attempt in (0, 1):
            q_values, q_offsets = encode_queries(queries, analyzer, vocab)
            try:
                return index.search_csr(
                    q_values,
                    q_offsets,
                    k,
                    mask=mask,
                    cutoff=cutoff,
                    num_threads=self.state.num_threads,
                )
            except StoreError as exc:  # a stored index whose postings proved damaged
                if attempt:
                    raise
                index, vocab = doc.derived.rebuild_bm25(
                    group, analyzer, self.bm25_params(), self.state.num_workers, exc
                )
        raise AssertionError("unreachable")  # pragma: no cover
