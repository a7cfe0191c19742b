"""Recreate the React docs Traditional Chinese held-out corpus from git snapshots of
reactjs/zh-hant.react.dev, reactjs/zh-hans.react.dev and reactjs/react.dev (not committed).

    python bench/data/react_tw/build_corpus.py MIRROR_DIR OUT_DIR

``MIRROR_DIR`` holds one git dir per repository (``owner+name/repo``, as the ``fetch`` tool
lays them out; ``--git-dir-pattern`` changes that). Writes
``OUT_DIR/<zh-tw|zh|en>/<learn|reference>/.../<page>.md``: every ``src/content/learn`` and
``src/content/reference`` page of each checkout, translated or not. The Simplified Chinese
and English commits are the React set's (``bench/data/react/build_corpus.py``).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import git_corpus  # noqa: E402  (bench/data/git_corpus.py)

_REACT = runpy.run_path(str(HERE.parent / "react" / "build_corpus.py"))
# lang -> (repository, commit)
REPOS = {
    "zh-tw": ("reactjs/zh-hant.react.dev", "19692fa83681619db5849b5d24b14b67b9650329"),
    "zh": _REACT["REPOS"]["zh"],
    "en": _REACT["REPOS"]["en"],
}
FOLDERS = _REACT["FOLDERS"]


def build(mirror: Path, out: Path, pattern: str = "{owner}+{name}/repo") -> int:
    """Write the corpus; returns the number of pages."""
    return git_corpus.build(REPOS, FOLDERS, "src/content/", mirror, out, pattern)


if __name__ == "__main__":
    raise SystemExit(git_corpus.main(__doc__, build))
