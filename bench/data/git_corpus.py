"""Held-out corpora rebuilt from git snapshots of a docs repository and its translations:
each language's pages under some folders at a pinned commit (``bench/data/vue``,
``bench/data/react``, ``bench/data/astro``, ...). A set whose folder holds a ``site.json``
(one repository, English pages at a root next to the translations' folders) is rebuilt here:

    python bench/data/git_corpus.py bench/data/biome MIRROR_DIR OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def build(
    repos: dict[str, tuple[str, ...]],
    folders: tuple[str, ...],
    prefix: str,
    mirror: Path,
    out: Path,
    pattern: str = "{owner}+{name}/repo",
    suffixes: tuple[str, ...] = (".md",),
) -> int:
    """Write ``out/<lang>/<path without prefix>`` for every page under ``folders`` of each
    language's repository whose name ends with one of ``suffixes`` (written as ``.md``);
    returns the count. ``repos``: lang -> (owner/name, commit) or (owner/name, commit, code),
    where ``code`` (default: lang) fills ``{code}`` in ``folders`` and ``prefix``, for
    repositories that keep every language in one tree. ``mirror`` holds one git dir per
    repository, named as ``pattern`` says."""
    count = 0
    for lang, (repo, commit, *rest) in repos.items():
        code = rest[0] if rest else lang
        owner, name = repo.split("/")
        git_dir = str(mirror / pattern.format(owner=owner, name=name))

        def git(*args: str, git_dir: str = git_dir) -> str:
            return subprocess.run(
                ["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True
            ).stdout

        lang_folders = [f.format(code=code) for f in folders]
        listing = git("ls-tree", "-r", "-z", "--name-only", commit, *lang_folders)
        for path in filter(None, listing.split("\0")):  # names may hold spaces
            suffix = next((s for s in suffixes if path.endswith(s)), None)
            if suffix is None:
                continue
            rel = path.removeprefix(prefix.format(code=code)).removesuffix(suffix) + ".md"
            dest = out / lang / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(git("show", f"{commit}:{path}"), encoding="utf-8")
            count += 1
    return count


def build_root_site(
    repo: tuple[str, str],
    root: str,
    english: tuple[str, ...],
    translations: dict[str, str],
    mirror: Path,
    out: Path,
    pattern: str = "{owner}+{name}/repo",
) -> int:
    """A Starlight-style docs site in one repository ``(owner/name, commit)``: English pages
    are ``english`` (folders and pages under ``root``, next to the translations' folders),
    each translation ``lang -> code`` is the folder ``root + code``; ``.md`` and ``.mdx``
    pages. Returns the page count."""
    suffixes = (".md", ".mdx")
    paths = tuple(root + e for e in english)
    count = build({"en": repo}, paths, root, mirror, out, pattern, suffixes=suffixes)
    others = {lang: (*repo, code) for lang, code in translations.items()}
    folder = root + "{code}"
    return count + build(others, (folder,), folder + "/", mirror, out, pattern, suffixes=suffixes)


def build_site(folder: Path, mirror: Path, out: Path, pattern: str = "{owner}+{name}/repo") -> int:
    """The corpus of the set in ``folder`` from its ``site.json`` (``repo``, ``commit``,
    ``root``, ``english``, ``translations``: :func:`build_root_site`'s arguments)."""
    site = json.loads((Path(folder) / "site.json").read_text(encoding="utf-8"))
    repo = (site["repo"], site["commit"])
    english, translations = tuple(site["english"]), site["translations"]
    return build_root_site(repo, site["root"], english, translations, mirror, out, pattern)


def main(doc: str, build_fn: Callable[..., int]) -> int:
    """The command line of a ``build_corpus.py``: ``MIRROR_DIR OUT_DIR [--git-dir-pattern]``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("mirror", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--git-dir-pattern", default="{owner}+{name}/repo")
    args = ap.parse_args()
    print(f"{build_fn(args.mirror, args.out, args.git_dir_pattern)} pages -> {args.out}")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="rebuild the corpus of a set described by site.json")
    ap.add_argument("set_dir", type=Path)
    ap.add_argument("mirror", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--git-dir-pattern", default="{owner}+{name}/repo")
    a = ap.parse_args()
    n = build_site(a.set_dir, a.mirror, a.out, a.git_dir_pattern)
    print(f"{n} pages -> {a.out}")
    sys.exit(0)
