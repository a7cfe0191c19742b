"""Filter expressions: Arrow masks vs a plain-Python evaluator of the same AST on random
metadata (hypothesis), text <-> AST <-> builder round trips, and every error path."""

from __future__ import annotations

import operator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastrag.errors import ConfigError
from fastrag.indexes.filters import (
    Expression,
    ExpressionType,
    FilterExpressionBuilder,
    FilterSyntaxError,
    Group,
    Key,
    Value,
    compile_filter,
    filter_mask,
    parse_filter,
)

B = FilterExpressionBuilder()
T = ExpressionType


# -- the plain-Python reference evaluator -------------------------------------------------------
_CMP = {
    T.EQ: operator.eq,
    T.NE: operator.ne,
    T.GT: operator.gt,
    T.GTE: operator.ge,
    T.LT: operator.lt,
    T.LTE: operator.le,
}


def py_eval(node, row: dict) -> bool:
    """Null semantics: a comparison / in / nin on a null value is False."""
    if isinstance(node, Group):
        return py_eval(node.content, row)
    t = node.type
    if t is T.AND:
        return py_eval(node.left, row) and py_eval(node.right, row)
    if t is T.OR:
        return py_eval(node.left, row) or py_eval(node.right, row)
    if t is T.NOT:
        return not py_eval(node.left, row)
    v = row[node.left.key]
    if t is T.ISNULL:
        return v is None
    if t is T.ISNOTNULL:
        return v is not None
    if v is None:
        return False
    lit = node.right.value
    if t is T.IN:
        return v in lit
    if t is T.NIN:
        return v not in lit
    return _CMP[t](v, lit)


def py_mask(table: pa.Table, node) -> np.ndarray:
    rows = table.to_pylist()
    for r in rows:  # struct paths as the filter addresses them
        r["m.x"] = r["m"]["x"] if r["m"] is not None else None
    return np.array([py_eval(node, r) for r in rows], dtype=bool)


# -- random tables and expressions ---------------------------------------------------------------
ALPHABET = "ab'\"\\ é中Z"
small_text = st.text(alphabet=ALPHABET, max_size=3)
ints = st.integers(-4, 4) | st.integers(-(2**50), 2**50)
floats = st.floats(-5, 5, allow_nan=False, allow_infinity=False).map(lambda x: round(x, 2))


@st.composite
def tables(draw) -> pa.Table:
    n = draw(st.integers(0, 12))

    def col(values):
        return draw(st.lists(st.none() | values, min_size=n, max_size=n))

    m = draw(
        st.lists(st.none() | st.fixed_dictionaries({"x": st.none() | ints}), min_size=n, max_size=n)
    )
    return pa.table(
        {
            "i": pa.array(col(ints), pa.int64()),
            "f": pa.array(col(floats), pa.float64()),
            "s": pa.array(col(small_text), pa.string()),
            "b": pa.array(col(st.booleans()), pa.bool_()),
            "n": pa.nulls(n),
            "release year": pa.array(col(st.integers(1990, 1995)), pa.int32()),
            "m": pa.array(m, pa.struct([("x", pa.int64())])),
        }
    )


NUMERIC = ["i", "f", "release year", "m.x"]
LITERALS = {
    "i": ints | floats,
    "f": floats | st.integers(-5, 5),
    "release year": st.integers(1989, 1996),
    "m.x": ints,
    "s": small_text,
    "b": st.booleans(),
    "n": st.integers(-2, 2),
}


@st.composite
def leaves(draw):
    field = draw(st.sampled_from(list(LITERALS)))
    kind = draw(st.sampled_from(["cmp", "cmp", "in", "nin", "null", "notnull"]))
    lit = LITERALS[field]
    if kind == "cmp":
        fn = draw(st.sampled_from([B.eq, B.ne, B.gt, B.gte, B.lt, B.lte]))
        return fn(field, draw(lit))
    if kind in ("in", "nin"):
        values = draw(st.lists(lit, max_size=3))
        return (B.in_ if kind == "in" else B.nin)(field, values)
    return B.is_null(field) if kind == "null" else B.is_not_null(field)


def _combine(children):
    return st.one_of(
        st.tuples(children, children).map(lambda p: B.and_(*p)),
        st.tuples(children, children).map(lambda p: B.or_(*p)),
        children.map(B.not_),
        children.map(B.group),
        st.tuples(children, children).map(lambda p: p[0].and_(p[1])),
    )


