"""fastrag's numba jieba segmenter gives exactly jieba.lcut's tokens."""

from __future__ import annotations

import numpy as np
import pytest

from fastrag.analysis.chinese import jieba_tokenizer
from fastrag.analysis.segment import get_segmenter

EDGE_CASES = [
    "",
    "iPhone6售价3.14%，a.b 1.2.3 +#& ω-force\r\n\t x_y 　全角空格",
    "ＡＢＣ１２３全角字母",
    "𠀀𠀁中文扩展B区",
    "C++和C#是编程语言，.NET框架",
    "乡里大辅先生因故去世",
    "\r\n\r\r\n\n  ",
    "abc123def 3.5kg 50% 1.2.3.4 a-b_c&d",
    "今天天气不错哈哈哈哈哈哈哈哈哈哈",
    "龘靐齉爩麤",  # rare characters: unknown to the HMM emission table
    "〇一二三四五六七八九十",
    "𠮷野家",
]


@pytest.mark.parametrize("hmm", [True, False], ids=["hmm", "no-hmm"])
def test_identical_to_jieba_on_cmrc(cmrc, hmm):
    contexts, questions, _ = cmrc
    dt = jieba_tokenizer()
    seg = get_segmenter()
    texts = contexts + questions + EDGE_CASES
    mismatches = [t for t in texts if seg.cut(t, hmm=hmm) != dt.lcut(t, HMM=hmm)]
    assert mismatches == []
    assert len(texts) == 848 + 3219 + len(EDGE_CASES)


def test_encode_matches_cut():
    seg = get_segmenter()
    texts = EDGE_CASES + ["北京大学北京大学", "北京"]
    vocab, ids, offsets = seg.encode(texts, hmm=True)
    assert ids.dtype == np.int32 and offsets.dtype == np.int64
    for i, text in enumerate(texts):
        assert [vocab[j] for j in ids[offsets[i] : offsets[i + 1]]] == seg.cut(text)
    assert len(vocab) == len(set(vocab))


def test_dictionary_frequencies_match_jieba():
    dt = jieba_tokenizer()
    words = ["北京大学", "北京", "北", "大辅", "乡里", "iPhone", "中华人民共和", "", "𠀀"]
    got = get_segmenter().freqs(words).tolist()
    assert got == [dt.FREQ.get(w, 0) for w in words]
