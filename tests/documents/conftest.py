"""Fixtures of the store tests."""

from __future__ import annotations

import pytest

import fastrag.documents.bm25data as derived_mod


@pytest.fixture(scope="module")
def pack_every_index():
    """Stores written in the module pack every BM25 index (by default only those of
    ``PACK_MIN_POSTINGS`` postings and more): for the tests that damage packed indexes.
    Use it as ``pytestmark = pytest.mark.usefixtures("pack_every_index")``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(derived_mod, "PACK_MIN_POSTINGS", 0)
        yield
