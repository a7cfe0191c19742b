"""Token-exact packing: counts, fewest prompts, exact splits, truncation, errors."""

from __future__ import annotations

import random
from collections import deque

import pytest
from reference import min_ordered_packs_reference

from fastrag.analysis.tokens import get_encoding
from fastrag.errors import ConfigError
from fastrag.synth.packing import Piece, PromptHelper

ENC = get_encoding()


def ntok(text: str) -> int:
    return len(ENC.encode_ordinary(text))


def english(rng: random.Random, n_words: int) -> str:
    words = [
        "the",
        "river",
        "city",
        "school",
        "music",
        "north",
        "energy",
        "bridge",
        "law",
        "of",
        "and",
        "to",
        "in",
        "was",
    ]
    sents, cur = [], []
    for _ in range(n_words):
        cur.append(rng.choice(words))
        if len(cur) >= rng.randint(6, 14):
            sents.append(" ".join(cur).capitalize() + ".")
            cur = []
    if cur:
        sents.append(" ".join(cur).capitalize() + ".")
    return " ".join(sents)


CHINESE = (
    "《战国无双3》是由光荣和ω-force开发的战国无双系列的正统第三续作。本作以三大故事为主轴，"
    "分别是以武田信玄等人为主的《关东三国志》，织田信长等人为主的《战国三杰》，石田三成等人为主"
    "的《关原的年轻武者》，丰富游戏内的剧情。此部份专门介绍角色，欲知武器情报、奥义字或擅长攻击"
    "类型等，请至战国无双系列1.由于乡里大辅先生因故去世，不得不寻找其他声优接手。"
)


def test_counts_match_tiktoken_and_cache():
    helper = PromptHelper()
    texts = ["hello world", CHINESE, "", "a b c " * 50] + [f"t{i}" for i in range(12)]
    assert helper.count_batch(texts) == [ntok(t) for t in texts]
    assert helper.count(CHINESE) == ntok(CHINESE)
    assert helper._cache[CHINESE] == ntok(CHINESE)
    assert helper.separator_tokens == ntok("\n\n") == 1
    pieces = helper.prepare(["  a  ", "", " \n", "b"])
    assert pieces == [Piece("a", 1), Piece("b", 1)]
    assert helper.prepare(["x y"], exact=False) == [Piece("x y", -1)]
    assert helper.counted(Piece("x y", -1)) == Piece("x y", 2)


@pytest.mark.parametrize("seed", range(6))
def test_pack_is_fewest_prompts_and_within_budget(seed):
    rng = random.Random(seed)
    helper = PromptHelper(context_window=4096, num_output=256)
    chunks = [english(rng, rng.randint(5, 120)) for _ in range(rng.randint(1, 40))]
    budget = rng.randint(200, 700)
    pieces = helper.prepare(chunks)
    packed = helper.pack(pieces, budget)
    sizes = [p.n_tokens for p in pieces]
    assert len(packed) == min_ordered_packs_reference(sizes, helper.separator_tokens, budget)
    for p in packed:
        assert ntok(p.text) <= p.n_tokens <= budget  # the sum of parts bounds the real count
    # order and content preserved, nothing duplicated
    assert "\n\n".join(p.text for p in packed) == "\n\n".join(p.text for p in pieces)


def test_take_uses_exact_budget_per_prompt():
    helper = PromptHelper()
    pieces = [Piece(f"chunk {i}", 100) for i in range(10)]
    q = deque(pieces)
    first = helper.take(q, 301)  # 100 + 1 + 100 + 1 + 100 = 302 > 301
    assert first.text == "chunk 0\n\nchunk 1" and first.n_tokens == 201
    second = helper.take(q, 302)
    assert second.text == "chunk 2\n\nchunk 3\n\nchunk 4" and second.n_tokens == 302
    assert len(q) == 5


