"""The BLAS check: a kernel older than the CPU is one warning per library, naming the fix."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fastrag import _blas

AVX512 = {"avx", "avx2", "fma", "avx512f", "avx512bw"}


def lib(arch: str, path: str = "/x/libopenblas.so") -> dict:
    return {"internal_api": "openblas", "architecture": arch, "filepath": path, "version": "0.3.15"}


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(_blas, "_checked", set())


def test_forced_haswell_on_avx512_warns_once_naming_the_variable(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    with pytest.warns(
        _blas.BlasWarning,
        match=r"Haswell \(AVX2\) kernel on a CPU with AVX-512.*"
        r"OPENBLAS_CORETYPE=Haswell is set.*unset it",
    ):
        assert len(_blas.check_blas([lib("Haswell")], AVX512)) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _blas.check_blas([lib("Haswell")], AVX512) == []  # once


def test_bundled_old_openblas_and_matching_kernels(monkeypatch):
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    with pytest.warns(
        _blas.BlasWarning,
        match=r"Barcelona \(SSE\).*does not know the CPU.*"
        r"OPENBLAS_CORETYPE=SkylakeX",
    ):
        got = _blas.check_blas([lib("Barcelona", "/faiss/libopenblas.so"), lib("SkylakeX")], AVX512)
    assert len(got) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _blas.check_blas([lib("Haswell", "/y.so")], {"avx", "avx2", "fma"}) == []
        assert _blas.check_blas([{"internal_api": "mkl", "filepath": "m"}], AVX512) == []


def test_levels():
    assert _blas.cpu_simd_level(AVX512) == 4
    assert _blas.cpu_simd_level({"avx", "avx2", "fma"}) == 3
    assert _blas.cpu_simd_level(set()) == 0


def test_dense_search_runs_the_check_once(monkeypatch):
    from fastrag.indexes.flat import FlatIndex

    calls = []
    monkeypatch.setattr(_blas, "_BLAS_CHECKED", False)
    monkeypatch.setattr(_blas, "check_blas", lambda: calls.append(1) or [])
    idx = FlatIndex(4)
    idx.add(np.eye(4, dtype=np.float32))
    idx.search(np.eye(4, dtype=np.float32), 1)
    idx.search(np.eye(4, dtype=np.float32), 1)
    assert calls == [1]
