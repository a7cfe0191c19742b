"""fastrag beyond one machine, on Ray Data (the ``[ray]`` extra; Ray loads on the first call).

- :func:`retrieve`: batch retrieval of a Dataset of queries on a pool of actors, each with the
  store open read-only and memory-mapped; the rows of single-process ``batch_arrow``.
- :func:`build_index` / :func:`open_index`: a corpus (a Ray Dataset read and built by the
  workers, a store, files, texts or a table) partitioned into segment stores built in
  parallel, searched by a :class:`ShardedRetriever` whose BM25 segments share global
  statistics (exact scores and top-k of one index); ``add`` / ``delete`` / ``merge`` grow and
  compact it without a full rebuild.
- :func:`embed`: missing vectors of a group computed on actors, committed by the one writer.
- :func:`synthesize` / :func:`parse`: batch synthesis and LLM parsing on actors, with a
  global limit on LLM calls in flight.

Without Ray installed, every call raises :class:`~fastrag.MissingExtraError` naming the extra.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fastrag.distributed.build import check_spec, create, stored_group
from fastrag.distributed.jobs import embed, parse, retrieve, synthesize
from fastrag.distributed.manifest import MANIFEST, is_sharded
from fastrag.distributed.sharded import ShardedRetriever
from fastrag.settings import DEFAULT_TOPK

__all__ = [
    "ShardedRetriever",
    "build_index",
    "embed",
    "is_sharded",
    "open_index",
    "parse",
    "retrieve",
    "synthesize",
]


def build_index(
    corpus: Any,
    path: str | os.PathLike,
    *,
    num_shards: int | None = None,
    group_name: str = "root",
    similarity: str = "bm25",
    parent: str = "root",
    transform: Any = None,
    embed: Any = None,
    embed_key: str = "default",
    stemmer: str | None = "auto",
    executor: str = "auto",
    overwrite: bool = False,
    topk: int = DEFAULT_TOPK,
    **params: Any,
) -> ShardedRetriever:
    """Build a sharded index of ``corpus`` under ``path`` (segments built in parallel) and
    return the :class:`ShardedRetriever` over it; its results equal one index over the same
    documents in the same order (ids, ranks, float32 scores).

    ``corpus``:

    - a ``ray.data.Dataset`` with a ``text`` column (optional ``id``; other columns become
      metadata), e.g. ``ray.data.read_parquet(...)`` / ``read_json`` / ``read_text``; or a glob
      or ``.parquet`` paths, which Ray Data reads. Ray workers build one segment per block
      where the block is, and the driver only sees each segment's size: nothing of the corpus
      passes through it. Without an ``id`` column the default ids need each row's global
      position, so the blocks are first materialised in the cluster's object store.
      ``num_shards`` repartitions the Dataset (an ordered split); None keeps its blocks.
    - a fastrag store directory, files or folders (fastrag's readers), a list of texts, or an
      Arrow table like the Dataset's: read here and cut into ``num_shards`` (default 2)
      segments, built in Ray tasks when Ray is running or ``executor="ray"`` (``"local"``:
      here, one after another).

    ``group_name``: "root", a built-in group, a group the store ``corpus`` holds with a
    recorded transform (every ``fastrag ingest --group`` group), or a group made by
    ``transform`` from ``parent``. ``similarity``: a BM25 similarity (``params``: method, k1,
    b, delta) or "cosine"/"dot" with ``embed``. ``path`` must be on storage every worker
    writes to (a shared filesystem on a multi-node cluster).
    """
    transform, parent = stored_group(corpus, group_name, parent, transform)
    spec = check_spec(group_name, similarity, parent, params, stemmer, embed_key, transform, embed)
    create(
        path,
        corpus,
        spec,
        num_shards=num_shards,
        transform=transform,
        embed=_embed_map(embed, embed_key),
        executor=executor,
        overwrite=overwrite,
    )
    return ShardedRetriever(
        path, topk=topk, transform=transform, embed=_embed_map(embed, embed_key)
    )


def open_index(
    path: str | os.PathLike,
    *,
    topk: int = DEFAULT_TOPK,
    transform: Any = None,
    embed: Any = None,
    **kw: Any,
) -> ShardedRetriever:
    """The :class:`ShardedRetriever` of a sharded index directory (``filter``,
    ``similarity_cut_off``, ``num_threads``, ``lock_timeout`` as keyword arguments)."""
    key = "default"
    if embed is not None and is_sharded(path):
        key = json.loads((Path(path) / MANIFEST).read_text())["spec"]["embed_key"]
    return ShardedRetriever(
        path, topk=topk, transform=transform, embed=_embed_map(embed, key), **kw
    )


def _embed_map(embed: Any, key: str) -> Any:
    if embed is None or isinstance(embed, dict):
        return embed
    return {key: embed}
