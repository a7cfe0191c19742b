"""``BaseDocument``: what the layers above read from a Document.

Retrievers, pipelines and chat engines check their ``doc`` argument against this interface
and call only these members, so they need not import :class:`~fastrag.Document` (which itself
offers one-line entry points into those layers).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.documents.group import NodeGroup
    from fastrag.documents.indexes import DerivedData


class BaseDocument(ABC):
    """Node groups by name, the embedders (``embed``: key -> embedder) and the owner of the
    derived data (``derived``: vectors and indexes per group)."""

    embed: dict[str, Any]
    derived: DerivedData

    @abstractmethod
    def group(self, name: str) -> NodeGroup:
        """The built group ``name``."""

    @abstractmethod
    def check_group(self, name: str) -> None:
        """Raise ConfigError naming the known groups when ``name`` is not registered."""

    @abstractmethod
    def embed_queries(self, queries: list[str], key: str = "default") -> np.ndarray:
        """Query vectors for one embed key."""

    @abstractmethod
    def embed_sparse_queries(self, queries: list[str], key: str = "default") -> list[dict]:
        """Sparse query vectors (``{token: weight}`` dicts) of a sparse embed key."""
