"""Token-budgeted splitters that emit offsets: :class:`SentenceSplitter`,
:class:`TokenTextSplitter`.

Both tokenize each text once with tiktoken (offline ``cl100k_base`` by default), map token
boundaries to character offsets (multi-byte CJK tokens that split a character are never cut
inside it), and plan the chunks in one numba pass (``fastrag._kernels.split``). Every chunk
has at most ``chunk_size`` tokens *counted on the chunk text itself*: the plan is verified
exactly (tiktoken's pre-tokenizer breaks wherever a letter or digit run ends, so only the
few characters at each chunk edge need re-encoding) and re-planned in the rare case it is
over. Offsets come from the plan, never from ``text.find``: ``text[start:end] == chunk`` also
when sentences repeat. Chunks are stripped of surrounding whitespace; whitespace-only
chunks are dropped.
"""

from __future__ import annotations

import functools
import os
import unicodedata
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType

import numpy as np

from fastrag._checks import check_int, check_str, check_str_list
from fastrag.analysis.tokens import DEFAULT_ENCODING, get_encoding, is_shipped
from fastrag.errors import ConfigError
from fastrag.transforms.base import NodeTransform
from fastrag.transforms.longtext import BufferText

# Version of the chunking algorithm: part of identity(), so stores re-split after a change.
_ALGORITHM_VERSION = 1

_NEWLINES = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_SENT_END = "。！？；.!?…‼⁇⁈⁉｡．﹒﹖﹗"
_CLAUSE = "，、,;:：﹐﹑﹔﹕︰"
_NEEDS_SPACE = ".!?,;:"
_CLOSERS = "\"')]}”’」』】》〕〉）］｝»›〗〙〛"


def split_kernels() -> ModuleType:
    """:mod:`fastrag._kernels.split`, imported on first use (numba loads with it)."""
    from fastrag._kernels import split  # lazy: numba

    return split


@functools.lru_cache(maxsize=1)
def char_table() -> np.ndarray:
    """Class flags (``fastrag._kernels.split.CLS_*``) of every code point, uint8[0x110000]."""
    _k = split_kernels()
    n = 0x110000
    alpha = np.empty(n, dtype=np.bool_)
    numeric = np.empty(n, dtype=np.bool_)
    space = np.empty(n, dtype=np.bool_)
    step = 1 << 16  # a block of code points at a time: all at once held ~90 MB of 1-char strs
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        chars = "".join(map(chr, range(lo, hi)))
        alpha[lo:hi] = np.fromiter(map(str.isalpha, chars), dtype=np.bool_, count=hi - lo)
        numeric[lo:hi] = np.fromiter(map(str.isnumeric, chars), dtype=np.bool_, count=hi - lo)
        space[lo:hi] = np.fromiter(map(str.isspace, chars), dtype=np.bool_, count=hi - lo)
    table = np.zeros(n, dtype=np.uint8)
    table[alpha] |= _k.CLS_LETTER
    for cp in np.flatnonzero(numeric & ~alpha).tolist():  # \p{N}: Nd, Nl, No
        if unicodedata.category(chr(cp)).startswith("N"):
            table[cp] |= _k.CLS_DIGIT
    table[space] |= _k.CLS_SPACE
    for chars_, flag in (
        (_NEWLINES, _k.CLS_NEWLINE),
        (_SENT_END, _k.CLS_SENT_END),
        (_CLAUSE, _k.CLS_CLAUSE),
        (_NEEDS_SPACE, _k.CLS_NEEDS_SPACE),
        (_CLOSERS, _k.CLS_CLOSER),
    ):
        for ch in chars_:
            table[ord(ch)] |= flag
    return table


