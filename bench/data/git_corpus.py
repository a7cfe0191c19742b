"""Held-out corpora rebuilt from git snapshots of a docs repository and its translations:
each language's pages under some folders at a pinned commit (``bench/data/vue``,
``bench/data/react``)."""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Callable
from pathlib import Path


def build(
    repos: dict[str, tuple[str, str]],
    folders: tuple[str, ...],
    prefix: str,
    mirror: Path,
    out: Path,
    pattern: str = "{owner}+{name}/repo",
) -> int:
    """Write ``out/<lang>/<path without prefix>`` for every ``.md`` page under ``folders`` of
    each language's repository (``repos``: lang -> (owner/name, commit)); returns the count.
    ``mirror`` holds one git dir per repository, named as ``pattern`` says."""
    count = 0
    for lang, (repo, commit) in repos.items():
        owner, name = repo.split("/")
        git_dir = str(mirror / pattern.format(owner=owner, name=name))

        def git(*args: str, git_dir: str = git_dir) -> str:
            return subprocess.run(
                ["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True
            ).stdout

        for path in git("ls-tree", "-r", "--name-only", commit, *folders).split():
            if not path.endswith(".md"):
                continue
            dest = out / lang / path.removeprefix(prefix)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(git("show", f"{commit}:{path}"), encoding="utf-8")
            count += 1
    return count


def main(doc: str, build_fn: Callable[..., int]) -> int:
    """The command line of a ``build_corpus.py``: ``MIRROR_DIR OUT_DIR [--git-dir-pattern]``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("mirror", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--git-dir-pattern", default="{owner}+{name}/repo")
    args = ap.parse_args()
    print(f"{build_fn(args.mirror, args.out, args.git_dir_pattern)} pages -> {args.out}")
    return 0