filters = st.recursive(leaves(), _combine, max_leaves=8)


# a renderer of canonical (parser-made) ASTs with random but equivalent spellings
def _ws(draw):
    return draw(st.sampled_from([" ", "  ", "\t", "\n ", " "]))


def _quote(draw, s: str) -> str:
    q = draw(st.sampled_from(["'", '"']))
    return q + s.replace("\\", "\\\\").replace(q, "\\" + q) + q


def _render(draw, node) -> str:
    w = _ws(draw)
    if isinstance(node, Group):
        return "(" + w + _render(draw, node.content) + w + ")"
    t = node.type
    if t in (T.AND, T.OR):
        words = ["AND", "and", "And", "&&"] if t is T.AND else ["OR", "or", "oR", "||"]
        return (
            _render(draw, node.left)
            + w
            + draw(st.sampled_from(words))
            + w
            + _render(draw, node.right)
        )
    if t is T.NOT:
        return draw(st.sampled_from(["NOT ", "not ", "!", "! "])) + _render(draw, node.left)
    key = node.left.key
    key = (
        draw(st.sampled_from([key, _quote(draw, key)]))
        if key.isidentifier()
        else (key if key == "m.x" and draw(st.booleans()) else _quote(draw, key))
    )
    if t is T.ISNULL:
        return key + w + draw(st.sampled_from(["IS NULL", "is null", "Is  Null"]))
    if t is T.ISNOTNULL:
        return key + w + draw(st.sampled_from(["IS NOT NULL", "is not null"]))

    def lit(v):
        if isinstance(v, bool):
            return draw(st.sampled_from(["true", "TRUE"] if v else ["false", "False"]))
        if isinstance(v, str):
            return _quote(draw, v)
        if isinstance(v, int):
            return str(v) + draw(st.sampled_from(["", "", "L"]))
        return repr(v)

    if t in (T.IN, T.NIN):
        op = draw(
            st.sampled_from(["IN", "in"] if t is T.IN else ["NIN", "nin", "NOT IN", "not in"])
        )
        return key + w + op + w + "[" + ("," + w).join(lit(v) for v in node.right.value) + "]"
    ops = {T.EQ: "==", T.NE: "!=", T.GT: ">", T.GTE: ">=", T.LT: "<", T.LTE: "<="}
    return key + w + ops[t] + w + lit(node.right.value)


# -- properties ---------------------------------------------------------------------------------
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=tables(), op=filters)
def test_mask_equals_python_evaluator(table, op):
    ast = op.build()
    expected = py_mask(table, ast)
    mask = filter_mask(table, op)
    assert mask.dtype == np.bool_ and mask.shape == (table.num_rows,)
    np.testing.assert_array_equal(mask, expected)
    # the canonical text form gives the same rows
    text = str(ast)
    np.testing.assert_array_equal(filter_mask(table, text), expected)
    # the compiled expression filters the same rows through Arrow's own filter
    expr = compile_filter(ast, table.schema)
    assert isinstance(expr, pc.Expression)
    assert table.filter(expr).num_rows == int(expected.sum())


@settings(max_examples=150, deadline=None)
@given(op=filters, data=st.data())
def test_text_round_trip(op, data):
    canonical = parse_filter(str(op.build()))
    assert parse_filter(str(canonical)) == canonical
    spelled = _render(data.draw, canonical)
    assert parse_filter(spelled) == canonical, spelled