def test_split_is_token_exact_on_char_boundaries_chinese():
    helper = PromptHelper(chunk_overlap=0)
    text = CHINESE * 6
    for budget in (17, 50, 123):
        parts = helper.split(text, budget)
        assert all(0 < p.n_tokens <= budget for p in parts)
        assert all(p.n_tokens == ntok(p.text) for p in parts)
        assert "".join(p.text for p in parts) == text  # no overlap: exact cover
        assert not any("\ufffd" in p.text for p in parts)  # never cut inside a character


def test_split_prefers_sentence_ends_and_overlaps():
    helper = PromptHelper(chunk_overlap=0)
    rng = random.Random(3)
    text = english(rng, 900)
    parts = helper.split(text, 120)
    assert all(p.n_tokens <= 120 for p in parts)
    # every cut but the last lands right after a full stop (one is always in reach here)
    assert all(p.text.endswith(".") for p in parts[:-1])
    assert "".join(p.text for p in parts) == text
    lapped = PromptHelper(chunk_overlap=20, sentence_aware=False).split(text, 120)
    ids = ENC.encode_ordinary(text)
    assert lapped[0].n_tokens == 120
    assert lapped[0].text == ENC.decode(ids[:120])
    assert lapped[1].text.startswith(ENC.decode(ids[100:105]))  # 20 tokens repeated
    assert len(lapped) > len(parts)


def test_take_splits_only_an_oversized_chunk():
    helper = PromptHelper(chunk_overlap=0)
    big = english(random.Random(5), 600)
    small = Piece("small chunk.", ntok("small chunk."))
    q = deque([Piece(big, ntok(big)), small])
    head = helper.take(q, 200)
    assert head.n_tokens <= 200 and big.startswith(head.text)
    # the rest of the big chunk comes next, then the small one (packed with the tail)
    rest = list(q)
    assert rest[-1] == small
    assert head.text + "".join(p.text for p in rest[:-1]) == big


def test_default_split_overlaps_a_tenth_as_llamaindex_does():
    """An oversized chunk is split with about a tenth of a piece repeated between consecutive
    pieces (LlamaIndex's chunk_overlap_ratio=0.1), so a sentence at a cut keeps its context."""
    big = " ".join(f"Sentence number {i} is here." for i in range(200))
    parts = PromptHelper().split(big, 150)
    exact = PromptHelper(chunk_overlap=0).split(big, 150)
    assert "".join(p.text for p in exact) == big
    assert len(parts) > len(exact) and all(p.n_tokens <= 150 for p in parts)
    for a, b in zip(parts, parts[1:], strict=False):
        assert a.text.endswith(b.text[:40]) or b.text[:40] in a.text  # starts inside a
        assert big.index(b.text) < big.index(a.text) + len(a.text)
    assert big.startswith(parts[0].text) and big.endswith(parts[-1].text)


def test_truncate_reports_dropped_tokens():
    helper = PromptHelper()
    rng = random.Random(1)
    chunks = [english(rng, 80) for _ in range(10)]
    pieces = helper.prepare(chunks)
    total = helper.joined_tokens(pieces)
    piece, dropped = helper.truncate(pieces, 300)
    assert piece.n_tokens <= 300 and ntok(piece.text) <= 300
    assert dropped == total - piece.n_tokens > 0
    assert "\n\n".join(chunks).startswith(piece.text)
    whole, none = helper.truncate(pieces, 10_000)
    assert none == 0 and whole.text == "\n\n".join(chunks)


def test_budget_and_argument_errors():
    helper = PromptHelper(context_window=1000, num_output=200, padding=10)
    assert helper.budget(90) == 700
    assert helper.room == 790
    with pytest.raises(ConfigError, match=r"no room for context.*context_window=1000"):
        helper.budget(800)
    with pytest.raises(ConfigError, match="num_output=500 leaves no room"):
        PromptHelper(context_window=500, num_output=500)
    with pytest.raises(ConfigError, match=r"chunk_overlap must be an int >= 0, got -1"):
        PromptHelper(chunk_overlap=-1)
    with pytest.raises(ConfigError, match="tokenizer must be"):
        PromptHelper(tokenizer=3.5)
    with pytest.raises(ConfigError, match="budget=0 must be positive"):
        helper.split("text", 0)
