"""Bundled datasets and helpers that turn SQuAD-style data into a knowledge base.

Attribution: ``data/cmrc2018_dev.json.gz`` is the development set of CMRC 2018 by Yiming Cui,
Ting Liu, Wanxiang Che, Li Xiao, Zhipeng Chen, Wentao Ma, Shijin Wang and Guoping Hu
("A Span-Extraction Dataset for Chinese Machine Reading Comprehension", EMNLP-IJCNLP 2019;
https://github.com/ymcui/cmrc2018), shipped unmodified (gzip-compressed) under the Creative
Commons Attribution-ShareAlike 4.0 International licence (CC BY-SA 4.0): see
``data/CMRC2018_LICENCE.txt`` and ``data/NOTICE``. Knowledge bases built from it carry the same
licence.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Mapping
from importlib import resources
from os import PathLike
from pathlib import Path
from typing import Any

from fastrag._checks import check_int
from fastrag.errors import ConfigError
from fastrag.eval.loaders import squad_questions

__all__ = ["CMRC2018_LICENCE", "build_squad_kb", "load_cmrc2018_dev", "squad_questions"]

CMRC2018_LICENCE = "CC BY-SA 4.0"
_KB_FILE = re.compile(r"^part_\d{4,}\.txt$")


def _data_file(name: str):
    return resources.files(__name__).joinpath("data", name)


def load_cmrc2018_dev() -> dict[str, Any]:
    """The CMRC 2018 dev set (SQuAD format: 848 paragraphs, 3,219 questions) as a new dict.

    CC BY-SA 4.0, by Cui et al. (see this module's docstring for the attribution).
    """
    with (
        _data_file("cmrc2018_dev.json.gz").open("rb") as raw,
        gzip.open(raw, "rt", encoding="utf-8") as f,
    ):
        return json.load(f)


def build_squad_kb(squad: Mapping, out_dir: str | PathLike, per_file: int = 10) -> list[Path]:
    """Write the unique paragraphs of a SQuAD-format dict as a knowledge base of ``.txt`` files.

    Paragraphs (first-seen order, line breaks inside a paragraph turned into spaces) go
    ``per_file`` to a file, joined by ``"\\n"`` with no trailing newline, so splitting a file on
    ``"\\n"`` gives exactly one piece per paragraph (the tutorial's ``"block"`` group). Files are
    named ``part_0000.txt``, ``part_0001.txt``, ... so that sorted order is paragraph order; stale
    ``part_*.txt`` files of an earlier, larger build in ``out_dir`` are removed. Returns the paths
    written, in order.
    """
    check_int("per_file", per_file, min=1, note="paragraphs per file")
    _, _, contexts = squad_questions(squad)
    if not contexts:
        raise ConfigError("the SQuAD data has no paragraphs; nothing to write")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"out_dir {str(out)!r} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    n_files = -(-len(contexts) // per_file)
    width = max(4, len(str(n_files - 1)))
    paths: list[Path] = []
    for i in range(n_files):
        path = out / f"part_{i:0{width}d}.txt"
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write("\n".join(contexts[i * per_file : (i + 1) * per_file]))
        paths.append(path)
    written = {p.name for p in paths}
    for stale in out.iterdir():
        if stale.is_file() and _KB_FILE.match(stale.name) and stale.name not in written:
            stale.unlink()
    return paths
