"""Metadata filter expressions in Spring AI's portable syntax, compiled to Arrow.

Text form (Spring AI ``FilterExpressionTextParser``)::

    genre == 'drama' && year >= 2020
    country in ['UK', 'NL'] OR NOT (isOpen == true)
    author.name != "Bob" and rating IS NOT NULL

* comparisons ``== != < <= > >=``, list membership ``in`` / ``nin`` (also ``not in``),
  ``IS NULL`` / ``IS NOT NULL``; and, beyond Spring AI (which has no text matching), SQL's
  ``LIKE`` / ``NOT LIKE`` on string fields: ``file_path LIKE 'docs/en/%'`` (``%`` any run of
  characters, ``_`` one character, ``\\`` before either for itself; case-sensitive);
* boolean ``&& || !`` or ``AND OR NOT`` (keywords case-insensitive), parentheses; precedence
  ``NOT`` > ``AND`` > ``OR``, ``AND``/``OR`` associate left;
* literals: strings in ``'...'`` or ``"..."`` (backslash escapes ``\\n \\t \\r \\uXXXX``, any
  other escaped character stands for itself), integers (optional sign, optional ``L``
  suffix), decimals (``1.5``, ``.5``, ``1e3``), ``true``/``false``, lists ``['a', 'b']``;
* fields: identifiers, dotted paths (``meta.year``: a column of that exact name, else a field
  of a struct column) or quoted names (``'release year' > 2000``); an optional leading
  ``WHERE`` is ignored.

The text parses to the same AST as Spring AI's ``Filter``: :class:`Expression` (an
:class:`ExpressionType` with a left and right operand), :class:`Key`, :class:`Value` and
:class:`Group` (parentheses). :class:`FilterExpressionBuilder` builds that AST in code.

Semantics (so that a filter is always a plain boolean row mask): any comparison, ``in`` or
``nin`` on a null value is **False** (so ``!(x == 1)`` is True on a null ``x``); ``IS NULL``
tests for null (a float NaN is not null). String columns compare with string literals, number
columns with number literals (ints and floats mix; int columns compare exactly below 2**53),
bool columns with ``true``/``false``, dates and timestamps with ISO strings; anything else is a
type error naming the field, its type and the literal.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastrag.errors import ConfigError

__all__ = [
    "Expression",
    "ExpressionType",
    "FilterExpressionBuilder",
    "FilterSyntaxError",
    "Group",
    "Key",
    "Op",
    "Value",
    "compile_filter",
    "filter_mask",
    "parse_filter",
]


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


_COMPARE = {
    ExpressionType.EQ: "==",
    ExpressionType.NE: "!=",
    ExpressionType.GT: ">",
    ExpressionType.GTE: ">=",
    ExpressionType.LT: "<",
    ExpressionType.LTE: "<=",
}
_COMPARE_BY_TEXT = {v: k for k, v in _COMPARE.items()}


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
            return "[" + ", ".join(_literal(x) for x in v) + "]"
        return _literal(v)


@dataclass(frozen=True)
class Expression:
    """``type`` applied to ``left`` (a :class:`Key`, or a sub-expression for AND/OR/NOT) and
    ``right`` (a :class:`Value`, a sub-expression for AND/OR, None for NOT/IS NULL)."""

    type: ExpressionType
    left: Any
    right: Any = None

    def __str__(self) -> str:
        t = self.type
        if t in _COMPARE:
            return f"{self.left} {_COMPARE[t]} {self.right}"
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
                ExpressionType.AND, ExpressionType.OR
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
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace(
        "\r", "\\r").replace("\t", "\\t") + "'"


def _literal(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return _quote(v)
    if isinstance(v, float):
        if not np.isfinite(v):
            raise ConfigError(f"filter literal {v!r} has no text form; use a finite number")
        return repr(v)
    return str(v)


# -- lexer ------------------------------------------------------------------------------------
_KEYWORDS = {"AND", "OR", "NOT", "IN", "NIN", "IS", "NULL", "TRUE", "FALSE", "WHERE", "LIKE"}
_IDENT = r"[^\W\d]\w*"
_IDENT_PATH = re.compile(rf"{_IDENT}(?:\.{_IDENT})*")
_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<number>[+-]?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+[lL]?)
        (?![\w.]))
  | (?P<ident>[^\W\d]\w*(?:\.[^\W\d]\w*)*)
  | (?P<op>==|!=|<=|>=|&&|\|\||[<>!()\[\],])
    """,
    re.VERBOSE,
)


