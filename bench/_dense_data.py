"""Vector sets for bench/bench_dense.py, each as (corpus, queries) float32 unit rows:

* ``iso``: seeded Gaussian rows (isotropic).
* ``dominant``: Gaussian rows plus a common component (``||mean|| ~ 0.6`` of unit rows) and 8
  of every 384 dimensions scaled 4x: the shape that makes per-row int8 codes waste their range.
* ``e5`` / ``minilm``: vectors of real text from the embedding models fastrag ships
  (``fr.default_embedding("e5-small")``: multilingual-e5-small, 3,000 passages of the CMRC 2018
  dev contexts and the bench/data doc folders, mixed Chinese/English/other; ``"minilm"``:
  all-MiniLM-L6-v2, 4,000 English passages), with 1,000 real queries (CMRC questions and doc
  headings). Embedding takes ~5 minutes once and is cached in ``bench/.work``. To reach 100k or
  1M rows, each extra row interpolates two random real rows (``t ~ U(0, 0.35)``) and is
  renormalised, which keeps the common component and the anisotropy of real vectors (and
  makes the data denser than the real set: more near-ties, a harder case for a first pass).
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from pathlib import Path

from _harness import WORK_DIR

ROOT = Path(__file__).resolve().parent.parent
REAL = {"e5": ("e5-small", 3000), "minilm": ("minilm", 4000)}
SETS = ("iso", "dominant", "e5", "minilm")
GEN_CHUNK = 100_000


def _texts() -> tuple[list[str], list[str]]:
    """Passages (~150 characters on average) and query texts from the bundled real data."""
    passages: list[str] = []
    queries: list[str] = []
    cmrc = json.loads((ROOT.parent / "shared/data/cmrc2018_dev.json").read_text("utf-8"))
    for art in cmrc["data"]:
        for p in art["paragraphs"]:
            ctx = p["context"]
            passages += [ctx[i : i + 240] for i in range(0, len(ctx), 200)]
            queries += [qa["question"] for qa in p["qas"]]
    for base in ("bench/data/fastapi_docs", "bench/data/mixed_docs"):
        for f in sorted((ROOT / base).rglob("*")):
            if not (f.is_file() and f.suffix in (".md", ".txt", ".rst", ".html")):
                continue
            try:
                text = f.read_text("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            for para in re.split(r"\n\s*\n", text):
                para = para.strip()
                if len(para) >= 60:
                    passages.append(para[:600])
                    if para.startswith("#") or len(para) < 120:
                        queries.append(para[:120])
    return passages, queries


def _samples() -> dict[str, tuple[list[str], list[str]]]:
    """The passages and queries each model embeds (one seeded draw, MiniLM's first)."""
    passages, queries = _texts()
    rng = random.Random(0)
    out = {}
    for name in ("minilm", "e5"):
        p, q = passages, queries
        if name == "minilm":  # English only
            p = [t for t in p if t.isascii()]
            q = [t for t in q if t.isascii()]
        drawn_p = rng.sample(p, REAL[name][1])
        out[name] = (drawn_p, rng.sample(q, 1000))
    return out


def real_vectors(name: str) -> tuple[Path, Path]:
    """Cached embeddings of the real passages and queries for ``e5`` or ``minilm``."""
    import numpy as np

    model = REAL[name][0]
    xp, qp = WORK_DIR / f"real_{name}_x.npy", WORK_DIR / f"real_{name}_q.npy"
    if xp.exists() and qp.exists():
        return xp, qp
    import fastrag as fr

    passages, queries = _samples()[name]
    emb = fr.default_embedding(model)
    t0 = time.perf_counter()
    q = np.asarray([emb.embed_query(t) for t in queries], np.float32)
    x = np.asarray(emb.embed(passages), np.float32)
    took = time.perf_counter() - t0
    print(f"embedded {name}: {len(passages)} passages in {took:.0f} s", flush=True)
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    for path, arr in ((qp, q), (xp, x)):
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, arr)
        os.replace(tmp, path)
    return xp, qp


def dataset(name: str, n: int, dim: int, n_queries: int, seed: int = 0) -> tuple[Path, Path]:
    """Paths of the corpus and query files of set ``name`` (generated once, in chunks)."""
    import numpy as np

    if name not in SETS:
        raise SystemExit(f"unknown data set {name!r}: choose from {', '.join(SETS)}")
    if name in REAL and dim != 384:
        raise SystemExit(f"{name} vectors are 384-d (asked for {dim})")
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    tag = "dense" if name == "iso" else f"dense_{name}"  # iso keeps its old file names
    xp = WORK_DIR / f"{tag}_{n}x{dim}_s{seed}.npy"
    qp = WORK_DIR / f"{tag}_q{n_queries}x{dim}_s{seed}.npy"
    if xp.exists() and qp.exists():
        return xp, qp
    if name in REAL:
        rx, rq = real_vectors(name)
        base, q = np.load(rx), np.load(rq)[:n_queries]
    else:
        rng = np.random.default_rng([seed, 10**6])
        q = rng.standard_normal((n_queries, dim), dtype=np.float32)
    tmp = xp.with_suffix(".tmp.npy")
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, dim))
    shape_rng = np.random.default_rng([seed, 7])
    common = shape_rng.standard_normal(dim).astype(np.float32)
    common /= np.linalg.norm(common)
    scale = np.ones(dim, np.float32)
    scale[shape_rng.choice(dim, max(1, dim // 48), replace=False)] = 4.0
    for c, s0 in enumerate(range(0, n, GEN_CHUNK)):
        rng = np.random.default_rng([seed, c])
        m = min(GEN_CHUNK, n - s0)
        if name in REAL:
            i, j = rng.integers(0, base.shape[0], (2, m))
            t = rng.random((m, 1), dtype=np.float32) * 0.35
            block = (1 - t) * base[i] + t * base[j]
            if s0 == 0:
                block[: min(m, base.shape[0])] = base[:m]
        else:
            block = rng.standard_normal((m, dim), dtype=np.float32)
            if name == "dominant":
                block = block * scale / np.sqrt(dim) + 0.75 * common
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[s0 : s0 + m] = block
    out.flush()
    del out
    os.replace(tmp, xp)
    if name == "dominant":
        q = q * scale / np.sqrt(dim) + 0.75 * common
    q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    np.save(qp, q)
    return xp, qp
