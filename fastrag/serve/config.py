"""One place for every setting of ``fastrag serve`` and its default.

:class:`ServeConfig` is what a ``fastrag serve`` command line means; the command line's flags,
the keyword defaults of :func:`fastrag.serve.create_app`, :func:`fastrag.serve.serve`,
:class:`~fastrag.serve.engine.ServeEngine`, :class:`~fastrag.serve.guard.ServeSettings` and the
MCP server (:mod:`fastrag.integrations.mcp_server`) all read their defaults from its fields.
This module imports nothing beyond the standard library and :mod:`fastrag.settings`, so it
loads without the ``[serve]`` extra.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastrag.settings import DEFAULT_TOPK

__all__ = ["LOOPBACK_HOSTS", "MAX_FILTER_CHARS", "ServeConfig"]

#: hosts that only this machine can reach (listening elsewhere without a key warns)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
#: characters of a filter expression a request (HTTP or MCP) may send
MAX_FILTER_CHARS = 4096


def _setting(default: Any, help: str, **flag: Any) -> Any:
    """A field of :class:`ServeConfig` with its default and what ``fastrag serve --help`` says
    of it (``help``; ``flag``: argparse's ``metavar`` / ``choices``, and ``minimum``, the
    least value the command line accepts)."""
    return dataclasses.field(default=default, metadata={"help": help, **flag})


@dataclass(frozen=True)
class ServeConfig:
    """The settings of one ``fastrag serve`` (JSON-able: ``--workers N`` hands it to each
    worker process as JSON). Keys are never held here, only the names of the environment
    variables they are read from (``api_key_env``, ``llm_api_key_env``). Each field's
    ``metadata["help"]`` says what it is: ``fastrag serve``'s flags are built from them."""

    store: str | None = _setting(
        None, "the store folder to serve (opened read-only; uploads go through one writer)"
    )
    host: str = _setting(
        LOOPBACK_HOSTS[0], "interface to listen on (default: this machine only)", metavar="HOST"
    )
    port: int = _setting(8000, "port to listen on")
    workers: int = _setting(
        1, "server processes; more than one share the store and one tasks folder", minimum=1
    )
    log_level: str = _setting(
        "info", "server log level", choices=("critical", "error", "warning", "info", "debug")
    )
    group: str | None = _setting(
        None, "default node group (default: the store's last built group)", metavar="GROUP"
    )
    similarity: str | None = _setting(
        None,
        "default similarity: one name (bm25, the default; bm25_chinese, hybrid, ...) or "
        "GROUP=NAME pairs, comma-separated; requests may name their own",
        metavar="NAME",
    )
    topk: int = _setting(DEFAULT_TOPK, "hits per query when a request names none", minimum=1)
    batching: bool = _setting(
        True, "coalesce concurrent retrievals into one Retriever.batch call (micro-batching)"
    )
    batch_window_ms: float = _setting(3.0, "how long a retrieval waits for others to batch with")
    max_batch: int = _setting(256, "queries per batch call at most", minimum=1)
    search_threads: int = _setting(
        1, "numba threads per batch call (concurrent calls already use the cores)", minimum=1
    )
    mode: str = _setting(
        "compact", "response mode of chat answers (compact, refine, tree_summarize, ...)"
    )
    compress_history: bool = _setting(
        False,
        "rewrite chat history + question into one standalone query (one more LLM call per "
        "follow-up question)",
    )
    chat_memory: str | None = _setting(
        None,
        "where the conversations of chats that send a session_id (or user) live: a SQLite "
        "database (a .sqlite3/.db file, or a folder) that every worker and every server on "
        "this machine shares, or redis://HOST:PORT/DB for servers on several machines (the "
        "[redis] extra); default: in memory, per process",
        metavar="PATH|URL",
    )
    chat_window: int = _setting(
        40, "messages each conversation keeps (the oldest go first)", minimum=1, metavar="N"
    )
    llm_base_url: str | None = _setting(
        None, "OpenAI-compatible LLM endpoint for chat (or FASTRAG_LLM_BASE_URL)", metavar="URL"
    )
    llm_model: str | None = _setting(
        None, "the LLM's model name (or FASTRAG_LLM_MODEL)", metavar="NAME"
    )
    llm_api_key_env: str | None = _setting(
        "OPENAI_API_KEY", "environment variable holding the LLM's key", metavar="NAME"
    )
    llm_max_retries: int = _setting(2, "retries of a failed LLM call", minimum=0)
    llm_timeout: float = _setting(60.0, "seconds an LLM call may take")
    llm_max_concurrency: int = _setting(
        64, "LLM calls in flight at once, across all chats", minimum=1
    )
    api_key_env: str | None = _setting(
        None,
        "require 'Authorization: Bearer <key>', the key read from this environment variable "
        "(default: no key)",
        metavar="NAME",
    )
    max_body_bytes: int = _setting(1 << 20, "JSON request body limit in bytes", minimum=1)
    max_upload_bytes: int = _setting(50 << 20, "upload body limit in bytes", minimum=1)
    max_queries: int = _setting(1024, "queries per /v1/retrieve request", minimum=1)
    max_query_chars: int = _setting(8192, "characters per query (and per chat question)", minimum=1)
    max_messages: int = _setting(256, "messages per chat request", minimum=1)
    max_upload_files: int = _setting(32, "files per upload", minimum=1)
    model_name: str = _setting("fastrag", "the model name the server answers to")
    tasks_dir: str | None = _setting(
        None,
        "folder of upload/delete tasks, kept across restarts (default: one per store under "
        "$XDG_STATE_HOME/fastrag/serve-tasks/, i.e. ~/.local/state/...)",
        metavar="DIR",
    )

    @property
    def limits(self) -> dict[str, Any]:
        """The request limits and model name, as :class:`~fastrag.serve.guard.ServeSettings`
        takes them."""
        return {
            "max_body_bytes": self.max_body_bytes,
            "max_upload_bytes": self.max_upload_bytes,
            "max_queries": self.max_queries,
            "max_query_chars": self.max_query_chars,
            "max_messages": self.max_messages,
            "max_upload_files": self.max_upload_files,
            "model_name": self.model_name,
        }

    def replace(self, **changes: Any) -> ServeConfig:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ServeConfig:
        """The config of a mapping of field names (e.g. parsed :meth:`to_json`)."""
        return cls(**values)
