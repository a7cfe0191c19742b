"""The filter AST, as Spring AI's ``Filter``: :class:`Expression`, :class:`Key`,
:class:`Value`, :class:`Group`, and the error of bad filter text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from fastrag.errors import ConfigError

KEYWORDS = {"AND", "OR", "NOT", "IN", "NIN", "IS", "NULL", "TRUE", "FALSE", "WHERE", "LIKE"}
_IDENT = r"[^\W\d]\w*"
_IDENT_PATH = re.compile(rf"{_IDENT}(?:\.{_IDENT})*")


def _is_keyword_path(name: str) -> bool:
    return any(part.upper() in KEYWORDS for part in name.split("."))


class FilterSyntaxError(ConfigError):
    """A filter string does not parse; ``position`` (0-based) and ``token`` locate the error."""

    def __init__(self, message: str, text: str, position: int, token: str) -> None:
        caret = f"\n  {text}\n  {' ' * position}^"
        super().__init__(f"{message}{caret}")
        self.text = text
        self.position = position
        self.token = token


# -- AST --------------------------------------------------------------------------------------
class ExpressionType(str, Enum):
    """Operators of a filter :class:`Expression` (Spring AI ``Filter.ExpressionType``)."""

    AND = "AND"
    """Both operands hold."""
    OR = "OR"
    """Either operand holds."""
    EQ = "EQ"
    """Field equals the value."""
    NE = "NE"
    """Field differs from the value (False on null)."""
    GT = "GT"
    """Field greater than the value."""
    GTE = "GTE"
    """Field greater than or equal to the value."""
    LT = "LT"
    """Field less than the value."""
    LTE = "LTE"
    """Field less than or equal to the value."""
    IN = "IN"
    """Field is one of the listed values."""
    NIN = "NIN"
    """Field is none of the listed values (False on null)."""
    NOT = "NOT"
    """Negation of the (only, left) operand."""
    ISNULL = "ISNULL"
    """Field is null."""
    ISNOTNULL = "ISNOTNULL"
    """Field is not null."""
    LIKE = "LIKE"
    """String field matches a SQL LIKE pattern (fastrag's; not in Spring AI)."""


COMPARE = {
    ExpressionType.EQ: "==",
    ExpressionType.NE: "!=",
    ExpressionType.GT: ">",
    ExpressionType.GTE: ">=",
    ExpressionType.LT: "<",
    ExpressionType.LTE: "<=",
}
COMPARE_BY_TEXT = {v: k for k, v in COMPARE.items()}


@dataclass(frozen=True)
class Key:
    """A metadata field (Spring AI ``Filter.Key``); dotted names address struct fields."""

    key: str

    def __str__(self) -> str:
        if _IDENT_PATH.fullmatch(self.key) and not _is_keyword_path(self.key):
            return self.key
        return _quote(self.key)


@dataclass(frozen=True, eq=False)
class Value:
    """A literal (Spring AI ``Filter.Value``): str, int, float, bool, or a tuple of those."""

    value: Any

    def _key(self) -> Any:
        v = self.value
        if isinstance(v, tuple):
            return ("list", tuple((type(x).__name__, x) for x in v))
        return (type(v).__name__, v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Value) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        v = self.value
        if isinstance(v, tuple):
            return "[" + ", ".join(literal_value(x) for x in v) + "]"
        return literal_value(v)


@dataclass(frozen=True)
class Expression:
    """``type`` applied to ``left`` (a :class:`Key`, or a sub-expression for AND/OR/NOT) and
    ``right`` (a :class:`Value`, a sub-expression for AND/OR, None for NOT/IS NULL)."""

    type: ExpressionType
    left: Any
    right: Any = None

    def __str__(self) -> str:
        t = self.type
        if t in COMPARE:
            return f"{self.left} {COMPARE[t]} {self.right}"
        if t is ExpressionType.IN:
            return f"{self.left} IN {self.right}"
        if t is ExpressionType.NIN:
            return f"{self.left} NIN {self.right}"
        if t is ExpressionType.ISNULL:
            return f"{self.left} IS NULL"
        if t is ExpressionType.ISNOTNULL:
            return f"{self.left} IS NOT NULL"
        if t is ExpressionType.LIKE:
            return f"{self.left} LIKE {self.right}"
        if t is ExpressionType.NOT:
            inner = str(self.left)
            if isinstance(self.left, Expression) and self.left.type in (
                ExpressionType.AND,
                ExpressionType.OR,
            ):
                return f"NOT ({inner})"
            return f"NOT {inner}"
        # AND / OR: the parser is left-associative with AND above OR; parenthesise where the
        # plain rendering would parse differently. The left spine of a chain is walked in a
        # loop, so chains of thousands of terms render without deep recursion.
        op = " AND " if t is ExpressionType.AND else " OR "
        rights = []
        node: Any = self
        while isinstance(node, Expression) and node.type is t:
            rights.append(_side(node.right, t, True))
            node = node.left
        return op.join([_side(node, t, False), *reversed(rights)])


@dataclass(frozen=True)
class Group:
    """A parenthesised sub-expression (Spring AI ``Filter.Group``)."""

    content: Any

    def __str__(self) -> str:
        return f"({self.content})"


Node = Expression | Group


def _side(node: Any, parent: ExpressionType, right: bool) -> str:
    s = str(node)
    if isinstance(node, Expression) and node.type in (ExpressionType.AND, ExpressionType.OR):
        looser = parent is ExpressionType.AND and node.type is ExpressionType.OR
        if looser or (right and node.type is parent):
            return f"({s})"
    return s


def _quote(s: str) -> str:
    return (
        "'"
        + s.replace("\\", "\\\\")
        .replace("'", "\\'")
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
        + "'"
    )


def literal_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return _quote(v)
    if isinstance(v, float):
        if not np.isfinite(v):
            raise ConfigError(f"filter literal {v!r} has no text form; use a finite number")
        return repr(v)
    return str(v)
