"""Each integration names its extra when the framework is missing; the MCP module's command
line needs no SDK (``fastrag mcp --help`` works without it)."""

from __future__ import annotations

import argparse
import importlib
import sys

import pytest

from fastrag.errors import MissingExtraError


def _fresh_import(monkeypatch, module: str, blocked: list[str]):
    for name in blocked:
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    monkeypatch.delitem(sys.modules, module, raising=False)
    return importlib.import_module(module)


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        (
            "fastrag.integrations.llama_index",
            ["llama_index.core", "llama_index.core.retrievers", "llama_index.core.callbacks"],
            "llama-index",
        ),
        (
            "fastrag.integrations.langchain",
            ["langchain_core", "langchain_core.retrievers", "langchain_core.callbacks"],
            "langchain",
        ),
    ],
)
def test_a_missing_framework_names_its_extra(monkeypatch, module, blocked, extra):
    with pytest.raises(MissingExtraError, match=rf"pip install 'fastrag-engine\[{extra}\]'"):
        _fresh_import(monkeypatch, module, blocked)
    monkeypatch.delitem(sys.modules, module, raising=False)  # next import sees the real one


def test_mcp_cli_without_the_sdk(monkeypatch, store):
    mod = _fresh_import(
        monkeypatch,
        "fastrag.integrations.mcp_server",
        ["mcp", "mcp.server", "mcp.server.mcpserver", "mcp.server.fastmcp"],
    )
    parser = argparse.ArgumentParser()
    mod.add_arguments(parser)
    args = parser.parse_args([store, "--http", "--port", "9", "--api-key-env", "NOPE_UNSET"])
    assert (args.http, args.port, args.api_key_env) == (True, 9, "NOPE_UNSET")
    with pytest.raises(MissingExtraError, match=r"pip install 'fastrag-engine\[mcp\]'"):
        mod.build_server(store)
    monkeypatch.delitem(sys.modules, "fastrag.integrations.mcp_server", raising=False)


def test_mcp_command_line_checks(monkeypatch, store, tmp_path, capsys):
    from fastrag.integrations.mcp_server import main

    monkeypatch.delenv("NOPE_UNSET", raising=False)
    assert main([str(tmp_path)]) == 2
    assert "is not a fastrag store" in capsys.readouterr().err
    assert main([store, "--http", "--api-key-env", "NOPE_UNSET"]) == 2
    assert "NOPE_UNSET: that environment variable is not set" in capsys.readouterr().err
    monkeypatch.setenv("SOME_KEY", "k")
    assert main([store, "--api-key-env", "SOME_KEY"]) == 2
    assert "--api-key-env applies to --http only" in capsys.readouterr().err
    assert main([store, "--base-url", "http://127.0.0.1:1/v1"]) == 2
    assert "needs both a base URL and a model" in capsys.readouterr().err
