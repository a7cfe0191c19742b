"""Helpers shared by the seed-example tests (not a test module)."""

from __future__ import annotations


def prompts(server, path: str = "/v1/chat/completions") -> list[str]:
    """The last message of every request the test server received on ``path``, in order."""
    return [r.body["messages"][-1]["content"] for r in server.requests if r.path == path]


def requests(server, path: str) -> list:
    return [r for r in server.requests if r.path == path]
