"""Seeded ingest benchmark corpus: ~100 MB of .txt files, half Chinese, half English (by bytes).

Recipe (deterministic for a given ``seed`` and ``mb``):

* Chinese files: the 848 unique CMRC 2018 dev paragraphs (``fastrag.datasets``), drawn in
  random order (a fresh permutation each time all are used), one paragraph a line, as the
  LazyLLM tutorial lays out a knowledge base.
* English files: generated prose. A vocabulary of 6,000 pseudo-words (2-4 random syllables)
  plus 60 English function words, drawn with Zipf-like weights; sentences of 4-30 words,
  capitalized, with occasional commas, numbers (``3.14``, ``1,024``), quotes and parentheses,
  ending in ``.`` / ``?`` / ``!``; paragraphs of 3-9 sentences separated by a blank line.
* Files of 100-300 KB alternate between the two languages until ``mb`` megabytes are written,
  named ``zh_00000.txt`` / ``en_00001.txt`` under ``bench/.work/ingest/<mb>mb_s<seed>/``
  (gitignored). A ``done.json`` marker records the recipe; an existing complete corpus is reused.

Usage: ``python bench/gen_ingest_corpus.py --mb 100`` prints the folder and its size.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import WORK_DIR

RECIPE_VERSION = 1
FUNCTION_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "a",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "i",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "they",
    "you",
    "were",
    "her",
    "she",
    "there",
    "one",
    "all",
    "we",
    "their",
    "been",
    "has",
    "more",
    "if",
    "will",
    "would",
    "about",
    "can",
    "its",
    "than",
    "other",
    "into",
    "some",
    "could",
    "them",
    "these",
    "two",
    "may",
    "then",
    "do",
    "first",
    "any",
]
SYLLABLES = [
    c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou", "ea", "io")
]


def _cmrc_paragraphs() -> list[str]:
    from fastrag.datasets import load_cmrc2018_dev

    data = load_cmrc2018_dev()
    return list(dict.fromkeys(p["context"] for a in data["data"] for p in a["paragraphs"]))


class _English:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        words = set()
        while len(words) < 6000:
            words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
        self.vocab = FUNCTION_WORDS + sorted(words)
        self.weights = [1.0 / (i + 5) for i in range(len(self.vocab))]  # Zipf-like

    def sentence(self) -> str:
        rng = self.rng
        words = rng.choices(self.vocab, self.weights, k=rng.randint(4, 30))
        for _ in range(rng.randint(0, 2)):
            i = rng.randrange(1, len(words))
            words[i] += ","
        if rng.random() < 0.15:
            words.insert(
                rng.randrange(len(words)), rng.choice(["3.14", "1,024", "42", "2019", "0.5"])
            )
        if rng.random() < 0.08:
            i = rng.randrange(len(words))
            words[i] = "(" + words[i] + ")"
        text = " ".join(words).rstrip(",")
        text = text[0].upper() + text[1:] + rng.choice(".....?!")
        if rng.random() < 0.05:
            text = '"' + text + '"'
        return text

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(3, 9)))


def generate(mb: float = 100.0, seed: int = 0, out_dir: Path | None = None) -> Path:
    """Write the corpus (or reuse a complete one) and return its folder."""
    out = Path(out_dir) if out_dir else WORK_DIR / "ingest" / f"{mb:g}mb_s{seed}"
    marker = out / "done.json"
    recipe = {"version": RECIPE_VERSION, "mb": mb, "seed": seed}
    if marker.exists() and json.loads(marker.read_text()).get("recipe") == recipe:
        return out
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.txt"):
        old.unlink()
    rng = random.Random(seed)
    paras = _cmrc_paragraphs()
    order: list[int] = []
    english = _English(rng)
    target = int(mb * 1e6)
    written = 0
    i = 0
    while written < target:
        size = min(rng.randint(100_000, 300_000), max(2_000, target - written))
        parts: list[str] = []
        n = 0
        if i % 2 == 0:
            while n < size:
                if not order:
                    order = list(range(len(paras)))
                    rng.shuffle(order)
                p = paras[order.pop()]
                parts.append(p)
                n += len(p.encode("utf-8")) + 1
            text, name = "\n".join(parts) + "\n", f"zh_{i:05d}.txt"
        else:
            while n < size:
                p = english.paragraph()
                parts.append(p)
                n += len(p) + 2
            text, name = "\n\n".join(parts) + "\n", f"en_{i:05d}.txt"
        data = text.encode("utf-8")
        (out / name).write_bytes(data)
        written += len(data)
        i += 1
    marker.write_text(json.dumps({"recipe": recipe, "files": i, "bytes": written}) + "\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=100.0, help="megabytes to write (default 100)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.mb <= 0:
        ap.error(f"--mb must be > 0, got {args.mb}")
    out = generate(args.mb, args.seed)
    info = json.loads((out / "done.json").read_text())
    print(f"{out}: {info['files']} files, {info['bytes'] / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
