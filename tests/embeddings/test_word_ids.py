"""WordIds, bert_wordpiece and AsciiWordPiece: the Python and numba WordPieces equal
``tokenizers``' on every word they take (real words of the seed documents, fuzzed ASCII, the
100-character limit), and the flat word cache gives the same ids as tokenizing each word,
across clears and long words."""

from __future__ import annotations

import random
import string
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers")

from fastrag.embeddings.word_ids import WordIds, cjk_units, unit_table
from fastrag.embeddings.wordpiece import AsciiWordPiece, bert_wordpiece  # noqa: E402
from fastrag.errors import ConfigError  # noqa: E402

VOCAB = Path(__file__).parents[2] / "fastrag" / "embeddings" / "data" / "minilm_vocab.txt"
SEEDS = Path(__file__).parents[3] / "shared" / "seeds"


@pytest.fixture(scope="module")
def bert():
    from tokenizers.implementations import BertWordPieceTokenizer

    ref = BertWordPieceTokenizer(
        str(VOCAB), lowercase=True, clean_text=True, handle_chinese_chars=True, strip_accents=None
    )
    vocab = ref.get_vocab()
    return ref, _returning(bert_wordpiece(vocab, vocab["[UNK]"]))


def _returning(fast):
    """``fast(word, out)`` as a function of the word: its ids, or None (``out`` untouched)."""

    def ids(word: str) -> list[int] | None:
        out = [-7]
        if fast(word, out):
            return out[1:]
        assert out == [-7]
        return None

    return ids


def _words() -> list[str]:
    words: set[str] = set()
    for f in sorted(SEEDS.rglob("*"))[:300]:
        if f.is_file():
            words.update(f.read_text(encoding="utf-8", errors="replace").split())
    rng = random.Random(0)
    alphabet = string.ascii_letters + string.digits + string.punctuation + "\x01\x7f\x00é中"
    for _ in range(20_000):
        words.add("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 16))))
    words.update(["a" * 100, "a" * 101, "ab" * 51, "x," * 60, "tokenization" * 9, "##ing"])
    words.update(["ab\u201c\u4e2d", "x\u2014y", "na\u00efve\u2014caf\u00e9", "\u201cquoted\u201d"])
    return sorted(words)


def test_bert_wordpiece_equals_tokenizers(bert):
    ref, fast = bert
    words = _words()
    handled = [w for w in words if fast(w) is not None]
    assert len(handled) > 10_000
    assert all(not w.isascii() or not w.isprintable() for w in words if fast(w) is None)
    ideographs = [chr(c) for c in range(0x3400, 0x2CEB0)]
    taken = [c for c in ideographs if fast(c) is not None]
    assert len(taken) > 80_000
    want = ref.encode_batch(taken, add_special_tokens=False)
    assert [fast(c) for c in taken] == [e.ids for e in want]
    assert fast("\uf900") is None and fast("中文") is None
    # every other character, alone and inside a word: taken or left, never wrong
    chars = [
        chr(c) for c in range(0x80, 0x40000) if not 0xD800 <= c < 0xE000 and not chr(c).isspace()
    ]
    for words, least in ((chars, 80_000), ([f"a{c}b" for c in chars], 500)):
        taken = [w for w in words if fast(w) is not None]
        assert len(taken) > least
        want = ref.encode_batch(taken, add_special_tokens=False)
        assert [fast(w) for w in taken] == [e.ids for e in want]
    assert fast("Évidemment") == ref.encode("Évidemment", add_special_tokens=False).ids
    for w in handled:
        assert fast(w) == ref.encode(w, add_special_tokens=False).ids, w
    unk = ref.token_to_id("[UNK]")
    assert fast("a" * 101) == [unk] and fast("a" * 100) != [unk]


def test_a_wrong_piece_is_caught(bert):
    """The comparison above can fail: a vocabulary without one of a word's pieces changes
    its ids."""
    ref, _ = bert
    enc = ref.encode("tokenization", add_special_tokens=False)
    assert len(enc.ids) > 1
    vocab = dict(ref.get_vocab())
    del vocab[enc.tokens[-1]]
    fast = _returning(bert_wordpiece(vocab, vocab["[UNK]"]))
    assert fast("tokenization") != enc.ids


def _split(ids: np.ndarray, counts: np.ndarray) -> list[list[int]]:
    off = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=off[1:])
    return [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:], strict=True)]


