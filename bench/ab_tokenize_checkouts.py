"""Tokenizing CPU time of two checkouts, interleaved: ``encode_chunk`` of ``bm25`` and
``bm25_chinese`` over CMRC dev (paragraphs and questions) and the first 8,000 lines of the
bench's 2 MB server log, memo cold (``release_memo`` first) and warm (best of 5).

Each round runs every checkout once, each in a fresh process that imports ``fastrag`` and
``fastrag._kernels`` from that checkout (checked) with its own numba cache, in turn:

    python bench/ab_tokenize_checkouts.py BEFORE_DIR AFTER_DIR --rounds 6

Writes ``bench/results/ab_tokenize_checkouts.{json,md}`` (``--name`` to change): per sample,
analyzer and state, each checkout's median CPU seconds and the median of the paired ratios.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _checkouts import checkout_args, interleave, paired, report
from _harness import WORK_DIR, median
from gen_log import write_log

ANALYZERS = ("bm25", "bm25_chinese")
LOG_LINES = 8000

CHILD = r"""
import time
from fastrag.analysis import get_analyzer
from fastrag.datasets import load_cmrc2018_dev
from fastrag.eval.loaders import squad_questions
import fastrag._kernels.jieba as jieba_kernel
assert jieba_kernel.__file__.startswith(os.path.dirname(OUT["kernels"]))

log = open(sys.argv[2], encoding="utf-8").read().splitlines()[: int(sys.argv[3])]
questions, _, contexts = squad_questions(load_cmrc2018_dev())
samples = {"cmrc": contexts + questions, "log": log}
out = OUT
for name in sys.argv[4:]:
    an = get_analyzer(name)
    an.encode_chunk(["warm 中文 up"])
    for sample, texts in samples.items():
        an.release_memo()
        t0 = time.process_time()
        an.encode_chunk(texts)
        cold = time.process_time() - t0
        warm = float("inf")
        for _ in range(5):
            t0 = time.process_time()
            an.encode_chunk(texts)
            warm = min(warm, time.process_time() - t0)
        out[f"{name}|{sample}"] = [cold, warm]
print(json.dumps(out))
"""


TITLE = "Tokenizing CPU time"
WHAT = "CPU seconds of `encode_chunk`: cold = memo released first, warm = best of 5 after it"
HEADERS = ["analyzer", "sample", "memo", "before s", "after s", "after / before (paired)"]


def log_file() -> Path:
    path = WORK_DIR / "ab_tokenize" / "log_2mb_s0.log"
    if not path.exists():
        write_log(path, 2_000_000, seed=0)
    return path


def main() -> int:
    args = checkout_args(__doc__.splitlines()[0], 6, "ab_tokenize_checkouts").parse_args()
    child_args = [str(log_file()), str(LOG_LINES), *ANALYZERS]
    rounds = interleave(args, CHILD, child_args, "ab_tokenize")
    rows, table = [], []
    for key in (k for k in rounds[0]["before"] if "|" in k):
        analyzer, sample = key.split("|")
        for i, state in enumerate(("cold", "warm")):
            b, a, ratio = paired(rounds, lambda out, key=key, i=i: out[key][i])
            rows.append(
                {
                    "analyzer": analyzer,
                    "sample": sample,
                    "state": state,
                    "before_s": b,
                    "after_s": a,
                    "paired_ratio": ratio,
                }
            )
            table.append([analyzer, sample, state, median(b), median(a), ratio])
    report(args, TITLE, WHAT, HEADERS, table, rows, rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
