"""Recreate the Vite docs held-out corpus from git snapshots of vitejs/vite and its translation
repositories (not committed).

    python bench/data/vite/build_corpus.py MIRROR_DIR OUT_DIR

``MIRROR_DIR`` holds one git dir per repository (``vitejs+vite/repo``, ``vitejs+docs-cn/repo``,
... as the ``fetch`` tool lays them out; ``--git-dir-pattern`` changes that). Writes
``OUT_DIR/<lang>/.../<page>.md``: the pages of the docs site (guide, config, plugins, changes,
blog and the top pages) in each language at the commits recorded here. English, Spanish,
Portuguese and German keep them under ``docs/``, Chinese, Japanese and Korean at the root.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import git_corpus  # noqa: E402  (bench/data/git_corpus.py)

PAGES = ("blog", "changes", "config", "guide", "plugins")
PAGES += ("acknowledgements.md", "blog.md", "index.md", "live.md", "releases.md", "team.md")
UNDER_DOCS = {
    "en": ("vitejs/vite", "a98c8d95d552c6fa98ab66fb810f5b39ad5abf49"),
    "es": ("vitejs/docs-es", "ceab6516303316a00310befa240c13722dd64b3e"),
    "pt": ("vitejs/docs-pt", "01bb4d9e170f5cb402292a263ca041b3c2d73f9f"),
    "de": ("vitejs/docs-de", "f9ac6cd297e6f75a81b0a010e1d7f5c1f90f79e9"),
}
AT_ROOT = {
    "zh": ("vitejs/docs-cn", "e2456079a4d366282206969b7dd819e2139d2035"),
    "ja": ("vitejs/docs-ja", "3237ae23aba865919bc6b2f7e68a784ea64c51ac"),
    "ko": ("vitejs/docs-ko", "7cec40882780a30be887a9e7bacaa6e936868d6b"),
}


def build(mirror: Path, out: Path, pattern: str = "{owner}+{name}/repo") -> int:
    """Write the corpus; returns the number of pages."""
    docs = tuple("docs/" + p for p in PAGES)
    count = git_corpus.build(UNDER_DOCS, docs, "docs/", mirror, out, pattern)
    return count + git_corpus.build(AT_ROOT, PAGES, "", mirror, out, pattern)


if __name__ == "__main__":
    raise SystemExit(git_corpus.main(__doc__, build))
