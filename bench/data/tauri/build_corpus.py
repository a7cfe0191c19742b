"""Recreate the Tauri docs held-out corpus from a git snapshot of tauri-apps/tauri-docs (not
committed).

    python bench/data/tauri/build_corpus.py MIRROR_DIR OUT_DIR

``MIRROR_DIR`` holds the git dir ``tauri-apps+tauri-docs/repo`` (as the ``fetch`` tool lays it
out; ``--git-dir-pattern`` changes that). Writes ``OUT_DIR/<lang>/.../<page>.md``: every page
(``.md`` and ``.mdx``, written as ``.md``) of the docs site in English and Chinese at the
commit recorded here. English pages sit at the root of ``src/content/docs``, next to the
translations' folders, so English is read from its own folders and pages.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import git_corpus  # noqa: E402  (bench/data/git_corpus.py)

REPO = "tauri-apps/tauri-docs"
COMMIT = "e1c39c6ef06b936f70e977d53c60fcf329ec3702"
ROOT = "src/content/docs/"
# English: the root's folders and pages (the rest is translations and included fragments)
ENGLISH = (
    "about",
    "blog",
    "concept",
    "develop",
    "distribute",
    "learn",
    "plugin",
    "reference",
    "release",
    "security",
    "start",
    "404.md",
    "index.mdx",
    "rss.mdx",
)
TRANSLATIONS = {"zh": "zh-cn"}


def build(mirror: Path, out: Path, pattern: str = "{owner}+{name}/repo") -> int:
    """Write the corpus; returns the number of pages."""
    return git_corpus.build_root_site(
        (REPO, COMMIT), ROOT, ENGLISH, TRANSLATIONS, mirror, out, pattern
    )


if __name__ == "__main__":
    raise SystemExit(git_corpus.main(__doc__, build))
