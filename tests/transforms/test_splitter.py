"""SentenceSplitter / TokenTextSplitter: invariants (hypothesis), exact cases, validation."""

from __future__ import annotations

import bisect
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastrag.analysis.tokens import get_encoding
from fastrag.errors import ConfigError
from fastrag.transforms import NodeTransform, SentenceSplitter, TokenTextSplitter
from fastrag.transforms.base import has_spans

ENC = get_encoding()


def ntok(text: str) -> int:
    return len(ENC.encode_ordinary(text))


POOL = [
    "今天天气很好。",
    "我们去公园吧！",
    "你觉得呢？",
    "他说：“好。”",
    "然后走了；",
    "亚硫酸盐是一种食品添加剂，",
    "The cat sat on the mat.",
    "Is it 3.14?",
    "Yes! ",
    "e.g. this",
    "𪚥𠀀龘",
    "😀👍🏽",
    "  ",
    "\n",
    "\n\n",
    "，",
    "word ",
    "don't ",
    "1234567",
    "ÄÖÜß straße.",
    "\t",
    "a" * 30,
    "中" * 40,
    "...",
    " ",
    "(note.)",
    "'quoted.' ",
    "\r\n",
    "“引号！”",
]


def check_invariants(
    text: str, spans: list[tuple[int, int]], chunk_size: int, chunk_overlap: int
) -> None:
    covered = [False] * len(text)
    prev = None
    for s, e in spans:
        chunk = text[s:e]
        assert 0 <= s < e <= len(text)
        assert chunk == chunk.strip() and not chunk.isspace()
        assert ntok(chunk) <= chunk_size, (chunk, ntok(chunk))
        for i in range(s, e):
            covered[i] = True
        if prev is not None:
            assert s > prev[0] and e > prev[1]  # in order, always progressing
            if s < prev[1]:  # the overlap is about chunk_overlap tokens (edge effects: +1)
                assert chunk_overlap > 0
                assert ntok(text[s : prev[1]]) <= chunk_overlap + 2
        prev = (s, e)
    assert all(c or text[i].isspace() for i, c in enumerate(covered))


@st.composite
def texts_and_sizes(draw):
    text = "".join(draw(st.lists(st.sampled_from(POOL), max_size=50)))
    chunk_size = draw(st.integers(4, 80))
    overlap = draw(st.integers(0, chunk_size - 1))
    return text, chunk_size, overlap


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts_and_sizes())
def test_sentence_splitter_invariants(args):
    text, chunk_size, overlap = args
    sp = SentenceSplitter(chunk_size, overlap)
    spans = sp.spans(text)
    check_invariants(text, spans, chunk_size, overlap)
    assert sp(text) == [text[s:e] for s, e in spans]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts_and_sizes())
def test_token_splitter_invariants(args):
    text, chunk_size, overlap = args
    check_invariants(text, TokenTextSplitter(chunk_size, overlap).spans(text), chunk_size, overlap)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200), st.integers(4, 40))
