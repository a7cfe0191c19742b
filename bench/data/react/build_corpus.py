"""Recreate the React docs held-out corpus from git snapshots of reactjs/react.dev and its
translations (not committed).

    python bench/data/react/build_corpus.py MIRROR_DIR OUT_DIR

``MIRROR_DIR`` holds one git dir per repository, named as ``REPOS`` says (``owner+name/repo``,
as the ``fetch`` tool lays them out; ``--git-dir-pattern`` changes that). Writes
``OUT_DIR/<lang>/<learn|reference>/.../<page>.md``: every ``src/content/learn`` and
``src/content/reference`` page of each language at the commit recorded here, translated or
not (as a user's checkout of the translation holds them).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import git_corpus  # noqa: E402  (bench/data/git_corpus.py)

# lang -> (repository, commit)
REPOS = {
    "en": ("reactjs/react.dev", "12d692da47e77cdc558b928fcfbaf4e71c6d0cec"),
    "fr": ("reactjs/fr.react.dev", "d60169fc8269d36347b340dd1def35c7af8e031d"),
    "es": ("reactjs/es.react.dev", "e91a76a98e0291fd3ae2abeb3da31442981a77f1"),
    "pt": ("reactjs/pt-br.react.dev", "ac8362350bbc25125a88b9309b54457589023c7e"),
    "zh": ("reactjs/zh-hans.react.dev", "f6cda05526ceff44b24588e9e0c2e2106d4588d4"),
    "ja": ("reactjs/ja.react.dev", "7f38231d9d5dddaae6ac51da7d0f173d697f835c"),
    "ko": ("reactjs/ko.react.dev", "2e8c873c3cea6703d1c94d01b5d5716259005c8e"),
    "ru": ("reactjs/ru.react.dev", "2361adda823b4cb04f0c46aade0303d20e6cb8a4"),
}
FOLDERS = ("src/content/learn", "src/content/reference")


def build(mirror: Path, out: Path, pattern: str = "{owner}+{name}/repo") -> int:
    """Write the corpus; returns the number of pages."""
    return git_corpus.build(REPOS, FOLDERS, "src/content/", mirror, out, pattern)


if __name__ == "__main__":
    raise SystemExit(git_corpus.main(__doc__, build))
