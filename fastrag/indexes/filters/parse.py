"""Filter text (Spring AI's syntax plus ``LIKE``) to the AST: the lexer and the parser."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from fastrag.errors import ConfigError
from fastrag.indexes.filters.ast import (
    COMPARE_BY_TEXT,
    KEYWORDS,
    Expression,
    ExpressionType,
    FilterSyntaxError,
    Group,
    Key,
    Node,
    Value,
)

# -- lexer ------------------------------------------------------------------------------------
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
            f"syntax error at position {start}: the string starting {text[start : start + 12]!r} "
            "holds a lone surrogate (e.g. '\\ud800' without its pair), which is not valid "
            "Unicode; remove it or write the whole character",
            text,
            start,
            text[start : start + 12],
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
                hexd = text[i + 2 : i + 6]
                if len(hexd) != 4 or not all(c in "0123456789abcdefABCDEF" for c in hexd):
                    raise FilterSyntaxError(
                        f"syntax error at position {i}: bad escape '\\u{hexd}' in a string "
                        "(write \\u followed by 4 hex digits)",
                        text,
                        i,
                        text[i : i + 6],
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
        f"syntax error at position {start}: unterminated string starting "
        f"{text[start : start + 12]!r}"
        f" (close it with {quote})",
        text,
        start,
        text[start : start + 12],
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
            toks.append(_Tok("kw", tok, i, up) if up in KEYWORDS else _Tok("ident", tok, i, tok))
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
            raise self.error(
                f"at most {MAX_DEPTH} nested parentheses or NOTs (this filter nests "
                "deeper; flatten it, e.g. drop redundant parentheses)"
            )

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
            self.text,
            tok.pos,
            tok.text,
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
        if tok.kind == "op" and tok.value in COMPARE_BY_TEXT:
            self.take()
            return Expression(COMPARE_BY_TEXT[tok.value], key, Value(self.parse_constant()))
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
            if (
                tok.kind == "number"
                and isinstance(tok.value, int)
                and not (-(2**63) <= tok.value < 2**63)
            ):
                raise FilterSyntaxError(
                    f"syntax error at position {tok.pos}: integer {tok.text} is outside the "
                    "64-bit range",
                    self.text,
                    tok.pos,
                    tok.text,
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