# -- builder <-> text -------------------------------------------------------------------------
SPRING_EXAMPLES = [
    ("country == 'BG'", B.eq("country", "BG")),
    ("genre == 'drama' && year >= 2020", B.eq("genre", "drama").and_(B.gte("year", 2020))),
    (
        "genre in ['comedy', 'documentary', 'drama']",
        B.in_("genre", "comedy", "documentary", "drama"),
    ),
    (
        'year >= 2020 OR country == "BG" AND city != "Sofia"',
        B.or_(B.gte("year", 2020), B.and_(B.eq("country", "BG"), B.ne("city", "Sofia"))),
    ),
    (
        '(year >= 2020 OR country == "BG") AND city NIN ["Sofia", "Plovdiv"]',
        B.and_(
            B.group(B.or_(B.gte("year", 2020), B.eq("country", "BG"))),
            B.nin("city", ["Sofia", "Plovdiv"]),
        ),
    ),
    (
        'isOpen == true AND year >= 2020 AND country IN ["BG", "NL", "US"]',
        B.and_(
            B.and_(B.eq("isOpen", True), B.gte("year", 2020)), B.in_("country", ["BG", "NL", "US"])
        ),
    ),
    (
        "temperature >= -15.6 && temperature <= +20.13",
        B.and_(B.gte("temperature", -15.6), B.lte("temperature", 20.13)),
    ),
    (
        'NOT(isOpen == true AND year >= 2020 AND country IN ["BG", "NL", "US"])',
        B.not_(
            B.group(
                B.and_(
                    B.and_(B.eq("isOpen", True), B.gte("year", 2020)),
                    B.in_("country", "BG", "NL", "US"),
                )
            )
        ),
    ),
    (
        "!a == 1 && b == 2 || c IS NULL",
        B.or_(B.and_(B.not_(B.eq("a", 1)), B.eq("b", 2)), B.is_null("c")),
    ),
    ("not not a is not null", B.not_(B.not_(B.is_not_null("a")))),
    (
        "WHERE 'release year' > 1999L and meta.year not in [1, 2.5]",
        B.gt("release year", 1999).and_(B.nin("meta.year", 1, 2.5)),
    ),
    ("x == 'it\\'s \\\"q\\\" \\\\ \\n \\u4e2d'", B.eq("x", 'it\'s "q" \\ \n 中')),
    ("a in []", B.in_("a", [])),
    ("a == .5 or b == 5. or c == 1e3", (B.eq("a", 0.5) | B.eq("b", 5.0)) | B.eq("c", 1000.0)),
]


@pytest.mark.parametrize(("text", "op"), SPRING_EXAMPLES)
def test_builder_builds_the_parsed_ast(text, op):
    assert parse_filter(text) == op.build()
    assert parse_filter(str(op.build())) == op.build()


def test_builder_round_trip_gives_the_same_mask():
    table = pa.table(
        {
            "genre": ["drama", "comedy", None, "drama", "drama"],
            "year": [2019, 2021, 2022, None, 2023],
            "country": ["BG", "NL", "BG", "US", None],
        }
    )
    text = "(genre == 'drama' && year >= 2020) || country in ['NL'] && !(year < 2021)"
    op = B.or_(
        B.group(B.eq("genre", "drama").and_(B.gte("year", 2020))),
        B.and_(B.in_("country", "NL"), B.not_(B.group(B.lt("year", 2021)))),
    )
    assert parse_filter(text) == op.build()
    mask = filter_mask(table, text)
    assert mask.tolist() == [False, True, False, False, True]
    np.testing.assert_array_equal(filter_mask(table, op), mask)
    np.testing.assert_array_equal(filter_mask(table, op.build()), mask)
    ops = (B.eq("genre", "drama") & B.gte("year", 2020)) | ~B.is_not_null("country")
    assert filter_mask(table, ops).tolist() == [False, False, False, False, True]
    assert B.eq("a", 1) == B.eq("a", 1) and B.eq("a", 1) != B.eq("a", True)
    assert Value(1) != Value(True) and Value(1.0) != Value(1)
    assert hash(Value("a")) == hash(Value("a"))


# -- semantics on a fixed table ----------------------------------------------------------------
TABLE = pa.table(
    {
        "genre": ["drama", "comedy", None, "drama"],
        "year": [2019, 2021, 2022, None],
        "score": [1.5, None, 3.0, float("nan")],
        "ok": [True, False, None, True],
        "u": pa.array([1, 2, 3, 4], pa.uint64()),
        "d": pa.array(["a", "b", "a", None]).dictionary_encode(),
        "dt": pa.array(["2020-01-01", "2021-05-05", None, "2019-01-01"]).cast(pa.date32()),
        "meta": pa.array([{"x": 1}, {"x": 2}, None, {"x": None}]),
        "a.b": [1, 2, 3, 4],
        "a": pa.array([{"b": 9}] * 4),
        "z": pa.nulls(4),
        "dec": pa.array([1, 2, 3, 4]).cast(pa.decimal128(22, 2)),
        "tags": pa.array([["x"], [], None, ["y"]]),
    }
)


