"""Traditional Chinese in ``bm25``: which texts read as Traditional; ``han_traditional="bigrams"``
(the default: characters and pairs, as ``bm25_cjk``) and ``"simplified"`` (cut as its
Simplified forms, tokens in its own characters); Simplified and Japanese text untouched; the
table is OpenCC's."""

from __future__ import annotations

import numpy as np
import pytest

from fastrag.analysis import MixedAnalyzer, get_analyzer
from fastrag.analysis.hant import (
    HAN_HI,
    HAN_LO,
    TABLE,
    build_table,
    han_tables,
    is_traditional,
    segmentation_view,
    table_tag,
    to_simplified,
    traditional_han,
)
from fastrag.analysis.mixed import mixed_classes
from fastrag.analysis.spans import texts_to_codepoints
from fastrag.analysis.wordseg import SEG_RANGES
from fastrag.errors import ConfigError


def _traditional(text: str) -> str:
    """``text`` with each character the table reaches written in a Traditional form that maps
    back to it (so ``to_simplified`` restores ``text``)."""
    back: dict[str, str] = {}
    for t, s in sorted(han_tables().trans.items()):
        back.setdefault(s, chr(t))
    return "".join(back.get(ch, ch) for ch in text)


_CORPUS_SAMPLE = ["修改文章链接的网址格式", "著作权", "在空文件夹里建立新的网站", "plain", "说明书"]


def test_the_table_maps_one_han_character_to_one():
    tables = han_tables()
    assert len(tables.trans) == 2853 and table_tag() == "opencc-1.4.2-chars"
    assert all(HAN_LO <= ord(s) <= HAN_HI and len(s) == 1 for s in tables.trans.values())
    assert to_simplified("在空資料夾裡建立新的網站") == "在空资料夹里建立新的网站"
    assert to_simplified("在空文件夹里 abc 東京タワー") == "在空文件夹里 abc 东京タワー"
    assert int((tables.evidence > 0).sum()) == 2847 and int((tables.evidence < 0).sum()) == 2597


def test_the_shipped_table_is_what_opencc_gives(tmp_path):
    opencc = pytest.importorskip("opencc")
    assert table_tag() == f"opencc-{opencc.__version__}-chars"
    out = tmp_path / "han_t2s.txt"
    assert build_table(out) == 2853
    assert out.read_bytes() == TABLE.read_bytes()


def test_which_texts_read_as_traditional():
    assert is_traditional("修改文章連結的網址格式")
    assert is_traditional("在空資料夾裡建立新的 Hexo 網站")
    assert not is_traditional("修改文章链接的网址格式")
    assert not is_traditional("著作权")  # 著 (Traditional-only by the table) against 权
    assert not is_traditional("")
    # Japanese writes many Traditional-only characters (東, 語, 開): kana says it is not Chinese
    assert is_traditional("東京語開") and not is_traditional("東京語を開く")
    assert not is_traditional("資料夾ｶ") and is_traditional("資料夾・資料")  # ･ U+30FB: no letter
    texts = ["修改文章連結的網址格式", "修改文章链接的网址格式", "plain words"]
    _, cps, off = texts_to_codepoints(texts)
    view = segmentation_view(cps, off, mixed_classes())
    assert view.shape == cps.shape and view is not cps
    changed = np.flatnonzero(view != cps)
    assert changed.size and (changed < off[1]).all()  # only the Traditional text
    joined = "".join(map(chr, view.tolist()))
    assert joined.split("\n")[:3] == ["修改文章连结的网址格式", texts[1], texts[2]]
    _, cps, off = texts_to_codepoints(texts[1:])
    assert segmentation_view(cps, off, mixed_classes()) is cps
    texts = ["東京語を開く", "資料夾 abc", "", "资料夹", "資料夾・資料", "資料ｶ", "資料夾ー夾x夾"]
    _, cps, off = texts_to_codepoints(texts)
    pos = traditional_han(cps, off, mixed_classes()).tolist()
    # Han outside runs wordseg cuts (``・`` and ``ー`` are in its ranges), in order
    assert [chr(cps[p]) for p in pos] == list("資料夾夾")
    assert pos == sorted(pos)
    texts = [_traditional(t) for t in _CORPUS_SAMPLE] + ["東京語を開く", "資料夾"] * 3
    _, cps, off = texts_to_codepoints(texts)
    text_of = np.searchsorted(off, traditional_han(cps, off, mixed_classes()), side="right") - 1
    assert sorted(set(text_of.tolist())) == [i for i, t in enumerate(texts) if is_traditional(t)]


