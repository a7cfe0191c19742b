"""Embedders by name, and the record a store keeps of the embedder that made its vectors.

``fastrag ingest --embed NAME`` embeds with :func:`embedder_by_name`; the store writes
:func:`embedder_record` beside the vectors, and a Document opened on that store without
``embed=`` gets the same embedder back (:func:`recorded_embedders`), so ``fastrag search``,
``fastrag serve`` and the MCP server embed queries as the vectors were embedded, with no
separate step. A record names the embedder and the exact weights (a static table's digest,
the model's name), so vectors made by other weights are never reused as if they were these.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from fastrag.embeddings.local import default_embedding, default_model_of
from fastrag.embeddings.static import StaticEmbedding
from fastrag.errors import ConfigError

__all__ = [
    "EMBEDDER_NAMES",
    "RecordedEmbedder",
    "embedder_by_name",
    "embedder_record",
    "recorded_embedders",
]

#: ``static`` is the static table of MiniLM (built in ~20 s; better than e5-small's on four of
#: the five sets of bench/results/quality_static_*.md at either fusion weighting); ``e5-small``
#: and ``minilm`` are the packaged transformer models (the ``embed`` extra).
EMBEDDER_NAMES = ("static", "static-minilm", "static-e5-small", "e5-small", "minilm")
_STATIC_DEFAULT = "static-minilm"


def embedder_by_name(name: str, progress: Any = None) -> Any:
    """The embedder called ``name`` (one of :data:`EMBEDDER_NAMES`). A static table is
    distilled into the cache first if missing (as ``fastrag embed --build-static`` does;
    ``progress(done, total)`` is called as it goes)."""
    if not isinstance(name, str) or name not in EMBEDDER_NAMES:
        raise ConfigError(
            f"unknown embedder {name!r}; choose one of {', '.join(EMBEDDER_NAMES)} "
            "(static: a table distilled from MiniLM, thousands of texts per second)"
        )
    if name == "static":
        name = _STATIC_DEFAULT
    if name.startswith("static-"):
        return StaticEmbedding.from_model(name.removeprefix("static-"), progress=progress)
    return default_embedding(name)


def embedder_record(emb: Any) -> dict | None:
    """What rebuilds ``emb`` exactly (``{"name", "dim", "weights"}``), or None for an embedder
    that only the caller can rebuild (their own model, a service, a callable)."""
    if isinstance(emb, RecordedEmbedder):
        return emb.record
    if isinstance(emb, StaticEmbedding):
        model = emb.table.meta.get("model")
        if f"static-{model}" not in EMBEDDER_NAMES or emb.dim != 256:
            return None
        digest = str(emb.table.meta.get("sha256", {}).get("table.i8", ""))[:16]
        return {"name": f"static-{model}", "dim": emb.dim, "weights": digest}
    model = default_model_of(emb)
    if model is None:
        return None
    return {"name": model, "dim": int(emb.dim), "weights": str(emb.name)}


class RecordedEmbedder:
    """The embedder a store's record names, built on first use (a Document opened on the store
    loads no model until it embeds). Checks that the weights are the recorded ones."""

    def __init__(self, record: dict) -> None:
        self.record = dict(record)
        self.name = str(record["name"])
        self.dim = int(record["dim"])
        self._emb: Any = None
        self._lock = threading.Lock()

    def _get(self) -> Any:
        with self._lock:
            if self._emb is None:
                emb = embedder_by_name(self.name)
                now = embedder_record(emb)
                if now != self.record:
                    raise ConfigError(
                        f"the store's vectors were embedded by {self.record}, but {self.name!r} "
                        f"here is {now}: pass embed= with the embedder that made them, or "
                        "re-embed under a new embed key"
                    )
                self._emb = emb
            return self._emb

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._get().embed(texts)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._get().embed_queries(texts)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self._get(), attr)

    def __repr__(self) -> str:
        return f"RecordedEmbedder({self.name!r})"


def recorded_embedders(manifest: dict) -> dict[str, RecordedEmbedder]:
    """``{embed key: embedder}`` for the embed keys whose vectors in ``manifest`` carry a
    record (one per key: the first group's)."""
    out: dict[str, RecordedEmbedder] = {}
    for entry in manifest.get("vectors", {}).values():
        rec = entry.get("embedder")
        key = entry.get("key")
        if isinstance(rec, dict) and rec.get("name") in EMBEDDER_NAMES and key not in out:
            try:
                out[key] = RecordedEmbedder(rec)
            except (KeyError, TypeError, ValueError):  # a damaged record: as if none
                continue
    return out
