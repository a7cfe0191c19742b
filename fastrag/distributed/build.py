"""Building a sharded index: the corpus read into root rows, cut into segments, built (in Ray
tasks or here) into temp folders, renamed into place and committed; and the checks of what
it builds, made before any work starts."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from fastrag._checks import check_int
from fastrag.distributed._ray import require_ray
from fastrag.distributed.dataset import as_dataset, build_dataset
from fastrag.distributed.manifest import (
    FORMAT,
    MANIFEST,
    TMP_PREFIX,
    collect_garbage,
    is_sharded,
    locked,
    new_segment_name,
    write_manifest,
)
from fastrag.distributed.segment import IndexSpec, build_segment
from fastrag.documents.building import transform_from_spec
from fastrag.documents.document import Document
from fastrag.errors import ConfigError
from fastrag.retrieval.similarity import get_similarity

ROOT_COLUMNS = ["id", "text", "metadata"]


def root_table(source: Any) -> pa.Table:
    """``(id, text, metadata)`` of the root documents of ``source``: a fastrag store directory,
    files or folders (a path or a list of paths), a list of texts, or an Arrow table with a
    ``text`` column (optional ``id``; other columns become metadata)."""
    if isinstance(source, pa.Table):
        if "text" not in source.column_names:
            raise ConfigError(f"the table needs a 'text' column; it has {source.column_names}")
        texts = source.column("text").to_pylist()
        ids = source.column("id").to_pylist() if "id" in source.column_names else None
        other = [c for c in source.column_names if c not in ("text", "id")]
        metas = source.select(other).to_pylist() if other else None
        doc = Document.from_texts(texts, metas, ids)
    elif isinstance(source, (str, os.PathLike)) and (Path(source) / "manifest.json").is_file():
        doc = Document(store=source, mode="r")
    elif isinstance(source, (str, os.PathLike)) or (
        isinstance(source, Sequence) and source and all(isinstance(x, os.PathLike) for x in source)
    ):
        doc = Document(source)
    elif isinstance(source, Sequence) and not isinstance(source, str):
        doc = Document.from_texts(list(source))
    else:
        raise ConfigError(
            "the corpus must be a fastrag store directory, files or folders, a list of texts, "
            f"or an Arrow table with a 'text' column; got {type(source).__name__}"
        )
    return doc.group("root").table.select(ROOT_COLUMNS)


def segment_roots(path: Path) -> pa.Table:
    """``(id, text, metadata)`` of the root documents of the segment store at ``path``."""
    return Document(store=path, mode="r").group("root").table.select(ROOT_COLUMNS)


def partition(n: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous ``[lo, hi)`` ranges of ``n`` rows in ``parts`` near-equal pieces."""
    bounds = np.linspace(0, n, parts + 1).round().astype(np.int64)
    return [(int(bounds[i]), int(bounds[i + 1])) for i in range(parts) if bounds[i + 1] > bounds[i]]


def run_builds(
    root: Path,
    jobs: list[tuple[str, pa.Table]],
    spec: IndexSpec,
    transform: Any,
    embed: Any,
    executor: str,
) -> list[dict[str, Any]]:
    """Build segment stores (in Ray tasks when ``executor`` is "ray", or "auto" with Ray
    initialized; else here, one after another) into temp folders, then rename each into place.
    On any failure every folder of this call is removed and the error raised."""
    if executor not in ("auto", "ray", "local"):
        raise ConfigError(f"executor must be 'auto', 'ray' or 'local', got {executor!r}")
    use_ray = executor == "ray"
    if executor == "auto":
        try:
            import ray  # optional extra: only a running cluster builds in Ray tasks

            use_ray = ray.is_initialized()
        except ImportError:
            use_ray = False
    tmp = [root / f"{TMP_PREFIX}{name}-{os.getpid()}-{time.monotonic_ns()}" for name, _ in jobs]
    try:
        if use_ray:
            ray = require_ray("fastrag.ray.build_index")
            task = ray.remote(build_segment).options(max_retries=2)
            refs = [
                task.remote(str(t), table, spec, transform, embed)
                for t, (_, table) in zip(tmp, jobs, strict=True)
            ]
            entries = ray.get(refs)
        else:
            entries = [
                build_segment(str(t), table, spec, transform, embed)
                for t, (_, table) in zip(tmp, jobs, strict=True)
            ]
        out = []
        for t, (name, _), entry in zip(tmp, jobs, entries, strict=True):
            os.rename(t, root / name)
            out.append({**entry, "dir": name})
        return out
    except BaseException:
        for t in tmp:
            shutil.rmtree(t, ignore_errors=True)
        raise


