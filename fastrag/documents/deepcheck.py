"""Structural checks of a store beyond its checksums (``fastrag info --verify --deep``).

Checksums catch accidents (a flipped bit, a truncated copy), not a buggy or foreign writer
that recomputed them over bad bytes. :func:`deep_check` opens everything the manifest names and
checks its structure: the manifest's own shape, every Arrow segment in full (schema, offsets,
UTF-8, nulls, metadata JSON, row counts, unique ids, finite vectors of the recorded
dimension), BM25 arrays and every posting, HNSW files element by element, token arrays.
Reading a store checks the parts it uses as it goes; this checks all of it at once, so a store
from an untrusted party can be checked before it is served.

The checks shared with the reader (:func:`check_json_objects`, :func:`manifest_problems`)
live in :mod:`fastrag.documents.storecheck`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastrag.documents.embedding import vector_schema
from fastrag.documents.labels import hnsw_label_problem
from fastrag.documents.sources import SOURCE_SCHEMA
from fastrag.documents.store import Store
from fastrag.documents.storecheck import manifest_problems
from fastrag.errors import StoreError
from fastrag.indexes.bm25.index import BM25Index
from fastrag.indexes.bm25.packed import checked_postings
from fastrag.indexes.bm25.stats import BM25Stats
from fastrag.indexes.vocab import decode_vocab
from fastrag.schema import GROUP_SCHEMA


def deep_check(store: Store) -> list[str]:
    """Every structural problem of ``store`` (see the module docstring), each naming its file;
    empty when the store is sound. Reads every file the manifest names; changes nothing.
    Checksums are :meth:`Store.verify`'s (``fastrag info --verify``); a file failing its
    checksum is reported here too, as it cannot be read."""
    m = store.manifest
    problems = [f"manifest.json: {p}" for p in manifest_problems(m, deep=True)]
    if problems:
        return problems  # what follows reads the files the manifest names
    reader = Store(store.path, mode="r", verify=True)  # every file read whole: all checked
    reader.manifest = m
    tables: dict[str, pa.Table] = {}

    def attempt(where: str, check: Callable[..., Any], *args: Any) -> Any:
        try:
            return check(*args)
        except StoreError as exc:
            problems.append(f"{where}: {exc}")
        except (ValueError, TypeError, KeyError, IndexError, pa.ArrowException) as exc:
            problems.append(f"{where}: {type(exc).__name__}: {exc}")
        return None

    def table(segs: list[dict], schema: pa.Schema, what: str) -> pa.Table | None:
        parts = [attempt(seg["file"], reader._read_segment, seg, schema) for seg in segs]
        if any(p is None for p in parts):
            return None
        t = pa.concat_tables(parts) if parts else schema.empty_table()
        key = "key" if "key" in t.column_names else "id"
        if pc.count_distinct(t.column(key)).as_py() != t.num_rows:
            problems.append(f"{_files(segs)}: {what} repeats {key}s")
        return t

    sources = table(m["sources"], SOURCE_SCHEMA, "sources")
    for name, g in m["groups"].items():
        tables[name] = table(g["segments"], GROUP_SCHEMA, f"group {name!r}")
    root = tables.get("root")
    if sources is not None and root is not None and sources.num_rows:
        roots = pc.list_flatten(sources.column("roots"))
        if pc.all(pc.is_in(roots, value_set=root.column("id"))).as_py() is False:
            problems.append(
                f"{_files(m['sources'])}: sources name root ids the root group does not hold"
            )
    for key, v in m["vectors"].items():
        t = table(v["segments"], vector_schema(v["dim"]), f"vectors {key!r}")
        if t is None:
            continue
        flat = t.column("vector").combine_chunks()
        if flat.null_count or not np.isfinite(flat.flatten().to_numpy()).all():
            problems.append(f"{_files(v['segments'])}: vectors {key!r} hold nulls, NaN or inf")
    for key, idx in m["indexes"].items():
        meta = idx["meta"]
        group = tables.get(meta["group"])
        if meta["group"] not in m["groups"]:
            problems.append(f"{idx['dir']}: index {key!r} of unknown group {meta['group']!r}")
        elif meta["kind"] == "bm25":
            attempt(idx["dir"], _check_bm25, reader, key, group)
        elif meta["kind"] == "hnsw":
            dims = {v["dim"] for v in m["vectors"].values() if v["group"] == meta["group"]}
            attempt(f"{idx['dir']}/index.bin", _check_hnsw, reader, idx, dims)
        elif meta["kind"] == "tokens":
            attempt(idx["dir"], _check_tokens, reader, key, group)
        else:
            problems.append(f"{idx['dir']}: index {key!r} of unknown kind {meta['kind']!r}")
    return problems


def _files(segs: list[dict]) -> str:
    return ", ".join(s["file"] for s in segs) or "(no segments)"


def _check_bm25(reader: Store, key: str, group: pa.Table | None) -> None:
    arrays, meta = reader.read_arrays(key)
    vocab = decode_vocab(arrays.pop("vocab_bytes"), arrays.pop("vocab_offsets"))
    index = BM25Index.from_arrays(arrays, meta["index"])
    index.check_postings()
    if index.n_vocab != len(vocab):
        raise StoreError(f"the index has {index.n_vocab} terms, its vocabulary {len(vocab)}")
    if group is not None and index.n_docs != group.num_rows:
        raise StoreError(
            f"the index covers {index.n_docs} nodes, its group "
            f"{meta['group']!r} has {group.num_rows}"
        )


def _check_hnsw(reader: Store, idx: dict, dims: set[int]) -> None:
    from fastrag.indexes.hnsw import check_index_file  # lazy: numba

    if "index.bin" not in idx["files"]:
        raise StoreError("the index names no index.bin")
    folder = reader.path / idx["dir"]
    reader.check_file(f"{idx['dir']}/index.bin", idx["files"]["index.bin"], full=True)
    ids = idx["meta"]["ids"]
    info = check_index_file(folder / "index.bin", max_rows=len(ids))
    if dims and info.dim not in dims:
        raise StoreError(
            f"it holds vectors of dim {info.dim}, but the vectors of its group "
            f"have dims {sorted(dims)}"
        )
    alive = np.zeros(int(info.labels.max()) + 1 if info.count else 0, np.bool_)
    alive[info.labels[~info.deleted]] = True
    problem = hnsw_label_problem(ids, alive)
    if problem:
        raise StoreError(problem)


def _check_tokens(reader: Store, key: str, group: pa.Table | None) -> None:
    arrays, meta = reader.read_arrays(key)
    vocab = decode_vocab(arrays["vocab_bytes"], arrays["vocab_offsets"])
    values, offsets = np.asarray(arrays["values"]), np.asarray(arrays["offsets"])
    if (
        values.ndim != 1
        or offsets.ndim != 1
        or values.dtype.kind not in "iu"
        or offsets.dtype.kind not in "iu"
        or len(offsets) == 0
    ):
        raise StoreError("token arrays are not 1-D integer arrays")
    if offsets[0] != 0 or offsets[-1] != len(values) or np.any(np.diff(offsets) < 0):
        raise StoreError("token offsets are out of range or decrease")
    if values.size and (values.min() < 0 or values.max() >= len(vocab)):
        raise StoreError(f"token ids outside the vocabulary of {len(vocab)} terms")
    if group is not None and len(offsets) != group.num_rows + 1:
        raise StoreError(f"tokens of {len(offsets) - 1} nodes, the group has {group.num_rows}")
    if "postings" in meta:  # a segment's packed postings: every block decoded and checked
        postings = checked_postings(arrays, meta["postings"])
        df = np.diff(np.asarray(postings["indptr"], np.int64))
        n_local = df.shape[0]
        if n_local != len(vocab) or not np.array_equal(
            df, BM25Stats.from_tokens(values, offsets, max(n_local, 1)).df[:n_local]
        ):
            raise StoreError("packed postings disagree with the token ids")
        doc_len = postings["doc_len"]
        stats = BM25Stats(len(doc_len), int(doc_len.sum(dtype=np.int64)), df)
        BM25Index.from_postings(postings, np.arange(n_local), n_local, stats)
