"""Helpers for the ``fastrag serve`` tests: a store of CMRC 2018 paragraphs and a server in its
own process (``python -m fastrag.cli serve``) on a free port of 127.0.0.1, killed afterwards."""

from __future__ import annotations

import os

import pytest
from serve_support import _LISTENING, ROOT, ServeProcess, make_cmrc_store  # noqa: F401


@pytest.fixture(autouse=True, scope="session")
def _private_state_home(tmp_path_factory):
    """Servers keep their upload tasks under $XDG_STATE_HOME by default: point it at a
    temporary folder, not the user's."""
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("xdg-state"))
    yield
    if old is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = old
