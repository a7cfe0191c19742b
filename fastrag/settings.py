"""``fr.Settings``: process-wide defaults (LlamaIndex's ``Settings``).

``Settings.llm`` is used by query components, synthesizers and pipelines built without
``llm=``; ``Settings.embed_model`` by Documents built without ``embed=``. Both are read when
an object is built, so changing them later does not change objects that already exist.
"""

from __future__ import annotations

import threading
from typing import Any

from fastrag.llms.resolve import resolve_llm

__all__ = ["DEFAULT_TOPK", "Settings"]

#: Hits per query when none is asked for: the library, the CLI, ``fastrag serve`` and MCP
#: (LazyLLM's default).
DEFAULT_TOPK = 6


class _Settings:
    """Global defaults; assign ``llm`` / ``embed_model`` (None clears them)."""

    __slots__ = ("_embed_model", "_llm", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._llm: Any = None
        self._embed_model: Any = None

    @property
    def llm(self) -> Any:
        """The default LLM (a fastrag LLM, an object with async ``acomplete``, or a function)."""
        return self._llm

    @llm.setter
    def llm(self, value: Any) -> None:
        if value is not None:
            value = resolve_llm(value)  # fail now, not at first use
        with self._lock:
            self._llm = value

    @property
    def embed_model(self) -> Any:
        """The default embedder (anything ``Document(embed=...)`` accepts)."""
        return self._embed_model

    @embed_model.setter
    def embed_model(self, value: Any) -> None:
        with self._lock:
            self._embed_model = value

    def reset(self) -> None:
        """Clear both defaults."""
        with self._lock:
            self._llm = None
            self._embed_model = None

    def __repr__(self) -> str:
        return f"Settings(llm={self._llm!r}, embed_model={self._embed_model!r})"


Settings = _Settings()
