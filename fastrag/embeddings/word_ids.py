"""Token ids of pre-split words, through a cache of each word's ids held in flat arrays.

:class:`WordIds` keeps every word it has tokenized (up to a count, then it starts again) as a
span of one growing id array, so a batch of texts already split into words becomes ids in a
few numpy passes: one dict lookup per word, no Python list per word. New words are tokenized
by the callable given to it, in one call per batch.

:func:`cjk_units` splits texts the way BERT's normalizer and whitespace split do (each CJK
ideograph a word of its own, the rest at whitespace) with numpy over the code points, so a
Chinese text's ideographs never become Python strings: :meth:`WordIds.unit_ids` looks them up
in a table by code point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain

import numpy as np

from fastrag._checks import check_int, check_str_list
from fastrag.errors import ConfigError

__all__ = ["CJK_RANGES", "WordIds", "cjk_units", "unit_table"]

# The ideographs BERT's normalizer pads with spaces (handle_chinese_chars), inclusive ranges.
CJK_RANGES = (
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0x2F800, 0x2FA1F),
)
_TOP = 0x30000  # above every CJK range and every whitespace character
_CJK_TABLE = np.zeros(_TOP + 1, np.bool_)
for _lo, _hi in CJK_RANGES:
    _CJK_TABLE[_lo : _hi + 1] = True
# str.split's whitespace (all below U+3001)
_SPACE_TABLE = np.zeros(_TOP + 1, np.bool_)
_SPACE_TABLE[[c for c in range(0x3001) if chr(c).isspace()]] = True


def unit_table(singles: Iterable[str] = ()) -> np.ndarray:
    """The characters :func:`cjk_units` makes units of their own: the CJK ideographs and
    ``singles`` (characters below U+30000 that are not whitespace), as a bool table by code
    point."""
    table = _CJK_TABLE.copy()
    for c in singles:
        if not isinstance(c, str) or len(c) != 1 or ord(c) >= _TOP or c.isspace():
            raise ConfigError(f"singles must be characters below U+30000, not spaces: {c!r}")
        table[ord(c)] = True
    return table


def cjk_units(
    texts: Sequence[str], table: np.ndarray | None = None
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """``texts`` split into units: each CJK ideograph (and each other character ``table``
    from :func:`unit_table` marks), and each run of other characters between whitespace and
    those (``text.split()`` after padding them with spaces). Returns ``(codes, runs,
    offsets)``: ``codes`` int64 per unit, the character's code point or -1 for a run;
    ``runs`` the runs' strings in order; ``offsets`` int64 ``(n + 1,)``, each text's units."""
    texts = check_str_list("texts", texts)
    if table is None:
        table = _CJK_TABLE
    elif not isinstance(table, np.ndarray) or table.shape != _CJK_TABLE.shape:
        raise ConfigError("table must come from unit_table()")
    joined = "\n".join(texts)
    cp = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), np.uint32)
    clipped = np.minimum(cp, _TOP)
    cjk = table[clipped]
    other = ~(cjk | _SPACE_TABLE[clipped])
    edges = np.diff(other.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    run_start = np.flatnonzero(edges == 1)
    run_end = np.flatnonzero(edges == -1)
    unit_start = cjk.copy()
    unit_start[run_start] = True
    upos = np.flatnonzero(unit_start)
    codes = np.where(cjk[upos], cp[upos].astype(np.int64), -1)
    runs = [joined[a:b] for a, b in zip(run_start.tolist(), run_end.tolist(), strict=True)]
    text_start = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, texts), np.int64, count=len(texts)) + 1, out=text_start[1:])
    offsets = np.searchsorted(upos, text_start)
    return codes, runs, offsets


def _new_codes(chars: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The code points of ``chars`` (each below ``_TOP``) that ``table`` has no word for
    (-1), sorted and each once."""
    if len(chars) < 4096:
        return np.unique(chars[table[chars] < 0])
    seen = np.zeros(_TOP, np.bool_)  # a mark per code point: far faster than sorting
    seen[chars] = True
    return np.flatnonzero(seen & (table < 0))