def test_a_traditional_text_is_cut_as_its_simplified_original(cmrc):
    contexts, questions, _ = cmrc
    an = get_analyzer("bm25", stopwords=None, han_traditional="simplified")  # stopwords: Simplified
    # kana (a run with any goes to MeCab as written) and Traditional texts left out
    originals = [
        t
        for t in contexts[:150] + questions[:400]
        if not is_traditional(t) and not any(a <= ord(c) <= b for c in t for a, b in SEG_RANGES)
    ]
    pairs = [(t, _traditional(t)) for t in originals]
    pairs = [(s, t) for s, t in pairs if s != t and to_simplified(t) == s and is_traditional(t)]
    assert len(pairs) > 500
    for simple, trad in pairs:
        tokens = an(trad)
        assert [to_simplified(w) for w in tokens] == an(simple)
        han = [w for w in tokens if any(HAN_LO <= ord(c) <= HAN_HI for c in w)]
        assert han and all(w in trad for w in han)  # the text's own characters


@pytest.mark.parametrize("mode", ["bigrams", "simplified"])
def test_the_regex_path_cuts_traditional_text_as_the_kernel(cmrc, mode):
    contexts, questions, _ = cmrc
    an = MixedAnalyzer(han_traditional=mode)
    texts = [_traditional(t).lower() for t in contexts[:100] + questions[:200]]
    texts += ["在空資料夾裡建立新的 hexo 網站", "修改文章链接的网址格式", "東京タワーに行きました"]
    texts += ["", "㐀資料夾㐀㐁 x", "資料夾\n", "a 資 b 料"]  # rarer ideographs next to Han
    kernel = an._spans(texts)
    python = an._spans_python(texts)
    assert kernel[0] == python[0]
    assert kernel[1].tolist() == python[1].tolist()
    assert kernel[2].tolist() == python[2].tolist()


def test_traditional_text_gives_characters_and_pairs_as_bm25_cjk(cmrc):
    contexts, questions, _ = cmrc
    an = get_analyzer("bm25", stopwords=None)  # the default han_traditional="bigrams"
    cjk = get_analyzer("bm25_cjk")
    texts = [_traditional(t) for t in contexts[:60] + questions[:200]]
    texts = [t for t in texts if is_traditional(t)]
    assert len(texts) > 200
    for text in texts:
        tokens = an(text)
        # bm25_cjk's Han characters, then its pairs of adjacent Han characters, in text order
        ref = [w for w in cjk(text) if all(HAN_LO <= ord(c) <= HAN_HI for c in w)]
        han_tokens = [w for w in tokens if all(HAN_LO <= ord(c) <= HAN_HI for c in w)]
        assert han_tokens == [w for w in ref if len(w) == 1] + [w for w in ref if len(w) == 2]


def test_simplified_text_tokens_are_unchanged(cmrc):
    contexts, questions, _ = cmrc
    texts = contexts[:200] + questions[:500]
    off = get_analyzer("bm25", han_traditional=None)
    for mode in ("bigrams", "simplified"):
        on = get_analyzer("bm25", han_traditional=mode)
        assert [on(t) for t in texts] == [off(t) for t in texts]


def test_japanese_text_tokens_are_unchanged():
    texts = ["東京語を開く設定ファイル", "環境変数を設定する。設定方法", "日本語の説明書"]
    # "simplified" looks words up in either form (設定 is 设定) wherever they are
    on, off = get_analyzer("bm25"), get_analyzer("bm25", han_traditional=None)
    assert [on(t) for t in texts] == [off(t) for t in texts]


def test_traditional_words_and_the_option_in_the_identity():
    on, off = (
        get_analyzer("bm25", han_traditional=True),
        get_analyzer("bm25", han_traditional=False),
    )
    text = "在空資料夾裡建立新的網站"
    assert on(text)[:5] == ["空", "資料夾", "資料", "裡", "建立"]
    assert "空資料" in off(text) and "空資料" not in on(text)
    words = get_analyzer("bm25", han_bigrams=False, han_traditional=True)
    assert words("用外掛程式產生額外的頁面") == ["外掛", "程式", "產生", "額外", "頁面"]
    assert get_analyzer("bm25", han_bigrams=False)("用外掛程式產生額外的頁面") == list(
        "外掛程式產生額外頁面"
    )
    assert get_analyzer("bm25", han_bigrams=False, han_traditional=None)(
        "用外掛程式產生額外的頁面"
    ) == [
        "外掛",
        "外",
        "掛",
        "程式",
        "產生額",
        "產",
        "生",
        "額",
        "外",
        "頁",
        "面",
    ]
    assert get_analyzer("bm25")("在空資料夾裡建立新的網站")[:4] == ["空", "資", "料", "夾"]
    assert on.options()["han_traditional"] == "simplified:opencc-1.4.2-chars"
    assert get_analyzer("bm25").options()["han_traditional"] == "bigrams:opencc-1.4.2-chars"
    assert "han_traditional" not in off.options()  # off: the identity stores had before
    assert get_analyzer("bm25", han_traditional=None).identity() == off.identity()
    assert len({on.identity(), off.identity(), get_analyzer("bm25").identity()}) == 3
    with pytest.raises(ConfigError, match="han_traditional"):
        get_analyzer("bm25", han_traditional="yes")