def _is_keyword_path(name: str) -> bool:
    return any(part.upper() in _KEYWORDS for part in name.split("."))


@dataclass(frozen=True)
class _Tok:
    kind: str  # "number" "string" "ident" "kw" "op" "end"
    text: str
    pos: int
    value: Any = None


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "0": "\0"}


def _unicode(value: str, text: str, start: int) -> str:
    """``value`` with ``\\uXXXX`` surrogate pairs joined; a lone surrogate is an error."""
    try:
        return value.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeDecodeError:
        raise FilterSyntaxError(
            f"syntax error at position {start}: the string starting {text[start:start + 12]!r} "
            "holds a lone surrogate (e.g. '\\ud800' without its pair), which is not valid "
            "Unicode; remove it or write the whole character", text, start, text[start:start + 12],
        ) from None


def _read_string(text: str, start: int) -> tuple[str, int]:
    quote = text[start]
    out = []
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text):
                break
            nxt = text[i + 1]
            if nxt == "u":
                hexd = text[i + 2:i + 6]
                if len(hexd) != 4 or not all(c in "0123456789abcdefABCDEF" for c in hexd):
                    raise FilterSyntaxError(
                        f"syntax error at position {i}: bad escape '\\u{hexd}' in a string "
                        "(write \\u followed by 4 hex digits)",
                        text, i, text[i:i + 6],
                    )
                out.append(chr(int(hexd, 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        if ch == quote:
            return _unicode("".join(out), text, start), i + 1
        out.append(ch)
        i += 1
    raise FilterSyntaxError(
        f"syntax error at position {start}: unterminated string starting {text[start:start + 12]!r}"
        f" (close it with {quote})",
        text, start, text[start:start + 12],
    )


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "'\"":
            s, j = _read_string(text, i)
            toks.append(_Tok("string", text[i:j], i, s))
            i = j
            continue
        m = _TOKEN.match(text, i)
        if m is None or m.end() == i:
            bad = text[i]
            hint = ""
            if bad == "=":
                hint = "; use '==' for equality"
            elif bad in "&|":
                hint = f"; use '{bad * 2}'"
            raise FilterSyntaxError(
                f"syntax error at position {i}: unexpected character {bad!r}{hint}", text, i, bad
            )
        kind = m.lastgroup
        tok = m.group()
        if kind == "number":
            raw = tok[:-1] if tok[-1] in "lL" else tok
            is_int = re.fullmatch(r"[+-]?\d+", raw) is not None
            value = int(raw) if is_int else float(raw)
            toks.append(_Tok("number", tok, i, value))
        elif kind == "ident":
            up = tok.upper()
            toks.append(_Tok("kw", tok, i, up) if up in _KEYWORDS else _Tok("ident", tok, i, tok))
        elif kind == "op":
            toks.append(_Tok("op", tok, i, tok))
        i = m.end()
    toks.append(_Tok("end", "", n))
    return toks


# -- parser -----------------------------------------------------------------------------------
MAX_DEPTH = 100  # nested parentheses and NOTs; AND/OR chains of any length are fine


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0
        self.depth = 0

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"at most {MAX_DEPTH} nested parentheses or NOTs (this filter nests "
                             "deeper; flatten it, e.g. drop redundant parentheses)")

    def peek(self, ahead: int = 0) -> _Tok:
        return self.toks[min(self.i + ahead, len(self.toks) - 1)]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def is_kw(self, word: str, ahead: int = 0) -> bool:
        t = self.peek(ahead)
        return t.kind == "kw" and t.value == word

    def is_op(self, op: str) -> bool:
        t = self.peek()
        return t.kind == "op" and t.value == op

    def error(self, expected: str, tok: _Tok | None = None) -> FilterSyntaxError:
        tok = tok or self.peek()
        shown = "end of input" if tok.kind == "end" else repr(tok.text)
        return FilterSyntaxError(
            f"syntax error at position {tok.pos} (token {shown}): expected {expected}",
            self.text, tok.pos, tok.text,
        )

    def parse(self) -> Node:
        if self.is_kw("WHERE"):
            self.take()
        if self.peek().kind == "end":
            raise self.error("a filter expression (the filter is empty)")
        node = self.parse_or()
        if self.peek().kind != "end":
            raise self.error("'AND', 'OR' or the end of the filter")
        return node

    def parse_or(self) -> Node:
        node = self.parse_and()
        while self.is_kw("OR") or self.is_op("||"):
            self.take()
            node = Expression(ExpressionType.OR, node, self.parse_and())
        return node

    def parse_and(self) -> Node:
        node = self.parse_not()
        while self.is_kw("AND") or self.is_op("&&"):
            self.take()
            node = Expression(ExpressionType.AND, node, self.parse_not())
        return node

    def parse_not(self) -> Node:
        if self.is_kw("NOT") or self.is_op("!"):
            self.take()
            self.enter()
            node = Expression(ExpressionType.NOT, self.parse_not())
            self.depth -= 1
            return node
        return self.parse_primary()

    def parse_primary(self) -> Node:
        if self.is_op("("):
            self.take()
            self.enter()
            inner = self.parse_or()
            if not self.is_op(")"):
                raise self.error("')' to close the '('")
            self.take()
            self.depth -= 1
            return Group(inner)
        tok = self.peek()
        if tok.kind == "ident" or tok.kind == "string":
            key = Key(self.take().value)
        elif tok.kind == "kw":
            raise self.error(
                f"a field name, 'NOT' or '(' ({tok.text!r} is a keyword; to use it as a field "
                f"name quote it: '{tok.text}')"
            )
        else:
            raise self.error("a field name, 'NOT' or '('")
        return self.parse_condition(key)

    def parse_condition(self, key: Key) -> Expression:
        tok = self.peek()
        if tok.kind == "op" and tok.value in _COMPARE_BY_TEXT:
            self.take()
            return Expression(_COMPARE_BY_TEXT[tok.value], key, Value(self.parse_constant()))
        if self.is_kw("IN"):
            self.take()
            return Expression(ExpressionType.IN, key, Value(self.parse_list()))
        if self.is_kw("NIN"):
            self.take()
            return Expression(ExpressionType.NIN, key, Value(self.parse_list()))
        if self.is_kw("LIKE") or (self.is_kw("NOT") and self.is_kw("LIKE", 1)):
            negate = self.is_kw("NOT")
            self.take()
            if negate:
                self.take()
            tok = self.peek()
            if tok.kind != "string":
                raise self.error("a 'pattern' string after LIKE, e.g. 'docs/en/%'")
            self.take()
            like = Expression(ExpressionType.LIKE, key, Value(tok.value))
            return Expression(ExpressionType.NOT, like) if negate else like
        if self.is_kw("NOT") and self.is_kw("IN", 1):
            self.take()
            self.take()
            return Expression(ExpressionType.NIN, key, Value(self.parse_list()))
        if self.is_kw("IS"):
            self.take()
            negate = False
            if self.is_kw("NOT"):
                self.take()
                negate = True
            if not self.is_kw("NULL"):
                raise self.error("NULL after IS" + (" NOT" if negate else ""))
            self.take()
            return Expression(ExpressionType.ISNOTNULL if negate else ExpressionType.ISNULL, key)
        raise self.error(
            f"a comparison (== != < <= > >= in nin LIKE IS NULL) after field {key.key!r}"
        )

    def parse_constant(self) -> Any:
        tok = self.peek()
        if tok.kind in ("number", "string"):
            self.take()
            if tok.kind == "number" and isinstance(tok.value, int) and not (
                -(2**63) <= tok.value < 2**63
            ):
                raise FilterSyntaxError(
                    f"syntax error at position {tok.pos}: integer {tok.text} is outside the "
                    "64-bit range", self.text, tok.pos, tok.text,
                )
            return tok.value
        if tok.kind == "kw" and tok.value in ("TRUE", "FALSE"):
            self.take()
            return tok.value == "TRUE"
        if tok.kind == "kw" and tok.value == "NULL":
            raise self.error("a value; to test for null write 'field IS NULL'")
        raise self.error("a value (a 'string', a number, true or false)")

    def parse_list(self) -> tuple:
        if not self.is_op("["):
            raise self.error("'[' to start a list of values, e.g. ['a', 'b']")
        self.take()
        items = []
        if self.is_op("]"):
            self.take()
            return ()
        while True:
            items.append(self.parse_constant())
            if self.is_op(","):
                self.take()
                continue
            if self.is_op("]"):
                self.take()
                return tuple(items)
            raise self.error("',' or ']' in the list")


@functools.lru_cache(maxsize=512)
def _parse_cached(text: str) -> Node:
    return _Parser(text).parse()


def parse_filter(text: str) -> Expression | Group:
    """Parse a filter in Spring AI's text syntax into its AST (cached per string)."""
    if not isinstance(text, str):
        raise ConfigError(f"parse_filter needs a str, got {type(text).__name__}")
    return _parse_cached(text)


# -- builder ----------------------------------------------------------------------------------
def _check_literal(value: Any, where: str) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(f"{where}: value {value!r} holds a lone surrogate, which is not "
                              "valid Unicode; remove it") from None
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
            raise ConfigError(f"like({key!r}, ...) needs a pattern string such as 'docs/en/%', "
                              f"got {pattern!r}")
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
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or (
        hasattr(pa.types, "is_string_view") and pa.types.is_string_view(typ)
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
                f"type mismatch in filter: field {key.key!r} is {typ} but {_literal(v)} "
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
                parts = [combine(*parts[i:i + 2]) if i + 1 < len(parts) else parts[i]
                         for i in range(0, len(parts), 2)]
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
                raise ConfigError(f"LIKE matches string fields with a pattern string; field "
                                  f"{key.key!r} is {typ}: compare it with == or in")
            if pa.types.is_dictionary(typ):
                expr = expr.cast(typ.value_type)
            return pc.is_valid(expr) & pc.match_like(expr, v)
        if t in _COMPARE:
            if isinstance(v, tuple):
                raise ConfigError(
                    f"filter '{key.key} {_COMPARE[t]} [...]' compares with a list; use 'in'"
                )
            if _kind(typ) == "null":
                return pc.scalar(False)
            lit = self.literal(key, typ, v, _COMPARE[t])
            if _kind(typ) == "int" and not isinstance(v, bool):
                exact = _int_comparison(t, v, typ)
                if isinstance(exact, bool):  # the same answer for every non-null value
                    return pc.is_valid(expr) & pc.scalar(exact)
                t, lit = exact
            if pa.types.is_decimal(typ):
                expr = expr.cast(pa.float64())
                lit = pa.scalar(float(v))
            fn = {
                ExpressionType.EQ: pc.equal, ExpressionType.NE: pc.not_equal,
                ExpressionType.GT: pc.greater, ExpressionType.GTE: pc.greater_equal,
                ExpressionType.LT: pc.less, ExpressionType.LTE: pc.less_equal,
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
        raise ConfigError(f"filter nests groups or NOTs too deeply to compile; keep nesting "
                          f"under {MAX_DEPTH} levels") from None


def _evaluate(table: pa.Table, expr: pc.Expression) -> np.ndarray:
    from pyarrow import acero

    decl = acero.Declaration.from_sequence([
        acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
        acero.Declaration("project", acero.ProjectNodeOptions([expr], ["_mask"])),
    ])
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
