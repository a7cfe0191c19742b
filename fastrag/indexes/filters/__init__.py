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

from fastrag.indexes.filters.ast import (
    Expression,
    ExpressionType,
    FilterSyntaxError,
    Group,
    Key,
    Value,
)
from fastrag.indexes.filters.builder import FilterExpressionBuilder, Op
from fastrag.indexes.filters.compile import compile_filter, filter_mask
from fastrag.indexes.filters.parse import MAX_DEPTH, parse_filter

__all__ = [
    "MAX_DEPTH",
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
