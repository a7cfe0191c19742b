"""Checks a store applies to what it reads: the manifest's shape, Arrow offsets, metadata JSON.

:func:`manifest_problems` checks a manifest body before anything it names is opened;
:func:`check_offsets` and :func:`check_json_objects` check the columns of every segment read
(the JSON check runs a numba kernel on large columns, ``json.loads`` below
:data:`JSON_KERNEL_MIN_ROWS`). They serve the reader (:class:`~fastrag.documents.store.Store`)
and :func:`~fastrag.documents.deepcheck.deep_check`.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import PurePosixPath
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastrag._coldstart import kernels_for

MAX_JSON_DEPTH = 512  # deeper metadata is refused (json.loads would recurse that deep)
JSON_KERNEL_MIN_ROWS = 100_000  # fewer values are checked with json.loads (see below)
# json.loads refuses longer integers (Python's int conversion limit; none before 3.11)
_INT_DIGITS = getattr(sys, "get_int_max_str_digits", lambda: 0)() or (1 << 62)


# -- metadata JSON ------------------------------------------------------------------------------


def check_json_objects(values: pa.Array | pa.ChunkedArray) -> int:
    """Row of the first value of a string column that ``json.loads`` would not decode into a
    dict (nested at most :data:`MAX_JSON_DEPTH` deep), or -1; a null counts as bad. The bytes
    must be valid UTF-8 already (``validate(full=True)``)."""
    # "{}" (most nodes) is fine. The kernel runs ~450 MB/s, but loading numba takes about
    # 0.5 s in a process that has not yet; json.loads takes ~6 us a value
    rows = np.flatnonzero(~np.asarray(pc.fill_null(pc.equal(values, "{}"), False)))
    many = len(rows) > JSON_KERNEL_MIN_ROWS or (len(rows) > 64 and "numba" in sys.modules)
    if many and kernels_for():
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
    from fastrag._kernels import store_check  # lazy: numba

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
    data = np.frombuffer(bufs[2] if bufs[2] is not None else b"", np.uint8)  # read-only, always
    return int(store_check.check_json_objects(data, offsets, MAX_JSON_DEPTH, _INT_DIGITS))


def json_object_ok(text: str) -> bool:
    """Whether ``json.loads(text)`` is a dict nested at most :data:`MAX_JSON_DEPTH` deep (the
    reference of the kernel behind :func:`check_json_objects`)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and not json_too_deep(value, text)


def json_too_deep(value: Any, text: str) -> bool:
    """Whether ``value``, parsed from the JSON ``text``, nests lists and objects deeper than
    :data:`MAX_JSON_DEPTH` (iterative: no recursion, whatever the depth)."""
    if text.count("{") + text.count("[") <= MAX_JSON_DEPTH:
        return False  # too few brackets to nest that deep
    todo = [(value, 1)]
    while todo:
        v, depth = todo.pop()
        if depth > MAX_JSON_DEPTH:
            return True
        if isinstance(v, (dict, list)):
            todo += [
                (x, depth + 1)
                for x in (v.values() if isinstance(v, dict) else v)
                if isinstance(x, (dict, list))
            ]
    return False


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
        rec = v.get("embedder", {})
        need(
            isinstance(rec, dict) and all(isinstance(rec.get(f, ""), (str, int)) for f in rec),
            f"{where}: embedder {rec!r} is not a record of names",
        )
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
                    and isinstance(f.get("chunks", ""), str)
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


# -- Arrow offsets ----------------------------------------------------------------------------


def check_offsets(table: pa.Table) -> None:
    """Raise ValueError when the offsets of a string or list column, at any depth (the
    sources' ``roots``: a list of strings), leave what they index or decrease (a damaged file
    that would make Arrow read out of bounds). Reads the offsets only."""

    def check(arr: pa.Array, name: str) -> None:
        t = arr.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                check(arr.field(i), f"{name}.{t.field(i).name}")
            return
        if pa.types.is_fixed_size_list(t):
            check(arr.values, f"{name}[]")  # its length: checked by validate()
            return
        strings = (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)
        )
        lists = pa.types.is_list(t) or pa.types.is_large_list(t)
        if not (strings or lists) or len(arr) == 0:
            return
        large = (
            pa.types.is_large_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_list(t)
        )
        raw = arr.buffers()[1]
        off = np.zeros(0) if raw is None else np.frombuffer(raw, np.int64 if large else np.int32)
        off = off[arr.offset : arr.offset + len(arr) + 1]
        if strings:
            data = arr.buffers()[2]
            limit, what = (0 if data is None else data.size), "bytes of data"
        else:
            limit, what = len(arr.values), "list values"
        if len(off) != len(arr) + 1 or off[0] < 0 or off[-1] > limit or np.any(np.diff(off) < 0):
            raise ValueError(f"column {name!r} has offsets out of range (of {limit} {what})")
        if lists:
            check(arr.values, f"{name}[]")

    for name, col in zip(table.column_names, table.columns, strict=True):
        for chunk in col.chunks:
            check(chunk, name)