@functools.lru_cache(maxsize=8)
def token_byte_lengths(encoding: str = DEFAULT_ENCODING) -> np.ndarray:
    """UTF-8 byte length of every token id of ``encoding`` (int32; 0 for unused ids)."""
    enc = get_encoding(encoding)
    out = np.zeros(enc.n_vocab, dtype=np.int32)
    for i in range(enc.n_vocab):
        try:
            out[i] = len(enc.decode_single_token_bytes(i))
        except KeyError:
            pass
    return out


def _clean(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (what tiktoken encodes; same length)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _encode_np(enc, text: str) -> np.ndarray:
    """Token ids of ``text`` as uint32 (tiktoken's buffer; no Python int list)."""
    core = getattr(enc, "_core_bpe", None)
    if core is not None and hasattr(core, "encode_to_tiktoken_buffer"):
        try:
            return np.frombuffer(core.encode_to_tiktoken_buffer(text, set()), dtype=np.uint32)
        except UnicodeEncodeError:
            return np.frombuffer(
                core.encode_to_tiktoken_buffer(_clean(text), set()), dtype=np.uint32
            )
    return np.asarray(enc.encode_ordinary(text), dtype=np.uint32)


class _TokenBudgetSplitter(NodeTransform):
    """Shared machinery of the splitters: validation, tokenization, planning, verification."""

    _mode = 0  # fastrag._kernels.split.MODE_SENTENCE (imported lazily: numba loads on use)
    reads_long_texts = True  # a long text is planned window by window: a BufferText will do

    def __init__(
        self,
        chunk_size: int = 1024,
        chunk_overlap: int = 200,
        encoding: str = DEFAULT_ENCODING,
        *,
        num_threads: int | None = None,
    ) -> None:
        chunk_size = check_int("chunk_size", chunk_size, min=1, note="tokens", fix="use e.g. 1024")
        chunk_overlap = check_int(
            "chunk_overlap", chunk_overlap, min=0, note="tokens", fix="use 0 for no overlap"
        )
        if chunk_overlap >= chunk_size:
            raise ConfigError(
                f"chunk_overlap={chunk_overlap} must be smaller than chunk_size={chunk_size}; "
                f"lower chunk_overlap (e.g. {chunk_size // 10}) or raise chunk_size"
            )
        check_str("encoding", encoding, note="a tiktoken encoding name")
        num_threads = check_int("num_threads", num_threads, min=1, none="all cores")
        if not is_shipped(encoding):
            get_encoding(encoding)  # fail now, not on first use, if it is unavailable
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.encoding = encoding
        self._num_threads = num_threads

    def identity(self) -> str:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}(chunk_size={self.chunk_size}, "
            f"chunk_overlap={self.chunk_overlap}, encoding={self.encoding!r}, "
            f"v={_ALGORITHM_VERSION})"
        )

    def spec(self) -> dict:
        return {
            "class": type(self).__name__,
            "params": {
                "chunk_size": self.chunk_size,
                "chunk_overlap": self.chunk_overlap,
                "encoding": self.encoding,
            },
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(chunk_size={self.chunk_size}, "
            f"chunk_overlap={self.chunk_overlap}, encoding={self.encoding!r})"
        )

    # -- public ------------------------------------------------------------------------------
    def spans(self, text: str) -> list[tuple[int, int]]:
        """``(start, end)`` of each chunk of ``text``: ``text[start:end]`` is the chunk."""
        starts, ends = self.span_arrays(text)
        return list(zip(starts.tolist(), ends.tolist(), strict=True))

    def batch_spans(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        """Spans of many texts; tokenization and planning run on a thread pool."""
        return [
            list(zip(s.tolist(), e.tolist(), strict=True)) for s, e in self.batch_span_arrays(texts)
        ]

    def span_arrays(self, text: str | BufferText) -> tuple[np.ndarray, np.ndarray]:
        """Chunk ``(starts, ends)`` of one text as int64 arrays."""
        if not isinstance(text, (str, BufferText)):
            raise ConfigError(f"{type(self).__name__} splits str, got {type(text).__name__}")
        return self._plan(text)

    def batch_span_arrays(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Chunk ``(starts, ends)`` arrays of many texts, in order."""
        if isinstance(texts, str):
            raise ConfigError(
                "batch_span_arrays takes a list of texts, got one str; "
                "wrap it in a list or call span_arrays()"
            )
        if isinstance(texts, list) and any(isinstance(t, BufferText) for t in texts):
            check_str_list("texts", ["" if isinstance(t, BufferText) else t for t in texts])
        else:
            texts = check_str_list("texts", texts)
        threads = self._num_threads or min(8, os.cpu_count() or 1)
        if threads <= 1 or len(texts) <= 1:
            return [self._plan(t) for t in texts]
        # big texts first so the pool stays busy; results put back in input order
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out: list = [None] * len(texts)
        with ThreadPoolExecutor(threads) as pool:
            for i, res in zip(order, pool.map(self._plan, [texts[i] for i in order]), strict=True):
                out[i] = res
        return out

    # -- planning ----------------------------------------------------------------------------
    def _plan(self, text: str | BufferText) -> tuple[np.ndarray, np.ndarray]:
        if not text or text.isspace():
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        if len(text) > WINDOW_CHARS:
            return self._plan_windows(text, WINDOW_CHARS)
        whole = text[:] if isinstance(text, BufferText) else text
        starts, ends, *_ = self._plan_window(whole, {}, -1, -1, False, -1)
        return starts, ends

    def _plan_window(
        self, text: str, fixes: dict[int, int], s0: int, prev0: int, had_prev: bool, guard: int
    ) -> tuple:
        """Chunks of ``text`` (or of a window of a longer one: see ``plan_window``), re-planned
        until every chunk's exact token count is within budget; ``fixes`` (chunk start ->
        smaller budget, where the estimate was low) gains what this finds."""
        plan_window = split_kernels().plan_window
        enc = get_encoding(self.encoding)
        tok_lens = token_byte_lengths(self.encoding)[_encode_np(enc, text)]
        cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        table = char_table()
        cache: dict[str, int] = {}
        while True:
            fix_s = np.array(sorted(fixes), dtype=np.int64)
            fix_b = np.array([fixes[k] for k in fix_s.tolist()], dtype=np.int64)
            starts, ends, q, r, inner, s, prev, stopped = plan_window(
                cps,
                table,
                tok_lens,
                self.chunk_size,
                self.chunk_overlap,
                self._mode,
                fix_s,
                fix_b,
                s0,
                prev0,
                had_prev,
                guard,
            )
            exact = _exact_counts(enc, text, starts, ends, q, r, inner, cache)
            changed = False
            for i in np.flatnonzero(exact > self.chunk_size).tolist():
                st = int(starts[i])
                cur = fixes.get(st, self.chunk_size)
                new = max(1, cur - int(exact[i] - self.chunk_size))
                if new < cur:
                    fixes[st] = new
                    changed = True
            if not changed:  # all within budget (or one character alone is over it)
                return starts, ends, int(s), int(prev), bool(stopped)

    def _plan_windows(self, text: str | BufferText, window: int) -> tuple[np.ndarray, np.ndarray]:
        """The plan of a long text, made window by window (memory bounded by the window, not
        the text) and equal to the whole text's: windows begin and end at safe cuts, and each
        resumes where the previous stopped, ahead of any look past its end."""
        guard = 3 * self.chunk_size + 64  # a chunk's planning looks < 2 chunks of tokens ahead
        n = len(text)
        fixes: dict[int, int] = {}  # absolute chunk start -> budget
        out_s: list[np.ndarray] = []
        out_e: list[np.ndarray] = []
        a, s_abs, prev_abs, had_prev = 0, -1, -1, False
        b = _safe_cut_after(text, window)
        while True:
            last = b >= n
            w_fix = {k - a: v for k, v in fixes.items() if a <= k < b}
            starts, ends, s, prev, stopped = self._plan_window(
                text[a:b],
                w_fix,
                s_abs - a if s_abs >= 0 else -1,
                prev_abs - a if prev_abs >= 0 else -1,
                had_prev,
                -1 if last else guard,
            )
            fixes.update({k + a: v for k, v in w_fix.items()})
            if not stopped:
                out_s.append(starts + a)
                out_e.append(ends + a)
                break
            if len(starts) == 0:  # too short a window for one chunk ahead of the guard: widen
                b = _safe_cut_after(text, b + window)
                continue
            out_s.append(starts + a)
            out_e.append(ends + a)
            had_prev = True
            s_abs, prev_abs = s + a, prev + a
            a = _safe_cut_before(text, min(s_abs, prev_abs), a)
            b = _safe_cut_after(text, max(b, a + window))
        return np.concatenate(out_s), np.concatenate(out_e)


WINDOW_CHARS = 1 << 20  # texts longer than this are planned window by window


def _safe_cut_after(text: str | BufferText, p: int) -> int:
    """The first safe cut at or after ``p``, else ``len(text)``: a position after a line
    break and before a non-space, where tiktoken's pre-tokenizer (and the splitters' classes)
    break whatever the text around it."""
    n = len(text)
    i = max(p, 1) - 1
    while True:
        i = text.find("\n", i, n - 1)
        if i < 0:
            return n
        if not text[i + 1].isspace():
            return i + 1
        i += 1


def _safe_cut_before(text: str | BufferText, p: int, lo: int) -> int:
    """The last safe cut in ``(lo, p]``, else ``lo``."""
    i = p
    while i > lo:
        i = text.rfind("\n", lo, i)
        if i < 0 or i + 1 <= lo:
            return lo
        if i + 1 <= p and not text[i + 1].isspace():
            return i + 1
    return lo


def _exact_counts(enc, text, starts, ends, q, r, inner, cache) -> np.ndarray:
    """Token count of each chunk text, from its edge fragments and the global tokens between."""
    out = inner.copy()

    def count(frag: str) -> int:
        v = cache.get(frag)
        if v is None:
            v = cache[frag] = len(enc.encode_ordinary(frag))
        return v

    for i, (s, e, qq, rr) in enumerate(
        zip(starts.tolist(), ends.tolist(), q.tolist(), r.tolist(), strict=True)
    ):
        if qq < 0:
            out[i] = count(text[s:e])
            continue
        k = 0
        if qq > s:
            k += count(text[s:qq])
        if e > rr:
            k += count(text[rr:e])
        if k:
            out[i] += k
    return out


class SentenceSplitter(_TokenBudgetSplitter):
    """Chunks of at most ``chunk_size`` tiktoken tokens that end at sentence ends.

    Cuts prefer sentence ends (。！？；.!? and newlines, with closing quotes/brackets kept on
    the sentence), then clause punctuation (，、,;:), then spaces, then token boundaries (a
    sentence longer than ``chunk_size`` is cut token-exactly, never inside a character).
    Each chunk after the first starts about ``chunk_overlap`` tokens before the previous
    chunk's end, on the best boundary available (a sentence start where possible); the
    overlap shrinks (or goes) when the next sentence would otherwise not fit whole.
    """

    _mode = 0  # MODE_SENTENCE


class TokenTextSplitter(_TokenBudgetSplitter):
    """Windows of ``chunk_size`` tokens, each starting ``chunk_overlap`` tokens before the
    previous window's end (cuts at token boundaries that fall on character boundaries)."""

    _mode = 1  # fastrag._kernels.split.MODE_TOKEN

    def __init__(
        self,
        chunk_size: int = 1024,
        chunk_overlap: int = 20,
        encoding: str = DEFAULT_ENCODING,
        *,
        num_threads: int | None = None,
    ) -> None:
        super().__init__(chunk_size, chunk_overlap, encoding, num_threads=num_threads)
