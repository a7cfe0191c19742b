"""fastrag's numba jieba segmenter gives exactly jieba.lcut's tokens."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fastrag.analysis.segment import get_segmenter, jieba_tokenizer

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


@pytest.mark.parametrize(
    "hmm", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["hmm", "no-hmm"]
)
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


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_fast_path_does_not_import_jieba():
    """With the tables cached, analysing text needs neither jieba nor its pkg_resources."""
    get_segmenter()  # the tables' cache file exists
    texts = EDGE_CASES + ["北京大学的乡里大辅先生", "亚硫酸盐有什么作用？"]
    out = json.loads(
        _run(
            "import json, sys\n"
            "from fastrag.analysis.chinese import ChineseAnalyzer\n"
            "from fastrag.analysis import segment\n"
            f"texts = {texts!r}\n"
            "a = ChineseAnalyzer()\n"
            "raw, ids, off = segment.get_segmenter().encode(texts, hmm=True)\n"
            "cuts = [[raw[j] for j in ids[off[i]:off[i + 1]]] for i in range(len(texts))]\n"
            "opts = a.options()\n"
            "seen = [m for m in ('jieba', 'pkg_resources') if m in sys.modules]\n"
            "print(json.dumps({'cuts': cuts, 'dictionary': opts['dictionary'], 'imported': seen,\n"
            "                  'path': segment._dictionary_path(),\n"
            "                  'cache': str(segment.tables_folder())}))"
        )
    )
    from fastrag.analysis import segment
    from fastrag.analysis.chinese import ChineseAnalyzer

    dt = jieba_tokenizer()  # jieba imported here
    assert out["imported"] == []
    assert out["cuts"] == [dt.lcut(t, HMM=True) for t in texts]
    assert out["dictionary"] == ChineseAnalyzer().options()["dictionary"]
    assert out["path"] == segment._dictionary_path()
    assert out["cache"] == str(segment.tables_folder())


def test_install_read_from_source_matches_jieba():
    import jieba

    from fastrag.analysis.segment import jieba_install

    got = jieba_install()
    assert got.version == jieba.__version__
    assert got.default_dict == jieba.DEFAULT_DICT_NAME
    assert got.package_dir == os.path.dirname(os.path.abspath(jieba.__file__))


def test_custom_dictionary_still_changes_identity(tmp_path):
    """A dictionary set with jieba.set_dictionary is seen (jieba is imported then)."""
    import jieba

    mine = tmp_path / "mydict.txt"
    shutil.copy(os.path.join(os.path.dirname(jieba.__file__), "dict.txt"), mine)
    out = json.loads(
        _run(
            "import json, jieba\n"
            f"jieba.set_dictionary({str(mine)!r})\n"
            "from fastrag.analysis import segment\n"
            "from fastrag.analysis.chinese import ChineseAnalyzer\n"
            "print(json.dumps([segment._dictionary_path(),\n"
            "                  ChineseAnalyzer().options()['dictionary']]))"
        )
    )
    assert out == [str(mine), f"jieba-{jieba.__version__}:mydict.txt"]


def test_the_tables_are_cached_checksummed_and_memory_mapped(tmp_path, monkeypatch, caplog):
    """The dictionary's tables are derived once into the cache folder as .npy files with
    checksums; later segmenters map them copy-on-write (file pages, shared between processes,
    writable arrays as the kernels take them) and cut exactly as jieba; a truncated table is
    derived again, with a warning."""
    from fastrag.analysis import segment

    monkeypatch.setenv("FASTRAG_CACHE_DIR", str(tmp_path))
    texts = [*EDGE_CASES, "北京大学的乡里大辅先生", "亚硫酸盐有什么作用？"]
    want = [jieba_tokenizer().lcut(t, HMM=True) for t in texts]
    first = segment.JiebaSegmenter()  # derives
    folder = segment.tables_folder()
    assert folder.parent == tmp_path / "jieba" and [p.name for p in folder.parent.iterdir()] == [
        folder.name
    ]  # no temporary folder left
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [*(f"{n}.npy" for n in segment._TABLES), "meta.json"]
    )
    again = segment.JiebaSegmenter()
    for name in ("keys", "vals", "freq", "logp", "emit_p"):
        table = getattr(again, name)
        assert isinstance(table, np.memmap) and table.mode == "c" and table.flags.writeable
    assert [first.cut(t) for t in texts] == [again.cut(t) for t in texts] == want

    keys = folder / "keys.npy"
    keys.write_bytes(keys.read_bytes()[:-4096])  # a truncated copy
    damaged = segment.JiebaSegmenter()
    assert "keys.npy does not match its checksum" in caplog.text
    assert [damaged.cut(t) for t in texts] == want


def test_processes_deriving_the_tables_at_once_agree(tmp_path):
    """Two processes with an empty cache folder derive the tables at once: both cut as jieba
    does and one whole folder is left, every file matching its checksum."""
    from fastrag._checksum import checksum_file
    from fastrag.analysis import segment

    text = "北京大学的乡里大辅先生因故去世"
    code = f"from fastrag.analysis import segment\nprint(segment.JiebaSegmenter().cut({text!r}))\n"
    env = {**os.environ, "FASTRAG_CACHE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == [str(jieba_tokenizer().lcut(text, HMM=True))] * 2
    (folder,) = (tmp_path / "jieba").iterdir()  # no temporary folder left
    meta = json.loads((folder / "meta.json").read_text())
    assert sorted(meta) == sorted(f"{n}.npy" for n in segment._TABLES)
    assert all(meta[n] == checksum_file(folder / n) for n in meta)


def test_an_unwritable_cache_still_segments_in_memory(tmp_path, monkeypatch, caplog):
    from fastrag.analysis import segment

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FASTRAG_CACHE_DIR", str(blocker / "cache"))
    seg = segment.JiebaSegmenter()
    assert "cannot cache the jieba tables" in caplog.text
    assert not isinstance(seg.keys, np.memmap)  # derived into a temporary folder, read in
    texts = ["北京大学的乡里大辅先生", "亚硫酸盐有什么作用？"]
    assert [seg.cut(t) for t in texts] == [jieba_tokenizer().lcut(t, HMM=True) for t in texts]
