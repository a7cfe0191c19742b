"""Analyzers: exact tokens, stopwords, options, identity, pickling, registry, errors."""

from __future__ import annotations

import pickle
import sys

import pytest

from fastrag.analysis import (
    Analyzer,
    CallableAnalyzer,
    ChineseAnalyzer,
    CJKAnalyzer,
    EnglishAnalyzer,
    get_analyzer,
    list_analyzers,
    load_stopwords,
    register_analyzer,
)
from fastrag.analysis import registry as registry_mod
from fastrag.errors import ConfigError, MissingExtraError

MIXED = "《战国无双3》是由光荣和ω-force开发的，iPhone6售价3.14%。乡里大辅先生因故去世 The DOG runs"


def upper_split(text: str) -> list[str]:  # module level: picklable
    return text.upper().split()


# ------------------------------------------------------------------------------ bm25_chinese


def test_chinese_exact_tokens():
    an = get_analyzer("bm25_chinese")
    assert an(MIXED) == [
        "战国",
        "无双",
        "3",
        "光荣",
        "ω",
        "force",
        "开发",
        "iphone6",
        "售价",
        "3.14%",
        "乡里",
        "大辅",
        "大",
        "辅",
        "因故",
        "去世",
        "dog",
        "runs",
    ]
    # HMM-invented word "大辅" is kept and backed off to its characters; dictionary words
    # ("乡里", "去世") are not split; stopwords 是/由/和/的/先生/the are gone
    assert an("") == []
    assert an("，。！？ ……") == []
    assert an("北京大学的学生") == ["北京大学", "学生"]


def test_chinese_options_change_tokens():
    plain = ChineseAnalyzer(oov_chars=False)
    assert plain("乡里大辅先生因故去世") == ["乡里", "大辅", "因故", "去世"]
    nohmm = ChineseAnalyzer(hmm=False, oov_chars=False)
    assert nohmm("乡里大辅先生因故去世") == ["乡里", "大", "辅", "因故", "去世"]
    assert ChineseAnalyzer(HMM=False)("乡里大辅") == nohmm("乡里大辅")
    search = ChineseAnalyzer(cut_for_search=True, stopwords=None)
    assert search("中华人民共和国") == ["中华", "华人", "人民", "共和", "共和国", "中华人民共和国"]
    cased = ChineseAnalyzer(lowercase=False, stopwords=None)
    assert cased("iPhone和Android") == ["iPhone", "和", "Android"]


def test_chinese_stopwords_default_none_custom():
    text = "我的朋友是谁"
    assert ChineseAnalyzer()(text) == ["朋友"]
    assert ChineseAnalyzer(stopwords=None)(text) == ["我", "的", "朋友", "是", "谁"]
    assert ChineseAnalyzer(stopwords={"朋友"})(text) == ["我", "的", "是", "谁"]
    # custom lists are lowercased like the tokens
    assert ChineseAnalyzer(stopwords=["DOG"])("the dog") == ["the"]
    zh, en = load_stopwords("zh"), load_stopwords("en")
    assert len(zh) == 841 and len(en) == 33
    assert ChineseAnalyzer().stopwords == zh | en
    assert ChineseAnalyzer(stopwords="zh").stopwords == zh


def test_chinese_fast_segmenter_equals_jieba_segmenter():
    fast = ChineseAnalyzer(segmenter="fast")
    slow = ChineseAnalyzer(segmenter="jieba")
    for text in (MIXED, "C++和C#是编程语言\r\n第二行", "ＡＢＣ１２３，𠀀𠀁中文"):
        assert fast(text) == slow(text)
    assert fast.identity() == slow.identity()  # same tokens, same fingerprint


def test_chinese_bad_options():
    with pytest.raises(ConfigError, match=r"hmm must be True or False, got str 'yes'"):
        ChineseAnalyzer(hmm="yes")
    with pytest.raises(ConfigError, match=r"segmenter must be 'auto', 'fast' or 'jieba'"):
        ChineseAnalyzer(segmenter="pkuseg")
    with pytest.raises(ConfigError, match=r"stopwords must be strings, got 3"):
        ChineseAnalyzer(stopwords=["a", 3])
    with pytest.raises(
        ConfigError, match=r"no shipped stopword list 'fr'; shipped lists: en, en_nltk, zh"
    ):
        ChineseAnalyzer(stopwords="fr")
    with pytest.raises(ConfigError, match=r"needs a str, got int"):
        ChineseAnalyzer()(5)


# ------------------------------------------------------------------------------ bm25_cjk


