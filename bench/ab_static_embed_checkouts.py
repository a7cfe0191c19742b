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

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _checkouts import checkout_args, interleave, paired, report
from _harness import WORK_DIR, median

CHILD = r"""
import time
from pathlib import Path
folders, repeats = json.loads(sys.argv[2]), int(sys.argv[3])
from bench_static_embed import chinese_chunks, fastapi_chunks
from fastrag.embeddings.static import StaticEmbedding
import fastrag._kernels.static_embed as pool
assert pool.__file__.startswith(os.path.dirname(OUT["kernels"]))
sets = {"fastapi": fastapi_chunks(2000), "cmrc": chinese_chunks(2000)}
out = OUT
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


TITLE = "Static embedding, texts per CPU-second"
HEADERS = ["table", "texts", "before", "after", "after / before (paired)"]


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


def main() -> int:
    ap = checkout_args(__doc__.splitlines()[0], 5, "ab_static_embed_checkouts")
    ap.add_argument("--repeats", type=int, default=3, help="first passes per process (median)")
    args = ap.parse_args()
    folders = json.dumps(tables())
    rounds = interleave(args, CHILD, [folders, str(args.repeats)], "ab_static_embed")
    rows, table = [], []
    for key in (k for k in rounds[0]["before"] if "|" in k):
        model, texts = key.split("|")
        b, a, ratio = paired(rounds, lambda out, key=key: out[key])
        rows.append({"table": model, "texts": texts, "before": b, "after": a, "paired": ratio})
        table.append([model, texts, f"{median(b):,.0f}", f"{median(a):,.0f}", f"{ratio:.2f}"])
    what = f"First pass (a fresh embedder), one thread, median of {args.repeats} per process"
    report(args, TITLE, what, HEADERS, table, rows, rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
