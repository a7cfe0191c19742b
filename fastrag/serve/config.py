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


@dataclass(frozen=True)
class ServeConfig:
    """The settings of one ``fastrag serve`` (JSON-able: ``--workers N`` hands it to each
    worker process as JSON). Keys are never held here, only the names of the environment
    variables they are read from (``api_key_env``, ``llm_api_key_env``)."""

    #: the store folder to serve (opened read-only; uploads go through one writer)
    store: str | None = None
    #: interface to listen on (this machine only by default)
    host: str = LOOPBACK_HOSTS[0]
    port: int = 8000
    #: server processes; more than one share the store and one tasks folder
    workers: int = 1
    log_level: str = "info"
    #: default node group (None: the store's last built group)
    group: str | None = None
    #: default similarity: one name, or ``GROUP=NAME`` pairs, comma-separated (None: bm25)
    similarity: str | None = None
    #: hits per query when a request names none
    topk: int = DEFAULT_TOPK
    #: coalesce concurrent retrievals into one ``Retriever.batch`` call
    batching: bool = True
    #: how long a retrieval waits for others to batch with
    batch_window_ms: float = 3.0
    #: queries per batch call at most
    max_batch: int = 256
    #: numba threads per batch call (concurrent calls already use the cores)
    search_threads: int = 1
    #: response mode of chat answers
    mode: str = "compact"
    #: rewrite chat history + question into one standalone query (one more LLM call)
    compress_history: bool = False
    #: where conversations live (None: in memory, per process): a SQLite database (a file
    #: ending in .sqlite/.sqlite3/.db, or a folder), shared by every worker and every server on
    #: this machine, or a ``redis://HOST:PORT/DB`` URL shared by servers on several machines
    chat_memory: str | None = None
    #: messages each conversation keeps (the oldest go first; system messages stay)
    chat_window: int = 40
    #: OpenAI-compatible LLM endpoint and model for chat (both, or neither: no chat)
    llm_base_url: str | None = None
    llm_model: str | None = None
    #: environment variable holding the LLM's key
    llm_api_key_env: str | None = "OPENAI_API_KEY"
    llm_max_retries: int = 2
    #: seconds
    llm_timeout: float = 60.0
    #: LLM calls in flight at once, across all chats
    llm_max_concurrency: int = 64
    #: environment variable holding the key every request must send (None: no key)
    api_key_env: str | None = None
    #: JSON request body limit
    max_body_bytes: int = 1 << 20
    #: upload body limit
    max_upload_bytes: int = 50 << 20
    #: queries per ``/v1/retrieve`` request
    max_queries: int = 1024
    #: characters per query (and per chat question)
    max_query_chars: int = 8192
    #: messages per chat request
    max_messages: int = 256
    #: files per upload
    max_upload_files: int = 32
    #: the model name the server answers to
    model_name: str = "fastrag"
    #: folder of upload/delete tasks, kept across restarts (None: one per store under
    #: ``$XDG_STATE_HOME/fastrag/serve-tasks/``)
    tasks_dir: str | None = None

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
