"""The default ``bm25`` analyzer: tokens by script, jieba's on Chinese, the regex path equal to
the kernel, options in the identity."""

from __future__ import annotations

import pickle
import re

import pytest

from fastrag.analysis import MixedAnalyzer, get_analyzer, tokenize_corpus
from fastrag.analysis.wordseg import segmenter_tags
from fastrag.errors import ConfigError

MIXED = [
    "如何上传文件? Upload files via the API: file_path, getUserName(), v1.2.3 and 3.14%",
    "東京タワーに行きました",
    "한국어 문서를 검색합니다",
    "Привет, мир! Программирование на Python",
    "Le développement des applications web",
    "北京大学的学生在2018年参加了比赛，获得１９７９分",
    "Ελληνικά κείμενα και προγράμματα",
    "",
    "，。!!",
    "snake_case __init__ ___ 0.5.x 1..2",
]


def test_tokens_by_script():
    an = get_analyzer("bm25")
    assert isinstance(an, MixedAnalyzer) and an.name == "bm25"
    # Han words by jieba (a word of 3+ characters is followed by its dictionary sub-words)
    assert an(MIXED[0]) == [
        "上传",
        "文件",
        "upload",
        "file",
        "via",
        "api",
        "file_path",
        "getusernam",
        "v1.2.3",
        "3.14",
        *("如何", "何上", "上传", "传文", "文件"),  # then the pairs of adjacent Han characters
    ]
    # a kana-with-kanji run by MeCab/UniDic: content words' base forms, particles dropped;
    # without it katakana words whole, kanji by jieba, hiragana dropped
    if segmenter_tags()["ja"].startswith("fugashi"):
        assert an(MIXED[1]) == ["東京", "タワー", "行く"]
    else:
        assert an(MIXED[1]) == ["東京", "タワー", "行"]
    assert an(MIXED[2])[:5] == ["한", "한국", "국", "국어", "어"]
    # Cyrillic with the Russian stemmer, Latin with the English one; a French text (its
    # function words say so) with the French one, French function words dropped
    assert an(MIXED[3]) == ["привет", "мир", "программирован", "на", "python"]
    assert an(MIXED[4]) == ["développ", "appliqu", "web"]
    assert get_analyzer("bm25", per_language=False)(MIXED[4]) == [
        *("le", "développ", "des", "applic", "web")
    ]
    # stopwords of both lists go ("的", "获得", "the"); full-width digits stay one number
    assert an(MIXED[5]) == [
        *("北京大学", "北京", "大学", "学生", "2018", "年", "参加", "比赛", "１９７９", "分"),
        *("北京", "京大", "大学", "学的", "的学", "学生", "生在"),
        *("年参", "参加", "加了", "了比", "比赛", "获得"),
    ]
    assert an(MIXED[6]) == ["ελλην", "κειμεν", "κα", "προγραμμ"]
    assert an(MIXED[7]) == [] and an(MIXED[8]) == []
    # identifiers and versions stay whole; a run of "_" alone is dropped
    assert an(MIXED[9]) == ["snake_cas", "__init__", "0.5", "x", "1", "2"]


def test_default_stopwords_are_nltk_english_and_chinese():
    from fastrag.analysis.stopwords import load_stopwords

    en, nltk = load_stopwords("en"), load_stopwords("en_nltk")
    assert len(en) == 33 and len(nltk) == 179 and en < nltk
    question = "What are the most common side effects of not sleeping?"
    assert get_analyzer("bm25")(question) == ["common", "side", "effect", "sleep"]
    # bm25_english keeps Lucene's 33: "what" and "most" stay
    assert get_analyzer("bm25_english")(question) == [
        "what",
        "most",
        "common",
        "side",
        "effect",
        "sleep",
    ]
    assert get_analyzer("bm25").stopwords == nltk | load_stopwords("zh")


