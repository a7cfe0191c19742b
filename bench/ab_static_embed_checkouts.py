"""Static embedding CPU time of two checkouts, interleaved: ``StaticEmbedding.embed`` on the
1,000-character chunks of ``bench_static_embed.py`` (FastAPI's docs in 6 languages, CMRC),
first pass (a fresh embedder, its word cache empty), MiniLM's table and e5-small's.

Each round runs every checkout once, each in a fresh process that imports ``fastrag`` and
``fastrag._kernels`` from that checkout (checked) with its own ``NUMBA_CACHE_DIR``, in turn:

    python bench/ab_static_embed_checkouts.py BEFORE_DIR AFTER_DIR --rounds 5

The tables come from ``bench_static_embed.py``'s cache (MiniLM's full table, e5's 1,000-token
subset: speed does not depend on the values); both checkouts read the same files. Writes
``bench/results/ab_static_embed_checkouts.{json,md}`` (``--name`` to change): each
checkout's median texts per CPU-second and the median of the paired ratios.
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

CHILD = r"""
import importlib.util, json, os, sys, time
root, folders, repeats = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
sys.path[:0] = [root, os.path.join(root, "bench")]
import fastrag
spec = importlib.util.spec_from_file_location(
    "fastrag._kernels", os.path.join(root, "kernels", "__init__.py"),
    submodule_search_locations=[os.path.join(root, "kernels")],
)
kernels = importlib.util.module_from_spec(spec)
sys.modules["fastrag._kernels"] = kernels
spec.loader.exec_module(kernels)
fastrag._kernels = kernels
from pathlib import Path
from bench_static_embed import chinese_chunks, fastapi_chunks
from fastrag.embeddings.static import StaticEmbedding
import fastrag._kernels.static_embed as pool
sets = {"fastapi": fastapi_chunks(2000), "cmrc": chinese_chunks(2000)}
out = {"fastrag": fastrag.__file__, "kernels": pool.__file__}
for model, folder in folders.items():
    StaticEmbedding.load(Path(folder)).embed(sets["cmrc"][:3])  # load the kernels
    for name, texts in sets.items():
        rates = []
        for _ in range(repeats):
            emb = StaticEmbedding.load(Path(folder))
            t0 = time.process_time()
            emb.embed(texts)
            rates.append(len(texts) / (time.process_time() - t0))
        out[f"{model}|{name}"] = sorted(rates)[len(rates) // 2]
print(json.dumps(out))
"""


def tables() -> dict[str, str]:
    from fastrag.embeddings.distill import build_static_table, table_folder
    from fastrag.embeddings.static import StaticEmbedding

    minilm = table_folder("minilm", 256)
    if not (minilm / "meta.json").exists():
        StaticEmbedding.from_model("minilm")
    e5 = WORK_DIR / "ab_static_embed" / "e5-small-subset"
    if not (e5 / "meta.json").exists():
        build_static_table("e5-small", e5, dim=256, tokens=range(4, 1004))
    return {"minilm": str(minilm), "e5-small": str(e5)}


def run(checkout: Path, folders: dict[str, str], repeats: int) -> dict:
    cache = WORK_DIR / "ab_static_embed" / f"numba-{checkout.resolve().name}"
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "NUMBA_CACHE_DIR": str(cache)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(checkout), json.dumps(folders), str(repeats)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{checkout}: {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("fastrag", "kernels"):
        if not Path(out[key]).resolve().is_relative_to(checkout.resolve()):
            raise SystemExit(f"{checkout}: imported {key} from {out[key]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="first passes per process (median)")
    ap.add_argument("--name", default="ab_static_embed_checkouts")
    args = ap.parse_args()
    folders = tables()
    rounds = []
    for r in range(args.rounds):
        load = os.getloadavg()[0]
        before = run(args.before, folders, args.repeats)
        after = run(args.after, folders, args.repeats)
        rounds.append({"load": load, "before": before, "after": after})
        print(f"round {r + 1}/{args.rounds} done (load {load:.2f})", flush=True)
    rows, table = [], []
    for key in (k for k in rounds[0]["before"] if "|" in k):
        model, texts = key.split("|")
        b = [x["before"][key] for x in rounds]
        a = [x["after"][key] for x in rounds]
        ratio = median([y / x for x, y in zip(b, a, strict=True)])
        rows.append({"table": model, "texts": texts, "before": b, "after": a, "paired": ratio})
        table.append([model, texts, f"{median(b):,.0f}", f"{median(a):,.0f}", f"{ratio:.2f}"])
    info = machine_info(["numpy", "numba"])
    loads = [x["load"] for x in rounds]
    md = "\n".join(
        [
            "# Static embedding, texts per CPU-second, two checkouts interleaved",
            "",
            f"`python bench/ab_static_embed_checkouts.py {args.before} {args.after} --rounds "
            f"{args.rounds}`; {info['cpu']} ({info.get('cpu_class', '')}), {args.rounds} "
            f"rounds, load {min(loads):.2f}-{max(loads):.2f}, {info['date']}. First pass (a "
            f"fresh embedder), one thread, median of {args.repeats} per process; medians over "
            "rounds, and the median of the per-round after/before ratios.",
            "",
            markdown_table(["table", "texts", "before", "after", "after / before (paired)"], table),
        ]
    )
    write_results(args.name, {"machine": info, "rounds": rounds, "rows": rows}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
