"""fastrag._kernels.edit against the plain-Python twins in tests/reference.py."""

from __future__ import annotations

import random

import numpy as np
import pytest
from fastrag._kernels import edit
from reference import bag_distance_reference, levenshtein_reference

ALPHABETS = ["ab", "abc", "abcdefgh", "甲乙丙丁𝄞"]
LENGTHS = [0, 1, 2, 63, 64, 65, 127, 128, 129, 150]


def _cp(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.int32)


def _random_pairs(seed: int, n: int) -> list[tuple[str, str]]:
    rnd = random.Random(seed)
    out = []
    for trial in range(n):
        la = rnd.choice(LENGTHS) if trial % 2 else rnd.randint(0, 150)
        lb = rnd.choice(LENGTHS) if trial % 3 else rnd.randint(0, 150)
        alpha = rnd.choice(ALPHABETS)
        a = "".join(rnd.choice(alpha) for _ in range(la))
        b = "".join(rnd.choice(alpha) for _ in range(lb))
        if trial % 5 == 0 and a:  # near-copies: a few substitutions of a
            chars = list(a)
            for _ in range(rnd.randint(1, 5)):
                chars[rnd.randrange(len(chars))] = rnd.choice(alpha)
            b = "".join(chars)
        out.append((a, b))
    return out


def test_within_distance_pins_the_exact_distance():
    for a, b in _random_pairs(11, 160):
        d = levenshtein_reference(a, b)
        ca, cb = _cp(a), _cp(b)
        assert edit.within_distance(ca, cb, d), (a, b, d)
        assert edit.within_distance(cb, ca, d), (a, b, d)
        if d > 0:
            assert not edit.within_distance(ca, cb, d - 1), (a, b, d)


@pytest.mark.parametrize(
    ("a", "b", "k", "want"),
    [
        ("", "", 0, True),
        ("", "", -1, False),  # a negative bound is never met
        ("", "abc", 3, True),
        ("", "abc", 2, False),
        ("kitten", "sitting", 3, True),
        ("kitten", "sitting", 2, False),
        ("same", "same", 0, True),
        ("a" * 64, "a" * 63 + "b", 1, True),  # the last bit of a full word
        ("a" * 65, "b" + "a" * 64, 1, True),  # a change in the second word
        ("𝄞x", "x𝄞", 2, True),  # astral code points are one character each
        ("𝄞x", "x𝄞", 1, False),
    ],
)
def test_within_distance_edges(a, b, k, want):
    assert levenshtein_reference(a, b) <= k if want else levenshtein_reference(a, b) > k
    assert bool(edit.within_distance(_cp(a), _cp(b), k)) is want


def test_bag_distance_is_the_reference_and_a_lower_bound():
    for a, b in _random_pairs(5, 120):
        got = edit.bag_distance(np.sort(_cp(a)), np.sort(_cp(b)))
        assert got == bag_distance_reference(a, b)
        assert got <= levenshtein_reference(a, b)


@pytest.mark.parametrize("kernel", [edit.pairs_within_serial, edit.pairs_within_parallel])
def test_pairs_within_matches_the_reference(kernel):
    rnd = random.Random(7)
    pairs = _random_pairs(3, 60)
    texts = sorted({t for p in pairs for t in p})
    index = {t: i for i, t in enumerate(texts)}
    points = [_cp(t) for t in texts]
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum([len(p) for p in points], out=offsets[1:])
    values = np.concatenate(points)
    sorted_values = np.concatenate([np.sort(p) for p in points])
    left = np.array([index[a] for a, _ in pairs], np.int64)
    right = np.array([index[b] for _, b in pairs], np.int64)
    dist = np.array([levenshtein_reference(a, b) for a, b in pairs], np.int64)
    kmax = dist + np.array([rnd.choice([-1, 0, 1]) for _ in pairs], np.int64)
    kmax[::13] = -1
    values.setflags(write=False)  # read-only input (as from Arrow) works too
    out = np.zeros(len(pairs), np.bool_)
    kernel(values, sorted_values, offsets, left, right, kmax, out)
    np.testing.assert_array_equal(out, dist <= kmax)
