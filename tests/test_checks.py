"""fastrag._checks: one wording, ``<name> must be <requirement>, got <value>[; <fix>]``."""

from __future__ import annotations

import numpy as np
import pytest

from fastrag._checks import (
    check_bool,
    check_choice,
    check_int,
    check_list,
    check_number,
    check_str,
    check_str_list,
)
from fastrag.errors import ConfigError


def test_values_pass_normalised():
    assert check_int("k", np.int64(3), min=1) == 3 and type(check_int("k", np.int64(3))) is int
    assert check_int("topk", None, min=1, none="keep all") is None
    assert check_number("t", 1, min=0) == 1.0 and check_number("t", float("inf"), finite=False)
    assert check_bool("b", np.bool_(True)) is True
    assert check_choice("m", "a", ("a", "b")) == "a"
    assert check_choice("f", None, (None, "content")) is None
    assert check_str("s", "", empty=True) == "" and check_str("s", " ") == " "
    assert check_str_list("texts", ("a", "b")) == ["a", "b"]
    assert check_list("lists", [[1]], "hit lists") == [[1]]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: check_int("topk", 0, min=1, none="keep all"),
            "topk must be None (keep all) or an int >= 1, got 0",
        ),
        (lambda: check_int("n", True, min=1), "n must be an int >= 1, got bool True"),
        (
            lambda: check_int("n", 2.0, min=1, max=5, note="tokens", fix="use e.g. 3"),
            "n must be an int in [1, 5] (tokens), got float 2.0; use e.g. 3",
        ),
        (
            lambda: check_number("latency", -1, min=0, note="seconds"),
            "latency must be a finite number >= 0 (seconds), got -1",
        ),
        (lambda: check_number("timeout", 0, above=0), "timeout must be a finite number > 0, got 0"),
        (
            lambda: check_number("p", float("nan"), min=0, max=1),
            "p must be a number in [0, 1], got nan",
        ),
        (lambda: check_number("x", "1"), "x must be a finite number, got str '1'"),
        (lambda: check_bool("sort", 1), "sort must be True or False, got int 1"),
        (
            lambda: check_choice("mode", "some", ("any", "all")),
            "mode must be 'any' or 'all', got 'some'",
        ),
        (lambda: check_choice("m", 1, (True, None)), "m must be True or None, got 1"),
        (lambda: check_str("model", ""), "model must be a non-empty str, got ''"),
        (lambda: check_str("model", "  ", strip=True), "model must be a non-empty str, got '  '"),
        (lambda: check_str("q", 3, empty=True, none=True), "q must be None or a str, got int 3"),
        (
            lambda: check_str_list("texts", "abc"),
            "texts must be a list of str, got a single str 'abc'; wrap it in a list: [texts]",
        ),
        (lambda: check_str_list("texts", ["a", None]), "texts[1] must be a str, got None"),
        (
            lambda: check_str_list("texts", [], empty=False),
            "texts must be a non-empty list of str, got []",
        ),
        (
            lambda: check_list("lists", "ab", "hit lists (one per retriever)"),
            "lists must be a list of hit lists (one per retriever), got str",
        ),
        (lambda: check_int("n", "x" * 200), "n must be an int, got str '" + "x" * 76 + "..."),
    ],
)
def test_one_wording(call, message):
    with pytest.raises(ConfigError) as info:
        call()
    assert str(info.value) == message
