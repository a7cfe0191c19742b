"""Structural checks of a store beyond its checksums (``fastrag info --verify --deep``).

Checksums catch accidents (a flipped bit, a truncated copy), not a buggy or foreign writer
that recomputed them over bad bytes. :func:`deep_check` opens everything the manifest names and
checks its structure: the manifest's own shape, every Arrow segment in full (schema, offsets,
UTF-8, nulls, metadata JSON, row counts, unique ids, finite vectors of the recorded
dimension), BM25 arrays and every posting, HNSW files element by element, token arrays.
Reading a store checks the parts it uses as it goes; this checks all of it at once, so a store
from an untrusted party can be checked before it is served.

:func:`check_json_objects` (the metadata columns, checked on every segment read) and
:func:`manifest_problems` are shared with the reader.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastrag.errors import StoreError

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.documents.store import Store

MAX_JSON_DEPTH = 512  # deeper metadata is refused (json.loads would recurse that deep)
JSON_KERNEL_MIN_ROWS = 100_000  # fewer values are checked with json.loads (see below)
# json.loads refuses longer integers (Python's int conversion limit; none before 3.11)
_INT_DIGITS = getattr(sys, "get_int_max_str_digits", lambda: 0)() or (1 << 62)


# -- metadata JSON ------------------------------------------------------------------------------


def check_json_objects(values: pa.Array | pa.ChunkedArray) -> int:
    """Row of the first value of a string column that ``json.loads`` would not decode into a
    dict (nested at most :data:`MAX_JSON_DEPTH` deep), or -1; a null counts as bad. The bytes
    must be valid UTF-8 already (``validate(full=True)``)."""
    from fastrag._coldstart import kernels_ready

    # "{}" (most nodes) is fine. The kernel runs ~450 MB/s, but loading numba takes about
    # 0.5 s in a process that has not yet; json.loads takes ~6 us a value
    rows = np.flatnonzero(~np.asarray(pc.fill_null(pc.equal(values, "{}"), False)))
    many = len(rows) > JSON_KERNEL_MIN_ROWS or (len(rows) > 64 and "numba" in sys.modules)
    if many and kernels_ready():
        start = 0
        for chunk in values.chunks if isinstance(values, pa.ChunkedArray) else [values]:
            bad = _check_chunk(chunk)
            if bad >= 0:
                return start + bad
            start += len(chunk)
        return -1
    texts = values.take(pa.array(rows, pa.int64())).to_pylist()
    return next(
        (int(r) for r, v in zip(rows, texts, strict=True) if v is None or not json_object_ok(v)), -1
    )


def _check_chunk(chunk: pa.Array) -> int:
    from fastrag._kernels import store_check

    if len(chunk) == 0:
        return -1
    if chunk.null_count:
        return int(np.flatnonzero(np.asarray(chunk.is_null()))[0])
    large = pa.types.is_large_string(chunk.type)
    bufs = chunk.buffers()
    offsets = np.array(
        np.frombuffer(bufs[1], np.int64 if large else np.int32)[
            chunk.offset : chunk.offset + len(chunk) + 1
        ],
        np.int64,
    )
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return int(store_check.check_json_objects(data, offsets, MAX_JSON_DEPTH, _INT_DIGITS))


def json_object_ok(text: str) -> bool:
    """Whether ``json.loads(text)`` is a dict nested at most :data:`MAX_JSON_DEPTH` deep (the
    reference of the kernel behind :func:`check_json_objects`)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    if not isinstance(value, dict):
        return False
    if text.count("{") + text.count("[") <= MAX_JSON_DEPTH:
        return True  # too few brackets to nest that deep
    todo = [(value, 1)]
    while todo:
        v, depth = todo.pop()
        if depth > MAX_JSON_DEPTH:
            return False
        todo += [
            (x, depth + 1)
            for x in (v.values() if isinstance(v, dict) else v)
            if isinstance(x, (dict, list))
        ]
    return True


# -- the manifest -------------------------------------------------------------------------------


