"""Retriever: top-k nodes of one group for one query or a batch, by BM25, dense or custom scores.

Every path returns the same triple of arrays, ``rows [n_q, k]`` (-1 padded), ``scores`` and
``counts``; ``__call__`` and ``batch`` turn them into ``NodeWithScore`` lists and ``batch_arrow``
into an Arrow table without per-hit Python objects. The single-query call is the batch call with
one query.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from fastrag._checks import check_topk
from fastrag.analysis import get_analyzer
from fastrag.documents.base import BaseDocument
from fastrag.documents.group import NodeGroup, full_metadata_json
from fastrag.embeddings.local import default_embedding
from fastrag.errors import ConfigError
from fastrag.indexes.base import Hits
from fastrag.indexes.filters import filter_mask
from fastrag.retrieval.args import (
    HIT_COLUMNS,
    check_columns,
    check_queries,
    group_by_filter,
    positional_args,
    takes_no_arguments,
)
from fastrag.retrieval.explain import uncertain_left_out, why_no_hits
from fastrag.retrieval.paths import BM25Path, MapPath, PathState, SearchPath
from fastrag.retrieval.similarity import Similarity, get_similarity
from fastrag.schema import NodeWithScore
from fastrag.settings import DEFAULT_TOPK

__all__ = [
    "HIT_COLUMNS",
    "Retriever",
]

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.documents.document import Document

logger = logging.getLogger(__name__)


class Retriever:
    """Top-k retrieval over one node group of a :class:`~fastrag.Document`.

    ``similarity``: "bm25" (any script: jieba for Han, bigrams for kana/Hangul, stemmed words
    otherwise), "bm25_english", "bm25_chinese" (jieba), "bm25_cjk" (CJK bigrams), "bm25_fused"
    (bm25 and bm25_cjk rankings fused; fusion options as hybrid's), "cosine",
    "dot", "hybrid" (BM25 and cosine over the Document's embedding, fused; the default
    embedding model when the Document has none), or a name registered with
    :func:`fastrag.register_similarity`. Hybrid options: ``fusion`` ("relative", the default:
    min-max normalized scores, weighted; or "rrf"), ``weights`` (BM25's, then each embed
    key's; default 0.6 and 0.4 shared), ``rrf_k`` (60) and ``depth`` (hits taken from each
    path before fusing, 50).
    ``index``: "default" (exact), "map" (every node whose text, or ``map_key`` metadata,
    equals the query string; ``topk`` does not apply, as in LazyLLM), "hnsw" (dense only;
    ``M``, ``ef_construction``, ``ef``).
    ``filter``: metadata equalities (dict), a filter expression string / builder (Spring AI
    syntax), or a callable on the group's Arrow table returning a boolean mask. ``stemmer``
    ("bm25", "bm25_english", "hybrid"): "auto" (the default: Latin script in each text's
    language for ``bm25``, English otherwise; Russian/Greek/Arabic by script), a Snowball
    language for Latin-script words, or None;
    ``analyzer``
    replaces the similarity's analyzer altogether. Extra keyword arguments are BM25 parameters
    (``method``, ``k1``, ``b``, ``delta``), HNSW parameters, or are passed to a custom
    similarity.

    Bad configuration fails here, not at the first query: an unknown group, similarity, BM25
    method or parameter, stemmer or analyzer, and a group with no nodes.
    """

    #: Spring AI's ``VectorStoreDocumentRetriever.FILTER_EXPRESSION``: a Query context key for a
    #: filter (it wins over the retriever's own ``filter``, as in Spring AI)
    FILTER_EXPRESSION = "vector_store_filter_expression"

    def __init__(
        self,
        doc: Document,
        group_name: str,
        similarity: str = "bm25",
        *args: Any,
        topk: int | None = None,
        similarity_cut_off: float | Mapping[str, float] | None = None,
        index: str = "default",
        filter: Any = None,
        analyzer: Callable[[str], list[str]] | str | None = None,
        stemmer: str | None = "auto",
        embed_keys: Sequence[str] | None = None,
        map_key: str | None = None,
        num_workers: int = 0,
        num_threads: int | None = None,
        **params: Any,
    ) -> None:
        given = {
            "topk": topk,
            "similarity_cut_off": similarity_cut_off,
            "index": index,
            "filter": filter,
        }
        set_by_name = {
            k for k, v in given.items() if v is not None and not (k == "index" and v == "default")
        }
        for name, value in positional_args(args, set_by_name).items():
            if name in set_by_name:
                raise ConfigError(
                    f"{name} given both by position and by keyword; pass "
                    f"Retriever(doc, group_name, similarity, {name}=...) once"
                )
            given[name] = value
        topk, similarity_cut_off = given["topk"], given["similarity_cut_off"]
        index, filter = given["index"], given["filter"]
        if topk is None:
            topk = DEFAULT_TOPK
        if not isinstance(doc, BaseDocument):
            raise ConfigError(f"doc must be a fastrag.Document, got {type(doc).__name__}")
        doc.check_group(group_name)
        self.doc = doc
        self.group_name = group_name
        self.sim: Similarity = get_similarity(similarity)
        self.similarity = similarity
        self.topk = check_topk(topk)
        if index not in ("default", "map", "hnsw"):
            raise ConfigError(f"unknown index {index!r}; use 'default', 'map' or 'hnsw'")
        kind = self.sim.path
        if index == "hnsw" and not kind.hnsw:
            raise ConfigError(
                f"index='hnsw' needs a dense similarity ('cosine', 'dot' or "
                f"'hybrid'), "
                f"not {similarity!r}"
            )
        self.index = index
        self.filter = filter
        self._warned: set[str] = set()  # warnings said (uncertain languages a filter leaves out)
        self.map_key = map_key
        self.num_workers = num_workers
        self.num_threads = num_threads
        if analyzer is not None and not kind.analyzed:
            raise ConfigError("analyzer= applies to BM25 and hybrid similarities only")
        self._analyzer_spec = analyzer
        self._analyzer_opts = self._check_stemmer(stemmer, analyzer)
        #: the stemmer the BM25 analyzer uses ("auto" resolved; None: no stemming)
        self.stemmer: str | None = None
        self.params = kind.check(params, similarity)
        if kind.analyzed:
            # built once now so a bad analyzer or stemmer (or a missing PyStemmer) fails here
            stem = getattr(self._analyzer(), "stemmer", None)
            self.stemmer = stem if isinstance(stem, str) else None
        self.embed_keys = self._check_embed_keys(embed_keys)
        self.similarity_cut_off = self._check_cutoff(similarity_cut_off)
        state = PathState(
            doc=doc,
            similarity=similarity,
            sim=self.sim,
            params=self.params,
            analyzer=self._analyzer,
            embed_keys=self.embed_keys,
            index=index,
            cutoff=self.similarity_cut_off,
            map_key=map_key,
            num_workers=num_workers,
            num_threads=num_threads,
        )
        #: the search path of this retriever's similarity (the map path with index="map")
        self.path: SearchPath = (MapPath if index == "map" else kind)(state)
        if len(doc.group(group_name)) == 0:  # builds the group now (it is lazy)
            raise ConfigError(_no_nodes(doc, group_name))

    # -- validation --------------------------------------------------------------------------
    def _check_stemmer(self, stemmer, analyzer) -> dict[str, Any]:
        """The analyzer options ``stemmer`` stands for ({} for the default "auto")."""
        if isinstance(stemmer, str) and stemmer == "auto":
            return {}
        if self.sim.analyzer not in ("bm25", "bm25_english"):
            raise ConfigError(
                f"stemmer={stemmer!r} applies to similarities 'bm25', 'bm25_english' and "
                f"'hybrid', not {self.similarity!r}; drop stemmer= or use similarity='bm25'"
            )
        if analyzer is not None:
            raise ConfigError(
                f"stemmer={stemmer!r} and analyzer= were both given; stemmer= configures the "
                "built-in 'bm25' analyzer, so drop it and set stemming on your analyzer "
                "(e.g. fastrag.analysis.EnglishAnalyzer(stemmer='english'))"
            )
        return {"stemmer": stemmer}

    def _check_embed_keys(self, embed_keys):
        if self.sim.path.default_embedding and embed_keys is None and not self.doc.embed:
            self.doc.embed.setdefault("default", default_embedding())
        if not self.sim.embedded:
            if embed_keys is not None:
                raise ConfigError("embed_keys applies to embedding similarities only")
            return None
        keys = list(embed_keys) if embed_keys is not None else list(self.doc.embed)
        if not keys:
            raise ConfigError(
                f"similarity {self.similarity!r} needs embeddings: create the Document with "
                "embed=Embedder or embed={'key': Embedder}"
            )
        missing = [k for k in keys if k not in self.doc.embed]
        if missing:
            raise ConfigError(
                f"unknown embed keys {missing}; the Document has {sorted(self.doc.embed)}"
            )
        return keys

    def _check_cutoff(self, cut):
        if cut is None:
            return None
        if isinstance(cut, Mapping):
            if self.embed_keys is None or not self.sim.path.per_key_cutoff:
                raise ConfigError("a per-key similarity_cut_off dict needs embedding similarity")
            unknown = set(cut) - set(self.embed_keys)
            if unknown:
                raise ConfigError(
                    f"similarity_cut_off has unknown keys {sorted(unknown)}; "
                    f"embed keys: {self.embed_keys}"
                )
            return {k: float(v) for k, v in cut.items()}
        if isinstance(cut, bool) or not isinstance(cut, (int, float)):
            raise ConfigError(f"similarity_cut_off must be a number or dict, got {cut!r}")
        return float(cut)

    # -- public API --------------------------------------------------------------------------
    def __call__(
        self, query: Any, *, filter: Any = None, topk: int | None = None
    ) -> list[NodeWithScore]:
        """The top-k nodes for ``query`` (a str, or a :class:`~fastrag.Query` whose
        ``context["filter"]`` applies as Spring AI's filter expression), best first (``[]``
        for an empty query)."""
        return self.batch([query], filter=filter, topk=topk)[0]

    def forward(self, query: Any, **kw: Any) -> list[NodeWithScore]:
        return self(query, **kw)

    retrieve = __call__  # LlamaIndex's retriever.retrieve(q)

    def batch(
        self, queries: Sequence[Any], *, filter: Any = None, topk: int | None = None
    ) -> list[list[NodeWithScore]]:
        """Top-k lists for many queries (str or :class:`~fastrag.Query`) in one pass per
        filter."""
        split = group_by_filter(queries, filter)
        if split is not None:
            out: list[list[NodeWithScore]] = [[] for _ in queries]
            for flt, idx in split:
                texts = [getattr(queries[i], "text", queries[i]) for i in idx]
                for i, hits in zip(idx, self.batch(texts, filter=flt, topk=topk), strict=True):
                    out[i] = hits
            return out
        group, (rows, scores, counts) = self._run(queries, filter, topk)
        out = []
        for q in range(len(rows)):
            c = int(counts[q])
            nodes = group.nodes(rows[q, :c])
            out.append(
                [NodeWithScore(n, float(s)) for n, s in zip(nodes, scores[q, :c], strict=True)]
            )
        return out

    def batch_arrow(
        self,
        queries: Sequence[str],
        *,
        filter: Any = None,
        topk: int | None = None,
        columns: Sequence[str] = (),
    ) -> pa.Table:
        """All hits as one Arrow table ``(query_idx, rank, node_id, score)``, best first;
        ``rank`` starts at 1, as everywhere in fastrag (CLI, server, Ray).

        ``columns``: more columns of each hit, taken from the group in one pass: ``"text"``
        and ``"metadata"`` (the node's complete metadata, its document's updated by its own,
        as a JSON string)."""
        extra = check_columns(columns)
        group, (rows, scores, counts) = self._run(queries, filter, topk)
        k = rows.shape[1] if rows.ndim == 2 else 0
        valid = np.arange(k)[None, :] < counts[:, None]
        qidx, rank = np.nonzero(valid)
        take = pa.array(rows[valid])
        out = {
            "query_idx": pa.array(qidx.astype(np.int32)),
            "rank": pa.array((rank + 1).astype(np.int32)),
            "node_id": group.table.column("id").take(take),
            "score": pa.array(scores[valid].astype(np.float32)),
        }
        if extra:
            taken = group.table.take(take)
            if "text" in extra:
                out["text"] = taken.column("text")
            if "metadata" in extra:
                out["metadata"] = (
                    taken.column("metadata")
                    if group.parent_name is None
                    else pa.array(full_metadata_json(taken, self.doc.group("root")), pa.string())
                )
        return pa.table(out)

    def why_no_hits(self, query: str, *, filter: Any = None) -> str:
        """Why ``query`` gets no hits (empty, no indexable terms, terms the group lacks, a
        language or script the analyzer cannot match, a filter or cut-off), with the fix."""
        flt = filter if filter is not None else self.filter
        group = self.doc.group(self.group_name)
        return why_no_hits(self, query, flt, self._mask(group, flt))

    def bm25_analyzer(self):
        """The analyzer this retriever's BM25 path tokenizes with (BM25 and hybrid only)."""
        if not self.sim.path.analyzed:
            raise ConfigError(f"similarity {self.similarity!r} has no BM25 analyzer")
        return self._analyzer()

    def bm25_vocabulary(self) -> Mapping[str, int]:
        """The BM25 index's terms (token -> id) of this retriever's group: a dict, or for an
        index read from a store a read-only
        :class:`~fastrag.analysis.vocabtable.VocabTable`, read the same way."""
        if not self.sim.path.analyzed:
            raise ConfigError(f"similarity {self.similarity!r} has no BM25 index")
        return BM25Path(self.path.state).prepare(self.doc, self.doc.group(self.group_name)).vocab

    def mask(self, filter: Any = None) -> np.ndarray | None:
        """The group's rows ``filter`` (default: this retriever's) keeps, as a bool mask; None
        when it keeps every row. A bad filter raises ConfigError."""
        flt = filter if filter is not None else self.filter
        return self._mask(self.doc.group(self.group_name), flt)

    def prepare(self, load: bool = True) -> None:
        """Build what this retriever searches now (the BM25 or dense index, stored when the
        store is writable) instead of at the first query. ``load=False``: for a process that
        only writes the store (``fastrag ingest``): a BM25 index streamed into the store is
        not opened in this one."""
        if not isinstance(load, bool):
            raise ConfigError(f"load must be True or False, got {load!r}")
        group = self.doc.group(self.group_name)
        if load:
            self.path.prepare(self.doc, group)
        else:
            self.path.store(self.doc, group)

    # -- core --------------------------------------------------------------------------------
    def _run(self, queries, filter, topk) -> tuple[NodeGroup, Hits]:
        check_queries(queries)
        k = self.topk if topk is None else check_topk(topk)
        group = self.doc.group(self.group_name)
        if len(group) == 0:  # emptied since construction (doc.delete)
            raise ConfigError(_no_nodes(self.doc, self.group_name))
        k = min(k, len(group))
        mask = self._mask(group, filter if filter is not None else self.filter)
        if self.index == "map":  # LazyLLM: every node whose key is the query, topk aside
            table = self.doc.derived.key_map(group, self.map_key)
            k = max((len(table.get(q, ())) for q in queries), default=0)
        nq = len(queries)
        empty = np.array([not q.strip() for q in queries], dtype=bool)
        rows = np.full((nq, k), -1, dtype=np.int64)
        scores = np.zeros((nq, k), dtype=np.float32)
        counts = np.zeros(nq, dtype=np.int32)
        todo = np.flatnonzero(~empty)
        if len(todo) and (mask is None or mask.any()):
            sub = [queries[i] for i in todo]
            r, s, c = self._search(group, sub, k, mask)
            rows[todo, : r.shape[1]] = r
            scores[todo, : s.shape[1]] = s
            counts[todo] = c
        return group, (rows, scores, counts)

    def _search(self, group, queries, k, mask) -> Hits:
        return self.path.search(self.path.prepare(self.doc, group), queries, k, mask)

    def _mask(self, group, flt) -> np.ndarray | None:
        if callable(flt) and not hasattr(flt, "build") and takes_no_arguments(flt):
            flt = flt()  # Spring AI's Supplier<String>: the expression of this moment
        if flt is None:
            return None
        n = len(group)
        if callable(flt) and not hasattr(flt, "build"):
            mask = np.asarray(flt(group.table))
            if mask.dtype != bool or mask.shape != (n,):
                raise ConfigError(
                    f"filter callable must return a bool mask of {n} rows, "
                    f"got dtype {mask.dtype} shape {mask.shape}"
                )
            return mask
        meta = group.metadata_table()
        if isinstance(flt, Mapping) and not flt:
            return None
        mask = np.asarray(filter_mask(meta, flt), dtype=bool)
        if meta.num_columns == 0:  # no metadata at all: nothing can match a condition
            mask = np.zeros(n, dtype=bool)
        warning = uncertain_left_out(meta, mask, flt)
        if warning is not None and warning not in self._warned:
            self._warned.add(warning)  # once per retriever and filter, not per query
            logger.warning(warning)
        return mask

    # -- analysis ----------------------------------------------------------------------------
    def _analyzer(self):
        spec = self._analyzer_spec if self._analyzer_spec is not None else self.sim.analyzer
        return get_analyzer(spec, **self._analyzer_opts)


# -- helpers -----------------------------------------------------------------------------------
def _no_nodes(doc: Document, group_name: str) -> str:
    """Why ``group_name`` has no nodes, and the fix."""
    n_roots = len(doc.group("root"))
    if n_roots == 0:
        return (
            f"group {group_name!r} has no nodes: the Document holds no documents (its "
            "sources gave no text, e.g. the source folder had no readable files); add "
            "documents with doc.add(...) or point the Document at files with text, then "
            "create the Retriever"
        )
    return (
        f"group {group_name!r} has no nodes: its transform made none from the Document's "
        f"{n_roots} root nodes; check the transform given to create_node_group, or "
        "retrieve from another group"
    )
