"""Running node transforms: the registered group definitions and the code that turns a
parent table into child rows (in-process, in worker processes, or span-based)."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
import pickle
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from fastrag.documents.buffertext import buffer_views, read_texts
from fastrag.documents.sources import rows_to_table
from fastrag.errors import ConfigError, FastragError, TransformError
from fastrag.schema import GROUP_SCHEMA, DocNode, dump_metadata, node_id
from fastrag.transforms import SPEC_CLASSES
from fastrag.transforms.base import NodeTransform, has_batch, has_spans


@dataclass
class GroupDef:
    name: str
    parent: str
    fn: Callable[[Any], Any]
    trans_node: bool
    num_workers: int
    identity: str
    spans: Callable[[list[str]], list[list[tuple[int, int]]]] | None = None
    spec: dict | None = None  # how to rebuild the transform when the store is re-opened
    from_store: bool = False  # registered by re-opening a store (a later definition replaces it)


STORED_ONLY = "stored-only"  # fn of a group whose transform the store could not record


def transform_from_spec(spec: Any) -> Any:
    """The transform a recorded spec describes, or None when it is not one fastrag can rebuild."""
    if not isinstance(spec, dict) or spec.get("class") not in SPEC_CLASSES:
        return None
    try:
        return SPEC_CLASSES[spec["class"]](**dict(spec.get("params") or {}))
    except (TypeError, ValueError):
        return None


def stored_def(name: str, entry: dict) -> GroupDef:
    """The definition of a group a store holds (its manifest ``entry``): rebuilt from its
    recorded spec where fastrag can, else :data:`STORED_ONLY` (usable as stored)."""
    transform = transform_from_spec(entry.get("spec"))
    if transform is not None:
        fn, identity, spans = resolve_transform(name, transform, {})
        return GroupDef(
            name,
            entry["parent"],
            fn,
            False,
            0,
            f"{identity}|trans_node=False",
            spans,
            spec=entry["spec"],
            from_store=True,
        )
    return GroupDef(
        name,
        entry["parent"],
        STORED_ONLY,
        False,
        0,
        entry.get("identity", ""),
        None,
        from_store=True,
    )


def callable_identity(fn: Any) -> str:
    """A fingerprint of a function's code, so a store notices when a transform changed."""
    target = inspect.unwrap(fn.func if isinstance(fn, functools.partial) else fn)
    qualname = getattr(target, "__qualname__", type(target).__qualname__)
    name = f"{getattr(target, '__module__', '')}.{qualname}"
    code = getattr(target, "__code__", None)
    if code is None:
        try:
            code = type(target).__call__.__code__
        except AttributeError:
            code = None
    h = hashlib.blake2b(digest_size=8)
    if code is not None:
        h.update(code.co_code)
        h.update(repr(code.co_consts).encode())
        h.update(repr(code.co_names).encode())
    if isinstance(fn, functools.partial):
        h.update(repr(sorted(fn.keywords.items())).encode())
    return f"{name}#{h.hexdigest()}"


def _children_of(
    fn: Callable, trans_node: bool, group: str, parent: tuple[str, str, str, str, str]
) -> list[tuple]:
    pid, doc_id, text, own_json, full_json = parent
    meta = json.loads(full_json)
    arg = DocNode(text=text, metadata=meta, id=pid) if trans_node else text
    return _child_rows(fn(arg), group, parent, meta)


def _child_rows(
    out: Any, group: str, parent: tuple[str, str, str, str, str], meta: dict[str, Any]
) -> list[tuple]:
    """The rows of one parent's children, from what its transform returned. A child stores
    only the metadata it adds to (or changes in) its document's: the parent's own, plus what
    a returned DocNode carries. A number or bool (LazyLLM's ``transform=lambda s: len(s)``)
    is a node without text whose metadata ``value`` holds it: a metadata-only group."""
    pid, doc_id, _text, own_json, full_json = parent
    if isinstance(out, (str, DocNode, int, float)):
        out = [out]
    if out is None or not isinstance(out, Iterable):
        raise ConfigError(
            f"transform of group {group!r} returned {type(out).__name__}; "
            "it must return a list of str (or of DocNode with trans_node=True)"
        )
    rows = []
    doc_meta = None
    for i, item in enumerate(out):
        if isinstance(item, str):
            ctext, cmeta = item, own_json
        elif isinstance(item, DocNode):
            ctext = item.text
            if item.metadata:
                if doc_meta is None:
                    doc_meta = _doc_part(meta, json.loads(own_json))
                cmeta = _own_part({**meta, **item.metadata}, doc_meta)
            else:
                cmeta = own_json
        elif isinstance(item, (int, float)) and math.isfinite(item):
            value_meta = dump_metadata({**json.loads(own_json), "value": item})
            rows.append(
                (node_id(group, pid, i, f"value:{item!r}"), doc_id, pid, "", None, None, value_meta)
            )
            continue
        else:
            raise ConfigError(
                f"transform of group {group!r} returned an item of type {type(item).__name__}"
                f"{' (not finite)' if isinstance(item, float) else ''}; items must be str, "
                "DocNode, or a finite number or bool (kept as metadata 'value')"
            )
        if ctext.strip():
            rows.append((node_id(group, pid, i, ctext), doc_id, pid, ctext, None, None, cmeta))
    return rows


