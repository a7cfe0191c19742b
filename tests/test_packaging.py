"""The built wheel carries fastrag._kernels and the tiktoken BPE file; counting works offline."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contains_kernels_and_imports_them(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("fastrag_engine-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "fastrag/_kernels/__init__.py" in names
    assert "fastrag/_kernels/bm25/__init__.py" in names
    assert "fastrag/analysis/data/cl100k_base.tiktoken" in names
    assert "fastrag/datasets/data/cmrc2018_dev.json.gz" in names
    assert not [n for n in names if n.startswith("kernels/")]  # never a bare top-level package
    packages = {str(p.relative_to(ROOT)) for p in (ROOT / "fastrag").rglob("__init__.py")}
    assert packages - set(names) == set()  # pyproject's package list names every package
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    code = (
        "import fastrag, fastrag._kernels._config as c; "
        f"assert fastrag.__file__.startswith({str(target)!r}), fastrag.__file__; "
        "print(sorted(c.FASTMATH))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(target)},
    )
    assert out.returncode == 0, out.stderr
    assert "reassoc" in out.stdout


def test_token_counting_works_offline_with_an_empty_cache(tmp_path):
    empty = tmp_path / "tiktoken-cache"
    empty.mkdir()
    code = (
        "from fastrag.analysis.tokens import count_tokens; "
        "print(count_tokens('hello world'), count_tokens('你好，世界'))"
    )
    env = {
        **os.environ,
        "TIKTOKEN_CACHE_DIR": str(empty),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    from fastrag.analysis.tokens import get_encoding

    enc = get_encoding()
    assert enc.encode_ordinary("hello world") == [15339, 1917]  # cl100k_base's ids
    assert out.stdout.split() == ["2", str(len(enc.encode_ordinary("你好，世界")))]
    assert list(empty.iterdir()) == []  # nothing downloaded or cached


def test_shipped_encoding_pickles_by_name_without_its_rank_dict():
    """The shipped cl100k_base drops tiktoken's Python copy of the ranks (~19 MiB a process)
    and still pickles (as multiprocessing and Ray workers do): to the same cached encoding."""
    import pickle

    from fastrag.analysis.tokens import get_encoding

    enc = get_encoding()
    assert not hasattr(enc, "_mergeable_ranks")
    blob = pickle.dumps(enc)
    assert len(blob) < 200  # by name, not 100k ranks
    assert pickle.loads(blob) is enc
    assert get_encoding("cl100k_base") is enc
    assert get_encoding("gpt-4") is enc  # one instance per process, whichever name asks
    text = "Größe 大小 size 🙂"
    assert enc.decode(enc.encode_ordinary(text)) == text
    assert enc.n_vocab == 100277


def test_models_of_another_encoding_are_not_counted_with_cl100k(tmp_path, monkeypatch):
    """gpt-4o counts with o200k_base (tiktoken's model table): offline and uncached it is a
    ConfigError naming the fix, not cl100k_base's counts under gpt-4o's name."""
    import pytest

    from fastrag.analysis.tokens import get_encoding, is_shipped
    from fastrag.errors import ConfigError

    assert [is_shipped(n) for n in ("gpt-4", "gpt-4-turbo", "gpt-3.5-turbo")] == [True] * 3
    assert [is_shipped(n) for n in ("gpt-4o", "gpt-4o-mini", "o200k_base")] == [False] * 3
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    with pytest.raises(ConfigError, match="not available offline.*cl100k_base"):
        get_encoding("gpt-4o-mini")


def test_released_encodings_are_built_again_and_count_the_same():
    """release_encodings (fastrag ingest, once its groups are built) drops the cached
    encoding; holders keep theirs and the next get_encoding builds an equal one."""
    from fastrag.analysis.tokens import count_tokens, get_encoding, release_encodings

    held = get_encoding()
    text = "Größe 大小 size 🙂 " * 20
    want = held.encode_ordinary(text)
    release_encodings()
    again = get_encoding()
    assert again is not held and get_encoding("gpt-4") is again
    assert again.encode_ordinary(text) == held.encode_ordinary(text) == want
    assert count_tokens(text) == len(want)
