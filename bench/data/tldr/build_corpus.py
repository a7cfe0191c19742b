"""Recreate the tldr held-out corpus from a tldr-pages/tldr git snapshot (not committed).

    python bench/data/tldr/build_corpus.py GIT_DIR OUT_DIR [--commit SHA]

Writes ``OUT_DIR/<lang>/<command>.md`` (``en`` for ``pages/``): for en zh ja ko fr de es ru,
every page of ``common/`` and ``linux/`` whose file exists in all eight languages (alias pages
included: they are the realistic near-duplicates); for th and lo, every page of those folders
(mostly alias pages; the few full pages are the Thai/Lao targets). A name in both folders
keeps ``common/``'s page. Pages are read with ``git show``, so nothing but git is needed.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

COMMIT = "08e345f42639f67d99282813247ac670dc6e87cb"  # tldr-pages/tldr, 2026-08-22
POOLED = ["en", "zh", "ja", "ko", "fr", "de", "es", "ru"]
WHOLE = ["th", "lo"]
FOLDERS = ["common", "linux"]


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True
    ).stdout


def _names(git_dir: str, commit: str, lang: str, folder: str) -> list[str]:
    top = "pages" if lang == "en" else f"pages.{lang}"
    out = subprocess.run(
        ["git", "--git-dir", git_dir, "ls-tree", "--name-only", f"{commit}:{top}/{folder}"],
        capture_output=True,
        text=True,
    ).stdout
    return [n for n in out.split() if n.endswith(".md")]


def build(git_dir: str, out: Path, commit: str = COMMIT) -> int:
    """Write the corpus; returns the number of pages."""
    pool = {}
    for folder in FOLDERS:
        sets = [set(_names(git_dir, commit, lang, folder)) for lang in POOLED]
        pool[folder] = set.intersection(*sets)
    count = 0
    for lang in POOLED + WHOLE:
        top = "pages" if lang == "en" else f"pages.{lang}"
        seen: set[str] = set()
        for folder in FOLDERS:
            names = pool[folder] if lang in POOLED else set(_names(git_dir, commit, lang, folder))
            for name in sorted(names - seen):
                seen.add(name)
                text = _git(git_dir, "show", f"{commit}:{top}/{folder}/{name}")
                dest = out / lang / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(text, encoding="utf-8")
                count += 1
    return count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("git_dir", help="a tldr-pages/tldr git directory (bare or .git)")
    ap.add_argument("out", type=Path)
    ap.add_argument("--commit", default=COMMIT)
    args = ap.parse_args()
    print(f"{build(args.git_dir, args.out, args.commit)} pages -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
