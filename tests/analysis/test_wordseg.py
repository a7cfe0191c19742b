"""Word segmentation of the scripts written without spaces (Japanese, Thai, Lao, Khmer,
Myanmar) in the default ``bm25`` analyzer, on sentences of tldr-pages (CC-BY-4.0) and, for
Khmer and Burmese, which tldr-pages lacks, command-like sentences written for these tests."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from fastrag.analysis import get_analyzer
from fastrag.analysis.wordseg import japanese_without_dictionary, segmenter_tags


@pytest.fixture(scope="module")
def an():
    """The default analyzer without its Han bigrams (test_mixed.py checks those)."""
    return get_analyzer("bm25", han_bigrams=False)


def test_japanese_content_words_not_kana_bigrams(an):
    pytest.importorskip("fugashi")
    pytest.importorskip("unidic_lite")
    # issue 42's miss: kana bigrams swamped 所有者; here the words and base forms remain
    assert an("ファイルの所有者を変える") == ["ファイル", "所有", "者", "変える"]
    assert an("隠しファイルも含めてフォルダの一覧を見る") == [
        *("隠す", "ファイル", "含める", "フォルダ", "一覧", "見る"),
    ]
    # Latin inside Japanese stays a stemmed word
    assert an("yamlファイルに定義したサービス") == ["yaml", "ファイル", "定義", "する", "サービス"]


def test_japanese_without_a_dictionary():
    # the fallback's cut: katakana runs whole, kanji by the given cutter, hiragana dropped
    assert japanese_without_dictionary("ファイルの所有者を変える", lambda s: [s]) == [
        *("ファイル", "所有者", "変"),
    ]
    assert japanese_without_dictionary("コンピューターを使う", list) == ["コンピューター", "使"]


def test_thai_by_newmm(an):
    pytest.importorskip("pythainlp")
    # issue 42's sentence was cut into single letters; newmm gives words
    assert an("วิธีดูพื้นที่ว่างในดิสก์") == ["วิธี", "ดู", "พื้น", "ที่ว่าง", "ใน", "ดิสก์"]
    assert an("แสดงชื่อไฟล์หรือโฟลเดอร์ทั้งหมด รวมทั้งไฟล์ที่ถูกซ่อนอยู่") == [
        *("แสดง", "ชื่อ", "ไฟล์", "หรือ", "โฟลเดอร์", "ทั้งหมด"),
        *("รวมทั้ง", "ไฟล์", "ที่", "ถูก", "ซ่อน", "อยู่"),
    ]


def test_lao_by_laonlp(an):
    pytest.importorskip("laonlp")
    assert an("ສະແດງຊື່ directory ທີ່ເຮັດວຽກຢູ່") == [
        *("ສະແດງ", "ຊື່", "directori", "ທີ່", "ເຮັດວຽກ", "ຢູ່"),
    ]


def test_khmer_and_myanmar_by_icu_dictionaries(an):
    """ICU's word break (icu4py) cuts Khmer and Burmese into dictionary words ("delete every
    file in the folder", "show every file and folder, hidden files too"); its spaces and
    punctuation (the Burmese comma) are not tokens."""
    pytest.importorskip("icu4py")
    from icu4py.breakers import WordBreaker

    assert an("លុបឯកសារទាំងអស់នៅក្នុងថត") == ["លុប", "ឯកសារ", "ទាំងអស់", "នៅក្នុង", "ថត"]
    assert an("ဖိုင်အားလုံးကိုဖျက်ပါ") == ["ဖိုင်", "အားလုံး", "ကို", "ဖျက်", "ပါ"]
    burmese = "ဖိုင်နှင့်ဖိုဒါအားလုံးကိုပြပါ၊ ဝှက်ထားသောဖိုင်များပါ"
    words = an(burmese)
    assert words == [w for w in WordBreaker(burmese, "my") if w.strip() and w != "\u104a"]
    assert words.count("ဖိုင်") == 2 and "\u104a" not in "".join(words)
    assert segmenter_tags()["km"] == segmenter_tags()["my"] == f"icu4py-{version('icu4py')}"


@pytest.fixture
def installed(monkeypatch):
    """``installed(*modules)``: this process sees only those segmenter packages (the
    segmenters' caches are cleared before and after)."""
    import fastrag.analysis.wordseg as ws

    caches = (ws._icu, ws._thai, ws._lao, ws.segmenter_tags)

    def only(*modules: str):
        monkeypatch.setattr(ws, "_installed", lambda *mods: all(m in modules for m in mods))
        for cached in caches:
            cached.cache_clear()
        return ws

    yield only
    for cached in caches:
        cached.cache_clear()


def test_without_a_dictionary_cluster_bigrams(installed):
    """Without icu4py (and PyThaiNLP / LaoNLP for their scripts): bigrams of letters with
    their combining signs, never bare marks."""
    ws = installed()
    assert ws.segment_run("ការប្រើប្រាស់", list) == [
        *("ការ", "រប្", "ប្រើ", "រើប្", "ប្រា", "រាស់"),
    ]
    assert ws.segment_run("ဗမာစာ", list) == ["ဗမာ", "မာစာ"]
    tags = ws.segmenter_tags()
    assert tags["km"] == tags["my"] == tags["th"] == tags["lo"] == "bigrams"


def test_thai_and_lao_fall_back_to_icu(installed):
    """Without PyThaiNLP and LaoNLP, Thai and Lao go to ICU's dictionaries, not bigrams."""
    pytest.importorskip("icu4py")
    ws = installed("icu4py")
    assert ws.segment_run("วิธีดูพื้นที่ว่างในดิสก์", list) == [
        *("วิธี", "ดู", "พื้นที่", "ว่าง", "ใน", "ดิสก์"),
    ]
    assert ws.segment_run("ພາສາລາວ", list) == ["ພາສາ", "ລາວ"]
    tags = ws.segmenter_tags()
    assert tags["th"] == tags["lo"] == tags["km"] == f"icu4py-{version('icu4py')}"


def test_segmenters_in_identity(an):
    assert '"segmenters":' in an.identity() and '"version":7' in an.identity()


def test_regex_path_equals_kernel(an):
    texts = [
        "ファイルの所有者を変える 3.14 東京",
        "วิธีดูพื้นที่ว่างในดิสก์ abc",
        "ຕອນນີ້ຢູ່ໂຟນເດີໃດ",
        "한국어 北京大学 ការប្រើ",
    ]
    raw, ids, _ = an._spans_python([t.lower() for t in texts])
    vocab, kids, _ = an.encode_chunk(texts)
    py = an._normalize_many(raw)
    flat = [tok for i in ids.tolist() for tok in py[i]]
    assert flat == [vocab[i] for i in kids.tolist()]


def test_japanese_in_threads(an):
    pytest.importorskip("fugashi")
    from concurrent.futures import ThreadPoolExecutor

    from fastrag.analysis import MixedAnalyzer

    texts = [f"ファイルの所有者を変える{i}回目です" for i in range(200)]
    expected = [MixedAnalyzer()(t) for t in texts]
    with ThreadPoolExecutor(4) as pool:  # fresh analyzers: no shared span cache
        got = list(pool.map(lambda t: MixedAnalyzer()(t), texts))
    assert got == expected
    # MeCab's words; no pairs of kanji inside Japanese
    assert expected[7] == ["ファイル", "所有", "者", "変える", "7", "回", "目"]


def test_the_analyzer_identity_imports_no_segmenter():
    """Naming the segmenters (the analyzer's identity, read by every search) imports none of
    them: laonlp's import alone loads its dictionary (0.26 s)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from fastrag.analysis import get_analyzer\n"
        "get_analyzer('bm25').identity()\n"
        "get_analyzer('bm25')('search the docs')\n"
        "mods = ('laonlp', 'pythainlp', 'fugashi', 'icu4py')\n"
        "print(sorted(m for m in mods if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_installed_segmenter_that_fails_to_import_is_named(monkeypatch):
    import fastrag.analysis.wordseg as ws
    from fastrag.errors import ConfigError

    pytest.importorskip("laonlp")

    def broken():
        raise ImportError("libfoo.so: cannot open shared object file")

    monkeypatch.setattr(ws, "_lao_tokenize", broken)
    ws._lao.cache_clear()
    try:
        with pytest.raises(ConfigError, match="laonlp is installed but fails to import.*libfoo"):
            ws.segment_run("ສະບາຍດີ", list)
    finally:
        ws._lao.cache_clear()
