"""``fr.Settings``: process-wide defaults (LlamaIndex's ``Settings``).

``Settings.llm`` is used by query components, synthesizers and pipelines built without
``llm=``; ``Settings.embed_model`` by Documents built without ``embed=``. Both are read when
an object is built, so changing them later does not change objects that already exist.
``Settings.callback_manager`` is an empty :class:`CallbackManager`, as LlamaIndex's default, so
code that reads it (a custom synthesizer's ``__init__``) runs; fastrag sends no callback
events (each response's ``metadata["trace"]`` and usage say what ran), so adding a handler
fails with that advice instead of never being called.

``fr.config`` is LazyLLM's ``lazyllm.config``: ``config.add(name, type, default, env)``
declares a setting read from ``$FASTRAG_<ENV>`` (or ``$LAZYLLM_<ENV>``, so ported apps keep
their environment), ``config[name]`` reads it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from fastrag.errors import ConfigError
from fastrag.llms.resolve import resolve_llm

__all__ = ["DEFAULT_TOPK", "CallbackManager", "Config", "Settings", "config"]

#: Hits per query when none is asked for: the library, the CLI, ``fastrag serve`` and MCP
#: (LazyLLM's default).
DEFAULT_TOPK = 6


_NO_EVENTS = (
    "fastrag sends no LlamaIndex callback events, so a handler would never be called; read "
    "what ran from resp.metadata['trace'] (stages, timings, LLM calls and tokens) instead"
)


class CallbackManager:
    """LlamaIndex's ``CallbackManager`` with no handlers (``Settings.callback_manager``).

    Kept so code written for LlamaIndex that reads or passes it runs; fastrag sends no
    callback events, so giving it handlers raises ``ConfigError`` saying where to look instead.
    """

    def __init__(self, handlers: list[Any] | None = None) -> None:
        if handlers:
            raise ConfigError(f"CallbackManager(handlers={handlers!r}): {_NO_EVENTS}")
        self.handlers: list[Any] = []

    def add_handler(self, handler: Any) -> None:
        raise ConfigError(f"CallbackManager.add_handler({handler!r}): {_NO_EVENTS}")

    def set_handlers(self, handlers: list[Any]) -> None:
        if handlers:
            raise ConfigError(f"CallbackManager.set_handlers({handlers!r}): {_NO_EVENTS}")

    def __repr__(self) -> str:
        return "CallbackManager(handlers=[])"


class _Settings:
    """Global defaults; assign ``llm`` / ``embed_model`` (None clears them)."""

    __slots__ = ("_callback_manager", "_embed_model", "_llm", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._llm: Any = None
        self._embed_model: Any = None
        self._callback_manager = CallbackManager()

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

    @property
    def callback_manager(self) -> CallbackManager:
        """An empty :class:`CallbackManager` (LlamaIndex's default; fastrag sends no events)."""
        return self._callback_manager

    @callback_manager.setter
    def callback_manager(self, value: Any) -> None:
        handlers = getattr(value, "handlers", None) if value is not None else None
        if handlers:
            raise ConfigError(f"Settings.callback_manager with handlers {handlers!r}: {_NO_EVENTS}")
        with self._lock:
            self._callback_manager = CallbackManager()

    def reset(self) -> None:
        """Clear both defaults."""
        with self._lock:
            self._llm = None
            self._embed_model = None

    def __repr__(self) -> str:
        return f"Settings(llm={self._llm!r}, embed_model={self._embed_model!r})"


Settings = _Settings()


class Config:
    """Named settings read from the environment (LazyLLM's ``lazyllm.config``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._decl: dict[str, tuple[type, Any, str]] = {}

    def add(self, name: str, type: type, default: Any, env: str, **_: Any) -> Config:
        """Declare ``name``: read from ``$FASTRAG_<ENV>`` or ``$LAZYLLM_<ENV>`` (upper case),
        converted by ``type`` (bool accepts 1/0, true/false, yes/no, on/off), else
        ``default``. LazyLLM's ``options``/``description`` keywords are accepted."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"config.add: name must be a non-empty str, got {name!r}")
        if not isinstance(env, str) or not env.strip():
            raise ConfigError(
                f"config.add({name!r}): env must name an environment variable (without the "
                f"FASTRAG_ / LAZYLLM_ prefix), got {env!r}"
            )
        if not callable(type):
            raise ConfigError(f"config.add({name!r}): type must be a type like str, got {type!r}")
        with self._lock:
            self._decl[name] = (type, default, env.strip().upper())
        return self

    def __getitem__(self, name: str) -> Any:
        decl = self._decl.get(name)
        if decl is None:
            raise ConfigError(
                f"config has no setting {name!r}; declare it first with "
                f"config.add({name!r}, str, default, 'ENV_NAME')"
            )
        typ, default, env = decl
        for var in (f"FASTRAG_{env}", f"LAZYLLM_{env}"):
            raw = os.environ.get(var)
            if raw is not None:
                return _convert(raw, typ, var)
        return default

    def __contains__(self, name: object) -> bool:
        return name in self._decl


def _convert(raw: str, typ: type, var: str) -> Any:
    if typ is bool:
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"${var}={raw!r} is not a boolean; use 1/0, true/false, yes/no or on/off")
    try:
        return typ(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"${var}={raw!r} is not a valid {typ.__name__}: {exc}") from None


#: LazyLLM's ``lazyllm.config``
config = Config()