def test_ascii_wordpiece_equals_tokenizers(bert):
    ref, _ = bert
    vocab = ref.get_vocab()
    words = [w for w in _words() if w.isascii() and w.isprintable() and " " not in w]
    words += [string.punctuation, "A" * 100, "Z9" * 50 + "!", "##", "###ing"]
    assert len(words) > 10_000
    want = [e.ids for e in ref.encode_batch(words, add_special_tokens=False)]
    assert _split(*AsciiWordPiece(vocab, vocab["[UNK]"]).encode(words)) == want
    # the comparison can fail: without one of a word's pieces, its ids change
    enc = ref.encode("tokenization", add_special_tokens=False)
    del vocab[enc.tokens[-1]]
    assert _split(*AsciiWordPiece(vocab, vocab["[UNK]"]).encode(["tokenization"])) != [enc.ids]
    with pytest.raises(ConfigError, match="printable ASCII"):
        AsciiWordPiece(vocab, 0).encode(["ok", "caf\u00e9"])
    with pytest.raises(ConfigError, match="printable ASCII"):
        AsciiWordPiece(vocab, 0).encode(["a b"])
    with pytest.raises(ConfigError, match="vocab must be a non-empty dict"):
        AsciiWordPiece({}, 0)
    with pytest.raises(ConfigError, match="max_chars"):
        AsciiWordPiece(vocab, 0, max_chars=0)


@pytest.mark.parametrize("max_words", [3, 1 << 20])
def test_word_ids_equal_word_by_word(bert, max_words):
    ref, _ = bert
    calls: list[int] = []

    def new_ids(words):
        calls.append(len(words))
        words = words[::-1]  # any order
        lists = [ref.encode(w, add_special_tokens=False).ids for w in words]
        return words, [i for ids in lists for i in ids], [len(ids) for ids in lists]

    cache = WordIds(new_ids, max_words=max_words, max_chars=8)
    texts = [
        ["hello", "world", "tokenization"],
        [],
        ["hello", "pneumonoultramicroscopic", "a", "hello"],
        ["", "x"],
        ["world"],
    ]
    for _ in range(2):
        ids, offsets = cache.ids(texts)
        assert ids.dtype == np.int32 and offsets.dtype == np.int64
        assert offsets[0] == 0 and offsets[-1] == len(ids) and len(offsets) == len(texts) + 1
        for i, words in enumerate(texts):
            want = [t for w in words for t in ref.encode(w, add_special_tokens=False).ids]
            assert ids[offsets[i] : offsets[i + 1]].tolist() == want
        assert not any(len(w) > 8 for w in cache.index)
        assert len(cache) <= max(max_words, 8)
    if max_words > 3:
        # the second batch tokenized only the words longer than 8 characters again
        assert calls == [5, 2, 2]
    empty_ids, empty_off = cache.ids([])
    assert empty_ids.shape == (0,) and empty_off.tolist() == [0]


def test_unit_table_adds_characters_of_their_own():
    codes, runs, offsets = cjk_units(["a\uff0cb\u4e2d c", "\uff0c"], unit_table(["\uff0c"]))
    assert codes.tolist() == [-1, 0xFF0C, -1, 0x4E2D, -1, 0xFF0C]
    assert runs == ["a", "b", "c"] and offsets.tolist() == [0, 5, 6]
    codes, runs, _ = cjk_units(["a\uff0cb"])  # not a unit of its own by default
    assert codes.tolist() == [-1] and runs == ["a\uff0cb"]
    with pytest.raises(ConfigError, match="singles"):
        unit_table(["ab"])
    with pytest.raises(ConfigError, match="singles"):
        unit_table(["\u3000"])
    with pytest.raises(ConfigError, match="unit_table"):
        cjk_units(["x"], np.zeros(3, bool))


def test_bad_arguments_fail_clearly():
    with pytest.raises(ConfigError, match="vocab must be a non-empty dict"):
        bert_wordpiece(["a"], 0)
    with pytest.raises(ConfigError, match="empty"):
        bert_wordpiece({}, 0)
    with pytest.raises(ConfigError, match="unk"):
        bert_wordpiece({"a": 0}, -1)
    with pytest.raises(ConfigError, match="max_chars"):
        bert_wordpiece({"a": 0}, 0, max_chars=0)
    with pytest.raises(ConfigError, match="tokenize_new must be a function"):
        WordIds(None)
    with pytest.raises(ConfigError, match="max_words"):
        WordIds(lambda words: (words, [], []), max_words=0)
    with pytest.raises(ConfigError, match=r"texts\[1\] must be a str"):
        cjk_units(["ok", 3])
    with pytest.raises(ConfigError, match="texts"):
        cjk_units("one text")
