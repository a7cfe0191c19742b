"""What a similarity's search path is: :class:`SearchPath` (check, prepare, search) and the
:class:`PathState` a Retriever hands it. A path never reads the Retriever."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fastrag.errors import ConfigError
from fastrag.indexes.base import Hits

__all__ = ["PathState", "SearchPath"]


@dataclass(frozen=True)
class PathState:
    """What a path searches with, checked by the Retriever: the Document (its derived-data
    owner builds and keeps the indexes), the similarity's name and registry row, its checked
    parameters, the analyzer it tokenizes with, the embed keys, the index kind, the
    similarity cut-off and the worker and thread counts."""

    doc: Any
    similarity: str
    sim: Any  # the registry row, fastrag.retrieval.similarity.Similarity
    params: Mapping[str, Any] = field(default_factory=dict)
    analyzer: Any = None  # a callable making the analyzer (BM25 paths)
    embed_keys: Sequence[str] | None = None
    index: str = "default"
    cutoff: float | Mapping[str, float] | None = None
    map_key: str | None = None
    num_workers: int = 0
    num_threads: int | None = None

    def cutoff_for(self, key: str | None) -> float | None:
        """The cut-off of the scores of embed key ``key`` (None: the one for all paths)."""
        cut = self.cutoff
        return cut.get(key) if isinstance(cut, Mapping) else cut


class SearchPath:
    """One kind of similarity: how its parameters are checked, what it prepares from a group
    (an index, vectors), and how it searches a batch of query strings for :data:`Hits`.

    Class attributes say what the kind uses, so callers ask them instead of its name:
    ``analyzed`` (tokenizes with a BM25 analyzer: ``analyzer=``, ``stemmer=``),
    ``embedded`` (scores with the Document's embeddings), ``default_embedding`` (uses the
    default embedding model when the Document has none), ``hnsw`` (``index="hnsw"``
    applies), ``per_key_cutoff`` (a cut-off per embed key), ``stored`` (what it prepares is
    kept in the store; False: built in each process's memory), ``shard`` (how a sharded index
    searches it: ``"bm25"`` corpus statistics merged across segments, ``"vectors"`` queries
    embedded once and every segment scored, ``"local"`` each segment searched on its own and
    the hits merged by score; None: it cannot be sharded)."""

    kind: ClassVar[str] = ""
    analyzed: ClassVar[bool] = False
    embedded: ClassVar[bool] = False
    default_embedding: ClassVar[bool] = False
    hnsw: ClassVar[bool] = False
    per_key_cutoff: ClassVar[bool] = False
    stored: ClassVar[bool] = True
    shard: ClassVar[str | None] = "local"
    param_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, state: PathState) -> None:
        self.state = state

    @classmethod
    def check(cls, params: Mapping[str, Any], similarity: str) -> dict[str, Any]:
        """The parameters this kind takes, checked (ConfigError naming the bad one)."""
        unknown = set(params) - set(cls.param_names)
        if unknown:
            raise ConfigError(
                f"unknown parameters {sorted(unknown)} for similarity {similarity!r}; known: "
                f"{list(cls.param_names)}"
            )
        return dict(params)

    def prepare(self, doc: Any, group: Any) -> Any:
        """What searching ``group`` needs (built or loaded through ``doc.derived``)."""
        return group

    def store(self, doc: Any, group: Any) -> None:
        """Build what searching ``group`` needs into ``doc``'s store, keeping in memory only
        what :meth:`prepare` would (a path that can leave it in the store overrides this)."""
        self.prepare(doc, group)

    def search(self, prepared: Any, queries: Sequence[str], k: int, mask: Any) -> Hits:
        """Top-``k`` rows of ``prepared``'s group for each query, allowed by ``mask``."""
        raise NotImplementedError

    def lexicons(self, doc: Any, group: Any) -> list[tuple[Any, Any]]:
        """(analyzer, vocabulary) of each BM25 index this path searches in ``group`` (what
        a query's terms must meet to score); none for a path without one."""
        return []
