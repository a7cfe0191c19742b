"""Kernel modules imported on first use: importing any of ``fastrag._kernels`` loads numba
(~0.2 s), which a process whose work all runs on the NumPy and Python twins (one query on a
small store) never needs."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for the module ``name``: the first attribute read imports it, and every read or
    write goes to the module itself (so a patched kernel is seen by every caller)."""

    __slots__ = ("_name", "_module")

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_module", None)

    def _load(self) -> ModuleType:
        module = self._module
        if module is None:
            module = importlib.import_module(self._name)
            object.__setattr__(self, "_module", module)
        return module

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._load(), attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(self._load(), attr, value)

    def __delattr__(self, attr: str) -> None:
        delattr(self._load(), attr)

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<lazy module {self._name!r}, {state}>"


def kernels(name: str) -> Any:
    """``fastrag._kernels.<name>``, imported when first used."""
    return LazyModule(f"fastrag._kernels.{name}")
