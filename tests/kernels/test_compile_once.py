"""Each kernel compiles once per kind of argument. numba compiles a kernel called with a
constant (a ``Literal`` type, e.g. a counter that starts at ``0`` and is passed on in a loop)
a second time, with everything it calls; the kernels start such values as ``np.int64(0)``."""

from __future__ import annotations

import pickle

import fastrag._kernels as kernels
import pytest
from numba.core import types

import fastrag._coldstart as cs


def _current_indexes() -> dict[str, list[tuple]]:
    """The signatures in numba's cache index of each kernel, for the indexes written since
    its source last changed (numba rewrites an index with each kernel it adds)."""
    out = {}
    for src_dir in kernels.kernel_folders():  # each folder of kernels has its own cache
        for nbi in sorted(kernels.cache_dir(src_dir).glob("*.nbi")):
            src = src_dir / (nbi.name.split(".", 1)[0] + ".py")
            if not src.exists():
                continue
            if nbi.stat().st_mtime < src.stat().st_mtime:
                continue
            with nbi.open("rb") as f:
                pickle.load(f)  # numba's version
                _, overloads = pickle.loads(f.read())
            out[f"{src_dir.name}/{nbi.name}"] = [key[0] for key in overloads]
    return out


def twice_compiled(signatures: list[tuple]) -> list[tuple]:
    """The signatures with a constant argument whose plain-typed twin was compiled too."""
    have = set(signatures)
    return [
        sig
        for sig in signatures
        if any(isinstance(a, types.Literal) for a in sig)
        and tuple(types.unliteral(a) for a in sig) in have
    ]


def test_twice_compiled_finds_a_constant_next_to_its_type():
    i64, lit0 = types.int64, types.literal(0)
    assert twice_compiled([(i64, types.boolean), (lit0, types.boolean)]) == [(lit0, types.boolean)]
    # a flag passed as two different constants is two kernels, not one compiled twice
    assert twice_compiled([(types.literal(True), i64), (types.literal(False), i64)]) == []


def test_no_kernel_is_compiled_for_a_constant_and_for_its_type():
    if not cs.marker().exists():
        pytest.skip("needs the compiled kernels: run `fastrag warmup` first")
    indexes = _current_indexes()
    assert len(indexes) > 50, f"only {len(indexes)} current cache indexes in {cs.cache_dir()}"
    twice = {name: sigs for name, s in indexes.items() if (sigs := twice_compiled(s))}
    assert not twice, (
        f"compiled a second time for constant arguments: {sorted(twice)}; "
        f"the first: {next(iter(twice.values()))[0]}"
    )