def test_cjk_exact_tokens():
    an = get_analyzer("bm25_cjk")
    assert an("北京大学") == ["北", "北京", "京", "京大", "大", "大学", "学"]
    assert an("我 iPhone6 售价3.14%!") == [
        "我",
        "iphone6",
        "售",
        "售价",
        "价",
        "3",
        "14",
    ]
    assert an("ひらがなとカタカナ") == [
        "ひ",
        "ひら",
        "ら",
        "らが",
        "が",
        "がな",
        "な",
        "なと",
        "と",
        "とカ",
        "カ",
        "カタ",
        "タ",
        "タカ",
        "カ",
        "カナ",
        "ナ",
    ]
    assert an("한국어 text_1") == ["한", "한국", "국", "국어", "어", "text_1"]
    assert an("") == [] and an("，。") == []
    assert CJKAnalyzer(stopwords={"的"})("我的书") == ["我", "我的", "的书", "书"]


# ------------------------------------------------------------------------------ bm25 (English)


def test_english_tokens_stopwords_stemming():
    an = get_analyzer("bm25_english", stemmer=None)
    assert an("The quick brown foxes are RUNNING, aren't they?") == [
        "quick",
        "brown",
        "foxes",
        "running",
        "aren",
        "t",
    ]
    stem = get_analyzer("bm25_english", stemmer="english")
    assert stem("The quick brown foxes are RUNNING") == ["quick", "brown", "fox", "run"]
    assert get_analyzer("bm25_english", stopwords=None)("The end") == ["the", "end"]
    assert stem.identity() != an.identity()
    # the default ("auto") stems with PyStemmer, a core dependency, and names it in its identity
    default = get_analyzer("bm25_english")
    assert default.stemmer == "english" and default == stem
    assert default("The quick brown foxes are RUNNING") == ["quick", "brown", "fox", "run"]
    assert get_analyzer("bm25_english", stemmer="auto").identity() == stem.identity()


def test_english_stemmer_errors(monkeypatch):
    with pytest.raises(ConfigError, match=r"unknown Snowball stemmer language 'klingon'"):
        EnglishAnalyzer(stemmer="klingon")
    monkeypatch.setitem(sys.modules, "Stemmer", None)  # as if PyStemmer were not installed
    with pytest.raises(
        MissingExtraError, match=r"needs the optional package 'PyStemmer'.*fastrag-engine\[stem\]"
    ):
        EnglishAnalyzer(stemmer="english")
    assert EnglishAnalyzer(stemmer=None)("Dogs") == ["dogs"]  # no stemmer, no PyStemmer needed
    auto = EnglishAnalyzer()  # "auto" without PyStemmer: no stemming, no error
    assert auto.stemmer is None and auto("Dogs") == ["dogs"]
    assert auto.identity() == EnglishAnalyzer(stemmer=None).identity()


# ------------------------------------------------------------------------------ identity, pickle


def test_identity_tracks_options():
    ids = {
        get_analyzer("bm25_chinese").identity(),
        get_analyzer("bm25_chinese", hmm=False).identity(),
        get_analyzer("bm25_chinese", cut_for_search=True).identity(),
        get_analyzer("bm25_chinese", oov_chars=False).identity(),
        get_analyzer("bm25_chinese", stopwords=None).identity(),
        get_analyzer("bm25_chinese", stopwords={"的"}).identity(),
        get_analyzer("bm25_chinese", stopwords={"了"}).identity(),
        get_analyzer("bm25_cjk").identity(),
        get_analyzer("bm25").identity(),
    }
    assert len(ids) == 9
    assert get_analyzer("bm25_chinese").identity() == ChineseAnalyzer().identity()
    assert get_analyzer("bm25_chinese") == ChineseAnalyzer()
    assert '"analyzer":"bm25_chinese"' in ChineseAnalyzer().identity()


@pytest.mark.parametrize(
    "an",
    [
        ChineseAnalyzer(),
        ChineseAnalyzer(segmenter="jieba", hmm=False, stopwords={"开发"}),
        CJKAnalyzer(),
        EnglishAnalyzer(stemmer="english"),
        CallableAnalyzer(upper_split),
    ],
    ids=["chinese", "chinese-jieba", "cjk", "english-stem", "callable"],
)
def test_analyzers_pickle(an):
    before = an(MIXED)
    blob = pickle.dumps(an)
    assert len(blob) < 50_000  # options only: no dictionary, no caches
    back = pickle.loads(blob)
    assert back(MIXED) == before
    assert back.identity() == an.identity()
    assert back.name == an.name


# ------------------------------------------------------------------------------ registry


