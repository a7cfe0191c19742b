"""Recreate the Starlight docs held-out corpus from a git snapshot of withastro/starlight (not
committed).

    python bench/data/starlight/build_corpus.py MIRROR_DIR OUT_DIR

``MIRROR_DIR`` holds the git dir ``withastro+starlight/repo`` (as the ``fetch`` tool lays it
out; ``--git-dir-pattern`` changes that). Writes ``OUT_DIR/<lang>/.../<page>.md``: every page
(``.md`` and ``.mdx``, written as ``.md``) of the docs site in each language at the commit
recorded here. English pages sit at the root of ``docs/src/content/docs``, next to the
translations' folders, so English is read from its own folders and pages.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import git_corpus  # noqa: E402  (bench/data/git_corpus.py)

REPO = "withastro/starlight"
COMMIT = "3999be7cc18b41095d61e3b63d68ff3e6c6c050b"
ROOT = "docs/src/content/docs/"
# English: the root's folders and pages (everything else there is a translation's folder)
ENGLISH = (
    "components",
    "guides",
    "reference",
    "resources",
    "404.md",
    "environmental-impact.mdx",
    "getting-started.mdx",
    "index.mdx",
    "manual-setup.mdx",
)
TRANSLATIONS = {
    "fr": "fr",
    "es": "es",
    "de": "de",
    "zh": "zh-cn",
    "ja": "ja",
    "ko": "ko",
    "ru": "ru",
}


def build(mirror: Path, out: Path, pattern: str = "{owner}+{name}/repo") -> int:
    """Write the corpus; returns the number of pages."""
    return git_corpus.build_root_site(
        (REPO, COMMIT), ROOT, ENGLISH, TRANSLATIONS, mirror, out, pattern
    )


if __name__ == "__main__":
    raise SystemExit(git_corpus.main(__doc__, build))
