"""Indexes: BM25 (numba), exact dense (FlatIndex), HNSW (hnswlib), filter expressions.

Submodules import their heavy dependencies lazily; import the classes from their modules
(``fastrag.indexes.bm25.BM25Index``) or from ``fastrag`` directly.
"""
