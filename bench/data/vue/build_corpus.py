"""Recreate the Vue docs held-out corpus from git snapshots of vuejs/docs and its
translations (not committed).

    python bench/data/vue/build_corpus.py MIRROR_DIR OUT_DIR

``MIRROR_DIR`` holds one git dir per repository, named as ``REPOS`` says (``owner+name/repo``,
as the ``fetch`` tool lays them out; ``--git-dir-pattern`` changes that). Writes
``OUT_DIR/<lang>/<guide|api>/.../<page>.md``: every ``src/guide`` and ``src/api`` page of each
language at the commit recorded here.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

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
    count = 0
    for lang, (repo, commit) in REPOS.items():
        owner, name = repo.split("/")
        git_dir = str(mirror / pattern.format(owner=owner, name=name))

        def git(*args: str, git_dir: str = git_dir) -> str:
            return subprocess.run(
                ["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True
            ).stdout

        names = git("ls-tree", "-r", "--name-only", commit, "src/guide", "src/api").split()
        for path in names:
            if not path.endswith(".md"):
                continue
            dest = out / lang / path.removeprefix("src/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(git("show", f"{commit}:{path}"), encoding="utf-8")
            count += 1
    return count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mirror", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--git-dir-pattern", default="{owner}+{name}/repo")
    args = ap.parse_args()
    print(f"{build(args.mirror, args.out, args.git_dir_pattern)} pages -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