@pytest.mark.parametrize(
    ("text", "rows"),
    [
        ("!(year == 2019)", [0, 1, 1, 1]),  # a comparison on null is False, its negation True
        ("year != 2019", [0, 1, 1, 0]),
        ("year nin [2019]", [0, 1, 1, 0]),
        ("year in [2019, 2022]", [1, 0, 1, 0]),
        ("year > 2019.5", [0, 1, 1, 0]),
        ("year in [2019.0, 2022.5]", [1, 0, 0, 0]),
        ("score != 3", [1, 0, 0, 1]),  # NaN is a value, not null
        ("score IS NULL", [0, 1, 0, 0]),
        ("ok == true", [1, 0, 0, 1]),
        ("ok < true", [0, 1, 0, 0]),
        ("u > -1 and u in [1, 4]", [1, 0, 0, 1]),
        ("d == 'a'", [1, 0, 1, 0]),
        ("d nin ['b']", [1, 0, 1, 0]),
        ("dt >= '2020-01-01'", [1, 1, 0, 0]),
        ("dt in ['2019-01-01']", [0, 0, 0, 1]),
        ("meta.x >= 2", [0, 1, 0, 0]),
        ("meta.x IS NULL", [0, 0, 1, 1]),
        ("a.b >= 3", [0, 0, 1, 1]),  # an exact column name wins over a struct path
        ("z == 1 or z in [1]", [0, 0, 0, 0]),
        ("z IS NULL", [1, 1, 1, 1]),
        ("dec >= 2.5", [0, 0, 1, 1]),
        ("dec in [1, 2]", [1, 1, 0, 0]),
        ("genre nin []", [1, 1, 0, 1]),
        ("tags IS NOT NULL", [1, 1, 0, 1]),
    ],
)
def test_semantics(text, rows):
    assert filter_mask(TABLE, text).astype(int).tolist() == rows


def test_signed_zeros_are_equal_in_lists():
    t = pa.table({"x": [0.0, -0.0, 1.0], "i": [0, 1, 2]})
    assert filter_mask(t, "x in [0]").tolist() == [True, True, False]
    assert filter_mask(t, "x in [-0.0]").tolist() == [True, True, False]
    assert filter_mask(t, "x nin [0.0]").tolist() == [False, False, True]
    assert filter_mask(t, "i in [-0.0, 5.5]").tolist() == [True, False, False]
    assert filter_mask(t, "x == -0.0").tolist() == [True, True, False]


def test_other_filter_forms():
    assert filter_mask(TABLE, None).tolist() == [True] * 4
    assert filter_mask(TABLE, {}).tolist() == [True] * 4
    assert filter_mask(TABLE, {"genre": "drama"}).tolist() == [True, False, False, True]
    assert filter_mask(TABLE, {"genre": ["drama", "comedy"], "year": None}).tolist() == [
        False,
        False,
        False,
        True,
    ]
    assert filter_mask(TABLE, pc.field("year") > 2020).tolist() == [False, True, True, False]

    def fn(t):
        return pc.equal(t["genre"], "drama")

    assert filter_mask(TABLE, fn).tolist() == [True, False, False, True]
    assert filter_mask(TABLE, lambda t: np.arange(t.num_rows) % 2 == 0).tolist() == [
        True,
        False,
        True,
        False,
    ]
    empty = TABLE.slice(0, 0)
    assert filter_mask(empty, "year > 1").shape == (0,)
    batch = TABLE.to_batches()[0]
    assert filter_mask(batch, "year > 2020").tolist() == [False, True, True, False]
    chunked = pa.concat_tables([TABLE.slice(0, 2), TABLE.slice(2)])
    assert filter_mask(chunked, "year >= 2021").tolist() == [False, True, True, False]


def test_parse_is_cached_and_ast_is_immutable():
    assert parse_filter("a == 1") is parse_filter("a == 1")
    ast = parse_filter("a == 1")
    with pytest.raises(AttributeError):
        ast.type = T.NE
    assert ast == Expression(T.EQ, Key("a"), Value(1))


