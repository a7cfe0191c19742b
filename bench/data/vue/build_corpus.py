"""Recreate the Vue docs held-out corpus from git snapshots of vuejs/docs and its
translations (not committed).

    python bench/data/vue/build_corpus.py MIRROR_DIR OUT_DIR

``MIRROR_DIR`` holds one git dir per repository, named as ``REPOS`` says (``owner+name/repo``,
as the ``fetch`` tool lays them out; ``--git-dir-pattern`` changes that). Writes
``OUT_DIR/<lang>/<guide|api>/.../<page>.md``: every ``src/guide`` and ``src/api`` page of each
language at the commit recorded here.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import git_corpus  # noqa: E402  (bench/data/git_corpus.py)

# lang -> (repository, commit)
REPOS = {
    "en": ("vuejs/docs", "01e098a967951ea92d09b100b8e7d82c7a3369a2"),
    "zh": ("vuejs-translations/docs-zh-cn", "c2715ff75bae5376bc5bf212280ae76e30089fbd"),
    "ja": ("vuejs-translations/docs-ja", "c627102bfabf8bc5ecaa6eb763b965a0a5d43a5b"),
    "ko": ("vuejs-translations/docs-ko", "6e646acb5687510feda533281faa546b26ea243c"),
    "fr": ("vuejs-translations/docs-fr", "f944e8479b8d8ef3caa21a3ae415ba927b7492a7"),
    "ru": ("vuejs-translations/docs-ru", "ed53a951b62483bb8a9e70b98815edd7491b475c"),
}


def build(mirror: Path, out: Path, pattern: str = "{owner}+{name}/repo") -> int:
    """Write the corpus; returns the number of pages."""
    return git_corpus.build(REPOS, ("src/guide", "src/api"), "src/", mirror, out, pattern)


if __name__ == "__main__":
    raise SystemExit(git_corpus.main(__doc__, build))
