"""Tokenizing speed of the default ``bm25`` analyzer by language (issue 42, goal 1): CPU
seconds of ``encode_chunk`` over whole corpora, span cache cold, best of 3.

Run it once with each version to compare (the held-out corpora of ``bench_quality.py``
must be built: ``--sets tldr,vue`` with ``--tldr-git`` / ``--vue-mirror``):

    python bench/ab_mixed_tokenize.py              # this checkout
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import WORK_DIR

import fastrag
from fastrag.analysis import get_analyzer
from fastrag.datasets import load_cmrc2018_dev
from fastrag.eval.loaders import squad_questions


def corpora() -> dict[str, list[str]]:
    """Texts per sample: tldr pages by language, the Japanese Vue docs, CMRC paragraphs."""
    out = {}
    for lang in ("en", "zh", "ja", "th"):
        paths = sorted((WORK_DIR / "tldr_corpus" / lang).glob("*.md"))
        out[f"tldr-{lang}"] = [p.read_text("utf-8") for p in paths]
    out["vue-ja"] = [
        p.read_text("utf-8") for p in sorted((WORK_DIR / "vue_corpus" / "ja").rglob("*.md"))
    ]
    out["cmrc"] = squad_questions(load_cmrc2018_dev())[2]
    return out


def main() -> int:
    an = get_analyzer("bm25")
    an.warmup()
    print(f"fastrag at {Path(fastrag.__file__).parent}; {an.identity()}")
    for name, texts in corpora().items():
        if not texts:
            continue
        an.encode_chunk(texts[:20])
        best = float("inf")
        for _ in range(3):
            an._cache = {}  # noqa: SLF001  (a cold span cache each repeat)
            t0 = time.process_time()
            _, ids, _ = an.encode_chunk(texts)
            best = min(best, time.process_time() - t0)
        chars = sum(map(len, texts))
        print(
            f"{name:8s} {len(texts):5d} texts {chars / 1e6:.2f} Mchar {len(ids):8d} tokens "
            f"{best:.3f} cpu-s {chars / best / 1e6:.2f} Mchar/s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
