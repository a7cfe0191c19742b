"""Corpora the cluster reads: a Ray Dataset, or a glob / ``.parquet`` paths Ray Data reads,
built into segments by the Ray workers where the blocks are (nothing passes through the
driver but each segment's entry)."""

from __future__ import annotations

import glob
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from fastrag.distributed._ray import init_if_needed, require_ray
from fastrag.distributed.manifest import TMP_PREFIX, new_segment_name
from fastrag.distributed.segment import IndexSpec, build_rows
from fastrag.errors import ConfigError
from fastrag.schema import node_id

DATA_FILES = (".parquet", ".jsonl", ".json")


def as_dataset(corpus: Any) -> Any:
    """``corpus`` as a ``ray.data.Dataset`` when the cluster should read it (a Dataset; a glob
    pattern or ``.parquet`` files, read by ``ray.data.read_parquet`` / ``read_json``), else
    None (a store, files or folders for fastrag's readers, texts, an Arrow table)."""
    if type(corpus).__module__.startswith("ray.data"):
        return corpus
    items = [corpus] if isinstance(corpus, (str, os.PathLike)) else corpus
    if not (
        isinstance(items, Sequence)
        and items
        and all(isinstance(x, (str, os.PathLike)) for x in items)
    ):
        return None
    names = [os.fspath(x) for x in items]
    globbed = [n for n in names if any(c in n for c in "*?[")]
    if not globbed and not all(n.lower().endswith(".parquet") for n in names):
        return None
    paths = []
    for n in names:
        got = sorted(glob.glob(n)) if n in globbed and "://" not in n else [n]
        if not got:
            raise ConfigError(f"no file matches {n!r}")
        paths += got
    kinds = {os.path.splitext(p)[1].lower() for p in paths}
    if not kinds <= set(DATA_FILES) or len(kinds & {".parquet"}) not in (0, len(kinds)):
        raise ConfigError(
            f"a glob must name .parquet files or .jsonl/.json files (one "
            f"document a row), got {sorted(kinds)}; for one document per line "
            "of text files pass ray.data.read_text(paths), for other files "
            "pass their paths or folder (fastrag's readers)"
        )
    ray = require_ray("fastrag.ray.build_index")
    init_if_needed(ray)
    n = len(paths)  # a block (a segment) per file; num_shards= repartitions
    if kinds == {".parquet"}:
        return ray.data.read_parquet(paths, override_num_blocks=n)
    return ray.data.read_json(paths, lines=".jsonl" in kinds, override_num_blocks=n)


def _block_rows(block: pa.Table, first_row: int | None) -> tuple[list, list | None, list]:
    """(texts, metadatas, ids) of a block of corpus rows: ``text``, ``id`` (else the id one
    index gives the text at its global row ``first_row + i``), other columns as metadata."""
    if "text" not in block.column_names:
        raise ConfigError(f"the corpus needs a 'text' column; it has {block.column_names}")
    texts = block.column("text").to_pylist()
    if "id" in block.column_names:
        ids = block.column("id").to_pylist()
    else:
        ids = [node_id("text", first_row + i, t) for i, t in enumerate(texts)]
    other = [c for c in block.column_names if c not in ("text", "id")]
    metas = block.select(other).to_pylist() if other else None
    return texts, metas, ids


def _build_block(
    block: pa.Table,
    first_row: int | None,
    root: str,
    token: str,
    spec: IndexSpec,
    transform: Any,
    embed: Any,
) -> dict[str, Any]:
    """Build one segment from a block of corpus rows, in a Ray worker, into a temp folder of
    ``root`` named by ``token``; returns its entry (``dir`` is the temp folder)."""
    if block.num_rows == 0:
        return {"dir": None, "docs": 0, "nodes": 0}
    texts, metas, ids = _block_rows(block, first_row)
    dest = Path(root) / f"{TMP_PREFIX}{token}-{uuid.uuid4().hex}"
    return build_rows(str(dest), texts, metas, ids, spec, transform, embed)


def _build_batch(
    block: pa.Table, root: str, token: str, spec: IndexSpec, transform: Any, embed: Any
) -> pa.Table:
    """map_batches function: one whole block in, one segment built, its entry out."""
    entry = _build_block(block, None, root, token, spec, transform, embed)
    return pa.table({k: [v] for k, v in entry.items()})


def build_dataset(
    root: Path, ds: Any, spec: IndexSpec, transform: Any, embed: Any, m: dict[str, Any]
) -> list[dict[str, Any]]:
    """One segment per block of ``ds``, built by Ray workers where the block is; the driver
    sees only each segment's entry. With an ``id`` column the blocks stream (read, built,
    dropped); without one, the default ids need every row's global position, so the blocks
    are first materialised in the cluster's object store (not here) and counted. Segments
    keep the Dataset's order; on failure every temp folder of this build is removed."""
    ray = require_ray("fastrag.ray.build_index")
    token = uuid.uuid4().hex[:12]
    args = (str(root), token, spec, transform, embed)
    try:
        if "id" in ds.schema().names:
            out = ds.map_batches(
                _build_batch, batch_size=None, batch_format="pyarrow", fn_args=args
            )
            out.context.execution_options.preserve_order = True  # segments in corpus order
            entries = out.take_all()
        else:
            opts = ds.context.execution_options
            kept, opts.preserve_order = opts.preserve_order, True  # blocks in corpus order
            try:
                refs = ds.to_arrow_refs()
            finally:
                opts.preserve_order = kept
            count = ray.remote(lambda b: b.num_rows)
            sizes = ray.get([count.remote(r) for r in refs])
            firsts = np.concatenate([[0], np.cumsum(sizes)])[:-1]
            task = ray.remote(_build_block).options(max_retries=2)
            entries = ray.get(
                [task.remote(r, int(f), *args) for r, f in zip(refs, firsts, strict=True)]
            )
        out_entries = []
        for e in entries:
            if not e["docs"]:
                continue
            name = new_segment_name(m)
            os.rename(root / e["dir"], root / name)
            out_entries.append({"dir": name, "docs": int(e["docs"]), "nodes": int(e["nodes"])})
        if not out_entries:
            raise ConfigError("the corpus has no documents")
        return out_entries
    except BaseException:
        for t in root.glob(f"{TMP_PREFIX}{token}-*"):
            shutil.rmtree(t, ignore_errors=True)
        raise
