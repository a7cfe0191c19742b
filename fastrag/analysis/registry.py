"""Analyzer base class, the analyzer registry, and stopword loading.

An analyzer turns one text into a list of tokens (``an(text) -> list[str]``). It is a small
picklable object (its options only; dictionaries and caches are rebuilt per process), with a
``name`` and an ``identity()`` string that changes whenever an option that changes its tokens
changes: stores use it as a fingerprint to decide whether an index must be rebuilt.

``Analyzer.encode_chunk(texts)`` is the batch path ``tokenize_corpus`` uses: it returns the
chunk's local vocabulary (tokens in first-occurrence order) and each text's tokens as local
ids, so no list of lists of str is kept. Subclasses override it when they can do better than
calling ``self(text)`` per text (the Chinese analyzers normalise each distinct raw token once;
``bm25_cjk`` does the whole chunk in a numba kernel).
"""

from __future__ import annotations

import functools
import hashlib
import json
import pickle
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any

import numpy as np

from fastrag.errors import ConfigError

__all__ = [
    "Analyzer",
    "CallableAnalyzer",
    "get_analyzer",
    "list_analyzers",
    "load_stopwords",
    "register_analyzer",
    "resolve_stopwords",
]

# Marks "use the analyzer's shipped stopword list" (distinct from None = no stopwords).
DEFAULT = "default"


class Analyzer:
    """Base class: ``__call__(text) -> list[str]``; subclasses set ``name`` and ``version``."""

    name: str = "analyzer"
    #: Bumped when the analyzer's output for the same options changes between releases.
    version: int = 1

    def __call__(self, text: str) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        """The options that determine the tokens (JSON-serialisable)."""
        return {}

    def identity(self) -> str:
        """A stable string naming this analyzer and every option that changes its tokens."""
        body = json.dumps(
            {"analyzer": self.name, "version": self.version, "options": self.options()},
            sort_keys=True,
            ensure_ascii=False,
            separators=(",", ":"),
        )
        return body

    def warmup(self) -> None:
        """Load dictionaries / compile kernels now (called once in each worker process)."""

    def encode_chunk(self, texts: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Tokens of ``texts`` as ``(local_vocab, ids int32, offsets int64)``.

        ``local_vocab`` lists the distinct tokens in order of first occurrence and ``ids``
        indexes it; text ``i`` has ``ids[offsets[i]:offsets[i + 1]]``.
        """
        local: dict[str, int] = {}
        ids: list[int] = []
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        setdefault = local.setdefault
        for i, text in enumerate(texts):
            ids.extend([setdefault(tok, len(local)) for tok in self(text)])
            offsets[i + 1] = len(ids)
        return list(local), np.asarray(ids, dtype=np.int32), offsets

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({opts})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Analyzer) and self.identity() == other.identity()

    def __hash__(self) -> int:
        return hash(self.identity())


class CallableAnalyzer(Analyzer):
    """Wraps a user callable ``str -> list[str]`` as an Analyzer.

    Its identity is the callable's module and qualified name (plus ``version``): bump
    ``version`` when you change what the function returns, so stored indexes are rebuilt.
    """

    def __init__(
        self,
        fn: Callable[[str], list[str]],
        name: str | None = None,
        version: int = 1,
        factory_options: dict[str, Any] | None = None,
    ):
        if not callable(fn):
            raise ConfigError(
                f"analyzer must be a registered name or a callable str -> list[str], got {fn!r}"
            )
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", None) or type(fn).__name__
        self.version = int(version)
        # options a registered factory was called with (they shape ``fn``'s tokens)
        self.factory_options = dict(factory_options or {})

    def __call__(self, text: str) -> list[str]:
        tokens = self.fn(text)
        if not isinstance(tokens, list):
            tokens = list(tokens)
        for tok in tokens:
            if not isinstance(tok, str):
                raise ConfigError(
                    f"analyzer {self.name!r} returned a token of type {type(tok).__name__} "
                    f"({tok!r}); an analyzer must return a list of str"
                )
        return tokens

    def options(self) -> dict[str, Any]:
        fn = self.fn
        qualname = getattr(fn, "__qualname__", type(fn).__name__)
        out: dict[str, Any] = {"callable": f"{getattr(fn, '__module__', '?')}.{qualname}"}
        if self.factory_options:
            out["factory_options"] = {k: repr(v) for k, v in sorted(self.factory_options.items())}
        return out

    def check_picklable(self) -> None:
        """Raise ConfigError if this analyzer cannot be sent to worker processes."""
        try:
            pickle.dumps(self)
        except Exception as exc:
            raise ConfigError(
                f"analyzer {self.name!r} cannot be pickled ({exc}), so it cannot run in worker "
                "processes; define it as a module-level function or use num_workers=0"
            ) from exc


# --------------------------------------------------------------------------------------------
# Registry

_REGISTRY: dict[str, Callable[..., Analyzer]] = {}


def register_analyzer(name: str, factory: Callable[..., Any], *, overwrite: bool = False) -> None:
    """Register ``factory(**opts)`` under ``name``; it returns an Analyzer or a callable.

    ``factory`` may also be an Analyzer subclass. Re-registering a name needs ``overwrite=True``.
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"analyzer name must be a non-empty string, got {name!r}")
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
    _ensure_builtins()
    return sorted(_REGISTRY)


