"""A jieba-compatible Chinese segmenter compiled with numba (``fastrag._kernels.jieba``).

``segmenter()`` is the one place that chooses between it and the jieba package: the numba port
once its kernels are ready, jieba itself while they compile (or for jieba's search mode, which
has no port). Both have the same methods (``cut``, ``freqs``, ``encode``, ``warmup``) and give
the same tokens.

``get_segmenter().cut(text, hmm=True)`` returns exactly ``jieba.lcut(text, HMM=hmm)`` (tested
on every CMRC paragraph and question), several times faster; ``encode(texts)`` returns the
chunk's distinct tokens and local ids without building a str per token. It reads jieba's
default dictionary and HMM tables as jieba has them loaded in this process (words added with
``jieba.add_word`` before the first use are included; later additions are not).
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import numpy as np

from fastrag._cache import cache_root
from fastrag._coldstart import kernels_for
from fastrag._derived import open_derived
from fastrag.analysis.spans import span_strings, text_kernels, texts_to_codepoints

_BLOCK_CHARS = "+#&._%-"  # with a-z, A-Z, 0-9 and U+4E00..U+9FD5: jieba's re_han_default
_STATES = "BMES"


_CACHE_FORMAT = 2
# the arrays of _build_tables, one cached .npy each
_TABLES = ("keys", "vals", "freq", "logp", "start_p", "trans_p", "emit_p", "meta")


def jieba_kernels() -> ModuleType:
    """:mod:`fastrag._kernels.jieba`, imported on first use (numba loads with it)."""
    from fastrag._kernels import jieba  # lazy: numba

    return jieba


class JiebaInstall(NamedTuple):
    """Where jieba is installed: its package dir, ``__version__`` and default dictionary name."""

    package_dir: str
    version: str
    default_dict: str


def imported_jieba() -> ModuleType | None:
    """The jieba module if this process has imported it, else None: then nothing in the
    process can have changed its dictionary, and its defaults hold. (Importing jieba costs
    ~0.15 s, mostly the ``pkg_resources`` it imports, on every fresh process's first query.)"""
    if "jieba" not in sys.modules:
        return None
    import jieba  # waits for another thread's import of it to finish

    return jieba


@functools.lru_cache(maxsize=1)
def jieba_install() -> JiebaInstall:
    """The installed jieba's location and version, read from its source without importing it
    (falls back to importing it if the source does not say)."""
    import importlib.util

    spec = importlib.util.find_spec("jieba")
    if spec is not None and spec.origin and spec.origin.endswith(".py"):
        with open(spec.origin, encoding="utf-8") as f:
            src = f.read()
        version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", src, re.M)
        name = re.search(r"^DEFAULT_DICT_NAME\s*=\s*['\"]([^'\"]+)['\"]", src, re.M)
        if version and name:
            return JiebaInstall(
                os.path.dirname(os.path.abspath(spec.origin)), version.group(1), name.group(1)
            )
    import jieba

    return JiebaInstall(
        os.path.dirname(os.path.abspath(jieba.__file__)), jieba.__version__, jieba.DEFAULT_DICT_NAME
    )


def _dictionary_path() -> str:
    jieba = imported_jieba()
    if jieba is not None and jieba.dt.dictionary:  # jieba.set_dictionary(...) was called
        return os.path.abspath(jieba.dt.dictionary)
    install = jieba_install()
    return os.path.join(install.package_dir, install.default_dict)


def tables_folder() -> Path:
    """Where the tables built from jieba's dictionary are cached: one ``.npy`` per table
    (checksummed, memory-mapped), in fastrag's cache folder, keyed by the dictionary file."""
    import hashlib

    path = _dictionary_path()
    st = os.stat(path)
    version = jieba_install().version
    key = f"{_CACHE_FORMAT}|{version}|{path}|{st.st_size}|{st.st_mtime_ns}"
    digest = hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]
    return cache_root() / "jieba" / f"jieba-{version}-{digest}"


