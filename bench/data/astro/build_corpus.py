"""Recreate the Astro docs held-out corpus from a git snapshot of withastro/docs (not
committed).

    python bench/data/astro/build_corpus.py MIRROR_DIR OUT_DIR

``MIRROR_DIR`` holds the git dir ``withastro+docs/repo`` (as the ``fetch`` tool lays it out;
``--git-dir-pattern`` changes that). Writes ``OUT_DIR/<lang>/.../<page>.md``: every page
(``.md`` and ``.mdx``, written as ``.md``) under ``src/content/docs/<code>`` of each language
at the commit recorded here, as the checkout holds it (untranslated pages are absent there).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import git_corpus  # noqa: E402  (bench/data/git_corpus.py)

COMMIT = "741c1b89ba13cf9b4ac4087ef09dc269e113fa77"
# lang -> (repository, commit, folder code): one repository holds every language
REPOS = {
    lang: ("withastro/docs", COMMIT, code)
    for lang, code in {
        "en": "en",
        "fr": "fr",
        "es": "es",
        "pt": "pt-br",
        "de": "de",
        "zh": "zh-cn",
        "ja": "ja",
        "ko": "ko",
        "ru": "ru",
    }.items()
}
PREFIX = "src/content/docs/{code}/"


def build(mirror: Path, out: Path, pattern: str = "{owner}+{name}/repo") -> int:
    """Write the corpus; returns the number of pages."""
    return git_corpus.build(
        REPOS, (PREFIX.rstrip("/"),), PREFIX, mirror, out, pattern, suffixes=(".md", ".mdx")
    )


if __name__ == "__main__":
    raise SystemExit(git_corpus.main(__doc__, build))
