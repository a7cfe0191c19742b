"""Static embeddings against the default embedder: texts/s on 1,000-character chunks, 1 thread.

Texts: 1,000-character chunks of real documents, in a fixed order: FastAPI's tutorial in six
languages from bench/data/fastapi_docs (Markdown; de 333, fr 326, pt 310, es 307, en 284, zh
158 chunks) and Chinese from the CMRC 2018 dev contexts bundled in ``fastrag.datasets``
(consecutive contexts joined, then cut). ``--texts`` chunks of each set.

Rows (one process, ``--threads`` threads for numba, onnxruntime/OpenMP and tokenizers):

* ``e5-small (default_embedding)``: ``fr.default_embedding(num_threads=T)`` on ``--e5-texts``
  chunks spread evenly over the set (it runs at a few texts/s, so fewer texts; texts/s is
  per text);
* ``static minilm`` / ``static e5-small``: ``StaticEmbedding.load(...)`` of the cached table on
  every chunk: ``--repeats`` first passes, each with a fresh embedder (its word cache empty,
  as on a new corpus; the median is reported), then ``--repeats`` second passes (every word
  cached); split into tokenization (the model's
  tokenizer, word by word through the cache) and pooling (the numba kernel). The e5 static
  table is the cached full table when it exists, else a table distilled from 1,000 tokens
  (``table`` column says so): speed does not depend on the values.

CPU seconds (``time.process_time``) and wall seconds are both reported, with the load average;
the load (and table verification) time of each embedder is its own column.

Usage: ``python bench/bench_static_embed.py`` (up to 2,000 texts per set, 20 for e5),
``--smoke`` (20 texts, 2 for e5), ``--hide-avx512`` (the AVX2 paths of an AVX-512 CPU,
``_avx2only.py``). Writes ``bench/results/static_embed.json`` and ``.md``
(``static_embed_smoke.*`` for ``--smoke``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def fastapi_chunks(n: int, size: int = 1000) -> list[str]:
    out: list[str] = []
    for path in sorted((HERE / "data" / "fastapi_docs").rglob("*.md")):
        text = " ".join(path.read_text("utf-8", errors="replace").split())
        for s in range(0, len(text) - size + 1, size):
            out.append(text[s : s + size])
            if len(out) == n:
                return out
    return out


def chinese_chunks(n: int, size: int = 1000) -> list[str]:
    from fastrag.datasets import load_cmrc2018_dev

    data = load_cmrc2018_dev()
    text = "".join(p["context"] for a in data["data"] for p in a["paragraphs"])
    return [text[s : s + size] for s in range(0, min(len(text), n * size) - size + 1, size)]


def timed(fn, repeats: int = 1, args: tuple = ()) -> tuple[float, float]:
    c, w = time.process_time(), time.perf_counter()
    for _ in range(repeats):
        fn(*args)
    return time.process_time() - c, time.perf_counter() - w


def static_row(model: str, texts: list[str], repeats: int, cache: Path) -> dict:
    from fastrag.embeddings.distill import build_static_table, table_folder
    from fastrag.embeddings.static import StaticEmbedding

    table = "full"
    folder = table_folder(model, 256)
    if not (folder / "meta.json").exists():
        if model == "minilm":
            StaticEmbedding.from_model(model)  # ~20 CPU-s: build it
        else:
            folder = cache / f"{model}-subset"
            build_static_table(model, folder, dim=256, tokens=range(4, 1004))
            table = "1,000-token subset"
    w = time.perf_counter()
    emb = StaticEmbedding.load(folder)
    load_wall = time.perf_counter() - w
    emb.embed_ids(np.zeros(1, np.int32), np.array([0, 1]))  # compile / load the kernel
    n = len(texts)
    # first passes: each on a fresh embedder (empty word cache); medians of ``repeats``
    tok_cold = statistics.median(
        timed(StaticEmbedding.load(folder).tokenize, args=(texts,))[0] for _ in range(repeats)
    )
    tok_warm, _ = timed(lambda: emb.tokenize(texts), repeats)
    ids, offsets = emb.tokenize(texts)
    pool_cpu, _ = timed(lambda: emb.embed_ids(ids, offsets), repeats)
    colds = [timed(StaticEmbedding.load(folder).embed, args=(texts,)) for _ in range(repeats)]
    cold_cpu = statistics.median(c for c, _ in colds)
    cold_wall = statistics.median(w for _, w in colds)
    fresh = StaticEmbedding.load(folder)
    fresh.embed(texts)
    warm_cpu, warm_wall = timed(lambda: fresh.embed(texts), repeats)
    return {
        "embedder": f"static {model}",
        "table": table,
        "texts": n,
        "tokens_per_text": round(len(ids) / n, 1),
        "load_s": round(load_wall, 3),
        "texts_per_cpu_s": n / cold_cpu,
        "texts_per_s": n / cold_wall,
        "warm_texts_per_cpu_s": n * repeats / warm_cpu,
        "tokenize_share": tok_cold / (tok_cold + pool_cpu / repeats),
        "tokenize_texts_per_cpu_s": n / tok_cold,
        "tokenize_warm_texts_per_cpu_s": n * repeats / tok_warm,
        "pool_texts_per_cpu_s": n * repeats / pool_cpu,
    }


def e5_row(texts: list[str], threads: int) -> dict:
    import fastrag as fr

    w = time.perf_counter()
    emb = fr.default_embedding(num_threads=threads)
    load_wall = time.perf_counter() - w
    emb.embed(texts[:1])
    cpu, wall = timed(lambda: emb.embed(texts))
    return {
        "embedder": "e5-small (default_embedding)",
        "table": "-",
        "texts": len(texts),
        "load_s": round(load_wall, 3),
        "texts_per_cpu_s": len(texts) / cpu,
        "texts_per_s": len(texts) / wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=2000, help="chunks per language")
    ap.add_argument("--e5-texts", type=int, default=20, help="chunks per language for e5")
    ap.add_argument("--repeats", type=int, default=3, help="1st and 2nd passes (static)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", default=None, help="results folder (default bench/results)")
    ap.add_argument(
        "--hide-avx512",
        action="store_true",
        help="run on the AVX2 paths: the process restarts with AVX-512 hidden (CPUID faulting)",
    )
    args = ap.parse_args()
    from _harness import AVX512_HIDDEN, machine_info, markdown_table, write_results

    if args.hide_avx512 and os.environ.get(AVX512_HIDDEN) != "1":
        from _avx2only import hide_avx512_env

        env = {**os.environ, **hide_avx512_env()}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    if args.smoke:
        args.texts, args.e5_texts, args.repeats = 20, 2, 1
    t = str(args.threads)
    for var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "RAYON_NUM_THREADS"):
        os.environ[var] = t
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if args.threads > 1 else "false"

    sets = {
        "fastapi (6 languages)": fastapi_chunks(args.texts),
        "cmrc (zh)": chinese_chunks(args.texts),
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for lang, texts in sets.items():
            for model in ("minilm", "e5-small"):
                rows.append({"lang": lang, **static_row(model, texts, args.repeats, Path(tmp))})
            sample = texts[:: max(1, len(texts) // args.e5_texts)][: args.e5_texts]
            rows.append({"lang": lang, **e5_row(sample, args.threads)})
    for lang in sets:
        base = next(r for r in rows if r["lang"] == lang and r["table"] == "-")
        for r in rows:
            if r["lang"] == lang:
                r["x_default"] = r["texts_per_cpu_s"] / base["texts_per_cpu_s"]
    load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else []
    info = machine_info()
    payload = {"machine": info, "loadavg": load, "threads": args.threads, "rows": rows}
    headers = [
        "texts of",
        "embedder",
        "table",
        "texts",
        "texts/CPU-s",
        "texts/s (wall)",
        "x default",
        "2nd pass texts/CPU-s",
        "load s",
        "tokenize share",
        "tokenize texts/CPU-s (1st / 2nd pass)",
        "pool texts/CPU-s",
    ]
    table = [
        [r["lang"], r["embedder"], r["table"], r["texts"], f"{r['texts_per_cpu_s']:,.1f}",
         f"{r['texts_per_s']:,.1f}", f"{r['x_default']:,.0f}x",
         f"{r['warm_texts_per_cpu_s']:,.0f}" if "tokenize_share" in r else "-", r["load_s"],
         f"{r['tokenize_share']:.0%}" if "tokenize_share" in r else "-",
         f"{r['tokenize_texts_per_cpu_s']:,.0f} / {r['tokenize_warm_texts_per_cpu_s']:,.0f}"
         if "tokenize_share" in r else "-",
         f"{r['pool_texts_per_cpu_s']:,.0f}" if "tokenize_share" in r else "-"]
        for r in rows
    ]  # fmt: skip
    md = (
        f"# Static embeddings vs default_embedding (1,000-character chunks, "
        f"{args.threads} thread(s))\n\n"
        f"CPU: {info.get('cpu', '?')} ({info.get('cpu_class', '?')}); "
        f"load average {' '.join(load)}.\n\n"
        + markdown_table(headers, table)
        + "\n\ntexts/CPU-s, texts/s: one pass over the chunks with a fresh embedder (empty word "
        f"cache), median of {args.repeats}; 2nd pass: the same chunks again (every word "
        "cached). x default: first-pass texts per CPU-second over default_embedding()'s on the "
        "same set. tokenize share: of the first pass's CPU time."
    )
    name = "static_embed_smoke" if args.smoke else "static_embed"
    paths = write_results(name, payload, md, Path(args.out) if args.out else None)
    print(md)
    print("wrote", *paths)


if __name__ == "__main__":
    main()