def test_arbitrary_unicode(text, chunk_size):
    """Any text (lone surrogates, controls, combining marks): limits and coverage hold."""
    spans = SentenceSplitter(chunk_size, chunk_size // 4).spans(text)
    clean = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    check_invariants(clean, spans, chunk_size, chunk_size // 4)


def test_sentences_kept_whole():
    text = "今天天气很好。我们去公园吧！你觉得呢？"
    assert [ntok(s) for s in ["今天天气很好。", "我们去公园吧！", "你觉得呢？"]] == [9, 8, 7]
    assert SentenceSplitter(12, 0)(text) == ["今天天气很好。", "我们去公园吧！", "你觉得呢？"]
    assert SentenceSplitter(17, 0)(text) == ["今天天气很好。我们去公园吧！", "你觉得呢？"]
    assert SentenceSplitter(24, 0)(text) == [text]
    # no sentence fits in 7 tokens of overlap: the overlap falls back to token boundaries
    assert SentenceSplitter(15, 7)(text) == [
        "今天天气很好。",
        "天气很好。我们去公园吧！",
        "去公园吧！你觉得呢？",
    ]
    assert ntok("天气很好。") <= 7 and ntok("去公园吧！") <= 7


def test_overlap_on_sentence_boundaries():
    text = "A b c. D e f. G h i. J k l. M n o."  # 4 tokens per sentence
    assert ntok("A b c.") == 4
    chunks = SentenceSplitter(12, 4)(text)
    assert chunks == ["A b c. D e f. G h i.", "G h i. J k l. M n o."]
    assert SentenceSplitter(12, 8)(text) == [
        "A b c. D e f. G h i.",
        "D e f. G h i. J k l.",
        "G h i. J k l. M n o.",
    ]
    # a sentence (4 tokens) does not fit in 3 tokens of overlap: word boundaries instead
    assert SentenceSplitter(12, 3)(text) == ["A b c. D e f. G h i.", "h i. J k l. M n o."]


def test_closing_quotes_stay_with_sentence():
    text = "他说：“好。”然后走了。他说：“好。”然后走了。"
    assert SentenceSplitter(10, 0)(text) == [
        "他说：“好。”",
        "然后走了。",
        "他说：“好。”",
        "然后走了。",
    ]
    text = 'He said "Stop." Then he left. Done.'
    chunks = SentenceSplitter(8, 0)(text)
    assert chunks[0] == 'He said "Stop."'


def test_decimal_point_is_not_a_sentence_end():
    text = "Pi is 3.14 and e is 2.71 today. Next one here."
    assert SentenceSplitter(16, 0)(text) == ["Pi is 3.14 and e is 2.71 today.", "Next one here."]


def test_newlines_are_sentence_ends():
    text = "one two three\nfour five six\nseven"
    assert ntok("one two three\nfour") == 5 and ntok("four five six\nseven") == 5
    # the line end wins over a later word boundary that would also fit
    assert SentenceSplitter(5, 0)(text) == ["one two three", "four five six\nseven"]
    assert SentenceSplitter(4, 0)(text) == ["one two three", "four five six", "seven"]


def test_long_sentence_cut_token_exactly():
    text = "这是一个非常长的句子没有任何标点符号" * 20  # one 300+ token sentence
    chunks = SentenceSplitter(50, 0)(text)
    assert "".join(chunks) == text  # no overlap: the chunks partition the text
    assert all(ntok(c) <= 50 for c in chunks)
    assert sum(ntok(c) for c in chunks) >= ntok(text)
    assert min(ntok(c) for c in chunks[:-1]) >= 45  # packed close to the budget


def test_multi_token_characters_never_split():
    text = "𪚥" * 30  # each character is several byte-level tokens
    assert ntok("𪚥") >= 2
    spans = SentenceSplitter(5, 0).spans(text)
    assert "".join(text[s:e] for s, e in spans) == text
    assert all(ntok(text[s:e]) <= 5 for s, e in spans)


def test_repeated_sentences_offsets_come_from_the_plan():
    text = "重复的句子。" * 12
    sp = SentenceSplitter(14, 0)
    spans = sp.spans(text)
    assert spans == [(12 * i, 12 * i + 12) for i in range(6)]  # 2 sentences (14 tokens) each
    assert all(text[s:e] == "重复的句子。重复的句子。" for s, e in spans)
    spans = SentenceSplitter(14, 7).spans(text)
    assert spans[:3] == [(0, 12), (6, 18), (12, 24)]  # one sentence of overlap
    check_invariants(text, spans, 14, 7)


def test_whitespace_and_empty():
    sp = SentenceSplitter(16, 2)
    assert sp.spans("") == [] and sp.spans("  \n\t ") == []
    text = "  hello world.  \n\n  next.  "
    spans = sp.spans(text)
    assert [text[s:e] for s, e in spans] == ["hello world.  \n\n  next."]
    assert spans == [(2, 25)]


def test_batch_equals_single_and_threads_agree():
    rng = random.Random(3)
    texts = ["".join(rng.choice(POOL) for _ in range(rng.randint(0, 80))) for _ in range(30)]
    single = [SentenceSplitter(32, 6).spans(t) for t in texts]
    assert SentenceSplitter(32, 6, num_threads=1).batch_spans(texts) == single
    assert SentenceSplitter(32, 6, num_threads=4).batch_spans(texts) == single
    starts, ends = SentenceSplitter(32, 6).batch_span_arrays(texts)[5]
    assert list(zip(starts.tolist(), ends.tolist(), strict=True)) == single[5]


def test_token_splitter_matches_token_windows():
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "data", "splitter", "token", "x", "42"]
    text = " ".join(rng.choice(words) for _ in range(300))
    toks = ENC.encode_ordinary(text)
    offs = [0]
    for t in toks:
        offs.append(offs[-1] + len(ENC.decode_single_token_bytes(t)))  # ASCII: bytes == chars
    size, overlap = 20, 5
    expected, i = [], 0
    while True:  # windows of `size` tokens, stripped; the next starts `overlap` tokens back
        j = min(i + size, len(toks))
        while True:  # a stripped window can count more tokens on its own ("x" vs " x")
            s, e = offs[i], offs[j]
            while text[s].isspace():
                s += 1
            while text[e - 1].isspace():
                e -= 1
            if ntok(text[s:e]) <= size:
                break
            j -= 1
        expected.append((s, e))
        if j == len(toks):
            break
        i = bisect.bisect_left(offs, e) - overlap  # tokens starting before the end, less overlap
        while text[offs[i] : offs[i + 1]].isspace():  # a window never starts with a blank token
            i += 1
    assert TokenTextSplitter(size, overlap).spans(text) == expected


def test_cmrc_paragraphs_limits_and_coverage():
    from fastrag.datasets import load_cmrc2018_dev  # byte-identical to ../shared/data's copy

    data = load_cmrc2018_dev()
    paras = list(dict.fromkeys(p["context"] for a in data["data"] for p in a["paragraphs"]))
    text = "\n".join(paras[:120])
    for size, overlap in [(128, 12), (1024, 100)]:
        spans = SentenceSplitter(size, overlap).spans(text)
        check_invariants(text, spans, size, overlap)
        counts = [ntok(text[s:e]) for s, e in spans]
        assert sum(counts) / len(counts) > 0.7 * size  # well packed
        # most chunks end at a sentence end or a paragraph end
        ends = sum(
            text[e - 1] in "。！？；”」）" or e == len(text) or text[e] == "\n" for _, e in spans
        )
        assert ends / len(spans) > 0.8


def test_validation():
    with pytest.raises(
        ConfigError, match=r"chunk_size must be an int >= 1 \(tokens\), got 0; use e.g. 1024"
    ):
        SentenceSplitter(0, 0)
    with pytest.raises(ConfigError, match=r"chunk_overlap must be an int >= 0 \(tokens\), got -1"):
        SentenceSplitter(10, -1)
    with pytest.raises(
        ConfigError,
        match=r"chunk_overlap=10 must be smaller than "
        r"chunk_size=10; lower chunk_overlap",
    ):
        SentenceSplitter(10, 10)
    with pytest.raises(
        ConfigError, match=r"chunk_size must be an int >= 1 \(tokens\), got str '128'"
    ):
        SentenceSplitter("128")
    with pytest.raises(
        ConfigError, match=r"chunk_size must be an int >= 1 \(tokens\), got bool True"
    ):
        TokenTextSplitter(True, 0)
    with pytest.raises(
        ConfigError, match=r"num_threads must be None \(all cores\) or an int >= 1, got 0"
    ):
        SentenceSplitter(10, 2, num_threads=0)
    with pytest.raises(ConfigError, match="not available offline"):
        SentenceSplitter(10, 2, encoding="no_such_encoding")
    sp = SentenceSplitter(10, 2)
    with pytest.raises(ConfigError, match="splits str, got bytes"):
        sp.spans(b"abc")
    with pytest.raises(ConfigError, match="got one str"):
        sp.batch_spans("abc")
    with pytest.raises(ConfigError, match=r"texts\[1\] must be a str, got int 1"):
        sp.batch_spans(["a", 1])


def test_identity_and_contract():
    a = SentenceSplitter(128, 12)
    assert a.identity() == SentenceSplitter(128, 12, num_threads=2).identity()
    assert a.identity() != SentenceSplitter(128, 13).identity()
    assert a.identity() != SentenceSplitter(256, 12).identity()
    assert a.identity() != TokenTextSplitter(128, 12).identity()
    assert "chunk_size=128" in a.identity() and "chunk_overlap=12" in a.identity()
    assert isinstance(a, NodeTransform) and has_spans(a) and has_spans(TokenTextSplitter(8, 1))
    assert SentenceSplitter().chunk_size == 1024 and SentenceSplitter().chunk_overlap == 200
    import pickle

    b = pickle.loads(pickle.dumps(a))
    assert b.identity() == a.identity() and b.spans("一句。两句。") == a.spans("一句。两句。")


@pytest.mark.parametrize(
    ("cls", "size", "overlap"),
    [(SentenceSplitter, 256, 32), (SentenceSplitter, 48, 8), (TokenTextSplitter, 100, 20)],
)
def test_a_long_text_planned_window_by_window_equals_the_whole_plan(
    monkeypatch, cls, size, overlap
):
    """Texts over WINDOW_CHARS are planned in windows (bounded memory); the chunks are the
    ones the whole text gives, for windows of any size, on mixed prose, CJK and log lines."""
    import fastrag.transforms.sentence as sentence_mod
    from fastrag.datasets import load_cmrc2018_dev

    rng = random.Random(7)
    paras = [p["context"] for a in load_cmrc2018_dev()["data"][:20] for p in a["paragraphs"]]
    lines = [
        f'10.0.{rng.randrange(256)}.{rng.randrange(256)} - - "GET /api/v1/items/'
        f"{rng.randrange(10**6)}"
        f'?page={rng.randrange(40)} HTTP/1.1" {rng.choice((200, 404, 500))} {rng.randrange(10**5)}'
        for _ in range(600)
    ]
    mixed = [rng.choice(POOL) for _ in range(3000)]
    text = "\n".join(paras + lines) + "".join(mixed) + "\n  indented\n\n" + "x" * 3000
    sp = cls(chunk_size=size, chunk_overlap=overlap)
    whole = sp.spans(text)
    assert len(text) <= sentence_mod.WINDOW_CHARS and len(whole) > 100
    for window in (700, 5000, 60_000):
        monkeypatch.setattr(sentence_mod, "WINDOW_CHARS", window)
        assert sp.spans(text) == whole
