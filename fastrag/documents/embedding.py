"""A Document's embedders and their vectors: the ``embed=`` argument checked, an embedder's
output checked, query vectors, and the Arrow form vectors are stored in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from fastrag.errors import ConfigError, EmbeddingError
from fastrag.settings import Settings


def normalize_embed(embed: Any) -> dict[str, Any]:
    """``embed=`` as ``{key: embedder}``: one embedder (or callable) is ``{"default": it}``;
    None is ``fr.Settings.embed_model`` (or no embedder)."""
    if embed is None:
        embed = Settings.embed_model
    if embed is None:
        return {}
    if isinstance(embed, Mapping):
        for key, emb in embed.items():
            if not isinstance(key, str) or not key:
                raise ConfigError(f"embed keys must be non-empty strings, got {key!r}")
            if not hasattr(emb, "embed") and not callable(emb):
                raise ConfigError(f"embed[{key!r}] must be an Embedder or a callable")
        return dict(embed)
    if not hasattr(embed, "embed") and not callable(embed):
        raise ConfigError("embed must be an Embedder, a callable, or a dict of them")
    return {"default": embed}


def embed_query_vectors(emb: Any, queries: Sequence[str], key: str = "default") -> np.ndarray:
    """Query vectors from one embedder (``embed_query`` is used where the model has it)."""
    if hasattr(emb, "embed_queries"):
        vecs = emb.embed_queries(list(queries))
    elif hasattr(emb, "embed_query"):
        vecs = [np.asarray(emb.embed_query(q), dtype=np.float32) for q in queries]
    else:
        vecs = emb.embed(list(queries)) if hasattr(emb, "embed") else emb(list(queries))
    return check_vectors(vecs, len(queries), [f"query {i}" for i in range(len(queries))], key, emb)


def embedder_name(emb: Any) -> str:
    """How errors name an embedder: its ``model``, else its class."""
    return getattr(emb, "model", None) or type(emb).__name__


def check_vectors(vecs: Any, n: int, ids: list[str], key: str, emb: Any) -> np.ndarray:
    """``vecs`` as an ``(n, dim)`` float32 array, or an EmbeddingError naming the embed key,
    the embedder and the shape."""

    def fail(what: str) -> EmbeddingError:
        return EmbeddingError(f"embed key {key!r} returned {what} (embedder {embedder_name(emb)})")

    try:
        arr = np.asarray(vecs, dtype=np.float32)
    except (ValueError, TypeError) as exc:
        shapes = sorted({np.shape(v) for v in vecs}) if isinstance(vecs, (list, tuple)) else "?"
        raise fail(
            f"a batch that is not an (n, dim) array of numbers for {n} texts (row "
            f"shapes {shapes}: {exc}); an embedder must return an (n, dim) array"
        ) from exc
    if arr.ndim != 2 or arr.shape[0] != n:
        raise fail(f"shape {arr.shape} for {n} texts; an embedder must return an (n, dim) array")
    if arr.shape[1] == 0:
        raise fail(f"an empty vector for node {ids[0]!r}")
    dim = getattr(emb, "dim", None)
    if isinstance(dim, int) and dim > 0 and arr.shape[1] != dim:
        raise fail(f"dimension {arr.shape[1]} for node {ids[0]!r}, but the embedder's dim is {dim}")
    bad = np.flatnonzero(~np.isfinite(arr).all(axis=1))
    if len(bad):
        raise fail(f"NaN/inf for node {ids[bad[0]]!r}")
    return arr


def vector_schema(dim: int) -> pa.Schema:
    """The Arrow schema of a stored vectors table of dimension ``dim``."""
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), int(dim))),
        ]
    )


def to_numpy(col: pa.ChunkedArray, dim: int) -> np.ndarray:
    """A ``fixed_size_list<float32>`` column as an ``(n, dim)`` array (zero-copy for one chunk)."""
    parts = [c.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim) for c in col.chunks]
    if not parts:
        return np.zeros((0, dim), dtype=np.float32)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