def get_analyzer(analyzer: str | Analyzer | Callable[[str], list[str]], **opts: Any) -> Analyzer:
    """An Analyzer from a registered name (with options), an Analyzer, or a callable."""
    _ensure_builtins()
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


def _ensure_builtins() -> None:
    if "bm25" in _REGISTRY:
        return
    from fastrag.analysis.chinese import ChineseAnalyzer
    from fastrag.analysis.cjk import CJKAnalyzer
    from fastrag.analysis.english import EnglishAnalyzer

    for name, cls in (
        ("bm25", EnglishAnalyzer),
        ("bm25_chinese", ChineseAnalyzer),
        ("bm25_cjk", CJKAnalyzer),
    ):
        _REGISTRY.setdefault(name, cls)


# --------------------------------------------------------------------------------------------
# Stopwords

_SHIPPED = {"zh": "stopwords_zh.txt", "en": "stopwords_en.txt"}


@functools.cache
def load_stopwords(lang: str) -> frozenset[str]:
    """A shipped stopword list: ``"zh"`` (841 Chinese words) or ``"en"`` (33 English words)."""
    if lang not in _SHIPPED:
        raise ConfigError(
            f"no shipped stopword list {lang!r}; shipped lists: {', '.join(sorted(_SHIPPED))}"
        )
    text = resources.files("fastrag.analysis").joinpath("data", _SHIPPED[lang]).read_text("utf-8")
    return frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


def resolve_stopwords(
    stopwords: Any, default_langs: tuple[str, ...], *, lowercase: bool = True
) -> frozenset[str]:
    """``"default"`` -> the shipped lists; None/False -> none; a language code or an iterable
    of str -> that set (lowercased when the analyzer lowercases)."""
    if stopwords is None or stopwords is False:
        return frozenset()
    if isinstance(stopwords, str):
        langs = default_langs if stopwords == DEFAULT else tuple(stopwords.split("+"))
        out: set[str] = set()
        for lang in langs:
            out |= load_stopwords(lang)
        return frozenset(out)
    if isinstance(stopwords, Iterable):
        words = list(stopwords)
        bad = [w for w in words if not isinstance(w, str)]
        if bad:
            raise ConfigError(
                f"stopwords must be strings, got {bad[0]!r} ({type(bad[0]).__name__})"
            )
        return frozenset(w.lower() if lowercase else w for w in words)
    raise ConfigError(
        f"stopwords must be 'default', None, a shipped list name ('zh', 'en', 'zh+en') or an "
        f"iterable of str; got {stopwords!r}"
    )


def stopwords_option(stopwords: frozenset[str], default: frozenset[str]) -> Any:
    """How a stopword set appears in ``options()``: 'default', None, or a short digest."""
    if stopwords == default:
        return DEFAULT
    if not stopwords:
        return None
    digest = hashlib.sha1("\n".join(sorted(stopwords)).encode("utf-8")).hexdigest()[:16]
    return f"custom:{len(stopwords)}:{digest}"