class WordIds:
    """Cache of words' token ids; :meth:`ids` turns split texts into ragged ids.

    Args:
        tokenize_new: the ids of a list of new words, as ``(words, ids, counts)``: the same
            words in any order, their ids one after the other, and how many each has.
        max_words: words kept; past it the cache starts again.
        max_chars: longer words are tokenized on every call and not kept (unspaced runs of
            text would fill the cache with words seen once).

    Not thread-safe: the caller holds a lock around :meth:`ids` and :meth:`unit_ids`.
    """

    def __init__(
        self,
        tokenize_new: Callable[[list[str]], tuple[list[str], Sequence[int], Sequence[int]]],
        max_words: int = 1 << 20,
        max_chars: int = 32,
    ) -> None:
        if not callable(tokenize_new):
            raise ConfigError(
                "tokenize_new must be a function of a list of words, "
                f"got {type(tokenize_new).__name__}"
            )
        self._tokenize_new = tokenize_new
        self.max_words = check_int("max_words", max_words, min=1)
        self.max_chars = check_int("max_chars", max_chars, min=1)
        self._clear()

    def _clear(self) -> None:
        self.index: dict[str, int] = {}
        self._start = np.zeros(1024, np.int64)
        self._len = np.zeros(1024, np.int64)
        self._flat = np.zeros(1 << 14, np.int32)
        self._n_ids = 0
        self._by_code: np.ndarray | None = None  # word id of each ideograph's code point

    def __len__(self) -> int:
        return len(self.index)

    def _append(self, words: list[str]) -> None:
        words, flat, counts = self._tokenize_new(words)
        lens = np.array(counts, np.int64)
        n0 = len(self.index)
        n1 = n0 + len(words)
        if n1 > self._start.shape[0]:
            cap = max(n1, 2 * self._start.shape[0])
            self._start = np.resize(self._start, cap)
            self._len = np.resize(self._len, cap)
        starts = np.empty(len(words), np.int64)
        if len(words):
            starts[0] = self._n_ids
            np.cumsum(lens[:-1], out=starts[1:])
            starts[1:] += self._n_ids
        total = int(lens.sum())
        m = self._n_ids + total
        if m > self._flat.shape[0]:
            self._flat = np.resize(self._flat, max(m, 2 * self._flat.shape[0]))
        self._flat[self._n_ids : m] = flat
        self._start[n0:n1] = starts
        self._len[n0:n1] = lens
        self._n_ids = m
        self.index.update(zip(words, range(n0, n1), strict=True))

    def _word_ids(self, words: list[str]) -> tuple[np.ndarray, list[str]]:
        """Word ids of ``words`` (new ones tokenized and added) and the words added for this
        call only (longer than ``max_chars``), to :meth:`_forget` once their ids are read."""
        index = self.index
        try:
            return np.fromiter(map(index.__getitem__, words), np.int64, count=len(words)), []
        except KeyError:
            pass
        new = list(set(words).difference(index))
        if len(index) + len(new) > self.max_words:
            self._clear()
            index = self.index
            new = list(set(words))
        keep = [w for w in new if len(w) <= self.max_chars]
        once = [w for w in new if len(w) > self.max_chars]
        if keep:
            self._append(keep)
        if once:  # appended last, so dropped by truncating
            self._append(once)
        return np.fromiter(map(index.__getitem__, words), np.int64, count=len(words)), once

    def _forget(self, once: list[str]) -> None:
        if once:
            self._n_ids = int(min(self._start[self.index[w]] for w in once))
            for w in once:
                del self.index[w]

    def _gather(self, wids: np.ndarray, word_off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from fastrag._kernels.static_embed import gather_spans  # lazy: numba

        ids, tok_off = gather_spans(self._flat, self._start, self._len, wids)
        return ids, tok_off[word_off]

    def ids(self, split: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids int32, offsets int64 (n + 1,))`` of texts given as lists of words."""
        words = list(chain.from_iterable(split))
        wids, once = self._word_ids(words)
        word_off = np.zeros(len(split) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, split), np.int64, count=len(split)), out=word_off[1:])
        out = self._gather(wids, word_off)
        self._forget(once)
        return out

    def unit_ids(
        self, codes: np.ndarray, runs: list[str], offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`ids` of texts split by :func:`cjk_units` (an ideograph is the word of its
        one character)."""
        is_char = codes >= 0
        chars = codes[is_char]
        table = self._by_code
        if table is None:
            table = np.full(_TOP, -1, np.int64)
        unknown = _new_codes(chars, table)
        if len(self.index) + len(unknown) + len(runs) > self.max_words:
            self._clear()  # now, so that no clear while adding leaves stale entries in table
            table = np.full(_TOP, -1, np.int64)
            unknown = _new_codes(chars, table)
        wids, once = self._word_ids([chr(c) for c in unknown.tolist()] + runs)
        if self._by_code is None:  # (a clear while adding drops table, all unknown then)
            self._by_code = table
        table[unknown] = wids[: len(unknown)]
        units = np.empty(len(codes), np.int64)
        units[is_char] = table[chars]
        units[~is_char] = wids[len(unknown) :]
        out = self._gather(units, offsets)
        self._forget(once)
        return out