def _doc_part(full: dict, own: dict) -> dict:
    """The document's metadata, given a node's full and own metadata."""
    return {k: v for k, v in full.items() if k not in own}


def _own_part(full: dict, doc_meta: dict) -> str:
    """JSON of the keys of ``full`` that its document's metadata lacks or holds otherwise."""
    own = {}
    for k, v in full.items():
        if k not in doc_meta or dump_metadata({"v": doc_meta[k]}) != dump_metadata({"v": v}):
            own[k] = v
    return dump_metadata(own)


def _run_chunk(fn, trans_node, group, parents):
    out = []
    for p in parents:
        try:
            out.append(_children_of(fn, trans_node, group, p))
        except Exception as exc:
            raise _failure(group, [p], exc) from exc
    return out


def _failure(group: str, parents: list[tuple], exc: Exception) -> FastragError:
    """A TransformError naming the group, the node and its document's file."""
    if isinstance(exc, TransformError) or "the transform of group" in str(exc):
        return exc
    first = parents[0]
    meta = json.loads(first[4])
    where = meta.get("abs_path") or meta.get("file_path") or f"document {first[1]}"
    node = (
        f"node {first[0]} of {where}"
        if len(parents) == 1
        else f"{len(parents)} nodes (the first: {first[0]} of {where})"
    )
    cls = ConfigError if isinstance(exc, ConfigError) else TransformError
    return cls(f"the transform of group {group!r} failed on {node}: {type(exc).__name__}: {exc}")


def _call(d: GroupDef, parents: list[tuple], fn: Callable[[], Any]) -> Any:
    """Run a batch transform; fastrag's own errors (which name their node) pass through."""
    try:
        return fn()
    except FastragError:
        raise
    except Exception as exc:
        raise _failure(d.name, parents, exc) from exc


def resolve_transform(name: str, transform: Any, kwargs: dict):
    """(callable, identity, batch-spans or None) for every accepted transform form."""
    if isinstance(transform, type):
        try:
            inst = transform(**kwargs)
        except TypeError as exc:
            raise ConfigError(
                f"cannot create transform {transform.__name__} for group "
                f"{name!r} with {kwargs}: {exc}"
            ) from exc
        if not callable(inst):
            raise ConfigError(
                f"transform class {transform.__name__} of group {name!r} has no __call__"
            )
        transform, kwargs = inst, {}
    if not callable(transform):
        raise ConfigError(
            f"transform of group {name!r} must be callable (a function, lambda, class with "
            f"__call__ or NodeTransform), got {type(transform).__name__}"
        )
    if isinstance(transform, NodeTransform):
        if kwargs:
            raise ConfigError(
                f"extra arguments {sorted(kwargs)} for group {name!r} are only "
                "used when transform is a class; configure the instance instead"
            )
        spans = transform.batch_spans if has_spans(transform) else None
        return transform, transform.identity(), spans
    fn = functools.partial(transform, **kwargs) if kwargs else transform
    return fn, callable_identity(fn), None


def run_transform(
    d: GroupDef,
    ptable: pa.Table,
    full_meta: list[str] | None = None,
    read: Callable[[], object] | None = None,
) -> pa.Table:
    """The child rows of every row of ``ptable`` (in ``ptable`` order). ``full_meta``: each
    parent's complete metadata JSON when the parent is not the root group (whose rows hold
    their documents' metadata). ``read``: called once the parents' texts are copied out of
    ``ptable`` (a store drops the pages it mapped for them)."""
    rows = transform_rows(d, ptable, full_meta, read)
    return rows.table() if isinstance(rows, SpanRows) else rows


