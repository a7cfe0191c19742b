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
