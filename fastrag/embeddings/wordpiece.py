"""BERT's WordPiece in Python and numba for the words most text is made of.

:class:`AsciiWordPiece` tokenizes printable-ASCII words in a numba kernel, a batch at a time.
:func:`bert_wordpiece` is a WordPiece tokenizer for the printable-ASCII words of a
lowercasing BERT model (BERT's normalizer and pre-tokenizer, then greedy longest-match-first
pieces) and for the words that are such once their accents are stripped (most Latin-script
words) or single CJK ideographs, equal to ``tokenizers``' on those words and several
times faster per new word; other words go to ``tokenizers``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from unicodedata import category, normalize

import numpy as np

from fastrag._checks import check_int, check_str, check_str_list
from fastrag.embeddings.unigram import code_point_trie, code_points
from fastrag.errors import ConfigError

__all__ = ["BERT_PUNCT", "AsciiWordPiece", "bert_wordpiece"]

# BERT's pre-tokenizer on lowercased printable ASCII: runs of letters and digits, and every
# other character (all ASCII punctuation to BERT) on its own.
_ASCII_PIECES = re.compile(r"[a-z0-9]+|[^a-z0-9]")
# CJK unified ideographs: BERT's normalizer leaves them as they are (the compatibility
# ideographs, which NFD changes, are not among them).
_UNIFIED = re.compile(
    "[\u3400-\u4dbf\u4e00-\u9fff\U00020000-\U0002a6df\U0002a700-\U0002b81f\U0002b920-\U0002ceaf]"
)

# The combining diacritical marks (all nonspacing in every Unicode version), which NFD splits
# off Latin, Greek and Cyrillic letters; other marks are left to ``tokenizers``, whose Unicode
# tables may be older than Python's.
_DIACRITICS = dict.fromkeys(range(0x300, 0x370))
# Punctuation BERT splits off as a piece of its own (a tokenizer may split texts at it first),
# from blocks whose characters have kept their category: Latin-1, general punctuation, CJK and
# fullwidth forms.
BERT_PUNCT = frozenset(
    chr(c)
    for lo, hi in ((0xA1, 0xBF), (0x2010, 0x205E), (0x3001, 0x301F), (0xFF01, 0xFF65))
    for c in range(lo, hi + 1)
    if category(chr(c)).startswith("P")
)
_PUNCT_SPLIT = re.compile("([" + re.escape("".join(sorted(BERT_PUNCT))) + "])").split


def bert_wordpiece(
    vocab: dict[str, int], unk: int, *, prefix: str = "##", max_chars: int = 100
) -> Callable[[str, list[int]], bool]:
    """A function ``(word, out)`` that appends the word's WordPiece ids under a lowercasing
    BERT model with vocabulary ``vocab`` (``unk``: the unknown token's id) to ``out`` and
    returns True, or leaves ``out`` as it was and returns False for a word it does not
    handle: one that is not printable ASCII without spaces once its accents are stripped, and
    is not one assigned CJK ideograph (the caller asks ``tokenizers``)."""
    _check_vocab(vocab)
    unk = check_int("unk", unk, min=0)
    prefix = check_str("prefix", prefix)
    max_chars = check_int("max_chars", max_chars, min=1)
    get = vocab.get
    findall = _ASCII_PIECES.findall
    # no longer substring can be a piece
    longest = max(
        (len(t) - len(prefix) if t.startswith(prefix) else len(t) for t in vocab), default=0
    )

    def piece_ids(piece: str, out: list[int]) -> None:
        """Append the ids of one pre-tokenized piece: the vocabulary entry it is, or its
        longest-match-first split (``unk`` alone if a part matches nothing)."""
        n = len(piece)
        if n > max_chars:
            out.append(unk)
            return
        tid = get(piece)
        if tid is not None:
            out.append(tid)
            return
        found: list[int] = []
        start = 0
        while start < n:
            end = min(n, start + longest)
            tid = None
            while end > start:
                sub = piece[start:end] if start == 0 else prefix + piece[start:end]
                tid = get(sub)
                if tid is not None:
                    break
                end -= 1
            if tid is None:
                out.append(unk)
                return
            found.append(tid)
            start = end
        out.extend(found)

    unified = _UNIFIED.fullmatch
    split_punct = _PUNCT_SPLIT

    def ascii_ids(word: str, out: list[int]) -> bool:
        """Append the ids of printable-ASCII ``word``; False if it is not such a word."""
        if not word.isprintable() or " " in word:
            return False
        low = word.lower()
        for piece in (low,) if low.isalnum() else findall(low):  # most words: one piece
            piece_ids(piece, out)
        return True

    def word_ids(word: str, out: list[int]) -> bool:
        n0 = len(out)
        if word.isascii():
            return ascii_ids(word, out)
        if len(word) == 1 and (word in BERT_PUNCT or (unified(word) and category(word) == "Lo")):
            out.append(get(word, unk))
            return True
        # BERT strips accents (NFD, then no nonspacing marks) before it lowercases, and splits
        # off each punctuation character
        word = normalize("NFD", word).translate(_DIACRITICS)
        if word.isascii():
            return ascii_ids(word, out)
        for part in split_punct(word):
            if part in BERT_PUNCT:
                out.append(get(part, unk))
            elif part and not (part.isascii() and ascii_ids(part, out)):
                del out[n0:]
                return False
        return True

    return word_ids


def _check_vocab(vocab: dict[str, int]) -> None:
    if not isinstance(vocab, dict) or not vocab:
        raise ConfigError(
            f"vocab must be a non-empty dict of token -> id, got {type(vocab).__name__}"
            + (" (empty)" if isinstance(vocab, dict) else "")
        )


class AsciiWordPiece:
    """A lowercasing BERT model's WordPiece for printable-ASCII words, in a numba kernel:
    :meth:`encode` gives the ids ``tokenizers`` gives each word (BERT's normalizer and
    pre-tokenizer, then greedy longest-match-first pieces).

    Args:
        vocab: token -> id.
        unk: the unknown token's id.
        prefix: the continuation pieces' prefix.
        max_chars: longer parts are the unknown token.

    Immutable after construction, so one instance serves any number of threads.
    """

    def __init__(
        self, vocab: dict[str, int], unk: int, *, prefix: str = "##", max_chars: int = 100
    ) -> None:
        _check_vocab(vocab)
        self.unk = check_int("unk", unk, min=0)
        prefix = check_str("prefix", prefix)
        self.max_chars = check_int("max_chars", max_chars, min=1)
        n = max(vocab.values()) + 1
        head = [""] * n
        tail = [""] * n  # empty: in no trie
        for t, i in vocab.items():
            if t.startswith(prefix):
                tail[i] = t[len(prefix) :]
            else:
                head[i] = t
        self._head = code_point_trie(head)
        self._tail = code_point_trie(tail)
        for a in (*self._head, *self._tail):
            a.flags.writeable = False

    def encode(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids int32, counts int64)``: each word's ids one after the other, and how many
        each has. Every word must be printable ASCII without spaces."""
        from fastrag._kernels.wordpiece import encode_ascii_words  # lazy: numba

        words = check_str_list("words", list(words))
        joined = "".join(words)
        if not (joined.isascii() and joined.isprintable()) or " " in joined:
            raise ConfigError("words must be printable ASCII without spaces")
        chars, offsets = code_points(words, narrow=True)
        ids = np.empty(len(chars), np.int32)
        counts = np.empty(len(words), np.int64)
        n = encode_ascii_words(
            chars, offsets, *self._head, *self._tail, self.unk, self.max_chars, ids, counts
        )
        return ids[:n], counts
