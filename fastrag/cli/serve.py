"""``fastrag serve`` (an OpenAI-compatible RAG server over a store) and ``fastrag mcp`` (an MCP
server for agents): check the command line, then run the server. Every flag's default is
:class:`~fastrag.serve.config.ServeConfig`'s."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from fastrag.cli.common import UsageError, require_store
from fastrag.documents.document import Document
from fastrag.documents.store import MANIFEST
from fastrag.integrations import mcp_server
from fastrag.serve import serve_config
from fastrag.serve.config import LOOPBACK_HOSTS, ServeConfig

__all__ = [
    "add_mcp_parser",
    "add_serve_parser",
    "cmd_mcp",
    "cmd_serve",
    "serve_config_of",
]

# flags named as ServeConfig's fields (--llm-base-url and --llm-model are read with their
# environment variables, --no-batching is turned around)
_SAME_NAME = (
    "host",
    "port",
    "workers",
    "log_level",
    "group",
    "similarity",
    "topk",
    "batch_window_ms",
    "max_batch",
    "search_threads",
    "mode",
    "compress_history",
    "chat_memory",
    "chat_window",
    "llm_api_key_env",
    "llm_max_retries",
    "llm_timeout",
    "llm_max_concurrency",
    "api_key_env",
    "max_body_bytes",
    "max_upload_bytes",
    "tasks_dir",
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
    base = args.llm_base_url or os.environ.get("FASTRAG_LLM_BASE_URL")
    model = args.llm_model or os.environ.get("FASTRAG_LLM_MODEL")
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
    for flag, value in (
        ("--workers", args.workers),
        ("--search-threads", args.search_threads),
        ("--llm-max-concurrency", args.llm_max_concurrency),
        ("--chat-window", args.chat_window),
    ):
        if value < 1:
            raise UsageError(f"{flag} {value}: must be at least 1")
    return ServeConfig(
        store=str(store.resolve()),
        batching=not args.no_batching,
        llm_base_url=base or None,
        llm_model=model or None,
        **{name: getattr(args, name) for name in _SAME_NAME},
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


def add_serve_parser(sub: Any) -> None:
    """Add ``fastrag serve`` to the subcommands ``sub``."""
    d = ServeConfig
    p = sub.add_parser(
        "serve",
        help="an OpenAI-compatible RAG server over a store: chat "
        "completions, batch retrieval, uploads, a chat page",
    )
    p.add_argument(
        "store",
        help="a store built with fastrag ingest (opened read-only; uploads go through one writer)",
    )
    p.add_argument(
        "--host",
        default=d.host,
        help=f"interface to listen on (default {d.host}: this machine only)",
    )
    p.add_argument("--port", type=int, default=d.port)
    p.add_argument(
        "--workers",
        type=int,
        default=d.workers,
        help=f"server processes (default {d.workers})",
    )
    p.add_argument("--group", help="default node group (default: the last one built)")
    p.add_argument(
        "--similarity",
        help="default similarity: one name (bm25, the default; "
        "bm25_chinese, hybrid, ...) or GROUP=NAME pairs, comma-separated; requests "
        "may name their own",
    )
    p.add_argument("--topk", type=int, default=d.topk, help=f"hits per query (default {d.topk})")
    p.add_argument(
        "--chat-memory",
        metavar="PATH|URL",
        help="where the conversations of chats that send a session_id (or user) live: a SQLite "
        "database (a .sqlite3/.db file, or a folder) that every worker and every server on this "
        "machine shares, or redis://HOST:PORT/DB for servers on several machines (the [redis] "
        "extra); default: in memory, per process",
    )
    p.add_argument(
        "--chat-window",
        type=int,
        default=d.chat_window,
        metavar="N",
        help=f"messages each conversation keeps (default {d.chat_window})",
    )
    p.add_argument(
        "--mode",
        default=d.mode,
        help="response mode of chat answers (compact, "
        "refine, tree_summarize, simple_summarize, ...)",
    )
    p.add_argument(
        "--llm-base-url",
        help="OpenAI-compatible LLM endpoint for chat (or FASTRAG_LLM_BASE_URL)",
    )
    p.add_argument("--llm-model", help="the LLM's model name (or FASTRAG_LLM_MODEL)")
    p.add_argument(
        "--llm-api-key-env",
        default=d.llm_api_key_env,
        metavar="NAME",
        help=f"environment variable holding the LLM's key (default {d.llm_api_key_env})",
    )
    p.add_argument("--llm-max-retries", type=int, default=d.llm_max_retries)
    p.add_argument("--llm-timeout", type=float, default=d.llm_timeout, help="seconds")
    p.add_argument(
        "--llm-max-concurrency",
        type=int,
        default=d.llm_max_concurrency,
        help=f"LLM calls in flight at once, across all chats (default {d.llm_max_concurrency})",
    )
    p.add_argument(
        "--compress-history",
        action="store_true",
        help="rewrite chat history + question into one standalone query (one more "
        "LLM call per follow-up question)",
    )
    p.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="require 'Authorization: Bearer <key>', the key read from this environment variable",
    )
    p.add_argument(
        "--no-batching",
        action="store_true",
        help="one Retriever.batch call per request (no micro-batching)",
    )
    p.add_argument(
        "--batch-window-ms",
        type=float,
        default=d.batch_window_ms,
        help=f"how long a retrieval waits for others to batch with (default {d.batch_window_ms:g})",
    )
    p.add_argument(
        "--max-batch",
        type=int,
        default=d.max_batch,
        help="queries per batch call at most",
    )
    p.add_argument(
        "--search-threads",
        type=int,
        default=d.search_threads,
        help=f"numba threads per batch call (default {d.search_threads}: concurrent calls "
        "already use the cores)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=d.max_body_bytes,
        help=f"JSON request body limit (default {d.max_body_bytes >> 20} MiB)",
    )
    p.add_argument(
        "--max-upload-bytes",
        type=int,
        default=d.max_upload_bytes,
        help=f"upload body limit (default {d.max_upload_bytes >> 20} MiB)",
    )
    p.add_argument(
        "--tasks-dir",
        help="folder for upload/delete tasks, kept across restarts "
        "(default: $XDG_STATE_HOME/fastrag/serve-tasks/<store>-<hash>, i.e. "
        "~/.local/state/...)",
    )
    p.add_argument(
        "--log-level",
        default=d.log_level,
        choices=["critical", "error", "warning", "info", "debug"],
    )
    p.set_defaults(func=cmd_serve)


def add_mcp_parser(sub: Any) -> None:
    """Add ``fastrag mcp`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "mcp",
        help="an MCP server over a store for agents: tools search, "
        "ask and list_groups, documents as resources (stdio, or --http)",
    )
    mcp_server.add_arguments(p)
    p.set_defaults(func=cmd_mcp)
