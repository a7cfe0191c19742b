"""fastrag beyond one machine, on Ray Data (the ``[ray]`` extra; Ray loads on the first call).

- :func:`retrieve`: batch retrieval of a Dataset of queries on a pool of actors, each with the
  store open read-only and memory-mapped; the rows of single-process ``batch_arrow``.
- :func:`build_index` / :func:`open_index`: a corpus partitioned into segment stores built in
  parallel, searched by a :class:`ShardedRetriever` whose BM25 segments share global
  statistics (exact scores and top-k of one index); ``add`` / ``delete`` / ``merge`` grow and
  compact it without a full rebuild.
- :func:`embed`: missing vectors of a group computed on actors, committed by the one writer.
- :func:`synthesize` / :func:`parse`: batch synthesis and LLM parsing on actors, with a
  global limit on LLM calls in flight.

Without Ray installed, every call raises :class:`~fastrag.MissingExtraError` naming the extra.
"""

from __future__ import annotations

import os
from typing import Any

from fastrag.distributed.jobs import embed, parse, retrieve, synthesize
from fastrag.distributed.sharded import (
    ShardedRetriever,
    check_spec,
    create,
    is_sharded,
    stored_group,
)

__all__ = ["ShardedRetriever", "build_index", "embed", "is_sharded", "open_index", "parse",
           "retrieve", "synthesize"]


def build_index(corpus: Any, path: str | os.PathLike, *, num_shards: int = 2,
                group_name: str = "root", similarity: str = "bm25", parent: str = "root",
                transform: Any = None, embed: Any = None, embed_key: str = "default",
                stemmer: str | None = "auto", executor: str = "auto", overwrite: bool = False,
                topk: int = 6, **params: Any) -> ShardedRetriever:
    """Partition ``corpus`` into ``num_shards`` segment stores under ``path``, built in
    parallel (Ray tasks when Ray is running or ``executor="ray"``; ``"local"``: here), and
    return the :class:`ShardedRetriever` over them.

    ``corpus``: a fastrag store directory, files or folders, a list of texts, or an Arrow
    table with a ``text`` column (optional ``id``; other columns become metadata).
    ``group_name``: "root", a built-in group, or a group made by ``transform`` from ``parent``.
    ``similarity``: a BM25 similarity (``params``: method, k1, b, delta) or "cosine"/"dot"
    with ``embed``. Segments keep documents in corpus order, so ties break as in one index.
    """
    transform, parent = stored_group(corpus, group_name, parent, transform)
    spec = check_spec(group_name, similarity, parent, params, stemmer, embed_key, transform,
                      embed)
    create(path, corpus, spec, num_shards=num_shards, transform=transform,
           embed=_embed_map(embed, embed_key), executor=executor, overwrite=overwrite)
    return ShardedRetriever(path, topk=topk, transform=transform,
                            embed=_embed_map(embed, embed_key))


def open_index(path: str | os.PathLike, *, topk: int = 6, transform: Any = None,
               embed: Any = None, **kw: Any) -> ShardedRetriever:
    """The :class:`ShardedRetriever` of a sharded index directory (``filter``,
    ``similarity_cut_off``, ``num_threads``, ``lock_timeout`` as keyword arguments)."""
    import json
    from pathlib import Path

    key = "default"
    if embed is not None and is_sharded(path):
        key = json.loads((Path(path) / "shards.json").read_text())["spec"]["embed_key"]
    return ShardedRetriever(path, topk=topk, transform=transform, embed=_embed_map(embed, key),
                            **kw)


def _embed_map(embed: Any, key: str) -> Any:
    if embed is None or isinstance(embed, dict):
        return embed
    return {key: embed}
