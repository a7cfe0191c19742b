"""Recreate the Pinia docs held-out corpus from a git snapshot of vuejs/pinia (not
committed).

    python bench/data/pinia/build_corpus.py MIRROR_DIR OUT_DIR

``MIRROR_DIR`` holds the git dir ``vuejs+pinia/repo`` (as the ``fetch`` tool lays it out;
``--git-dir-pattern`` changes that). Writes ``OUT_DIR/<lang>/.../<page>.md``: every page of
the docs site in English and Chinese at the commit recorded here. English pages sit at the
root of ``packages/docs``, next to the Chinese folder ``zh``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import git_corpus  # noqa: E402  (bench/data/git_corpus.py)

REPO = "vuejs/pinia"
COMMIT = "254eec764ecccd120ab9dbc31352d76ffd6ecfa3"
ROOT = "packages/docs/"
# English: the root's folders and pages (the rest is the site's code and the Chinese folder)
ENGLISH = (
    "api",
    "cookbook",
    "core-concepts",
    "getting-started.md",
    "index.md",
    "introduction.md",
    "ssr",
)
TRANSLATIONS = {"zh": "zh"}


def build(mirror: Path, out: Path, pattern: str = "{owner}+{name}/repo") -> int:
    """Write the corpus; returns the number of pages."""
    return git_corpus.build_root_site(
        (REPO, COMMIT), ROOT, ENGLISH, TRANSLATIONS, mirror, out, pattern
    )


if __name__ == "__main__":
    raise SystemExit(git_corpus.main(__doc__, build))
