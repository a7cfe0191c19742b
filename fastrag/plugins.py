"""Plugins: modules a command imports before it works, so what they register (similarities and
search paths, readers, analyzers, rerankers) is there in the CLI, in every server worker and in
the MCP server. Named by ``fastrag --plugin MODULE`` (repeatable) or ``$FASTRAG_PLUGINS``
(comma-separated); the CLI passes its ``--plugin`` modules on to the processes it starts."""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence

from fastrag.errors import ConfigError

__all__ = ["PLUGINS_ENV", "load_plugins"]

PLUGINS_ENV = "FASTRAG_PLUGINS"


def load_plugins(modules: Sequence[str] = ()) -> list[str]:
    """Import ``modules`` and those named in ``$FASTRAG_PLUGINS`` (each once); the names are
    then recorded in ``$FASTRAG_PLUGINS`` for the processes this one starts. Returns every
    plugin module loaded, in order. A module that fails to import raises ConfigError naming
    it and the cause."""
    env = [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]
    names = list(dict.fromkeys([*env, *modules]))
    for name in names:
        if not isinstance(name, str) or not name.replace(".", "").replace("_", "").isalnum():
            raise ConfigError(
                f"plugin {name!r} is not a module name; pass a dotted Python module name "
                "(e.g. mypackage.similarities)"
            )
        try:
            importlib.import_module(name)
        except Exception as exc:  # the plugin's own failure, named with it
            raise ConfigError(
                f"plugin {name!r} could not be imported ({type(exc).__name__}: {exc}); check "
                "the module name and that its folder is on PYTHONPATH"
            ) from exc
    if names:
        os.environ[PLUGINS_ENV] = ",".join(names)
    return names
