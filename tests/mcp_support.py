"""The MCP server's ``search`` tool called in process through the SDK's own client."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest


def mcp_search(store: str | Path, query: str, **server_kw: Any) -> list[dict]:
    """The hits ``search`` returns for ``query`` from ``build_server(store, **server_kw)``
    (skips without the MCP SDK 2)."""
    pytest.importorskip("mcp")
    try:
        from mcp import Client  # mcp 2
    except ImportError:  # pragma: no cover - mcp 1
        pytest.skip("in-process MCP client needs mcp>=2")
    from fastrag.integrations.mcp_server import build_server

    server, engine = build_server(str(store), **server_kw)

    async def main():
        async with Client(server) as c:
            return await c.call_tool("search", {"query": query})

    try:
        res = asyncio.run(main())
    finally:
        engine.close()
    assert not res.is_error
    return res.structured_content["hits"]