def test_options_change_tokens_and_identity():
    auto = get_analyzer("bm25")
    french = get_analyzer("bm25", stemmer="french")
    plain = get_analyzer("bm25", stemmer=None, stopwords=None)
    # a given stemmer stems every Latin-script text; a French text still drops French
    # function words (the default stopwords follow the text's language)
    assert french(MIXED[4]) == ["développ", "appliqu", "web"]
    assert french(MIXED[3])[2] == "программирован"  # other scripts: still by script
    assert plain("The files") == ["the", "files"]
    assert (
        len(
            {
                auto.identity(),
                french.identity(),
                plain.identity(),
                get_analyzer("bm25", hmm=False).identity(),
                get_analyzer("bm25", stemmer="english").identity(),
                get_analyzer("bm25", per_language=False).identity(),
            }
        )
        == 6
    )
    assert get_analyzer("bm25", stemmer="english", per_language=False) == get_analyzer(
        "bm25", per_language=False
    )
    with pytest.raises(ConfigError, match="unknown Snowball stemmer language 'klingon'"):
        get_analyzer("bm25", stemmer="klingon")
    with pytest.raises(ConfigError, match="needs a str, got int"):
        auto(3)
    again = pickle.loads(pickle.dumps(french))
    assert again == french and again(MIXED[4]) == french(MIXED[4])


def test_equals_bm25_chinese_on_chinese_text(cmrc):
    contexts, questions, _ = cmrc
    han_only = [
        t
        for t in contexts + questions
        if all("\u4e00" <= ch <= "\u9fd5" for ch in re.findall(r"\w", t))
    ]
    assert len(han_only) > 2_000
    mixed = get_analyzer("bm25", han_search=False, han_bigrams=False)
    chinese = get_analyzer("bm25_chinese")
    assert [mixed(t) for t in han_only] == [chinese(t) for t in han_only]


def test_regex_path_equals_kernel(cmrc):
    contexts, questions, _ = cmrc
    an = MixedAnalyzer()
    texts = [t.lower() for t in MIXED + contexts[:200] + questions[:300]]
    kernel = an._spans(texts)
    python = an._spans_python(texts)
    assert kernel[0] == python[0]
    assert kernel[1].tolist() == python[1].tolist()
    assert kernel[2].tolist() == python[2].tolist()


def test_corpus_tokens_equal_calls(cmrc):
    contexts, _, _ = cmrc
    an = get_analyzer("bm25")
    texts = MIXED + contexts[:100]
    tc = tokenize_corpus(texts, an, chunk_chars=3_000)
    inverse = list(tc.vocab)
    for i, text in enumerate(texts):
        ids = tc.values[tc.offsets[i] : tc.offsets[i + 1]]
        assert [inverse[j] for j in ids] == an(text)


def test_han_search_subwords_and_chars():
    text = "把文件夹打包成压缩文件"
    words = [*("文件夹", "文件", "件夹", "打包", "成", "压缩文件", "压缩", "文件")]
    pairs = [*("把文", "文件", "件夹", "夹打", "打包", "包成", "成压", "压缩", "缩文", "文件")]
    assert get_analyzer("bm25")(text) == words + pairs
    assert get_analyzer("bm25", han_bigrams=False)(text) == words
    assert get_analyzer("bm25", han_search=False, han_bigrams=False)(text) == [
        *("文件夹", "打包", "成", "压缩文件"),
    ]
    # characters too (stopword characters such as 打 stay dropped)
    assert get_analyzer("bm25", han_chars=True, han_bigrams=False)(text) == [
        *("文件夹", "文件", "件夹", "文", "件", "夹", "打包", "包", "成"),
        *("压缩文件", "压缩", "文件", "压", "缩", "文", "件"),
    ]
    opts = ({}, {"han_chars": True}, {"han_bigrams": False})
    assert len({get_analyzer("bm25", **o).identity() for o in opts}) == 3


