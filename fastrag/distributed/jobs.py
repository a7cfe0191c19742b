"""Ray Data jobs: batch retrieval, embedding, synthesis and LLM parsing over a cluster.

Each job is a ``map_batches`` over Arrow batches with a fixed pool of actors (a callable class):
an actor opens what it needs once (a store read-only and memory-mapped, a synthesizer, a
parser) and handles batch after batch. Actors that die are restarted and their batch retried by
Ray; a row that cannot be handled becomes a row with an ``error`` message instead of failing
the job. Anything written to a store is written by the calling process, through the store's
single writer.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa

from fastrag._checks import check_int
from fastrag.distributed._ray import actor_options, init_if_needed, require_ray, to_dataset
from fastrag.distributed.manifest import is_sharded
from fastrag.distributed.sharded import ShardedRetriever, ranks_of
from fastrag.documents.document import Document
from fastrag.documents.embedding import check_vectors
from fastrag.errors import ConfigError
from fastrag.retrieval.retriever import Retriever
from fastrag.schema import DocNode
from fastrag.settings import DEFAULT_TOPK
from fastrag.transforms.base import NodeTransform

HIT_FIELDS = [
    pa.field("rank", pa.int32()),
    pa.field("node_id", pa.string()),
    pa.field("score", pa.float32()),
    pa.field("error", pa.string()),
]


# -- retrieval ---------------------------------------------------------------------------------
def _open_retriever(
    store: str, group_name: str, similarity: str, kwargs: dict, mode: str
) -> Retriever | ShardedRetriever:
    """The retriever of a store (or of a sharded index) for a job."""
    if is_sharded(store):
        return ShardedRetriever(store, **kwargs)
    embed = kwargs.pop("embed", None)
    doc = Document(store=store, mode=mode, embed=embed)
    return Retriever(doc, group_name, similarity, **kwargs)


class _RetrieveActor:
    """Holds one read-only retriever; turns a batch of query rows into hit rows."""

    def __init__(
        self,
        store: str,
        group_name: str,
        similarity: str,
        kwargs: dict,
        query_column: str,
        filter: Any,
    ) -> None:
        self.ret = _open_retriever(store, group_name, similarity, dict(kwargs), "r")
        self.query_column = query_column
        self.filter = filter

    def __call__(self, batch: pa.Table) -> pa.Table:
        queries = batch.column(self.query_column).to_pylist()
        good = [i for i, q in enumerate(queries) if isinstance(q, str)]
        parts = []
        if good:
            hits = self.ret.batch_arrow([queries[i] for i in good], filter=self.filter)
            qidx = hits.column("query_idx").to_numpy()
            rows = np.asarray(good, np.int64)[qidx]
            parts.append(
                _with_hits(
                    batch.take(pa.array(rows)),
                    pa.array(ranks_of(qidx)),
                    hits.column("node_id"),
                    hits.column("score"),
                    None,
                )
            )
        bad = [i for i, q in enumerate(queries) if not isinstance(q, str)]
        if bad:
            n = len(bad)
            msg = [f"{self.query_column} is {_what(queries[i])}, expected a string" for i in bad]
            parts.append(
                _with_hits(
                    batch.take(pa.array(bad, pa.int64())),
                    pa.nulls(n, pa.int32()),
                    pa.nulls(n, pa.string()),
                    pa.nulls(n, pa.float32()),
                    pa.array(msg, pa.string()),
                )
            )
        if not parts:
            return _with_hits(
                batch.slice(0, 0),
                pa.array([], pa.int32()),
                pa.array([], pa.string()),
                pa.array([], pa.float32()),
                None,
            )
        return pa.concat_tables(parts)


def _what(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _with_hits(base: pa.Table, rank, node_id, score, error) -> pa.Table:
    n = base.num_rows
    cols = {f.name: f for f in HIT_FIELDS}
    out = base
    for name, col in (
        ("rank", rank),
        ("node_id", node_id),
        ("score", score),
        ("error", error if error is not None else pa.nulls(n, pa.string())),
    ):
        if name in out.column_names:
            out = out.drop_columns([name])
        out = out.append_column(
            cols[name],
            pa.chunked_array([col]) if isinstance(col, pa.Array) else col.cast(cols[name].type),
        )
    return out


def retrieve(
    store: str | os.PathLike,
    queries: Any,
    *,
    group_name: str = "root",
    similarity: str = "bm25",
    topk: int = DEFAULT_TOPK,
    filter: Any = None,
    query_column: str = "query",
    batch_size: int = 1024,
    concurrency: int = 2,
    prepare: bool = True,
    **retriever_kwargs: Any,
) -> Any:
    """Top-k hits for every query row, on a pool of Ray actors; a ``ray.data.Dataset``.

    ``store``: a fastrag store directory (or a sharded index from :func:`build_index`).
    ``queries``: a ``ray.data.Dataset`` with a ``query_column``, an Arrow table, or a list of
    strings (tables and lists gain a ``query_index`` column: their row number). Each output
    row is one hit: the query row's own columns plus ``rank``, ``node_id``, ``score`` (the rows
    and values of single-process ``Retriever.batch_arrow``) and ``error`` (null; a message for
    a query row that is not a string, which then has null hit columns). A query with no hit
    has no row, as in ``batch_arrow``.

    Every actor opens the store read-only and memory-mapped once. ``prepare=True`` first
    builds and stores the index here (once, through the store's writer) when the store lacks
    it, so actors only map it. Other keyword arguments go to the :class:`~fastrag.Retriever`
    (``similarity_cut_off``, ``embed``, BM25 parameters, ...).
    """
    ray = require_ray("fastrag.ray.retrieve")
    batch_size = check_int("batch_size", batch_size, min=1)
    concurrency = check_int("concurrency", concurrency, min=1)
    store = os.fspath(store)
    kwargs = {"topk": topk, **retriever_kwargs}
    _prepare_store(store, group_name, similarity, dict(kwargs), filter, prepare)
    init_if_needed(ray)
    ds = to_dataset(ray, queries, query_column, batch_size)
    return ds.map_batches(
        _RetrieveActor,
        batch_size=batch_size,
        batch_format="pyarrow",
        fn_constructor_args=(store, group_name, similarity, kwargs, query_column, filter),
        **actor_options(concurrency),
    )


def _prepare_store(store, group_name, similarity, kwargs, filter, prepare) -> None:
    """Check the arguments here (not in every actor) and, with ``prepare``, build and store
    the index once."""
    if not os.path.isdir(store):
        raise ConfigError(
            f"store {store!r} is not a directory; build it first "
            "(fastrag ingest, fastrag.Document(..., store=...) or build_index)"
        )
    mode = "a" if prepare and not is_sharded(store) else "r"
    ret = _open_retriever(store, group_name, similarity, kwargs, mode)
    if is_sharded(store):
        ret._run([""], filter, None)  # validates the filter
        return
    ret.mask(filter)  # validates the filter
    if mode == "a":
        ret.prepare()


# -- embedding ---------------------------------------------------------------------------------
class _EmbedActor:
    def __init__(self, embedder: Any) -> None:
        self.emb = embedder() if isinstance(embedder, type) else embedder

    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = batch.column("text").to_pylist()
        ids = batch.column("id").to_pylist()
        vecs = self.emb.embed(texts) if hasattr(self.emb, "embed") else self.emb(texts)
        vecs = check_vectors(vecs, len(texts), ids, "ray", self.emb)
        flat = pa.array(np.ascontiguousarray(vecs).reshape(-1), pa.float32())
        return pa.table(
            {
                "pos": batch.column("pos"),
                "vector": pa.FixedSizeListArray.from_arrays(flat, vecs.shape[1]),
            }
        )


class _RayEmbedder:
    """An embedder whose ``embed`` runs on a Ray actor pool (the Document calls it once with
    every missing text)."""

    def __init__(self, ray, embedder, concurrency: int, batch_size: int) -> None:
        self.ray, self.embedder = ray, embedder
        self.concurrency, self.rows = concurrency, batch_size
        self.batch_size = 1 << 62  # the Document hands over every missing text in one call
        self.computed = 0
        self.dim = getattr(embedder, "dim", None)

    def embed(self, texts: list[str]) -> np.ndarray:
        table = pa.table(
            {
                "pos": pa.array(range(len(texts)), pa.int64()),
                "text": pa.array(texts, pa.large_string()),
                "id": pa.array([str(i) for i in range(len(texts))]),
            }
        )
        rows = max(1, min(self.rows, -(-len(texts) // self.concurrency)))  # every actor busy
        ds = to_dataset(self.ray, table, "text", rows, index=False)
        out = ds.map_batches(
            _EmbedActor,
            batch_size=rows,
            batch_format="pyarrow",
            fn_constructor_args=(self.embedder,),
            **actor_options(self.concurrency),
        ).to_arrow_refs()
        result = pa.concat_tables(self.ray.get(out))
        pos = result.column("pos").to_numpy()
        col = result.column("vector").combine_chunks()
        dim = col.type.list_size
        vecs = np.empty((len(texts), dim), np.float32)
        vecs[pos] = col.flatten().to_numpy().reshape(-1, dim)
        if len(np.unique(pos)) != len(texts):
            raise RuntimeError(f"the embedding job returned {len(pos)} rows for {len(texts)} texts")
        self.computed += len(texts)
        return vecs


def embed(
    store: str | os.PathLike,
    group_name: str,
    key: str,
    embedder: Any,
    *,
    concurrency: int = 2,
    batch_size: int = 256,
) -> dict[str, int]:
    """Compute the vectors a group is missing for embed key ``key`` on Ray actors and commit
    them to the store (from this process, through the store's single writer).

    ``embedder``: an Embedder (or callable ``texts -> vectors``) shipped to every actor, or an
    Embedder class each actor instantiates (so a model loads once per actor). Vectors already
    stored for unchanged nodes are kept. Returns ``{"nodes", "computed"}``.
    """
    ray = require_ray("fastrag.ray.embed")
    concurrency = check_int("concurrency", concurrency, min=1)
    batch_size = check_int("batch_size", batch_size, min=1)
    if not isinstance(key, str) or not key:
        raise ConfigError(f"key must be a non-empty string, got {key!r}")
    if embedder is None or not (
        isinstance(embedder, type) or hasattr(embedder, "embed") or callable(embedder)
    ):
        raise ConfigError(
            "embedder must be an Embedder, a callable texts -> vectors, or an Embedder class"
        )
    if not isinstance(embedder, type):
        check_reachable(embedder, "fastrag.ray.embed: the embedder")
    init_if_needed(ray)
    remote = _RayEmbedder(ray, embedder, concurrency, batch_size)
    doc = Document(store=store, embed={key: remote})
    group = doc.group(group_name)
    doc.derived.vectors(group, key)
    return {"nodes": len(group), "computed": remote.computed}


# -- LLM work ----------------------------------------------------------------------------------
_START_ONE = (
    "start an OpenAI-compatible server there (e.g. `ollama serve` and `ollama pull "
    "qwen2.5:7b`, or `vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000`) or point "
    "FASTRAG_LLM_BASE_URL (and FASTRAG_LLM_MODEL) at one"
)


def check_reachable(client: Any, what: str) -> None:
    """Fail fast, here, when the HTTP endpoint of ``client`` (an LLM or embedder with a
    ``base_url``; or what holds one as ``llm``) refuses connections, instead of a job whose
    every row is an error. Anything else (no base_url, a slow server) is left to the job."""
    for obj in (client, getattr(client, "llm", None)):
        url = getattr(obj, "base_url", None)
        if isinstance(url, str):
            break
    else:
        return
    parts = urlsplit(url)
    if not parts.hostname:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=3.0).close()
    except (ConnectionRefusedError, socket.gaierror) as exc:
        reason = (
            "connection refused"
            if isinstance(exc, ConnectionRefusedError)
            else f"unknown host {parts.hostname!r}"
        )
        raise ConfigError(f"{what}: no server answers at {url} ({reason}); {_START_ONE}") from None
    except OSError:
        return


def _split_limit(max_llm_calls: int, concurrency: int) -> int:
    max_llm_calls = check_int("max_llm_calls", max_llm_calls, min=1)
    if max_llm_calls < concurrency:
        raise ConfigError(
            f"max_llm_calls={max_llm_calls} is below concurrency={concurrency} "
            "actors; every actor needs at least one call in flight"
        )
    return max_llm_calls // concurrency


class _SynthActor:
    def __init__(
        self, synthesizer: Any, per_actor: int, query_column: str, contexts_column: str
    ) -> None:
        self.synth = (
            synthesizer()
            if callable(synthesizer) and not hasattr(synthesizer, "abatch")
            else synthesizer
        )
        self.synth.max_concurrency = per_actor  # this actor's share of the global limit
        self.query_column, self.contexts_column = query_column, contexts_column

    def __call__(self, batch: pa.Table) -> pa.Table:
        queries = batch.column(self.query_column).to_pylist()
        contexts = batch.column(self.contexts_column).to_pylist()
        ok = [
            i
            for i, (q, c) in enumerate(zip(queries, contexts, strict=True))
            if isinstance(q, str) and isinstance(c, list) and all(isinstance(t, str) for t in c)
        ]
        answers: list[str | None] = [None] * len(queries)
        errors: list[str | None] = [None] * len(queries)
        calls = [0] * len(queries)
        for i in set(range(len(queries))) - set(ok):
            errors[i] = (
                f"{self.query_column} must be a string and {self.contexts_column} a list of strings"
            )
        if ok:
            out = self.synth.batch(
                [queries[i] for i in ok],
                [contexts[i] for i in ok],
                return_exceptions=True,
                show_progress=False,
            )
            for i, resp in zip(ok, out, strict=True):
                if isinstance(resp, BaseException):
                    errors[i] = f"{type(resp).__name__}: {resp}"
                else:
                    answers[i] = resp.response
                    calls[i] = int(resp.metadata.get("llm_calls", 0))
        return (
            batch.append_column("response", pa.array(answers, pa.string()))
            .append_column("llm_calls", pa.array(calls, pa.int32()))
            .append_column("error", pa.array(errors, pa.string()))
        )


def synthesize(
    data: Any,
    synthesizer: Any,
    *,
    query_column: str = "query",
    contexts_column: str = "contexts",
    concurrency: int = 2,
    max_llm_calls: int = 64,
    batch_size: int = 64,
) -> Any:
    """Answer every row's query from its contexts on Ray actors; a ``ray.data.Dataset``.

    ``data``: a Dataset (or Arrow table) with ``query_column`` (str) and ``contexts_column``
    (list of str: e.g. the retrieved texts). ``synthesizer``: a fastrag synthesizer
    (``fr.get_response_synthesizer(...)``, shipped to each actor) or a zero-argument factory
    returning one. Each actor runs its batches with fastrag's async core; at most
    ``max_llm_calls`` LLM calls are in flight over the whole pool (each actor gets
    ``max_llm_calls // concurrency``). Output: the input columns plus ``response``,
    ``llm_calls`` and ``error`` (a failed query is an error row, not a failed job).
    """
    ray = require_ray("fastrag.ray.synthesize")
    concurrency = check_int("concurrency", concurrency, min=1)
    batch_size = check_int("batch_size", batch_size, min=1)
    per_actor = _split_limit(max_llm_calls, concurrency)
    if not (hasattr(synthesizer, "abatch") or callable(synthesizer)):
        raise ConfigError(
            "synthesizer must be a fastrag synthesizer "
            "(fr.get_response_synthesizer(...)) or a factory returning one"
        )
    if hasattr(synthesizer, "abatch"):
        check_reachable(synthesizer, "fastrag.ray.synthesize: the synthesizer's LLM")
    init_if_needed(ray)
    ds = to_dataset(ray, data, query_column, batch_size)
    if contexts_column not in ds.schema().names:
        raise ConfigError(
            f"the data has no column {contexts_column!r}; its columns are {ds.schema().names}"
        )
    return ds.map_batches(
        _SynthActor,
        batch_size=batch_size,
        batch_format="pyarrow",
        fn_constructor_args=(synthesizer, per_actor, query_column, contexts_column),
        **actor_options(concurrency),
    )


class _ParseActor:
    def __init__(self, parser: Any, per_actor: int) -> None:
        self.parser = parser() if isinstance(parser, type) else parser
        if hasattr(self.parser, "max_concurrency"):
            self.parser.max_concurrency = per_actor
        self.parser.show_progress = False

    def __call__(self, batch: pa.Table) -> pa.Table:
        nodes = [
            DocNode(text=t, metadata=json.loads(m), id=i)
            for t, m, i in zip(
                batch.column("text").to_pylist(),
                batch.column("metadata").to_pylist(),
                batch.column("id").to_pylist(),
                strict=True,
            )
        ]
        children = self.parser.batch_transform(nodes)
        texts, metas = [], []
        for kids in children:
            texts.append([k.text if hasattr(k, "text") else str(k) for k in kids])
            metas.append(
                [json.dumps(getattr(k, "metadata", {}) or {}, ensure_ascii=False) for k in kids]
            )
        return pa.table(
            {
                "pos": batch.column("pos"),
                "children": pa.array(texts),
                "children_metadata": pa.array(metas),
            }
        )


class _RayParser(NodeTransform):
    """A node transform that runs another transform's ``batch_transform`` on Ray actors; its
    identity is the inner transform's, so the stored group is the same group."""

    trans_node = True

    def __init__(self, ray, parser, concurrency: int, per_actor: int, batch_size: int) -> None:
        self.ray, self.parser = ray, parser
        self.concurrency, self.per_actor, self.rows = concurrency, per_actor, batch_size
        self.parsed = 0

    def _inner(self) -> Any:
        return self.parser() if isinstance(self.parser, type) else self.parser

    def identity(self) -> str:
        return self._inner().identity()

    def spec(self) -> dict | None:
        return self._inner().spec()

    def __call__(self, node):
        return self.batch_transform([node])[0]

    def transform(self, node):
        return self(node)

    def batch_transform(self, nodes: list) -> list[list]:
        table = pa.table(
            {
                "pos": pa.array(range(len(nodes)), pa.int64()),
                "text": pa.array([n.text for n in nodes], pa.large_string()),
                "metadata": pa.array(
                    [json.dumps(n.metadata or {}, ensure_ascii=False) for n in nodes]
                ),
                "id": pa.array([n.id for n in nodes]),
            }
        )
        rows = max(1, min(self.rows, -(-len(nodes) // self.concurrency)))  # every actor busy
        ds = to_dataset(self.ray, table, "text", rows, index=False)
        out = ds.map_batches(
            _ParseActor,
            batch_size=rows,
            batch_format="pyarrow",
            fn_constructor_args=(self.parser, self.per_actor),
            **actor_options(self.concurrency),
        ).to_arrow_refs()
        result = pa.concat_tables(self.ray.get(out)).sort_by("pos")
        if result.num_rows != len(nodes) or result.column("pos").to_pylist() != list(
            range(len(nodes))
        ):
            raise RuntimeError(
                f"the parse job returned {result.num_rows} rows for {len(nodes)} nodes"
            )
        self.parsed += len(nodes)
        return [
            [DocNode(text=t, metadata=json.loads(m)) for t, m in zip(ts, ms, strict=True)]
            for ts, ms in zip(
                result.column("children").to_pylist(),
                result.column("children_metadata").to_pylist(),
                strict=True,
            )
        ]


def parse(
    store: str | os.PathLike,
    group_name: str,
    parser: Any,
    *,
    parent: str = "root",
    concurrency: int = 2,
    max_llm_calls: int = 64,
    batch_size: int = 64,
) -> dict[str, int]:
    """Build node group ``group_name`` of a store with an LLM parser (``fr.LLMParser``, or its
    class) running on Ray actors; the group is committed from this process through the
    store's single writer, under the parser's own identity (so a later
    ``create_node_group(group_name, transform=parser)`` finds it built). At most
    ``max_llm_calls`` LLM calls are in flight over the pool. Returns ``{"parents", "nodes"}``.
    """
    ray = require_ray("fastrag.ray.parse")
    concurrency = check_int("concurrency", concurrency, min=1)
    batch_size = check_int("batch_size", batch_size, min=1)
    per_actor = _split_limit(max_llm_calls, concurrency)
    inner = parser() if isinstance(parser, type) else parser
    if not hasattr(inner, "batch_transform") or not hasattr(inner, "identity"):
        raise ConfigError(
            "parser must be a fastrag node transform with batch_transform "
            "(fr.LLMParser) or its class"
        )
    check_reachable(inner, "fastrag.ray.parse: the parser's LLM")
    init_if_needed(ray)
    remote = _RayParser(ray, parser, concurrency, per_actor, batch_size)
    doc = Document(store=store)
    doc.create_node_group(group_name, transform=remote, parent=parent)
    group = doc.group(group_name)
    return {"parents": remote.parsed, "nodes": len(group)}
