"""The analyzer registry: names (``"bm25"``, ``"bm25_english"``, ``"bm25_chinese"``,
``"bm25_cjk"`` and the user's ``register_analyzer`` ones) to analyzer factories, and
``get_analyzer``.

The built-in analyzers are registered when this module is imported; analyzers never import
the registry (it imports them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastrag._checks import check_str
from fastrag.analysis.base import Analyzer, CallableAnalyzer
from fastrag.analysis.chinese import ChineseAnalyzer
from fastrag.analysis.cjk import CJKAnalyzer
from fastrag.analysis.english import EnglishAnalyzer
from fastrag.analysis.mixed import MixedAnalyzer
from fastrag.errors import ConfigError

__all__ = ["get_analyzer", "list_analyzers", "register_analyzer"]


_REGISTRY: dict[str, Callable[..., Analyzer]] = {
    "bm25": MixedAnalyzer,
    "bm25_english": EnglishAnalyzer,
    "bm25_chinese": ChineseAnalyzer,
    "bm25_cjk": CJKAnalyzer,
}


def register_analyzer(name: str, factory: Callable[..., Any], *, overwrite: bool = False) -> None:
    """Register ``factory(**opts)`` under ``name``; it returns an Analyzer or a callable.

    ``factory`` may also be an Analyzer subclass. Re-registering a name needs ``overwrite=True``.
    """
    check_str("analyzer name", name, strip=True)
    if not callable(factory):
        raise ConfigError(
            f"factory for analyzer {name!r} must be callable (returning an Analyzer or a "
            f"str -> list[str] function), got {factory!r}"
        )
    if name in _REGISTRY and not overwrite:
        raise ConfigError(
            f"analyzer {name!r} is already registered; pass overwrite=True to replace it"
        )
    _REGISTRY[name] = factory


def list_analyzers() -> list[str]:
    """Names of the registered analyzers, sorted."""
    return sorted(_REGISTRY)


def get_analyzer(analyzer: str | Analyzer | Callable[[str], list[str]], **opts: Any) -> Analyzer:
    """An Analyzer from a registered name (with options), an Analyzer, or a callable."""
    if isinstance(analyzer, Analyzer):
        if opts:
            raise ConfigError(
                f"options {sorted(opts)} given with an already built analyzer {analyzer!r}; "
                "pass the analyzer's name instead, e.g. get_analyzer('bm25_chinese', **opts)"
            )
        return analyzer
    if isinstance(analyzer, str):
        try:
            factory = _REGISTRY[analyzer]
        except KeyError:
            raise ConfigError(
                f"unknown analyzer {analyzer!r}; known analyzers: {', '.join(sorted(_REGISTRY))} "
                "(or pass a callable str -> list[str], or register_analyzer(name, factory))"
            ) from None
        try:
            built = factory(**opts)
        except TypeError as exc:
            raise ConfigError(f"bad options for analyzer {analyzer!r}: {exc}") from exc
        if isinstance(built, Analyzer):
            return built
        return CallableAnalyzer(built, name=analyzer, factory_options=opts)
    if callable(analyzer):
        if opts:
            raise ConfigError(
                f"options {sorted(opts)} cannot be applied to a callable analyzer; "
                "bind them in the callable (e.g. functools.partial)"
            )
        return CallableAnalyzer(analyzer)
    raise ConfigError(
        f"analyzer must be a name ({', '.join(sorted(_REGISTRY))}), an Analyzer, or a "
        f"callable str -> list[str]; got {type(analyzer).__name__} {analyzer!r}"
    )