def _int(v: Any, lo: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v < 1 << 62


def _name(v: Any, folder: str, depth: int = 2) -> bool:
    """A plain relative path ``folder/<name>`` (``depth`` parts) inside the store."""
    if not isinstance(v, str) or "\\" in v or "\0" in v:
        return False
    parts = PurePosixPath(v).parts
    return (
        len(parts) == depth
        and parts[0] == folder
        and all(p not in ("", ".", "..") for p in parts)
        and str(PurePosixPath(*parts)) == v
    )


def manifest_problems(m: Any, *, deep: bool = False) -> list[str]:
    """What in a manifest body is not of the shape fastrag writes (the fields it reads, their
    types and ranges, file names inside the store); empty when fine. ``deep`` also checks
    every HNSW node id (a list as long as the index)."""
    if not isinstance(m, dict):
        return [f"the manifest is a {type(m).__name__}, not a JSON object"]
    out: list[str] = []

    def need(ok: bool, what: str) -> bool:
        if not ok:
            out.append(what)
        return ok

    for key in ("generation", "root_gen", "next_id"):
        need(_int(m.get(key)), f"{key}={m.get(key)!r} is not a count")
    need(_int(m.get("removed_gen", 0)), f"removed_gen={m.get('removed_gen')!r} is not a count")
    for key, kind in (("sources", list), ("groups", dict), ("vectors", dict), ("indexes", dict)):
        need(isinstance(m.get(key), kind), f"{key} is not a JSON {kind.__name__}")
    need(isinstance(m.get("inputs", []), list), "inputs is not a list")
    need(
        isinstance(m.get("tags", []), list) and all(isinstance(t, dict) for t in m.get("tags", [])),
        "tags is not a list of objects",
    )
    if out:
        return out
    files: list[str] = []

    def segments(segs: Any, where: str) -> None:
        if not need(isinstance(segs, list), f"{where}: segments is not a list"):
            return
        for seg in segs:
            if not need(isinstance(seg, dict), f"{where}: a segment is not an object"):
                continue
            ok = (
                _name(seg.get("file"), "data")
                and _int(seg.get("rows"))
                and _int(seg.get("size"))
                and isinstance(seg.get("checksum"), str)
            )
            if need(ok, f"{where}: segment {seg!r} needs a file in data/, rows, size and checksum"):
                files.append(seg["file"])

    segments(m["sources"], "sources")
    for name, g in m["groups"].items():
        where = f"group {name!r}"
        if not need(isinstance(g, dict), f"{where} is not an object"):
            continue
        segments(g.get("segments"), where)
        need(
            g.get("parent") is None
            or (isinstance(g.get("parent"), str) and g["parent"] in m["groups"]),
            f"{where}: parent {g.get('parent')!r} is not a group of the store",
        )
        need("parent" in g, f"{where}: parent is missing")
        need(isinstance(g.get("identity", ""), str), f"{where}: identity is not a string")
        need(_int(g.get("root_gen")), f"{where}: root_gen is not a count")
        need(
            g.get("spec") is None or isinstance(g.get("spec"), dict),
            f"{where}: spec is not an object",
        )
        if isinstance(g.get("segments"), list) and _int(g.get("nodes", 0)):
            rows = sum(
                s["rows"] for s in g["segments"] if isinstance(s, dict) and _int(s.get("rows"))
            )
            need(
                g.get("nodes", rows) == rows,
                f"{where}: nodes={g.get('nodes')} but its segments hold {rows} rows",
            )
    for key, v in m["vectors"].items():
        where = f"vectors {key!r}"
        if not need(isinstance(v, dict), f"{where} is not an object"):
            continue
        need(_int(v.get("dim"), 1) and v["dim"] <= 1 << 20, f"{where}: dim={v.get('dim')!r}")
        need(
            isinstance(v.get("group"), str) and v["group"] in m["groups"],
            f"{where}: group {v.get('group')!r} is not a group of the store",
        )
        need(isinstance(v.get("aligned", ""), str), f"{where}: aligned is not a string")
        segments(v.get("segments"), where)
    for key, idx in m["indexes"].items():
        where = f"index {key!r}"
        if not need(
            isinstance(idx, dict) and _name(idx.get("dir"), "indexes"),
            f"{where} needs a folder in indexes/",
        ):
            continue
        fs = idx.get("files")
        if need(isinstance(fs, dict), f"{where}: files is not an object"):
            for fname, f in fs.items():
                ok = (
                    isinstance(f, dict)
                    and _name(f"{idx['dir']}/{fname}", "indexes", 3)
                    and _int(f.get("size"))
                    and isinstance(f.get("checksum"), str)
                )
                if need(ok, f"{where}: file {fname!r} needs a plain name, size and checksum"):
                    files.append(f"{idx['dir']}/{fname}")
        meta = idx.get("meta")
        if not need(
            isinstance(meta, dict)
            and isinstance(meta.get("kind"), str)
            and isinstance(meta.get("group"), str),
            f"{where}: meta needs a kind and a group",
        ):
            continue
        need(isinstance(meta.get("fingerprint", ""), str), f"{where}: fingerprint is not a string")
        if meta["kind"] == "hnsw":
            ids = meta.get("ids")
            if need(isinstance(ids, list), f"{where}: ids is not a list") and deep:
                need(
                    all(x is None or isinstance(x, str) for x in ids),
                    f"{where}: ids holds values that are neither node ids nor null",
                )
        elif meta["kind"] == "bm25":
            need(isinstance(meta.get("index"), dict), f"{where}: meta has no index object")
    dup = sorted(f for f, c in Counter(files).items() if c > 1)
    need(not dup, f"files named twice: {dup[:3]}")
    return out


# -- the whole store ----------------------------------------------------------------------------


def deep_check(store: Store) -> list[str]:
    """Every structural problem of ``store`` (see the module docstring), each naming its file;
    empty when the store is sound. Reads every file the manifest names; changes nothing.
    Checksums are :meth:`Store.verify`'s (``fastrag info --verify``); a file failing its
    checksum is reported here too, as it cannot be read."""
    from fastrag.documents.store import Store

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

    from fastrag.documents.indexes import _vector_schema
    from fastrag.documents.sources import SOURCE_SCHEMA
    from fastrag.schema import GROUP_SCHEMA

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
        t = table(v["segments"], _vector_schema(v["dim"]), f"vectors {key!r}")
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
    from fastrag.documents.indexes import _decode_vocab
    from fastrag.indexes.bm25 import BM25Index

    arrays, meta = reader.read_arrays(key)
    vocab = _decode_vocab(arrays.pop("vocab_bytes"), arrays.pop("vocab_offsets"))
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
    from fastrag.documents.indexes import hnsw_label_problem
    from fastrag.indexes.hnsw import check_index_file

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
    from fastrag.documents.indexes import _decode_vocab

    arrays, _ = reader.read_arrays(key)
    vocab = _decode_vocab(arrays["vocab_bytes"], arrays["vocab_offsets"])
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