# -- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "pos", "token", "match"),
    [
        ("genre = 'drama'", 6, "=", r"position 6: unexpected character '='; use '=='"),
        ("genre == ", 9, "", r"position 9 \(token end of input\): expected a value"),
        ("genre == 'dr", 9, "'dr", r"position 9: unterminated string starting \"'dr\""),
        ("(year > 1", 9, "", r"position 9 \(token end of input\): expected '\)' to close"),
        ("year > 1 year", 9, "year", r"position 9 \(token 'year'\): expected 'AND', 'OR' or"),
        ("year in 2019", 8, "2019", r"position 8 \(token '2019'\): expected '\[' to start a list"),
        ("year == [1]", 8, "[", r"position 8 \(token '\['\): expected a value"),
        ("year in [1, 2", 13, "", r"position 13 \(token end of input\): expected ',' or '\]'"),
        ("x == null", 5, "null", r"to test for null write 'field IS NULL'"),
        ("x IS 5", 5, "5", r"position 5 \(token '5'\): expected NULL after IS"),
        ("x IS NOT", 8, "", r"expected NULL after IS NOT"),
        (
            "x NOT == 1",
            2,
            "NOT",
            r"expected a comparison \(== != < <= > >= in nin LIKE IS NULL\) after field 'x'",
        ),
        ("genre & x", 6, "&", r"unexpected character '&'; use '&&'"),
        ("in == 1", 0, "in", r"'in' is a keyword; to use it as a field name quote it"),
        ("== 1", 0, "==", r"position 0 \(token '=='\): expected a field name, 'NOT' or '\('"),
        ("x == 'a\\u12'", 7, "\\u12'", r"bad escape '\\u12'' in a string"),
        ("x > 99999999999999999999", 4, "99999999999999999999", r"outside the 64-bit range"),
        ("", 0, "", r"the filter is empty"),
        ("x > 5abc", 4, "5", r"position 4: unexpected character '5'"),
        ("a == 1 && ", 10, "", r"position 10 \(token end of input\): expected a field name"),
    ],
)
def test_syntax_errors(text, pos, token, match):
    with pytest.raises(FilterSyntaxError, match=match) as info:
        parse_filter(text)
    assert (info.value.position, info.value.token) == (pos, token)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)
    assert str(info.value).endswith("\n  " + text + "\n  " + " " * pos + "^")


@pytest.mark.parametrize(
    ("filter", "match"),
    [
        (
            "yeer > 1",
            (
                r"unknown field 'yeer' in filter; known fields: \[.*'year'.*\]; did you mean "
                r"'year'\?"
            ),
        ),
        ("meta.y == 1", r"unknown field 'meta\.y' .*'meta\.x'"),
        (
            "year > 'x'",
            (
                r"type mismatch in filter: field 'year' is int64 but 'x' \(in '>'\) is a "
                r"string; compare it with a number"
            ),
        ),
        (
            "genre > 5",
            (
                r"field 'genre' is string but 5 \(in '>'\) is a number; compare it with a "
                r"quoted string"
            ),
        ),
        ("ok == 1", r"field 'ok' is bool but 1 \(in '=='\) is a number; compare it with true"),
        ("year == true", r"field 'year' is int64 but true \(in '=='\) is a boolean"),
        ("year in [1, 'a']", r"field 'year' is int64 but 'a' \(in 'in'\) is a string"),
        ("genre nin ['a', 1.5]", r"field 'genre' is string but 1.5 \(in 'nin'\) is a number"),
        ("d == 3", r"field 'd' is string but 3"),
        ("dt > 5", r"field 'dt' is date32\[day\] but 5 .* compare it with an ISO date/time"),
        (
            "dt > 'notadate'",
            r"filter value 'notadate' cannot be read as date32\[day\] for field 'dt'",
        ),
        ("meta > 1", r"field 'meta' has type struct<x: int64>, which filters cannot compare"),
        ("tags == 'x'", r"field 'tags' has type list<item: string>, which filters cannot compare"),
        ({"genre": 5}, r"field 'genre' is string but 5"),
        ({"nope": 1}, r"unknown field 'nope'"),
        ({3: 1}, r"filter dict key 3 must be a field name"),
        ({"genre": {"a": 1}}, r"value \{'a': 1\} of type dict is not a filter literal"),
        (
            Expression(T.EQ, Key("year"), Value((1, 2))),
            (
                r"'year == \[\.\.\.\]' compares with a "
                r"list; use 'in'"
            ),
        ),
        (Expression(T.IN, Key("year"), Value(1)), r"'in' on field 'year' needs a list of values"),
        (Expression(T.EQ, "year", Value(1)), r"left operand of EQ must be a field Key"),
        (Expression(T.EQ, Key("year"), 1), r"right operand of EQ must be a Value"),
        (42, r"filter of type int cannot be compiled; pass a filter string"),
    ],
)
def test_compile_errors(filter, match):
    with pytest.raises(ConfigError, match=match):
        filter_mask(TABLE, filter)


