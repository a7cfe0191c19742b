"""The AST (or a dict, or text) compiled to an Arrow expression and evaluated as a row
mask, with Spring AI's semantics for nulls and types."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastrag.errors import ConfigError
from fastrag.indexes.filters.ast import (
    COMPARE,
    Expression,
    ExpressionType,
    Group,
    Key,
    Value,
    literal_value,
)
from fastrag.indexes.filters.builder import FilterExpressionBuilder, Op
from fastrag.indexes.filters.parse import MAX_DEPTH, parse_filter

# -- compiler ---------------------------------------------------------------------------------
FilterLike = str | Expression | Group | Op | Mapping[str, Any] | pc.Expression


def _from_dict(d: Mapping[str, Any]) -> Expression | Group | None:
    """``{"genre": "drama", "lang": ["en", "fr"], "x": None}`` -> AND of EQ / IN / IS NULL."""
    b = FilterExpressionBuilder()
    node: Op | None = None
    for key, value in d.items():
        if not isinstance(key, str):
            raise ConfigError(f"filter dict key {key!r} must be a field name (str)")
        if value is None:
            op = b.is_null(key)
        elif isinstance(value, (list, tuple, set, frozenset, np.ndarray)):
            op = b.in_(key, list(value))
        else:
            op = b.eq(key, value)
        node = op if node is None else node.and_(op)
    return None if node is None else node.build()


def _to_ast(filter: Any) -> Expression | Group | None:
    if isinstance(filter, str):
        return parse_filter(filter)
    if isinstance(filter, Op):
        return filter.expression
    if isinstance(filter, (Expression, Group)):
        return filter
    if isinstance(filter, Mapping):
        return _from_dict(filter)
    raise ConfigError(
        f"filter of type {type(filter).__name__} cannot be compiled; pass a filter string, a "
        "FilterExpressionBuilder result, an Expression or a dict of field values"
    )


def _field_paths(schema: pa.Schema) -> dict[str, tuple[tuple[str, ...], pa.DataType]]:
    """Every addressable field: top-level columns and dotted paths into struct columns."""
    out: dict[str, tuple[tuple[str, ...], pa.DataType]] = {}

    def walk(prefix: tuple[str, ...], typ: pa.DataType) -> None:
        out.setdefault(".".join(prefix), (prefix, typ))
        if pa.types.is_struct(typ):
            for i in range(typ.num_fields):
                f = typ.field(i)
                walk((*prefix, f.name), f.type)

    for f in schema:
        out[f.name] = ((f.name,), f.type)  # an exact column name wins over a struct path
    for f in schema:
        if pa.types.is_struct(f.type):
            walk((f.name,), f.type)
    return out


def _kind(typ: pa.DataType) -> str:
    if pa.types.is_dictionary(typ):
        return _kind(typ.value_type)
    if pa.types.is_boolean(typ):
        return "bool"
    if pa.types.is_integer(typ):
        return "int"
    if pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        return "float"
    if (
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or (hasattr(pa.types, "is_string_view") and pa.types.is_string_view(typ))
    ):
        return "string"
    if pa.types.is_temporal(typ):
        return "temporal"
    if pa.types.is_null(typ):
        return "null"
    return "other"


def _lit_kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return "string"


_LIT_NAME = {"bool": "a boolean", "number": "a number", "string": "a string"}
_FIELD_WANTS = {
    "bool": "true or false",
    "int": "a number",
    "float": "a number",
    "string": "a quoted string",
    "temporal": "an ISO date/time string",
}


def _operands(node: Expression, t: ExpressionType) -> list[Any]:
    """The operands of a chain of ``t`` (AND or OR) expressions, left to right, collected with
    a stack instead of recursion."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Expression) and n.type is t:
            stack += [n.right, n.left]
        else:
            out.append(n)
    return out


