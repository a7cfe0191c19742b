"""Shared pytest fixtures. Append new fixtures in their own clearly separated section."""

from __future__ import annotations

import os
import sys

import pytest

# Kernels compile in the test process (and its subprocesses) on first use, as plain numba does:
# tests of the background compile and its NumPy path (tests/test_coldstart.py) turn it on.
os.environ.setdefault("FASTRAG_BACKGROUND_COMPILE", "0")

# tests/ on sys.path, so test modules can `from openai_server import OpenAIServer`.
sys.path.insert(0, os.path.dirname(__file__))

from openai_server import OpenAIServer


# --- LLM / embedding HTTP test server (fastrag.llms) ------------------------------------------
@pytest.fixture
def openai_server():
    """A fresh local OpenAI-compatible server (see tests/openai_server.py), stopped after."""
    with OpenAIServer() as server:
        yield server