def test_callable_and_argument_errors():
    with pytest.raises(ConfigError, match=r"returned a mask of shape \(3,\); the table has 4 rows"):
        filter_mask(TABLE, lambda t: np.ones(3, bool))
    with pytest.raises(ConfigError, match=r"returned dtype int64; return a boolean mask"):
        filter_mask(TABLE, lambda t: np.ones(4, np.int64))
    with pytest.raises(ConfigError, match=r"returned a mask of shape \(2, 2\)"):
        filter_mask(TABLE, lambda t: np.ones((2, 2), bool))
    with pytest.raises(ConfigError, match=r"returned an Arrow array of int64"):
        filter_mask(TABLE, lambda t: t["year"])
    with pytest.raises(ConfigError, match=r"table must be a pyarrow.Table, got dict"):
        filter_mask({"a": [1]}, "a == 1")
    with pytest.raises(ConfigError, match=r"a callable filter cannot be compiled"):
        compile_filter(lambda t: t, TABLE.schema)
    with pytest.raises(ConfigError, match=r"schema must be a pyarrow.Schema, got Table"):
        compile_filter("a == 1", TABLE)
    with pytest.raises(ConfigError, match=r"parse_filter needs a str, got int"):
        parse_filter(3)


def test_builder_errors():
    with pytest.raises(ConfigError, match=r"eq\('x', \.\.\.\): value is None; use is_null"):
        B.eq("x", None)
    with pytest.raises(ConfigError, match=r"value \[1\] of type list is not a filter literal"):
        B.eq("x", [1])
    with pytest.raises(ConfigError, match=r"value nan is not a finite number"):
        B.gt("x", float("nan"))
    with pytest.raises(ConfigError, match=r"field name '' must be a non-empty str"):
        B.eq("", 1)
    with pytest.raises(ConfigError, match=r"and_: operand 'x == 1' is not a filter"):
        B.eq("x", 1).and_("x == 1")
    with pytest.raises(ConfigError, match=r"or_: operand None is not a filter"):
        B.or_(B.eq("x", 1), None)
    with pytest.raises(ConfigError, match=r"in_\('x', \.\.\.\): value is None"):
        B.in_("x", 1, None)
    assert B.eq("x", np.int64(3)).build() == parse_filter("x == 3")


def test_like_matches_path_prefixes_and_sql_wildcards():
    """``LIKE`` (fastrag's, not Spring AI's): ``%`` any run, ``_`` one character, ``\\`` for
    either itself; case-sensitive; a null never matches (so ``NOT LIKE`` holds on it)."""
    t = pa.table(
        {
            "path": [
                "docs/en/a.md",
                "docs/zh/a.md",
                "docs/en/sub/b.md",
                None,
                "docs/EN/c.md",
                "x_y%z",
            ],
            "n": [1, 2, 3, 4, 5, 6],
        }
    )
    assert filter_mask(t, "path LIKE 'docs/en/%'").tolist() == [1, 0, 1, 0, 0, 0]
    assert filter_mask(t, "path NOT LIKE 'docs/en/%'").tolist() == [0, 1, 0, 1, 1, 1]
    assert filter_mask(t, "path like 'docs/__/a.md'").tolist() == [1, 1, 0, 0, 0, 0]
    assert filter_mask(t, r"path LIKE 'x\\_y\\%z'").tolist() == [0, 0, 0, 0, 0, 1]
    assert filter_mask(t, "path LIKE 'docs/%' and not path LIKE '%/zh/%'").tolist() == [
        1,
        0,
        1,
        0,
        1,
        0,
    ]
    built = B.like("path", "docs/en/%").build()
    assert built == parse_filter("path LIKE 'docs/en/%'") and str(built) == "path LIKE 'docs/en/%'"
    assert filter_mask(t, built).tolist() == [1, 0, 1, 0, 0, 0]
    dict_t = pa.table({"path": pa.array(["a/1", "b/2"]).dictionary_encode()})
    assert filter_mask(dict_t, "path LIKE 'a/%'").tolist() == [1, 0]
    with pytest.raises(ConfigError, match=r"LIKE matches string fields .* field 'n' is int64"):
        filter_mask(t, "n LIKE '1%'")
    with pytest.raises(FilterSyntaxError, match=r"expected a 'pattern' string after LIKE"):
        parse_filter("path LIKE 5")
    with pytest.raises(ConfigError, match=r"like\('path', \.\.\.\) needs a pattern string"):
        B.like("path", 5)
