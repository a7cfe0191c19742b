"""The public names of DESIGN.md resolve, and importing fastrag stays cheap."""

from __future__ import annotations

import subprocess
import sys

import fastrag as fr


def test_every_export_resolves():
    for name in fr.__all__:
        assert getattr(fr, name) is not None, name


def test_design_contract_names():
    for name in (
        "Document",
        "Retriever",
        "NodeWithScore",
        "DocNode",
        "SentenceSplitter",
        "get_response_synthesizer",
        "ResponseMode",
        "PromptTemplate",
        "Response",
        "register_similarity",
        "Reranker",
        "ReciprocalRankFusionJoiner",
        "FilterExpressionBuilder",
    ):
        assert name in fr.__all__


def test_import_compiles_nothing_and_loads_no_numba():
    code = "import sys, fastrag; print('numba' in sys.modules, 'pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_front_door_is_small():
    assert len(fr.__all__) <= 50
    assert len(set(fr.__all__)) == len(fr.__all__)
    assert "__version__" in fr.__all__ and "serve" in fr.__all__


def test_moved_names_warn_and_resolve_to_their_home():
    import importlib
    import warnings

    assert len(fr._MOVED) >= 40
    assert not set(fr._MOVED) & set(fr.__all__)
    for name, home in fr._MOVED.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(fr, name)
        assert value is getattr(importlib.import_module(home), name), name
        assert [w.category for w in caught] == [DeprecationWarning], name
        assert f"from {home} import {name}" in str(caught[0].message)
        assert caught[0].filename == __file__  # points at the caller's line


def test_front_door_names_do_not_warn():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in fr.__all__:
            getattr(fr, name)


def test_unknown_name_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        fr.NoSuchThing  # noqa: B018
