"""``FilterExpressionBuilder``: the AST built in code (Spring AI's builder)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastrag.errors import ConfigError
from fastrag.indexes.filters.ast import Expression, ExpressionType, Group, Key, Value


# -- builder ----------------------------------------------------------------------------------
def _check_literal(value: Any, where: str) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(
                f"{where}: value {value!r} holds a lone surrogate, which is not "
                "valid Unicode; remove it"
            ) from None
        return value
    if isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if not np.isfinite(value):
            raise ConfigError(f"{where}: value {value!r} is not a finite number")
        return value
    if value is None:
        raise ConfigError(f"{where}: value is None; use is_null(key) to test for null")
    raise ConfigError(
        f"{where}: value {value!r} of type {type(value).__name__} is not a filter literal "
        "(str, int, float or bool)"
    )


def _check_key(key: Any, where: str) -> Key:
    if isinstance(key, Key):
        return key
    if not isinstance(key, str) or not key:
        raise ConfigError(f"{where}: field name {key!r} must be a non-empty str")
    return Key(key)


class Op:
    """A built filter (Spring AI ``FilterExpressionBuilder.Op``); ``.build()`` gives the AST.

    Chains: ``b.eq("genre", "drama").and_(b.gte("year", 2020))``; operators ``&``, ``|``, ``~``
    do the same.
    """

    __slots__ = ("expression",)

    def __init__(self, expression: Expression | Group) -> None:
        self.expression = expression

    def build(self) -> Expression | Group:
        return self.expression

    def and_(self, other: Op | Expression | Group) -> Op:
        return Op(Expression(ExpressionType.AND, self.expression, _unwrap(other, "and_")))

    def or_(self, other: Op | Expression | Group) -> Op:
        return Op(Expression(ExpressionType.OR, self.expression, _unwrap(other, "or_")))

    def not_(self) -> Op:
        return Op(Expression(ExpressionType.NOT, self.expression))

    def group(self) -> Op:
        return Op(Group(self.expression))

    __and__ = and_
    __or__ = or_

    def __invert__(self) -> Op:
        return self.not_()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Op) and self.expression == other.expression

    def __hash__(self) -> int:
        return hash(self.expression)

    def __str__(self) -> str:
        return str(self.expression)

    def __repr__(self) -> str:
        return f"Op({self.expression!s})"


def _unwrap(x: Any, where: str) -> Expression | Group:
    if isinstance(x, Op):
        return x.expression
    if isinstance(x, (Expression, Group)):
        return x
    raise ConfigError(
        f"{where}: operand {x!r} is not a filter; build it with FilterExpressionBuilder "
        "methods such as b.eq(key, value)"
    )


class FilterExpressionBuilder:
    """Builds the same AST as :func:`parse_filter` (Spring AI ``FilterExpressionBuilder``).

    >>> b = FilterExpressionBuilder()
    >>> str(b.eq("genre", "drama").and_(b.gte("year", 2020)).build())
    "genre == 'drama' AND year >= 2020"
    """

    def _cmp(self, t: ExpressionType, key: Any, value: Any) -> Op:
        where = f"{t.value.lower()}({key!r}, ...)"
        return Op(Expression(t, _check_key(key, where), Value(_check_literal(value, where))))

    def eq(self, key: str, value: Any) -> Op:
        return self._cmp(ExpressionType.EQ, key, value)

    def ne(self, key: str, value: Any) -> Op:
        return self._cmp(ExpressionType.NE, key, value)

    def gt(self, key: str, value: Any) -> Op:
        return self._cmp(ExpressionType.GT, key, value)

    def gte(self, key: str, value: Any) -> Op:
        return self._cmp(ExpressionType.GTE, key, value)

    def lt(self, key: str, value: Any) -> Op:
        return self._cmp(ExpressionType.LT, key, value)

    def lte(self, key: str, value: Any) -> Op:
        return self._cmp(ExpressionType.LTE, key, value)

    def _members(self, t: ExpressionType, key: Any, values: tuple) -> Op:
        where = f"{'in_' if t is ExpressionType.IN else 'nin'}({key!r}, ...)"
        if len(values) == 1 and isinstance(values[0], (list, tuple, set, frozenset, np.ndarray)):
            values = tuple(values[0])
        vals = tuple(_check_literal(v, where) for v in values)
        return Op(Expression(t, _check_key(key, where), Value(vals)))

    def in_(self, key: str, *values: Any) -> Op:
        """``key in [values]``; values as arguments or as one list."""
        return self._members(ExpressionType.IN, key, values)

    def nin(self, key: str, *values: Any) -> Op:
        """``key nin [values]``; values as arguments or as one list."""
        return self._members(ExpressionType.NIN, key, values)

    def like(self, key: str, pattern: str) -> Op:
        """``key LIKE pattern`` (SQL: ``%`` any run of characters, ``_`` one character)."""
        if not isinstance(pattern, str):
            raise ConfigError(
                f"like({key!r}, ...) needs a pattern string such as 'docs/en/%', got {pattern!r}"
            )
        return Op(Expression(ExpressionType.LIKE, _check_key(key, "like"), Value(pattern)))

    def is_null(self, key: str) -> Op:
        return Op(Expression(ExpressionType.ISNULL, _check_key(key, "is_null")))

    def is_not_null(self, key: str) -> Op:
        return Op(Expression(ExpressionType.ISNOTNULL, _check_key(key, "is_not_null")))

    def and_(self, left: Op, right: Op) -> Op:
        return Op(Expression(ExpressionType.AND, _unwrap(left, "and_"), _unwrap(right, "and_")))

    def or_(self, left: Op, right: Op) -> Op:
        return Op(Expression(ExpressionType.OR, _unwrap(left, "or_"), _unwrap(right, "or_")))

    def not_(self, content: Op) -> Op:
        return Op(Expression(ExpressionType.NOT, _unwrap(content, "not_")))

    def group(self, content: Op) -> Op:
        return Op(Group(_unwrap(content, "group")))
