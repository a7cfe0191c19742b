"""Token-exact prompt packing (LlamaIndex's ``PromptHelper``, without its per-word tokenizing).

Every chunk is tokenized once (one ``encode_ordinary_batch`` call for all chunks not seen
before; counts are cached by text). Packing is then integer arithmetic: whole chunks go
greedily, in order, into the current prompt while ``sum(tokens) + separators <= budget``
(for an ordered sequence this next-fit greedy gives the fewest prompts). Only a chunk that
alone exceeds the budget is split, at token-exact positions on character boundaries,
preferring a sentence end in the last half of the piece, with ``chunk_overlap`` tokens
repeated between its pieces (0 by default: no duplicated text).

The token count of a prompt is computed as the sum of the counts of its parts (template text,
chunks, separators). tiktoken's pre-tokenizer can only merge text across such a boundary
(``".\\n\\n"`` is one token), so the sum is the exact count or an overestimate, never below it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from fastrag._checks import check_int, check_str
from fastrag.analysis.tokens import DEFAULT_ENCODING, get_encoding
from fastrag.errors import ConfigError

__all__ = ["DEFAULT_CONTEXT_WINDOW", "DEFAULT_NUM_OUTPUT", "Piece", "PromptHelper"]

DEFAULT_CONTEXT_WINDOW = 3900  # LlamaIndex's default
DEFAULT_NUM_OUTPUT = 256

# Bytes that end a sentence (checked at the end of the bytes before a cut).
_SENTENCE_ENDS = tuple(
    s.encode("utf-8")
    for s in (".", "!", "?", "\n", ";", "。", "！", "？", "；", "…", '."', "”", ".)")
)
_SPACE_BYTES = frozenset(b" \t\n\r")


@dataclass(frozen=True, slots=True)
class Piece:
    """A packed text and its token count (exact or an upper bound, see module doc)."""

    text: str
    n_tokens: int


class PromptHelper:
    """Counts tokens and packs text chunks into prompts that fit an LLM's context window.

    Args:
        context_window: tokens the model accepts (prompt + output).
        num_output: tokens reserved for the answer.
        tokenizer: a tiktoken encoding or model name (``"cl100k_base"`` works offline), or a
            ``tiktoken.Encoding``.
        chunk_overlap: tokens repeated between consecutive pieces of a split chunk (None:
            a tenth of the piece, as LlamaIndex's ``chunk_overlap_ratio=0.1``).
        separator: text put between packed chunks.
        padding: extra tokens kept free in every prompt (safety margin; 0 is exact).
        sentence_aware: cut oversized chunks at a sentence end when one is in reach.
        cache_size: texts whose token count is remembered (0 disables the cache).
    """

    def __init__(
        self,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        num_output: int = DEFAULT_NUM_OUTPUT,
        *,
        tokenizer: str | Any = DEFAULT_ENCODING,
        chunk_overlap: int | None = None,
        separator: str = "\n\n",
        padding: int = 0,
        sentence_aware: bool = True,
        cache_size: int = 100_000,
    ) -> None:
        for name, value, low in (
            ("context_window", context_window, 1),
            ("num_output", num_output, 0),
            ("chunk_overlap", 0 if chunk_overlap is None else chunk_overlap, 0),
            ("padding", padding, 0),
            ("cache_size", cache_size, 0),
        ):
            check_int(name, value, min=low)
        if num_output >= context_window:
            raise ConfigError(
                f"num_output={num_output} leaves no room in context_window={context_window}; "
                "lower num_output or raise context_window"
            )
        check_str("separator", separator, empty=True)
        if isinstance(tokenizer, str):
            self.encoding = get_encoding(tokenizer)
        elif hasattr(tokenizer, "encode_ordinary_batch") and hasattr(
            tokenizer, "decode_tokens_bytes"
        ):
            self.encoding = tokenizer
        else:
            raise ConfigError(
                f"tokenizer must be a tiktoken encoding/model name or a tiktoken.Encoding, "
                f"got {type(tokenizer).__name__}"
            )
        self.context_window = context_window
        self.num_output = num_output
        self.chunk_overlap = chunk_overlap
        self.separator = separator
        self.padding = padding
        self.sentence_aware = sentence_aware
        self.cache_size = cache_size
        self._cache: dict[str, int] = {}
        self.separator_tokens = self.count(separator) if separator else 0

    def __repr__(self) -> str:
        return (
            f"PromptHelper(context_window={self.context_window}, num_output={self.num_output}, "
            f"tokenizer={self.encoding.name!r}, chunk_overlap={self.chunk_overlap})"
        )

    # -- counting ------------------------------------------------------------------------------
    def count(self, text: str) -> int:
        """Tokens of one text (cached)."""
        n = self._cache.get(text)
        if n is None:
            n = len(self.encoding.encode_ordinary(text))
            self._remember(text, n)
        return n

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        """Tokens of many texts: cached ones are looked up, the rest encoded in one batch."""
        cache = self._cache
        out = [cache.get(t, -1) for t in texts]
        missing = [i for i, n in enumerate(out) if n < 0]
        if missing:
            uniq = list(dict.fromkeys(texts[i] for i in missing))
            if len(uniq) > 8:
                counts = [len(x) for x in self.encoding.encode_ordinary_batch(uniq)]
            else:
                counts = [len(self.encoding.encode_ordinary(t)) for t in uniq]
            fresh = dict(zip(uniq, counts, strict=True))
            for i in missing:
                out[i] = fresh[texts[i]]
            for t, n in fresh.items():
                self._remember(t, n)
        return out

    def _remember(self, text: str, n: int) -> None:
        if self.cache_size:
            if len(self._cache) >= self.cache_size:
                self._cache.clear()
            self._cache[text] = n

    def clear_cache(self) -> None:
        self._cache.clear()

    # -- budgets -------------------------------------------------------------------------------
    def budget(self, overhead_tokens: int) -> int:
        """Context tokens left for chunks in a prompt whose other parts take ``overhead``."""
        room = self.context_window - self.num_output - self.padding - overhead_tokens
        if room <= 0:
            raise ConfigError(
                f"no room for context: context_window={self.context_window} - "
                f"num_output={self.num_output} - padding={self.padding} - "
                f"prompt template/query/answer tokens={overhead_tokens} = {room}; "
                "raise context_window, lower num_output, or shorten the template or query"
            )
        return room

    @property
    def room(self) -> int:
        """Tokens a whole prompt may take: ``context_window - num_output - padding``."""
        return self.context_window - self.num_output - self.padding

    # -- normalising input ---------------------------------------------------------------------
    def prepare(self, texts: Iterable[str], exact: bool = True) -> list[Piece]:
        """Strip chunks and drop empty ones; count the rest in one batch (``exact=True``) or
        leave their count unknown (``n_tokens=-1``, counted later only where needed)."""
        stripped = [t.strip() for t in texts]
        stripped = [t for t in stripped if t]
        if not exact:
            return [Piece(t, -1) for t in stripped]
        return [Piece(t, n) for t, n in zip(stripped, self.count_batch(stripped), strict=True)]

    def counted(self, piece: Piece) -> Piece:
        """``piece`` with its token count known."""
        return piece if piece.n_tokens >= 0 else Piece(piece.text, self.count(piece.text))

    # -- splitting -----------------------------------------------------------------------------
    def split(self, text: str, budget: int) -> list[Piece]:
        """Cut one text into pieces of at most ``budget`` tokens (token-exact).

        Cuts fall on character boundaries, at a sentence end in the second half of a piece
        when there is one (else a word boundary in its last tenth), with ``chunk_overlap``
        tokens shared by consecutive pieces.
        """
        if budget <= 0:
            raise ConfigError(f"budget={budget} must be positive to split text")
        enc = self.encoding
        ids = enc.encode_ordinary(text)
        n = len(ids)
        if n <= budget:
            return [Piece(text, n)]
        tok_bytes = enc.decode_tokens_bytes(ids)
        offs = [0] * (n + 1)
        acc = 0
        for i, b in enumerate(tok_bytes):
            acc += len(b)
            offs[i + 1] = acc
        data = text.encode("utf-8")
        size = len(data)

        def char_boundary(j: int) -> bool:
            o = offs[j]
            return o >= size or (data[o] & 0xC0) != 0x80

        def sentence_end(j: int) -> bool:
            o = offs[j]
            return data.endswith(_SENTENCE_ENDS, max(0, o - 4), o)

        def word_boundary(j: int) -> bool:
            o = offs[j]
            if o >= size or data[o] in _SPACE_BYTES or data[o - 1] in _SPACE_BYTES:
                return True
            return data[o] >= 0xE3 or data[o - 1] >= 0x80  # CJK: any char boundary will do

        want = budget // 10 if self.chunk_overlap is None else self.chunk_overlap
        overlap = min(want, budget // 2)
        pieces: list[tuple[int, int]] = []
        s = 0
        while True:
            hard = s + budget
            if hard >= n:
                pieces.append((s, n))
                break
            e = hard
            while e > s + 1 and not char_boundary(e):
                e -= 1
            if self.sentence_aware:
                cut = 0
                for j in range(e, s + max(1, budget // 2) - 1, -1):
                    if char_boundary(j) and sentence_end(j):
                        cut = j
                        break
                if not cut:
                    for j in range(e, s + max(1, budget - budget // 10) - 1, -1):
                        if char_boundary(j) and word_boundary(j):
                            cut = j
                            break
                if cut > s:
                    e = cut
            pieces.append((s, e))
            ns = max(e - overlap, s + 1)
            while ns < e and not char_boundary(ns):
                ns += 1
            s = ns
        texts = [data[offs[a] : offs[b]].decode("utf-8", errors="replace") for a, b in pieces]
        out: list[Piece] = []
        # Re-count the decoded pieces (exact); a piece that re-encodes longer is cut again.
        for t, m in zip(texts, self.count_batch(texts), strict=True):
            if m <= budget:
                out.append(Piece(t, m))
            else:  # pragma: no cover - tiktoken re-encoding a cut piece longer: rare
                out.extend(self.split(t, budget - (m - budget) - 1))
        return out

    # -- packing -------------------------------------------------------------------------------
    def joined_tokens(self, pieces: Sequence[Piece]) -> int:
        """Token count of ``separator.join(pieces)`` (sum of parts)."""
        if not pieces:
            return 0
        return sum(p.n_tokens for p in pieces) + self.separator_tokens * (len(pieces) - 1)

    def pack(self, pieces: Sequence[Piece], budget: int) -> list[Piece]:
        """Greedy whole-chunk packing into the fewest prompts of ``budget`` context tokens."""
        queue = deque(pieces)
        out: list[Piece] = []
        while queue:
            out.append(self.take(queue, budget))
        return out

    def take(self, queue: deque[Piece], budget: int) -> Piece:
        """Pop from ``queue`` the longest prefix of whole chunks that fits ``budget``.

        When the first chunk alone is too big it is split; its first piece is returned and
        the rest go back to the front of the queue (to be packed with what follows).
        """
        first = queue[0]
        if first.n_tokens < 0:
            first = queue[0] = self.counted(first)
        if first.n_tokens > budget:
            queue.popleft()
            parts = self.split(first.text, budget)
            queue.extendleft(reversed(parts[1:]))
            return parts[0]
        sep_n = self.separator_tokens
        texts = [queue.popleft().text]
        used = first.n_tokens
        while queue:
            if queue[0].n_tokens < 0:
                queue[0] = self.counted(queue[0])
            if used + sep_n + queue[0].n_tokens > budget:
                break
            p = queue.popleft()
            texts.append(p.text)
            used += sep_n + p.n_tokens
        if len(texts) == 1:
            return first
        return Piece(self.separator.join(texts), used)

    def truncate(self, pieces: Sequence[Piece], budget: int) -> tuple[Piece, int]:
        """One piece of at most ``budget`` tokens: whole chunks, then the head of the next.

        Returns the piece and the number of tokens dropped (of the joined input).
        """
        total = self.joined_tokens(pieces)
        if total <= budget:
            return Piece(self.separator.join(p.text for p in pieces), total), 0
        sep_n = self.separator_tokens
        texts: list[str] = []
        used = 0
        for p in pieces:
            extra = p.n_tokens + (sep_n if texts else 0)
            if used + extra <= budget:
                texts.append(p.text)
                used += extra
                continue
            room = budget - used - (sep_n if texts else 0)
            if room > 0:
                head = self.split(p.text, room)[0]
                if head.n_tokens <= room:
                    texts.append(head.text)
                    used += head.n_tokens + (sep_n if len(texts) > 1 else 0)
            break
        return Piece(self.separator.join(texts), used), total - used
