"""Search paths, one module per kind of similarity: each checks its parameters, prepares what
it searches from a group (through the Document's derived-data owner) and searches a batch of
queries for :data:`~fastrag.indexes.base.Hits`, handed its state (:class:`PathState`), never
the Retriever. The similarity registry (:mod:`fastrag.retrieval.similarity`) maps each name to
its path; adding a kind is one module here and one registry row."""

from __future__ import annotations

from fastrag.retrieval.paths.base import PathState, SearchPath
from fastrag.retrieval.paths.bm25 import BM25Path
from fastrag.retrieval.paths.custom import CustomPath
from fastrag.retrieval.paths.dense import DensePath
from fastrag.retrieval.paths.fused import FusedBM25Path
from fastrag.retrieval.paths.hybrid import HybridPath
from fastrag.retrieval.paths.map import MapPath
from fastrag.retrieval.paths.sparse import SparsePath

__all__ = [
    "BM25Path",
    "CustomPath",
    "DensePath",
    "FusedBM25Path",
    "HybridPath",
    "MapPath",
    "PathState",
    "SearchPath",
    "SparsePath",
]