def test_registry_and_callables():
    assert {"bm25", "bm25_chinese", "bm25_cjk"} <= set(list_analyzers())
    wrapped = get_analyzer(upper_split)
    assert isinstance(wrapped, Analyzer) and wrapped("a b") == ["A", "B"]
    assert wrapped.name == "upper_split"
    assert "test_analyzers.upper_split" in wrapped.identity()
    an = ChineseAnalyzer()
    assert get_analyzer(an) is an

    register_analyzer("test_upper", lambda: upper_split)
    register_analyzer("test_ws", lambda sep=" ": lambda t: t.split(sep))
    try:
        assert get_analyzer("test_upper")("x y") == ["X", "Y"]
        assert get_analyzer("test_upper").name == "test_upper"
        assert get_analyzer("test_ws", sep=",")("a,b") == ["a", "b"]
        # factory options are part of the fingerprint
        assert get_analyzer("test_ws", sep=",").identity() != get_analyzer("test_ws").identity()
        with pytest.raises(ConfigError, match=r"analyzer 'test_upper' is already registered"):
            register_analyzer("test_upper", lambda: upper_split)
        register_analyzer("test_upper", lambda: str.split, overwrite=True)
        assert get_analyzer("test_upper")("x y") == ["x", "y"]
        with pytest.raises(ConfigError, match=r"bad options for analyzer 'test_ws'"):
            get_analyzer("test_ws", nope=1)
    finally:
        registry_mod._REGISTRY.pop("test_upper", None)
        registry_mod._REGISTRY.pop("test_ws", None)


def test_registry_errors():
    with pytest.raises(
        ConfigError,
        match=r"unknown analyzer 'bm25_klingon'; known analyzers: bm25, bm25_chinese, bm25_cjk",
    ):
        get_analyzer("bm25_klingon")
    with pytest.raises(ConfigError, match=r"analyzer must be a name .* got int 3"):
        get_analyzer(3)
    with pytest.raises(ConfigError, match=r"options \['hmm'\] given with an already built"):
        get_analyzer(ChineseAnalyzer(), hmm=False)
    with pytest.raises(ConfigError, match=r"cannot be applied to a callable analyzer"):
        get_analyzer(upper_split, lower=True)
    with pytest.raises(ConfigError, match=r"analyzer name must be a non-empty str, got ''"):
        register_analyzer("", upper_split)
    with pytest.raises(ConfigError, match=r"factory for analyzer 'x' must be callable"):
        register_analyzer("x", "not callable")
    bad = get_analyzer(lambda t: [1, 2])
    with pytest.raises(ConfigError, match=r"returned a token of type int \(1\)"):
        bad("text")


def test_expand_tokens_same_count_is_not_identity():
    """Raw tokens dropped (stopwords) and others expanded (OOV back-off) can leave as many
    tokens as before; the stream must still be remapped, not returned as is."""
    import numpy as np

    from fastrag.analysis.spans import expand_tokens

    vocab, ids, off = expand_tokens(
        ["a", "b", "c"], np.array([0, 2, 1], np.int32), np.array([0, 3]), [(), ("x", "y"), ("z",)]
    )
    assert vocab == ["x", "y", "z"]
    assert ids.tolist() == [2, 0, 1] and off.tolist() == [0, 3]


def test_expand_tokens_reads_none_as_the_raw_token_itself():
    """An analyzer's memo keeps a raw token that is its own output token as None: it expands
    to that token, exactly as a 1-tuple of it, in the identity and the remapped paths."""
    import numpy as np

    from fastrag.analysis.spans import expand_tokens

    raw, ids, off = ["a", "b", "c"], np.array([0, 2, 1, 0], np.int32), np.array([0, 1, 4])
    for parts in ([None, None, None], [None, ("x", "b"), ()], [("a",), None, ("c", "c")]):
        want = expand_tokens(
            raw, ids, off, [(r,) if p is None else p for r, p in zip(raw, parts, strict=True)]
        )
        got = expand_tokens(raw, ids, off, parts)
        assert got[0] == want[0] and got[1].tolist() == want[1].tolist()
        assert got[2].tolist() == want[2].tolist()
    vocab, values, offsets = expand_tokens(raw, ids, off, [None, ("x", "b"), ()])
    assert [vocab[i] for i in values.tolist()] == ["a", "x", "b", "a"]
    assert offsets.tolist() == [0, 1, 4]


def test_chinese_encode_equals_call_alone_and_in_a_batch():
    """A question whose dropped stopwords offset its back-off characters (found by the serve
    benchmark: its hits differed alone and in a batch)."""
    an = get_analyzer("bm25_chinese")
    q = "文周王是哪年到哪年在位？"
    for texts in ([q], ["第一个问题是什么？", q]):
        vocab, ids, off = an.encode_chunk(texts)
        assert [vocab[i] for i in ids[off[-2] : off[-1]].tolist()] == an(q)