class _Compiler:
    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.fields = _field_paths(schema)

    def field(self, key: Key) -> tuple[pc.Expression, pa.DataType]:
        entry = self.fields.get(key.key)
        if entry is None:
            known = sorted(self.fields)
            close = difflib.get_close_matches(key.key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown field {key.key!r} in filter; known fields: {known}{hint}")
        path, typ = entry
        expr = pc.field(*path) if len(path) > 1 else pc.field(path[0])
        if pa.types.is_dictionary(typ):
            expr = expr.cast(typ.value_type)
            typ = typ.value_type
        return expr, typ

    def literal(self, key: Key, typ: pa.DataType, v: Any, op: str) -> pa.Scalar:
        kind, lk = _kind(typ), _lit_kind(v)
        ok = (
            (kind == "bool" and lk == "bool")
            or (kind in ("int", "float") and lk == "number")
            or (kind == "string" and lk == "string")
            or (kind == "temporal" and lk == "string")
        )
        if not ok:
            if kind == "other":
                raise ConfigError(
                    f"field {key.key!r} has type {typ}, which filters cannot compare; "
                    "filter on scalar columns (strings, numbers, booleans, dates)"
                )
            raise ConfigError(
                f"type mismatch in filter: field {key.key!r} is {typ} but {literal_value(v)} "
                f"(in '{op}') is {_LIT_NAME[lk]}; compare it with {_FIELD_WANTS[kind]}"
            )
        if kind == "temporal":
            try:
                return pa.scalar(v).cast(typ)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise ConfigError(
                    f"filter value {v!r} cannot be read as {typ} for field {key.key!r} ({e})"
                ) from None
        if kind == "float":
            return pa.scalar(float(v))
        return pa.scalar(v)

    def compile(self, node: Any) -> pc.Expression:
        if isinstance(node, Group):
            return self.compile(node.content)
        if not isinstance(node, Expression):
            raise ConfigError(f"not a filter expression node: {node!r}")
        t = node.type
        if t in (ExpressionType.AND, ExpressionType.OR):
            parts = [self.compile(x) for x in _operands(node, t)]
            # if_else, not & / |: Arrow re-nests and_kleene / or_kleene into one left-deep
            # chain, and a few thousand terms overflow its stack (a segfault); if_else stays as
            # built, and is exact here because every operand is a non-null boolean.
            yes, no = pc.scalar(True), pc.scalar(False)
            if t is ExpressionType.AND:

                def combine(a, b):
                    return pc.if_else(a, b, no)
            else:

                def combine(a, b):
                    return pc.if_else(a, yes, b)

            while len(parts) > 1:  # a balanced tree: shallow for Arrow, whatever the length
                parts = [
                    combine(*parts[i : i + 2]) if i + 1 < len(parts) else parts[i]
                    for i in range(0, len(parts), 2)
                ]
            return parts[0]
        if t is ExpressionType.NOT:
            return ~self.compile(node.left)
        key = node.left
        if not isinstance(key, Key):
            raise ConfigError(f"the left operand of {t.value} must be a field Key, got {key!r}")
        expr, typ = self.field(key)
        if t is ExpressionType.ISNULL:
            return pc.is_null(expr)
        if t is ExpressionType.ISNOTNULL:
            return pc.is_valid(expr)
        if not isinstance(node.right, Value):
            raise ConfigError(f"the right operand of {t.value} must be a Value, got {node.right!r}")
        v = node.right.value
        if t is ExpressionType.LIKE:
            if _kind(typ) == "null":
                return pc.scalar(False)
            if _kind(typ) != "string" or not isinstance(v, str):
                raise ConfigError(
                    f"LIKE matches string fields with a pattern string; field "
                    f"{key.key!r} is {typ}: compare it with == or in"
                )
            if pa.types.is_dictionary(typ):
                expr = expr.cast(typ.value_type)
            return pc.is_valid(expr) & pc.match_like(expr, v)
        if t in COMPARE:
            if isinstance(v, tuple):
                raise ConfigError(
                    f"filter '{key.key} {COMPARE[t]} [...]' compares with a list; use 'in'"
                )
            if _kind(typ) == "null":
                return pc.scalar(False)
            lit = self.literal(key, typ, v, COMPARE[t])
            if _kind(typ) == "int" and not isinstance(v, bool):
                exact = _int_comparison(t, v, typ)
                if isinstance(exact, bool):  # the same answer for every non-null value
                    return pc.is_valid(expr) & pc.scalar(exact)
                t, lit = exact
            if pa.types.is_decimal(typ):
                expr = expr.cast(pa.float64())
                lit = pa.scalar(float(v))
            fn = {
                ExpressionType.EQ: pc.equal,
                ExpressionType.NE: pc.not_equal,
                ExpressionType.GT: pc.greater,
                ExpressionType.GTE: pc.greater_equal,
                ExpressionType.LT: pc.less,
                ExpressionType.LTE: pc.less_equal,
            }[t]
            return pc.is_valid(expr) & fn(expr, lit)  # null -> False
        # IN / NIN
        if not isinstance(v, tuple):
            raise ConfigError(f"'{t.value.lower()}' on field {key.key!r} needs a list of values")
        word = "in" if t is ExpressionType.IN else "nin"
        if _kind(typ) == "null":
            return pc.scalar(False)
        scalars = [self.literal(key, typ, x, word) for x in v]
        if not scalars:
            member: pc.Expression = pc.scalar(False)
        else:
            kind = _kind(typ)
            if kind in ("int", "float"):
                if kind == "int":  # exact: floats that are not whole numbers cannot match
                    lo, hi = _int_range(typ)
                    whole = [int(x) for x in v if float(x).is_integer() and lo <= x <= hi]
                    vs = pa.array(whole, typ)
                else:
                    # is_in hashes floats, so -0.0 would miss 0.0: adding 0.0 makes every zero +0.0
                    expr = pc.add(expr.cast(pa.float64()), pa.scalar(0.0))
                    vs = pa.array([float(x) + 0.0 for x in v], pa.float64())
            elif kind == "temporal":
                vs = pa.array(scalars, typ)
            elif kind == "bool":
                vs = pa.array(v, pa.bool_())
            else:
                vs = pa.array(v, typ)
            member = pc.is_in(expr, value_set=vs)
        if t is ExpressionType.IN:
            return pc.is_valid(expr) & member
        return pc.is_valid(expr) & ~member


def _int_range(typ: pa.DataType) -> tuple[int, int]:
    info = np.iinfo(typ.to_pandas_dtype())
    return int(info.min), int(info.max)


def _int_comparison(t: ExpressionType, v: int | float, typ: pa.DataType):
    """An integer column compared with ``v``, exactly (no cast to float64, which rounds above
    2**53): ``True``/``False`` when the answer is the same for every non-null value, else
    ``(op, literal of the column's type)`` with the same meaning."""
    import math

    lo, hi = _int_range(typ)
    E = ExpressionType
    if isinstance(v, float) and math.isnan(v):
        return t is E.NE
    if isinstance(v, float) and math.isfinite(v) and not v.is_integer():
        if t is E.EQ or t is E.NE:
            return t is E.NE
        # x > 2.5 <=> x >= 3;  x < 2.5 <=> x <= 2
        v, t = (math.ceil(v), E.GTE) if t in (E.GT, E.GTE) else (math.floor(v), E.LTE)
    elif isinstance(v, float) and math.isfinite(v):
        v = int(v)
    if isinstance(v, float) or not lo <= v <= hi:  # beyond every value of the column
        above = v > 0
        if t is E.EQ or t is E.NE:
            return t is E.NE
        return (t in (E.LT, E.LTE)) == above
    return t, pa.scalar(v, typ)


def compile_filter(filter: FilterLike, schema: pa.Schema) -> pc.Expression:
    """Compile a filter (string, AST, builder result or dict of equalities) against ``schema``
    to a ``pyarrow.compute.Expression`` that yields a non-null boolean per row."""
    if not isinstance(schema, pa.Schema):
        raise ConfigError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
    if isinstance(filter, pc.Expression):
        return filter
    if callable(filter) and not isinstance(filter, (Op, Expression, Group, Mapping)):
        raise ConfigError(
            "a callable filter cannot be compiled to an Arrow expression; pass it to "
            "filter_mask(table, filter) instead"
        )
    ast = _to_ast(filter)
    if ast is None:
        return pc.scalar(True)
    try:
        return _Compiler(schema).compile(ast)
    except RecursionError:
        raise ConfigError(
            f"filter nests groups or NOTs too deeply to compile; keep nesting "
            f"under {MAX_DEPTH} levels"
        ) from None


def _evaluate(table: pa.Table, expr: pc.Expression) -> np.ndarray:
    from pyarrow import acero

    decl = acero.Declaration.from_sequence(
        [
            acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
            acero.Declaration("project", acero.ProjectNodeOptions([expr], ["_mask"])),
        ]
    )
    col = decl.to_table(use_threads=False).column(0)
    col = pc.fill_null(col, False)
    if col.type != pa.bool_():
        raise ConfigError(f"filter expression yields {col.type}, not a boolean per row")
    out = col.to_numpy() if col.num_chunks != 1 else col.chunk(0).to_numpy(zero_copy_only=False)
    return np.asarray(out, dtype=np.bool_)


def filter_mask(
    table: pa.Table,
    filter: FilterLike | Callable[[pa.Table], Any] | None,
) -> np.ndarray:
    """Boolean row mask (``np.ndarray[bool]`` of ``table.num_rows``) of the rows ``filter``
    keeps. ``table`` holds flat metadata columns; ``filter`` is a filter string, AST, builder
    result, dict of equalities, a ``pyarrow.compute.Expression``, or a callable
    ``table -> bool mask``; ``None`` keeps every row."""
    if not isinstance(table, pa.Table):
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        else:
            raise ConfigError(f"table must be a pyarrow.Table, got {type(table).__name__}")
    n = table.num_rows
    if filter is None:
        return np.ones(n, dtype=np.bool_)
    if callable(filter) and not isinstance(filter, (Op, Expression, Group, Mapping, pc.Expression)):
        return _callable_mask(table, filter)
    expr = compile_filter(filter, table.schema)
    if n == 0:
        return np.zeros(0, dtype=np.bool_)
    return _evaluate(table, expr)


def _callable_mask(table: pa.Table, fn: Callable[[pa.Table], Any]) -> np.ndarray:
    name = getattr(fn, "__name__", type(fn).__name__)
    result = fn(table)
    if isinstance(result, (pa.ChunkedArray, pa.Array)):
        if result.type != pa.bool_():
            raise ConfigError(
                f"filter callable {name!r} returned an Arrow array of {result.type}; "
                "return booleans, one per row"
            )
        result = pc.fill_null(result, False)
        result = result.to_numpy(zero_copy_only=False)
    mask = np.asarray(result)
    if mask.dtype != np.bool_:
        raise ConfigError(
            f"filter callable {name!r} returned dtype {mask.dtype}; return a boolean mask "
            f"(np.ndarray[bool] of length {table.num_rows})"
        )
    if mask.ndim != 1 or mask.shape[0] != table.num_rows:
        raise ConfigError(
            f"filter callable {name!r} returned a mask of shape {mask.shape}; the table has "
            f"{table.num_rows} rows, so return shape ({table.num_rows},)"
        )
    return np.ascontiguousarray(mask)
