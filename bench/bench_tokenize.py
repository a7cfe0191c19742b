"""Corpus tokenization throughput (chars/s): jieba vs fastrag's analyzers, 0/1/2 workers.

Corpora: the 848 unique CMRC 2018 dev paragraphs (~432k chars) and a larger one made by
shuffling all CMRC sentences into documents, ``--scale`` times the CMRC size (seeded).

Rows (all in this process, same texts, medians of ``--repeats``):

* ``jieba.lcut``: the peer, jieba's own segmentation, one text at a time (raw tokens only);
* ``fastrag segmenter cut``: fastrag's numba port of jieba, one text at a time (same tokens);
* ``tokenize_corpus`` with ``bm25_chinese`` (segmenter ``jieba`` and the default numba one)
  and ``bm25_cjk``, with 0 (in process), 1 and 2 worker processes: full pipeline up to int32
  token-id arrays. Worker rows include starting the pool (fork: the default start method on
  Linux) and each worker's set-up.

Usage: ``python bench/bench_tokenize.py`` (full), ``--smoke`` (tiny, CI).
Writes ``bench/results/tokenize.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, markdown_table, median, write_results


def cmrc_contexts() -> list[str]:
    from fastrag.datasets import load_cmrc2018_dev

    squad = load_cmrc2018_dev()
    return list(dict.fromkeys(p["context"] for a in squad["data"] for p in a["paragraphs"]))


def shuffled_corpus(contexts: list[str], scale: float, seed: int = 0) -> list[str]:
    """Documents of 5-15 CMRC sentences drawn from shuffled copies of all sentences."""
    sentences = [s for c in contexts for s in re.findall(r"[^。！？!?]+[。！？!?]?", c)]
    target = int(sum(map(len, contexts)) * scale)
    rng = random.Random(seed)
    docs: list[str] = []
    pool: list[str] = []
    size = 0
    while size < target:
        if len(pool) < 15:
            more = sentences[:]
            rng.shuffle(more)
            pool.extend(more)
        n = rng.randint(5, 15)
        doc = "".join(pool[:n])
        del pool[:n]
        docs.append(doc)
        size += len(doc)
    return docs


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny run for CI (< 20 s)")
    ap.add_argument("--scale", type=float, default=5.0, help="larger corpus, x CMRC size")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="results directory (default bench/results)")
    args = ap.parse_args(argv)

    from fastrag.analysis import get_analyzer, tokenize_corpus
    from fastrag.analysis.segment import get_segmenter, jieba_tokenizer

    info = machine_info(["jieba", "fastrag-engine"])
    contexts = cmrc_contexts()
    if args.smoke:
        corpora = {"cmrc[:100]": contexts[:100]}
        worker_counts = (0, 1)
        repeats = 1
    else:
        corpora = {
            "cmrc": contexts,
            f"shuffled x{args.scale:g}": shuffled_corpus(contexts, args.scale),
        }
        worker_counts = (0, 1, 2)
        repeats = args.repeats

    # warm-up: dictionary loads and numba kernels (compiled or loaded from numba's cache)
    dt = jieba_tokenizer()
    seg = get_segmenter()
    seg.warmup()
    analyzers = {
        "bm25_chinese (jieba)": get_analyzer("bm25_chinese", segmenter="jieba"),
        "bm25_chinese (fastrag segmenter)": get_analyzer("bm25_chinese"),
        "bm25_cjk": get_analyzer("bm25_cjk"),
    }
    for an in analyzers.values():
        an.warmup()
        tokenize_corpus(contexts[:20], an)

    rows = []
    records = []
    for cname, texts in corpora.items():
        n_chars = sum(map(len, texts))

        def add(
            method: str,
            workers: int | None,
            seconds: float,
            tokens: int | None = None,
            cname=cname,
            texts=texts,
            n_chars=n_chars,
        ):
            rec = {
                "corpus": cname,
                "n_texts": len(texts),
                "n_chars": n_chars,
                "method": method,
                "workers": workers,
                "seconds": seconds,
                "chars_per_s": n_chars / seconds,
                "tokens": tokens,
            }
            records.append(rec)
            rows.append(
                [
                    cname,
                    method,
                    "-" if workers is None else workers,
                    round(seconds, 3),
                    n_chars / seconds / 1e6,
                ]
            )
            print(
                f"{cname:>14} {method:<36} workers={rec['workers']!s:<4} "
                f"{seconds:8.3f} s {n_chars / seconds / 1e6:7.3f} M chars/s",
                flush=True,
            )

        add(
            "jieba.lcut (peer)",
            None,
            timed(lambda texts=texts: [dt.lcut(t) for t in texts], repeats),
        )
        add(
            "fastrag segmenter cut",
            None,
            timed(lambda texts=texts: [seg.cut(t) for t in texts], repeats),
        )
        for aname, an in analyzers.items():
            for w in worker_counts:
                out = {}

                def run(an=an, w=w, out=out, texts=texts):
                    out["tc"] = tokenize_corpus(texts, an, num_workers=w)

                secs = timed(run, repeats)
                add(f"tokenize_corpus {aname}", w, secs, out["tc"].n_tokens)

    import os

    load_end = list(os.getloadavg())
    md = [
        "# Corpus tokenization throughput",
        "",
        (
            f"Machine: {info['cpu']}, {info['usable_cores']} usable cores, load average at "
            f"start {info['loadavg_at_start']}, at end {load_end}; numba {info.get('numba')}, "
            f"numpy {info['numpy']}, jieba {info.get('jieba')}. Medians of {repeats} runs. "
            "Worker rows include starting the pool (fork) and each worker's set-up."
        ),
        "",
        markdown_table(["corpus", "method", "workers", "seconds", "M chars/s"], rows),
        "",
    ]
    name = "tokenize_smoke" if args.smoke else "tokenize"
    jp, mp = write_results(
        name,
        {"machine": info, "repeats": repeats, "results": records},
        "\n".join(md),
        Path(args.out) if args.out else None,
    )
    print(f"wrote {jp} and {mp}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