def create(
    path: str | os.PathLike,
    corpus: Any,
    spec: IndexSpec,
    *,
    num_shards: int | None,
    transform: Any = None,
    embed: Any = None,
    executor: str = "auto",
    overwrite: bool = False,
) -> Path:
    """Partition ``corpus`` into ``num_shards`` segments at ``path`` (built in parallel on Ray
    when it is running) and commit the sharded index; returns ``path``."""
    if num_shards is not None:
        num_shards = check_int("num_shards", num_shards, min=1)
    root = Path(path)
    if root.exists() and any(root.iterdir()):
        if not overwrite:
            raise ConfigError(
                f"{str(root)!r} exists and is not empty; choose a new directory "
                "or pass overwrite=True to replace it"
            )
        if not is_sharded(root):
            raise ConfigError(f"{str(root)!r} is not a sharded index; refusing to overwrite it")
    ds = as_dataset(corpus)
    if ds is not None:
        if executor == "local":
            raise ConfigError(
                "a Ray Dataset (or .parquet files / a glob) is built by Ray "
                "workers; use executor='auto' or 'ray'"
            )
        if num_shards is not None:  # an ordered split into num_shards blocks (in the cluster)
            ds = ds.repartition(num_shards)
    else:
        table = root_table(corpus)
        if table.num_rows == 0:
            raise ConfigError("the corpus has no documents")
    root.mkdir(parents=True, exist_ok=True)
    with locked(root):
        first = 1
        if is_sharded(root):  # overwrite: new names after the old ones, which go at the commit
            with contextlib.suppress(OSError, ValueError, KeyError):
                first = int(json.loads((root / MANIFEST).read_text())["next_segment"])
        m = {"format": FORMAT, "spec": spec.to_json(), "segments": [], "next_segment": first}
        if ds is not None:
            m["segments"] = build_dataset(root, ds, spec, transform, embed, m)
        else:
            jobs = [
                (new_segment_name(m), table.slice(lo, hi - lo))
                for lo, hi in partition(table.num_rows, num_shards or 2)
            ]
            m["segments"] = run_builds(root, jobs, spec, transform, embed, executor)
        write_manifest(root, m)
        collect_garbage(root, m)
    return root


def _is_builtin(group_name: str) -> bool:
    return group_name == "root" or group_name in Document.BUILTIN_GROUPS


def check_spec(
    group_name: str,
    similarity: str,
    parent: str,
    params: Mapping[str, Any],
    stemmer: str | None,
    embed_key: str,
    transform: Any,
    embed: Any,
) -> IndexSpec:
    """Validate what a sharded index builds, before any work starts."""
    if not isinstance(group_name, str) or not group_name:
        raise ConfigError(f"group_name must be a non-empty string, got {group_name!r}")
    sim = get_similarity(similarity)
    if sim.path.shard is None:
        raise ConfigError(
            f"sharded indexes support BM25, dense and custom similarities, not "
            f"{similarity!r}; fuse sharded indexes instead (BM25 and dense for hybrid, "
            "bm25 and bm25_cjk for bm25_fused) with fastrag.ReciprocalRankFusionJoiner"
        )
    if sim.path.shard == "vectors" and params:
        raise ConfigError(f"parameters {sorted(params)} do not apply to {similarity!r}")
    sim.path.check(params, similarity)
    if sim.embedded and embed is None:
        raise ConfigError(f"similarity {similarity!r} needs embed= (an Embedder)")
    if not _is_builtin(group_name) and transform is None:
        raise ConfigError(
            f"group {group_name!r} is not 'root' or a built-in group "
            f"({sorted(Document.BUILTIN_GROUPS)}); pass transform= to build it (a "
            "store's group made by `fastrag ingest --group` needs none)"
        )
    recorded = None
    if transform is not None and callable(getattr(transform, "spec", None)):
        recorded = transform.spec()
    return IndexSpec(
        group_name,
        similarity,
        parent,
        dict(params),
        stemmer,
        embed_key,
        recorded if isinstance(recorded, dict) else None,
    )


def stored_group(corpus: Any, group_name: str, parent: str, transform: Any) -> tuple[Any, str]:
    """``(transform, parent)`` of ``group_name``: as given, or, when ``corpus`` is a store
    holding the group and no transform is given, rebuilt from the spec the store recorded
    (``fastrag ingest --group`` records one for every group it makes)."""
    if transform is not None or _is_builtin(group_name):
        return transform, parent
    if not (isinstance(corpus, (str, os.PathLike)) and (Path(corpus) / "manifest.json").is_file()):
        return transform, parent
    entry = Document(store=corpus, mode="r").store.manifest["groups"].get(group_name)
    if entry is None:
        return transform, parent
    rebuilt = transform_from_spec(entry.get("spec"))
    if rebuilt is None:
        raise ConfigError(
            f"group {group_name!r} of store {str(corpus)!r} was made by a "
            "transform the store could not record (a function); pass "
            "transform= (the same transform) to build it"
        )
    stored_parent = entry.get("parent", "root")
    if not _is_builtin(stored_parent):
        raise ConfigError(
            f"group {group_name!r} of store {str(corpus)!r} is made from group "
            f"{stored_parent!r}, not from 'root'; a sharded index builds groups "
            "of the documents: index that group's parent chain as one group "
            "(e.g. ingest it with --group NAME=SPEC, no @PARENT)"
        )
    return rebuilt, stored_parent
