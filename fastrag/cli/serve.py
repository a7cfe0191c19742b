"""``fastrag serve`` (an OpenAI-compatible RAG server over a store) and ``fastrag mcp`` (an MCP
server for agents): check the command line, then run the server. Every flag's default is
:class:`~fastrag.serve.config.ServeConfig`'s."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from fastrag.cli.common import UsageError, require_store
from fastrag.cli.storearg import add_store_argument
from fastrag.documents.document import Document
from fastrag.documents.store import MANIFEST
from fastrag.integrations import mcp_server
from fastrag.serve import serve_config
from fastrag.serve.config import LOOPBACK_HOSTS, ServeConfig

__all__ = [
    "add_config_flags",
    "add_mcp_arguments",
    "add_serve_arguments",
    "cmd_mcp",
    "cmd_serve",
    "serve_config_of",
]

# fields the command line reads differently: the positional store, and the LLM's endpoint and
# model, which fall back on their environment variables
_NOT_FLAGS = ("store",)
_FROM_ENV = {"llm_base_url": "FASTRAG_LLM_BASE_URL", "llm_model": "FASTRAG_LLM_MODEL"}
_TYPES = {"int": int, "float": float, "str": str}


def _flag(name: str, prefix: str = "--") -> str:
    """The command-line flag of field ``name`` (``--batch-window-ms``; ``prefix="--no-"``)."""
    return prefix + name.replace("_", "-")


def add_config_flags(p: argparse.ArgumentParser) -> None:
    """One flag per :class:`ServeConfig` field (``--batch-window-ms`` for ``batch_window_ms``;
    a field that defaults to True is turned off by ``--no-<name>``), its type, default and
    help taken from the field."""
    for f in dataclasses.fields(ServeConfig):
        if f.name in _NOT_FLAGS:
            continue
        help_text = f.metadata["help"]
        if f.type == "bool":
            if f.default:
                p.add_argument(
                    _flag(f.name, "--no-"),
                    dest=f.name,
                    action="store_false",
                    help=f"do not {help_text[0].lower()}{help_text[1:]}",
                )
            else:
                p.add_argument(_flag(f.name), action="store_true", help=help_text)
            continue
        kind = _TYPES[f.type.removesuffix(" | None")]
        shown = f" (default {f.default})" if f.default is not None else ""
        if "default" in help_text or f.name in _FROM_ENV:
            shown = ""
        p.add_argument(
            _flag(f.name),
            type=kind,
            default=f.default,
            metavar=f.metadata.get("metavar"),
            choices=f.metadata.get("choices"),
            help=help_text + shown,
        )


def serve_config_of(args: argparse.Namespace) -> ServeConfig:
    """The server config of a ``fastrag serve`` command line, checked (a usage error names
    the flag to fix)."""
    store = require_store(args.store)
    if args.group is not None:
        groups = json.loads((store / MANIFEST).read_text("utf-8")).get("groups", {})
        builtin = Document.BUILTIN_GROUPS
        if args.group not in groups and args.group not in builtin:
            raise UsageError(
                f"--group {args.group!r} is not in the store; it has "
                f"{', '.join(sorted(groups))} (or a built-in: {', '.join(builtin)})"
            )
    base = args.llm_base_url or os.environ.get(_FROM_ENV["llm_base_url"])
    model = args.llm_model or os.environ.get(_FROM_ENV["llm_model"])
    if bool(base) != bool(model):
        raise UsageError(
            "an LLM needs both --llm-base-url and --llm-model (or "
            "FASTRAG_LLM_BASE_URL and FASTRAG_LLM_MODEL)"
        )
    if args.compress_history and not base:
        raise UsageError("--compress-history needs an LLM: give --llm-base-url and --llm-model")
    if args.api_key_env is not None and not os.environ.get(args.api_key_env):
        raise UsageError(
            f"--api-key-env {args.api_key_env}: that environment variable is not set or empty"
        )
    flags = {}
    for f in dataclasses.fields(ServeConfig):
        if f.name in _NOT_FLAGS or f.name in _FROM_ENV:
            continue
        value = flags[f.name] = getattr(args, f.name)
        least = f.metadata.get("minimum")
        if least is not None and value is not None and value < least:
            raise UsageError(f"{_flag(f.name)} {value}: must be at least {least}")
    return ServeConfig(
        store=str(store.resolve()), llm_base_url=base or None, llm_model=model or None, **flags
    )


def cmd_serve(args: argparse.Namespace) -> int:
    config = serve_config_of(args)
    if config.host not in LOOPBACK_HOSTS and config.api_key_env is None:
        print(
            f"warning: listening on {config.host} without --api-key-env: anyone who can reach "
            "this port can read and change the store",
            file=sys.stderr,
        )
    if config.workers > 1 and config.chat_memory is None:
        print(
            f"note: --workers {config.workers} without --chat-memory: each worker keeps its own "
            "conversations, so a session's turns may not see each other; pass --chat-memory "
            "PATH (a SQLite file all workers share)",
            file=sys.stderr,
        )
    serve_config(config)
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    return mcp_server.cmd_mcp(args)


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``fastrag serve`` (its handler, ``cmd_serve``, as ``func``)."""
    add_store_argument(p, help=ServeConfig.__dataclass_fields__["store"].metadata["help"])
    add_config_flags(p)
    p.set_defaults(func=cmd_serve)


def add_mcp_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``fastrag mcp`` (its handler, ``cmd_mcp``, as ``func``)."""
    mcp_server.add_arguments(p)
    p.set_defaults(func=cmd_mcp)