def test_han_bigrams_follow_each_text_and_match_without_kernels(monkeypatch):
    an = MixedAnalyzer()
    texts = ["北京大学", "abc", "上传文件，打包", "", "中", "所有者を変える 北京"]
    vocab, ids, offsets = an.encode_chunk(texts)
    got = [[vocab[i] for i in ids[offsets[k] : offsets[k + 1]]] for k in range(len(texts))]
    japanese = an("所有者を変える")
    assert got == [
        ["北京大学", "北京", "大学", "北京", "京大", "大学"],
        ["abc"],
        ["上传", "文件", "打包", "上传", "传文", "文件", "打包"],  # no pair across "，"
        [],
        ["中"],
        [*japanese, "北京", "北京"],  # no pairs in a run with kana
    ]
    assert "有者" not in japanese and "所有者" in an("所有者")
    assert vocab == list(dict.fromkeys(t for toks in got for t in toks))  # first occurrence
    import fastrag.analysis.mixed as mixed_module

    monkeypatch.setattr(mixed_module, "kernels_for", lambda *a, **k: False)
    plain = MixedAnalyzer()
    assert [plain(t) for t in texts] == got
    assert plain.query_tokens("上传文件") == ["上传", "文件", "上传", "传文", "文件"]


def test_han_bigrams_read_only_the_texts_holding_han(monkeypatch):
    """A chunk where a few texts hold Han characters: the pair pass reads those texts alone
    (a log with a few such lines pays for them, not for the chunk), and every text's tokens
    are those it has tokenized alone, in the same order."""
    an = MixedAnalyzer()
    texts = ["GET /a 200 user=José", "東京 région=東京都", "", "plain words", "上传文件", "abc"]
    want = [an(t) for t in texts]
    seen: list[list[str]] = []
    real = MixedAnalyzer._text_bigrams

    def spy(self, sub):
        seen.append(list(sub))
        return real(self, sub)

    monkeypatch.setattr(MixedAnalyzer, "_text_bigrams", spy)
    vocab, ids, offsets = an.encode_chunk(texts)
    got = [[vocab[i] for i in ids[offsets[k] : offsets[k + 1]]] for k in range(len(texts))]
    assert got == want
    assert want[1][-3:] == ["東京", "東京", "京都"] and want[4][-3:] == ["上传", "传文", "文件"]
    assert seen == [[texts[1], texts[4]]]
    seen.clear()
    assert an.encode_chunk(["no han here", "none"])[0] == ["han", "none"]
    assert seen == []


NO_HAN_CHILD = r"""
import json
from fastrag._coldstart import kernels_for
from fastrag.analysis import MixedAnalyzer
from fastrag.analysis import segment
kernels_for(lambda: 100.0, wait=True)
a = MixedAnalyzer()
english = a.encode_chunk(["Running 3.14 dogs; Straße ok", "ファイル 한국어"])
loaded = segment.get_segmenter.cache_info().currsize
chinese = a.encode_chunk(["中文分词 running"])
print(json.dumps([loaded, segment.get_segmenter.cache_info().currsize,
                  english[0], english[1].tolist(), chinese[0]]))
"""


def test_batches_without_han_never_load_jiebas_tables():
    """jieba's dictionary (~20 MB) loads on the first batch holding Han characters, not
    before: English, kana and Hangul batches tokenize with empty tables, as with full ones."""
    import json
    import subprocess
    import sys

    from fastrag.analysis.segment import get_segmenter

    out = subprocess.run(
        [sys.executable, "-c", NO_HAN_CHILD],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    loaded_before, loaded_after, vocab, ids, chinese = json.loads(out.stdout)
    assert (loaded_before, loaded_after) == (0, 1)
    get_segmenter()  # here the full tables
    want = MixedAnalyzer().encode_chunk(["Running 3.14 dogs; Straße ok", "ファイル 한국어"])
    assert (vocab, ids) == (want[0], want[1].tolist())
    assert chinese[:3] == ["中文", "分词", "run"]


def test_a_word_its_stemmer_leaves_unchanged_stays_one_string():
    """A stem equal to its word is the word's own string (memo key, term and vocabulary share
    it: ~10 MiB less for a log's 200k distinct terms); changed stems are new strings."""
    an = MixedAnalyzer()
    words = ["".join(w) for w in (["e", "r", "r", "o", "r"], ["r", "u", "n", "s"], "4xx")]
    got = an._stem_many(words)
    assert got == ["error", "run", "4xx"]
    assert got[0] is words[0] and got[2] is words[2] and got[1] is not words[1]