def _build_tables(dt) -> dict[str, np.ndarray]:
    """The trie, frequencies and HMM tables from an initialised ``jieba.Tokenizer``."""
    from jieba import finalseg

    kj = jieba_kernels()
    han_lo, han_hi, min_float = kj.HAN_LO, kj.HAN_HI, kj.MIN_FLOAT
    freq_dict = dt.FREQ
    n = len(freq_dict) + 1
    words = list(freq_dict)
    node_of = {w: i + 1 for i, w in enumerate(words)}
    node_of[""] = 0
    parents = np.fromiter((node_of[w[:-1]] for w in words), dtype=np.int64, count=n - 1)
    del node_of
    cps = np.fromiter((ord(w[-1]) for w in words), dtype=np.int64, count=n - 1)
    keys, vals = kj.build_edge_table(parents, cps, np.arange(1, n, dtype=np.int32))
    freq = np.zeros(n, dtype=np.int64)
    freq[1:] = np.fromiter(freq_dict.values(), dtype=np.int64, count=n - 1)
    logtotal = math.log(dt.total)
    log = math.log
    # exactly jieba's ``log(FREQ.get(w) or 1) - logtotal``, per node
    logp = np.array([log(f or 1) - logtotal for f in freq.tolist()], dtype=np.float64)

    start_p = np.array([finalseg.start_P[s] for s in _STATES], dtype=np.float64)
    trans_p = np.full((4, 4), min_float, dtype=np.float64)
    for i, s0 in enumerate(_STATES):
        for s1, p in finalseg.trans_P[s0].items():
            trans_p[i, _STATES.index(s1)] = p
    emit_p = np.full((han_hi - han_lo + 1, 4), min_float, dtype=np.float64)
    for j, s in enumerate(_STATES):
        for ch, p in finalseg.emit_P[s].items():
            c = ord(ch)
            if han_lo <= c <= han_hi:
                emit_p[c - han_lo, j] = p
    meta = np.array([n - 1, dt.total], dtype=np.int64)
    return {
        "keys": keys,
        "vals": vals,
        "freq": freq,
        "logp": logp,
        "start_p": start_p,
        "trans_p": trans_p,
        "emit_p": emit_p,
        "meta": meta,
    }


def _derive_tables(folder: Path) -> None:
    """Build the tables from a pristine ``jieba.Tokenizer`` of the dictionary file."""
    import jieba

    pristine = jieba.Tokenizer(jieba.dt.dictionary or jieba.DEFAULT_DICT)
    pristine.tmp_dir = jieba.dt.tmp_dir
    _quiet_initialize(pristine)
    for name, table in _build_tables(pristine).items():
        np.save(folder / f"{name}.npy", table, allow_pickle=False)


def _open_tables(folder: Path, mmap_mode: str | None) -> dict[str, np.ndarray]:
    # copy-on-write maps: pages stay the file's (shared between processes, resident only once
    # read) and the arrays are writable, the type the kernels are compiled for
    mode = "c" if mmap_mode else None
    return {n: np.load(folder / f"{n}.npy", mmap_mode=mode, allow_pickle=False) for n in _TABLES}


def _load_tables() -> dict[str, np.ndarray]:
    """Tables of jieba's dictionary: from the cache (:func:`tables_folder`, built from a
    pristine ``jieba.Tokenizer`` of the same dictionary file), or from ``jieba.dt`` itself when
    it is loaded in this process and differs from the file (``jieba.add_word``, user dicts)."""
    files = [f"{n}.npy" for n in _TABLES]
    try:
        folder = tables_folder()
    except OSError:  # the dictionary file cannot be read: jieba's own tables, in memory
        folder = None
    if folder is None:
        tables = _build_tables(jieba_tokenizer())
    else:
        tables = open_derived(folder, files, _derive_tables, _open_tables, "jieba tables")
    jieba = imported_jieba()
    if jieba is not None and jieba.dt.initialized:
        dt = jieba.dt
        meta = tables["meta"]
        if int(meta[0]) != len(dt.FREQ) or int(meta[1]) != dt.total:
            return _build_tables(dt)
    return tables


@functools.lru_cache(maxsize=1)
def jieba_tokenizer():
    """jieba's default Tokenizer, initialised once per process (quietly)."""
    import jieba

    _quiet_initialize(jieba.dt)
    return jieba.dt


def _quiet_initialize(tokenizer) -> None:
    import logging

    import jieba

    log = jieba.default_logger
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        tokenizer.initialize()
    finally:
        log.setLevel(level)