def transform_rows(
    d: GroupDef,
    ptable: pa.Table,
    full_meta: list[str] | None = None,
    read: Callable[[], object] | None = None,
) -> pa.Table | SpanRows:
    """:func:`run_transform`'s rows: those of a span transform as :class:`SpanRows` (made a
    batch at a time as they are read), any other transform's as a table."""
    n = ptable.num_rows
    if n == 0:
        return GROUP_SCHEMA.empty_table()
    ids = ptable.column("id").to_pylist()
    docs = ptable.column("doc_id").to_pylist()
    if d.spans is not None and getattr(d.fn, "reads_long_texts", False):
        texts = read_texts(ptable.column("text"), read)  # long ones never decoded whole
    else:
        texts = ptable.column("text").to_pylist()
    if read is not None:
        read()
    if full_meta is None:  # parents are documents: children inherit, carrying nothing
        full_meta = ptable.column("metadata").to_pylist()
        own = ["{}"] * n
    else:
        own = ptable.column("metadata").to_pylist()
    if d.spans is not None:
        return SpanRows(d, ids, docs, texts, own, ptable.column("text"), read)
    parents = list(zip(ids, docs, texts, own, full_meta, strict=True))
    if has_batch(d.fn):  # one call for every parent (e.g. concurrent LLM calls)
        parsed = [json.loads(m) for m in full_meta]
        arg = (
            [DocNode(text=t, metadata=m, id=i) for i, t, m in zip(ids, texts, parsed, strict=True)]
            if d.trans_node
            else texts
        )
        outs = _call(d, parents, lambda: d.fn.batch_transform(arg))
        if not isinstance(outs, list) or len(outs) != n:
            raise ConfigError(
                f"batch_transform of group {d.name!r} returned "
                f"{len(outs) if isinstance(outs, list) else type(outs).__name__} "
                f"results for {n} parents; return one list per parent"
            )
        rows = [
            r
            for out, p, m in zip(outs, parents, parsed, strict=True)
            for r in _child_rows(out, d.name, p, m)
        ]
        return rows_to_table(rows, d.name)
    if d.num_workers > 0 and n > 1:
        k = min(n, d.num_workers * 4)
        chunks = [parents[i * n // k : (i + 1) * n // k] for i in range(k)]
        pool_cls = ThreadPoolExecutor
        try:
            pickle.dumps(d.fn)
            pool_cls = ProcessPoolExecutor
        except Exception:
            pass
        with pool_cls(max_workers=d.num_workers) as pool:
            parts = pool.map(_run_chunk, [d.fn] * k, [d.trans_node] * k, [d.name] * k, chunks)
            per_parent = [rows for part in parts for rows in part]
    else:
        per_parent = _run_chunk(d.fn, d.trans_node, d.name, parents)
    return rows_to_table([r for rows in per_parent for r in rows], d.name)


SPAN_BATCH = 8192  # child rows turned into Arrow at a time (a long parent's chunks stream)


class SpanRows:
    """The child rows of a span transform's parents: the spans are found at once (so their
    size is known before any row is made), the rows are made :data:`SPAN_BATCH` at a time
    when :meth:`batches` is read.

    ``column``: the parents' text column; once the spans are found, a long text is read
    from its Arrow buffer a chunk at a time instead of held as a str, and ``release`` (a
    store's ``release_pages``) is called after each batch, so a mapped parent's pages come
    and go."""

    def __init__(
        self,
        d: GroupDef,
        ids,
        docs,
        texts,
        metas,
        column: pa.ChunkedArray | None = None,
        release: Callable[[], object] | None = None,
    ) -> None:
        self.name = d.name
        self.spans = d.spans(texts)
        views = 0
        if column is not None:
            views = buffer_views(texts, column, release)
        self._release = release if views else None
        self._parents = (ids, docs, texts, metas)
        chars = sum(e - s for spans in self.spans for s, e in spans)
        meta = sum(len(m) * len(spans) for m, spans in zip(metas, self.spans, strict=True))
        rows = sum(len(spans) for spans in self.spans)
        #: the Arrow bytes of the rows' table, about (texts counted a byte a character)
        self.nbytes = chars + meta + rows * _ROW_BYTES

    def batches(self) -> Iterator[pa.Table]:
        """The rows as tables of about :data:`SPAN_BATCH` rows, in order (at least one)."""
        name = self.name
        cols: dict[str, list] = {c: [] for c in GROUP_SCHEMA.names}
        made = False
        for pid, doc_id, text, meta, spans in zip(*self._parents, self.spans, strict=True):
            i = 0  # child number within the parent (kept chunks only, as node ids count them)
            for lo in range(0, len(spans), SPAN_BATCH):
                kept = [
                    (s, e, c) for s, e in spans[lo : lo + SPAN_BATCH] if (c := text[s:e]).strip()
                ]
                n = len(kept)
                cols["id"] += [node_id(name, pid, i + k, c) for k, (_, _, c) in enumerate(kept)]
                cols["text"] += [c for _, _, c in kept]
                cols["start"] += [s for s, _, _ in kept]
                cols["end"] += [e for _, e, _ in kept]
                cols["doc_id"] += [doc_id] * n
                cols["parent_id"] += [pid] * n
                cols["metadata"] += [meta] * n
                i += n
                if len(cols["id"]) >= SPAN_BATCH:
                    yield _cols_table(cols, name)
                    made = True
                    cols = {c: [] for c in GROUP_SCHEMA.names}
                    if self._release is not None:
                        self._release()
        if cols["id"] or not made:
            yield _cols_table(cols, name)

    def table(self) -> pa.Table:
        """All the rows as one table."""
        parts = list(self.batches())
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


_ROW_BYTES = 4 * 32 + 5 * 4 + 2 * 8  # ids (32 hex digits), string offsets, start and end


def _cols_table(cols: dict[str, list], name: str) -> pa.Table:
    try:
        return pa.table(cols, schema=GROUP_SCHEMA)
    except (pa.ArrowException, UnicodeError):
        return rows_to_table(list(zip(*cols.values(), strict=True)), name)  # names the bad node
