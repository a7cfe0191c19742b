"""The analyzer base class and the callable wrapper.

An analyzer turns one text into a list of tokens (``an(text) -> list[str]``). It is a small
picklable object (its options only; dictionaries and caches are rebuilt per process), with a
``name`` and an ``identity()`` string that changes whenever an option that changes its tokens
changes: stores use it as a fingerprint to decide whether an index must be rebuilt.

``Analyzer.encode_chunk(texts)`` is the batch path ``tokenize_corpus`` uses: it returns the
chunk's local vocabulary (tokens in first-occurrence order) and each text's tokens as local
ids, so no list of lists of str is kept. Subclasses override it when they can do better than
calling ``self(text)`` per text (the Chinese analyzers normalise each distinct raw token once;
``bm25_cjk`` does the whole chunk in a numba kernel). Queries go through
``encode_query_chunk``, which may add tokens an index never holds (``bm25``'s compound parts);
``query_options()`` names what changes only queries, so it is not part of ``identity()``.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from fastrag.errors import ConfigError

__all__ = ["Analyzer", "CallableAnalyzer"]


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

    def query_options(self) -> dict[str, Any]:
        """Options that change only the tokens of queries (not an index's: not in identity)."""
        return {}

    def warmup(self) -> None:
        """Load dictionaries / compile kernels now (called once in each worker process)."""

    def release_memo(self) -> None:
        """Drop what this analyzer memoised of the texts it has seen (the memory back; the
        tokens stay the same). For a one-shot build done tokenizing a large corpus."""

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

    def encode_query_chunk(self, texts: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Tokens of queries, as :meth:`encode_chunk` (the same unless a subclass expands
        queries)."""
        return self.encode_chunk(texts)

    def query_tokens(self, text: str) -> list[str]:
        """The tokens of one query (what a search looks up)."""
        vocab, ids, _ = self.encode_query_chunk([text])
        return [vocab[i] for i in ids.tolist()]

    def __repr__(self) -> str:
        items = {**self.options(), **self.query_options()}.items()
        opts = ", ".join(f"{k}={v!r}" for k, v in items)
        return f"{type(self).__name__}({opts})"

    def _key(self) -> tuple[str, str]:
        return self.identity(), json.dumps(self.query_options(), sort_keys=True, default=str)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Analyzer) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


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