class JiebaSegmenter:
    """jieba's accurate-mode ``cut`` over numba kernels, built from jieba's tables."""

    def __init__(self) -> None:
        kj = jieba_kernels()
        t = _load_tables()
        self.keys, self.vals, self.freq, self.logp = t["keys"], t["vals"], t["freq"], t["logp"]
        self.start_p, self.trans_p, self.emit_p = t["start_p"], t["trans_p"], t["emit_p"]
        block = np.zeros(kj.CP_LIMIT, dtype=np.uint8)
        block[kj.HAN_LO : kj.HAN_HI + 1] = 1
        for a, b in ((48, 57), (65, 90), (97, 122)):
            block[a : b + 1] = 1
        for ch in _BLOCK_CHARS:
            block[ord(ch)] = 1
        self.block_cls = block

    def freqs(self, words: list[str]) -> np.ndarray:
        """jieba's ``FREQ.get(w, 0)`` of each word (int64)."""
        if not words:
            return np.zeros(0, dtype=np.int64)
        _, cps, doc_off = texts_to_codepoints(words)
        lens = (np.diff(doc_off) - 1).astype(np.int32)
        return jieba_kernels().lookup_freqs(
            cps, doc_off[:-1], lens, self.keys, self.vals, self.freq
        )

    def _spans(self, cps: np.ndarray, doc_off: np.ndarray, hmm: bool):
        return jieba_kernels().jieba_spans(
            cps,
            doc_off,
            self.block_cls,
            self.keys,
            self.vals,
            self.freq,
            self.logp,
            self.start_p,
            self.trans_p,
            self.emit_p,
            bool(hmm),
        )

    def warmup(self) -> None:
        """Compile (or load from numba's cache) the kernels."""
        self.encode(["中文分词 abc\r\n"], hmm=True)
        self.encode(["中文"], hmm=False)

    def cut(self, text: str, hmm: bool = True) -> list[str]:
        """``jieba.lcut(text, HMM=hmm)``."""
        joined, cps, doc_off = texts_to_codepoints([text])
        starts, lens, _ = self._spans(cps, doc_off, hmm)
        return span_strings(joined, cps, starts, lens)

    def encode(
        self, texts: list[str], hmm: bool = True
    ) -> tuple[list[str], np.ndarray, np.ndarray]:
        """``(distinct raw tokens in first-occurrence order, local ids int32, offsets int64)``."""
        joined, cps, doc_off = texts_to_codepoints(texts)
        starts, lens, tok_off = self._spans(cps, doc_off, hmm)
        ids, first = text_kernels().intern_spans(cps, starts, lens)
        vocab = span_strings(joined, cps, starts[first], lens[first])
        return vocab, ids, tok_off


@functools.lru_cache(maxsize=1)
def get_segmenter() -> JiebaSegmenter:
    """The process-wide segmenter (built on first use from jieba's dictionary)."""
    return JiebaSegmenter()


class JiebaPython:
    """The jieba package behind :class:`JiebaSegmenter`'s methods: the same tokens without
    kernels. ``search=True`` cuts with jieba's ``cut_for_search``."""

    def __init__(self, search: bool = False) -> None:
        self.search = search

    def freqs(self, words: list[str]) -> np.ndarray:
        """jieba's ``FREQ.get(w, 0)`` of each word (int64)."""
        freq = jieba_tokenizer().FREQ
        return np.array([freq.get(w, 0) for w in words], dtype=np.int64)

    def warmup(self) -> None:
        """Load jieba's dictionary."""
        jieba_tokenizer()

    def cut(self, text: str, hmm: bool = True) -> list[str]:
        """``jieba.lcut(text, HMM=hmm)`` (``lcut_for_search`` with ``search=True``)."""
        dt = jieba_tokenizer()
        return dt.lcut_for_search(text, HMM=hmm) if self.search else dt.lcut(text, HMM=hmm)

    def encode(
        self, texts: list[str], hmm: bool = True
    ) -> tuple[list[str], np.ndarray, np.ndarray]:
        """As :meth:`JiebaSegmenter.encode`."""
        local: dict[str, int] = {}
        ids: list[int] = []
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        setdefault = local.setdefault
        for i, text in enumerate(texts):
            ids.extend([setdefault(tok, len(local)) for tok in self.cut(text, hmm)])
            offsets[i + 1] = len(ids)
        return list(local), np.asarray(ids, dtype=np.int32), offsets


_PYTHON = (JiebaPython(), JiebaPython(search=True))


def segmenter(*, search: bool = False, port: bool = True) -> JiebaSegmenter | JiebaPython:
    """jieba's segmenter for this call: the numba port when ``port`` is set and its kernels are
    ready (compiled or cached), else the jieba package (the same tokens; always for
    ``search=True``, jieba's ``cut_for_search``, which has no port)."""
    if port and not search and kernels_for():
        return get_segmenter()
    return _PYTHON[search]
