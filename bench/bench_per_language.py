"""CPU cost of the default analyzer's per-text language (``per_language``, issue 42): the
``bm25`` analyzer with it against ``per_language=False``, tokenizing real pages and queries.

Corpora: the FastAPI tutorial in six languages (``bench/data/fastapi_docs``, 306 pages, one
text per page), its 51 English pages alone (no text changes language: the cost of the check
alone), the tldr pages when built (``bench/.work/tldr_corpus``); queries: every question of
the known-item sets in ``bench/data`` (one batch). One thread, CPU seconds
(``time.process_time``) of a fresh analyzer's first and second calls, the two
analyzers interleaved, median of ``--repeats``.

    python bench/bench_per_language.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import BENCH_DIR, WORK_DIR, machine_info, markdown_table, write_results

from fastrag.analysis.mixed import MixedAnalyzer

DATA = BENCH_DIR / "data"


def _pages(folder: Path) -> list[str]:
    return [p.read_text("utf-8") for p in sorted(folder.rglob("*.md"))]


def _cases() -> dict[str, tuple[list[str], bool]]:
    fastapi = DATA / "fastapi_docs" / "corpus"
    cases = {
        "FastAPI pages, 6 languages": (_pages(fastapi), False),
        "FastAPI pages, English only": (_pages(fastapi / "en"), False),
    }
    tldr = WORK_DIR / "tldr_corpus"
    if tldr.is_dir():
        cases["tldr pages, 10 languages"] = (_pages(tldr), False)
    questions = [
        json.loads(line)["question"]
        for name in ("mixed_docs", "fastapi_docs", "tldr", "vue", "react")
        if (DATA / name / "questions.jsonl").is_file()
        for line in (DATA / name / "questions.jsonl").open(encoding="utf-8")
    ]
    cases["queries of the known-item sets"] = (questions, True)
    return cases


def _cpu(texts: list[str], query: bool, per_language: bool) -> tuple[float, float]:
    """CPU seconds of a fresh analyzer's first call and of its second (memo warm)."""
    an = MixedAnalyzer(per_language=per_language)
    encode = an.encode_query_chunk if query else an.encode_chunk
    out = []
    for _ in range(2):
        t0 = time.process_time()
        encode(texts)
        out.append(time.process_time() - t0)
    return out[0], out[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--name", default="per_language_cost")
    args = ap.parse_args()
    rows, payload = [], {"machine": machine_info(["numpy", "numba"]), "cases": {}}
    for label, (texts, query) in _cases().items():
        for flag in (True, False):  # warm: kernels, jieba, stemmers
            _cpu(texts, query, flag)
        runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for _ in range(args.repeats):
            for flag in (False, True):
                runs[flag].append(_cpu(texts, query, flag))
        cold = [statistics.median(r[0] for r in runs[f]) for f in (False, True)]
        warm = [statistics.median(r[1] for r in runs[f]) for f in (False, True)]
        chars = sum(map(len, texts))
        rows.append([label, len(texts), chars, *cold, cold[1] / cold[0], *warm, warm[1] / warm[0]])
        payload["cases"][label] = {"texts": len(texts), "chars": chars, "runs": runs}
    info = payload["machine"]
    text = "\n".join(
        [
            "# Per-text language of the default analyzer: CPU cost",
            "",
            f"`python bench/bench_per_language.py --repeats {args.repeats}`; CPU: "
            f"{info.get('cpu')} ({info.get('cpu_class')}); load at start "
            f"{info.get('loadavg_at_start')}; commit {info.get('commit')}. "
            "One thread, CPU seconds of `encode_chunk` (pages) or `encode_query_chunk` "
            "(queries, one batch): a fresh analyzer's first call (stems memoised from none) "
            "and its second call (memo warm, as an index build's later chunks); "
            "`off` is `per_language=False`; medians of interleaved repeats.",
            "",
            markdown_table(
                [
                    *("texts", "n", "chars"),
                    *("off, 1st call", "default, 1st call", "ratio"),
                    *("off, memo warm", "default, memo warm", "ratio"),
                ],
                rows,
            ),
        ]
    )
    write_results(args.name, payload, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
