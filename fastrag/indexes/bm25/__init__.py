"""The BM25 index: :class:`BM25Index` (``index``) and its parts, one job each: parameter checks
(``args``), corpus statistics (``stats``) and the term weights from them (``weights``), the
NumPy path used while the kernels compile (``numpy_path``), packed postings (``packed``),
streamed builds (``stream``), the store's files (``stored``) and saving / loading
(``persist``)."""

from fastrag.indexes.bm25.index import BM25_METHODS, SEARCH_STRATEGIES, BM25Index

__all__ = ["BM25_METHODS", "SEARCH_STRATEGIES", "BM25Index"]
