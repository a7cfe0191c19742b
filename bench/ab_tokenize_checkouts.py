"""Tokenizing CPU time of two checkouts, interleaved: ``encode_chunk`` of ``bm25`` and
``bm25_chinese`` over CMRC dev (paragraphs and questions) and the first 8,000 lines of the
bench's 2 MB server log, memo cold (``release_memo`` first) and warm (best of 5).

Each round runs every checkout once, each in a fresh process with ``PYTHONPATH=<checkout>``
(kernels loaded from its numba cache; run ``fastrag warmup`` in each first), in turn:

    python bench/ab_tokenize_checkouts.py BEFORE_DIR AFTER_DIR --rounds 6

Writes ``bench/results/ab_tokenize_checkouts.{json,md}`` (``--name`` to change): per sample,
analyzer and state, each checkout's median CPU seconds and the median of the paired ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import WORK_DIR, machine_info, markdown_table, median, write_results
from gen_log import write_log

ANALYZERS = ("bm25", "bm25_chinese")
LOG_LINES = 8000

CHILD = r"""
import json, sys, time
from fastrag.analysis import get_analyzer
from fastrag.datasets import load_cmrc2018_dev
from fastrag.eval.loaders import squad_questions

import fastrag
log = open(sys.argv[1], encoding="utf-8").read().splitlines()[: int(sys.argv[2])]
questions, _, contexts = squad_questions(load_cmrc2018_dev())
samples = {"cmrc": contexts + questions, "log": log}
out = {"fastrag": fastrag.__file__}
for name in sys.argv[3:]:
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


def log_file() -> Path:
    path = WORK_DIR / "ab_tokenize" / "log_2mb_s0.log"
    if not path.exists():
        write_log(path, 2_000_000, seed=0)
    return path


def run(checkout: Path, log: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(log), str(LOG_LINES), *ANALYZERS],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{checkout}: {proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not Path(out["fastrag"]).resolve().is_relative_to(checkout.resolve()):
        raise SystemExit(f"{checkout}: imported fastrag from {out['fastrag']}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--name", default="ab_tokenize_checkouts")
    args = ap.parse_args()
    log = log_file()
    rounds = []
    for r in range(args.rounds):
        load = os.getloadavg()[0]
        rounds.append(
            {"load": load, "before": run(args.before, log), "after": run(args.after, log)}
        )
        print(f"round {r + 1}/{args.rounds} done (load {load:.2f})", flush=True)
    rows, table = [], []
    for key in (k for k in rounds[0]["before"] if "|" in k):
        analyzer, sample = key.split("|")
        for i, state in enumerate(("cold", "warm")):
            b = [x["before"][key][i] for x in rounds]
            a = [x["after"][key][i] for x in rounds]
            ratio = median([y / x for x, y in zip(b, a, strict=True)])
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
    info = machine_info(["numpy", "numba"])
    loads = [x["load"] for x in rounds]
    md = "\n".join(
        [
            "# Tokenizing CPU time, two checkouts interleaved",
            "",
            f"`python bench/ab_tokenize_checkouts.py {args.before} {args.after} --rounds "
            f"{args.rounds}`; {info['cpu']} ({info.get('cpu_class', '')}), {args.rounds} rounds, "
            f"load {min(loads):.2f}-{max(loads):.2f}, {info['date']}. CPU seconds of "
            "`encode_chunk`: cold = memo released first, warm = best of 5 after it; medians "
            "over rounds, and the median of the per-round after/before ratios.",
            "",
            markdown_table(
                ["analyzer", "sample", "memo", "before s", "after s", "after / before (paired)"],
                table,
            ),
        ]
    )
    write_results(args.name, {"machine": info, "rounds": rounds, "rows": rows}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
