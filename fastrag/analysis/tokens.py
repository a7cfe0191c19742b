"""Token counting with tiktoken, offline.

tiktoken downloads its BPE files at run time; fastrag ships ``cl100k_base`` inside the package
and builds the encoding from that copy, so counting works with no network and an empty
``TIKTOKEN_CACHE_DIR``. Other encodings fall back to ``tiktoken.get_encoding`` (which may need
the network) and fail with a message that says so.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from importlib import resources

from fastrag._checks import check_str
from fastrag.errors import ConfigError

# The pattern and special tokens of cl100k_base, as tiktoken_ext.openai_public defines them.
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
_CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"

DEFAULT_ENCODING = "cl100k_base"


@functools.lru_cache(maxsize=64)
def is_shipped(name: str) -> bool:
    """Whether encoding (or model) ``name`` is served by the cl100k_base file fastrag ships:
    the encoding itself, or a model tiktoken maps to it (gpt-4 and gpt-3.5-turbo are, gpt-4o
    is not: it counts with o200k_base)."""
    if name == DEFAULT_ENCODING:
        return True
    from tiktoken.model import encoding_name_for_model  # lazy: tiktoken's model table

    try:
        return encoding_name_for_model(name) == DEFAULT_ENCODING
    except KeyError:
        return False


def _shipped_encoding_class():
    import tiktoken

    class ShippedEncoding(tiktoken.Encoding):
        """cl100k_base built from fastrag's copy; pickled by name, rebuilt by ``get_encoding``."""

        def __init__(self, **kwargs) -> None:
            super().__init__(**kwargs)
            # tiktoken keeps the Python dict only to pickle the encoding (its Rust core holds
            # a copy): ~19 MiB per process. This encoding pickles by name instead.
            del self._mergeable_ranks

        def __reduce__(self):
            return get_encoding, (DEFAULT_ENCODING,)

    return ShippedEncoding


def get_encoding(name: str = DEFAULT_ENCODING):
    """A ``tiktoken.Encoding`` by encoding name or model name; cl100k_base works offline (one
    instance per process, whichever name asked for it)."""
    check_str("encoding", name)
    return _encoding(DEFAULT_ENCODING if is_shipped(name) else name)


@functools.lru_cache(maxsize=8)
def _encoding(name: str):
    import tiktoken

    if name == DEFAULT_ENCODING:
        path = resources.files("fastrag.analysis").joinpath("data/cl100k_base.tiktoken")
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != _CL100K_SHA256:
            raise ConfigError("the shipped cl100k_base.tiktoken file is damaged; reinstall fastrag")
        # parsed here rather than by tiktoken.load, which copies local files into its cache
        ranks = {
            base64.b64decode(tok): int(rank)
            for tok, rank in (line.split() for line in data.splitlines() if line)
        }
        return _shipped_encoding_class()(
            name=DEFAULT_ENCODING,
            pat_str=_CL100K_PAT,
            mergeable_ranks=ranks,
            special_tokens=_CL100K_SPECIAL,
        )
    try:
        try:
            return tiktoken.get_encoding(name)
        except ValueError:
            return tiktoken.encoding_for_model(name)
    except Exception as exc:  # network failure or unknown name
        raise ConfigError(
            f"tiktoken encoding {name!r} is not available offline ({exc}); "
            f"use {DEFAULT_ENCODING!r} (shipped with fastrag) or put the BPE file in "
            "TIKTOKEN_CACHE_DIR"
        ) from exc


def release_encodings() -> None:
    """Drop the encodings this process built (cl100k_base: ~26 MiB); the next
    :func:`get_encoding` builds them again (~0.3 s). For a one-shot process done counting
    tokens, such as ``fastrag ingest`` once its groups are built; holders of an encoding
    keep theirs."""
    _encoding.cache_clear()


def count_tokens(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Number of tokens of ``text`` (special-token strings count as plain text)."""
    return len(get_encoding(encoding).encode_ordinary(text))


def count_tokens_batch(texts: list[str], encoding: str = DEFAULT_ENCODING) -> list[int]:
    """Token counts of many texts in one tiktoken batch call."""
    return [len(t) for t in get_encoding(encoding).encode_ordinary_batch(list(texts))]
