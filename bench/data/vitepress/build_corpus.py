"""Recreate the VitePress docs held-out corpus from a git snapshot of vuejs/vitepress (not
committed).

    python bench/data/vitepress/build_corpus.py MIRROR_DIR OUT_DIR

``MIRROR_DIR`` holds the git dir ``vuejs+vitepress/repo`` (as the ``fetch`` tool lays it out;
``--git-dir-pattern`` changes that). Writes ``OUT_DIR/<lang>/.../<page>.md``: every page under
``docs/<lang>`` at the commit recorded here, for the seven languages the questions ask in.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import git_corpus  # noqa: E402  (bench/data/git_corpus.py)

REPO = "vuejs/vitepress"
COMMIT = "ed2bfb266ef788e86d1a73fe3cd7708a4cd5e260"
LANGS = ("en", "zh", "pt", "ru", "es", "ko", "ja")


def build(mirror: Path, out: Path, pattern: str = "{owner}+{name}/repo") -> int:
    """Write the corpus; returns the number of pages."""
    repos = {lang: (REPO, COMMIT) for lang in LANGS}
    return git_corpus.build(repos, ("docs/{code}",), "docs/{code}/", mirror, out, pattern)


if __name__ == "__main__":
    raise SystemExit(git_corpus.main(__doc__, build))
