"""Recreate the tldr Traditional Chinese held-out corpus from a tldr-pages/tldr git snapshot.

    python bench/data/tldr_tw/build_corpus.py GIT_DIR OUT_DIR [--commit SHA]

Writes ``OUT_DIR/<lang>/<command>.md`` for every page of ``common/`` and ``linux/`` in
``pages.zh_TW`` (``zh-tw``; alias pages included), and the page of the same name in
``pages.zh`` (``zh``) and ``pages`` (``en``) where one exists. A name in both folders keeps
``common/``'s page. The git helpers are the tldr set's (``bench/data/tldr/build_corpus.py``).
"""

from __future__ import annotations

import argparse
import runpy
from pathlib import Path

_TLDR = runpy.run_path(str(Path(__file__).resolve().parent.parent / "tldr" / "build_corpus.py"))
COMMIT = _TLDR["COMMIT"]
LANGS = {"zh-tw": "zh_TW", "zh": "zh", "en": "en"}  # folder -> tldr's language code
FOLDERS = ["common", "linux"]


def build(git_dir: str, out: Path, commit: str = COMMIT) -> int:
    """Write the corpus; returns the number of pages."""
    names = {f: set(_TLDR["_names"](git_dir, commit, "zh_TW", f)) for f in FOLDERS}
    count = 0
    for lang, code in LANGS.items():
        top = "pages" if code == "en" else f"pages.{code}"
        seen: set[str] = set()
        for folder in FOLDERS:
            have = set(_TLDR["_names"](git_dir, commit, code, folder))
            for name in sorted((names[folder] & have) - seen):
                seen.add(name)
                text = _TLDR["_git"](git_dir, "show", f"{commit}:{top}/{folder}/{name}")
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
