"""Store benchmark: what it costs to build, reopen and update a persisted ``Document``.

Uses only the public API that every store format shares::

    doc = fr.Document.from_texts(texts, store=path)        # build
    doc = fr.Document(store=path)                           # reopen
    doc.add(["one new text"])                               # the timed update
    fr.Retriever(doc, "root", "bm25", topk=3)("words")      # the next query

For each size (default 10k / 100k / 1M seeded synthetic texts of ~100-300 characters: random
Zipf-distributed pseudo-words) a fresh store is built under a temp dir on /tmp (removed after),
then every step runs in its own subprocess (a warm-up on a tiny in-memory Document first, so
imports and numba's compile/cache load are not timed):

1. ``build``   ``from_texts`` into the store, then one root BM25 query (builds and persists the
               index); store size on disk and ``manifest.json`` bytes.
2. ``reopen``  ``Document(store=path)`` in a fresh process: seconds, and the process's peak RSS
               (``ru_maxrss``) before and after (memory-mapping vs reading), then the first root
               BM25 query (no add yet).
3. ``add``     ``--repeats`` times: reopen, ``doc.add([one text])``, the next root BM25 query
               (medians reported; the store grows by one text per repeat).
4. ``group``   ``create_node_group("line", transform=split_lines)`` and its first build and
               BM25 query; store size and manifest bytes with the group.
5. ``reopen``/``add`` again with the "line" group registered: the add, then the next
               ``doc.group("line")`` access and a BM25 query on "line".

A size is skipped, with the extrapolated minutes in the table, when the previous size's wall
time scaled linearly by the size ratio exceeds ``--max-minutes``; a step that runs past
``--step-timeout`` is recorded as a timeout. Load averages at start and end are recorded.

Usage: ``python bench/bench_store.py --label before`` (10k, 100k, 1M), ``--sizes 10000,100000``,
``--smoke`` (tiny, seconds; CI), ``--out DIR``. Writes ``store_<label>.json`` and ``.md``
(``store_<label>_smoke.*`` with ``--smoke``) under ``bench/results/``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
# the fastrag next to this script (a worktree's), not whatever is installed editable
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(BENCH))
from _harness import (  # noqa: E402
    current_rss_mb,
    git_commit,
    machine_info,
    markdown_table,
    write_results,
)


# -- corpus ----------------------------------------------------------------------------------
def _vocab(seed: int, size: int = 20000) -> list[str]:
    import numpy as np

    rng = np.random.default_rng(seed)
    lens = rng.integers(3, 11, size=size)
    letters = rng.integers(97, 123, size=int(lens.sum()), dtype=np.uint8).tobytes().decode()
    ends = np.cumsum(lens)
    return list(
        dict.fromkeys(
            letters[s:e] for s, e in zip((ends - lens).tolist(), ends.tolist(), strict=False)
        )
    )


def generate_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` texts of 13-37 Zipf(1.05) pseudo-words (~100-300 chars); ~6 s for 1M."""
    import numpy as np

    vocab = _vocab(seed)
    rng = np.random.default_rng(seed + 1)
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    p /= p.sum()
    counts = rng.integers(13, 38, size=n)
    words = [vocab[i] for i in rng.choice(len(vocab), size=int(counts.sum()), p=p).tolist()]
    out, s = [], 0
    for e in np.cumsum(counts).tolist():
        out.append(" ".join(words[s:e]))
        s = e
    return out


def _query(seed: int) -> str:
    v = _vocab(seed)
    return f"{v[3]} {v[40]} {v[500]}"  # frequent, medium and rare-ish terms


def _queries(seed: int, n: int) -> list[str]:
    """``n`` queries of 3 words drawn like the texts' words (Zipf 1.05), seeded."""
    import numpy as np

    vocab = _vocab(seed)
    rng = np.random.default_rng(seed + 2)
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    p /= p.sum()
    ids = rng.choice(len(vocab), size=(n, 3), p=p)
    return [" ".join(vocab[i] for i in row) for row in ids.tolist()]


def split_lines(text: str) -> list[str]:
    """The "line" group's trivial transform: the text cut in two halves at a space."""
    mid = text.find(" ", len(text) // 2)
    return [text] if mid < 0 else [text[:mid], text[mid + 1 :]]


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _manifest_bytes(path: Path) -> int:
    m = path / "manifest.json"
    return m.stat().st_size if m.exists() else 0


# -- children: one step each, in a fresh process ---------------------------------------------
def _warmup(group: bool) -> None:
    import fastrag as fr

    doc = fr.Document.from_texts(["alpha beta gamma", "beta gamma delta", "gamma delta eps"])
    fr.Retriever(doc, "root", "bm25", topk=3)("beta")
    if group:
        doc.create_node_group("line", transform=split_lines)
        doc.group("line")
        fr.Retriever(doc, "line", "bm25", topk=3)("beta")


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _open(path: Path, group: bool):
    import fastrag as fr

    doc = fr.Document(store=str(path))
    if group:
        doc.create_node_group("line", transform=split_lines)
    return doc


def child(step: str, path: Path, n: int, seed: int, repeats: int, group: bool) -> dict:
    import gc

    import fastrag as fr

    q = _query(seed)
    _warmup(group)
    gc.collect()
    res: dict = {"step": step, "fastrag_file": fr.__file__}
    if step == "build":
        texts, res["generate_s"] = _timed(lambda: generate_texts(n, seed))
        res["mean_chars"] = sum(map(len, texts)) / max(1, len(texts))
        doc, res["build_s"] = _timed(lambda: fr.Document.from_texts(texts, store=str(path)))
        _, res["first_query_s"] = _timed(lambda: fr.Retriever(doc, "root", "bm25", topk=3)(q))
    elif step == "group":
        doc, res["reopen_s"] = _timed(lambda: _open(path, True))
        _, res["group_build_s"] = _timed(lambda: doc.group("line"))
        res["line_nodes"] = len(doc.group("line").table)
        _, res["first_query_s"] = _timed(lambda: fr.Retriever(doc, "line", "bm25", topk=3)(q))
    elif step == "reopen":
        rss0, maxrss0 = current_rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        doc, res["reopen_s"] = _timed(lambda: _open(path, group))
        maxrss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        res.update(
            rss_before_mb=rss0,
            rss_after_mb=current_rss_mb(),
            maxrss_before_mb=maxrss0 / 1024,
            maxrss_after_mb=maxrss1 / 1024,
            maxrss_delta_mb=(maxrss1 - maxrss0) / 1024,
        )
        if group:
            _, res["group_access_s"] = _timed(lambda: doc.group("line"))
        name = "line" if group else "root"
        ret = fr.Retriever(doc, name, "bm25", topk=3)
        _, res["first_query_s"] = _timed(lambda: ret(q))
        res["maxrss_end_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        # what a server's memory does over its next 1,000 queries (3 words of the vocabulary
        # drawn like the texts' words): the postings they touch become resident
        rss_q0 = current_rss_mb()
        _, res["queries_1000_s"] = _timed(lambda: ret.batch(_queries(seed, 1000)))
        res["rss_after_1000_queries_mb"] = current_rss_mb()
        res["rss_growth_1000_queries_mb"] = res["rss_after_1000_queries_mb"] - rss_q0
    elif step == "add":
        # kept under 200 chars: add() takes a string for a path when Path(text).exists(),
        # which raises "File name too long" for a text without newlines over 255 bytes
        extra = [t[:200] for t in generate_texts(repeats, seed + 1000 + (7 if group else 0))]
        for key in ("reopen_s", "add_s", "group_access_s", "query_s"):
            res[key] = []
        for i in range(repeats):
            doc, t = _timed(lambda: _open(path, group))
            res["reopen_s"].append(t)
            ids, t = _timed(lambda doc=doc, i=i: doc.add([extra[i]]))
            assert len(ids) == 1
            res["add_s"].append(t)
            if group:
                _, t = _timed(lambda doc=doc: doc.group("line"))
                res["group_access_s"].append(t)
            name = "line" if group else "root"
            _, t = _timed(lambda doc=doc, name=name: fr.Retriever(doc, name, "bm25", topk=3)(q))
            res["query_s"].append(t)
            del doc
            gc.collect()
        if not group:
            del res["group_access_s"]
    else:
        raise ValueError(step)
    res["store_bytes"] = _dir_bytes(path)
    res["manifest_bytes"] = _manifest_bytes(path)
    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return res


# -- parent ----------------------------------------------------------------------------------
def _run_child(step: str, path: Path, n: int, args, group: bool = False) -> dict:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        step,
        "--dir",
        str(path),
        "--n",
        str(n),
        "--seed",
        str(args.seed),
        "--repeats",
        str(args.repeats),
    ]
    if group:
        cmd.append("--group")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, check=False, timeout=args.step_timeout, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        return {
            "step": step,
            "error": f"timeout after {args.step_timeout:g} s",
            "wall_s": time.perf_counter() - t0,
        }
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"step": step, "error": err, "wall_s": wall}
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["wall_s"] = wall
    return res


def _med(xs):
    return statistics.median(xs) if xs else None


def run_size(n: int, args, tmp: Path) -> dict:
    path = tmp / f"store_{n}"
    out: dict = {"n": n}
    steps = [
        ("build", False),
        ("reopen", False),
        ("add", False),
        ("group", True),
        ("reopen_line", True),
        ("add_line", True),
    ]
    t0 = time.perf_counter()
    try:
        for key, group in steps:
            res = _run_child(key.split("_")[0], path, n, args, group)
            out[key] = res
            msg = res.get("error") or ", ".join(
                f"{k} {(_med(v) if isinstance(v, list) else v):.3g}"
                for k, v in res.items()
                if k.endswith("_s") and k != "wall_s" and v not in (None, [])
            )
            print(f"  {n:>9,d} {key:12s} {msg}", flush=True)
            if "error" in res:
                break
    finally:
        shutil.rmtree(path, ignore_errors=True)
    out["wall_s"] = time.perf_counter() - t0
    return out


def _fmt_err(r: dict) -> str:
    return r.get("error", "")


def report(runs: list[dict], args, info: dict) -> str:
    rows1, rows2 = [], []
    for r in runs:
        n = r["n"]
        if "skipped" in r:
            rows1.append([n] + [None] * 7 + [r["skipped"]])
            rows2.append([n, "", None, None, None, None, None, None, None, None, r["skipped"]])
            continue
        b, g = r.get("build", {}), r.get("group", {})
        mb = 1e6
        rows1.append(
            [
                n,
                b.get("build_s"),
                b.get("first_query_s"),
                b.get("store_bytes", 0) / mb if "store_bytes" in b else None,
                b.get("manifest_bytes", 0) / mb if "manifest_bytes" in b else None,
                g.get("group_build_s"),
                g.get("store_bytes", 0) / mb if "store_bytes" in g else None,
                g.get("manifest_bytes", 0) / mb if "manifest_bytes" in g else None,
                "; ".join(e for e in (_fmt_err(b), _fmt_err(g)) if e),
            ]
        )
        for variant, ro, ad in (("root", "reopen", "add"), ("+line", "reopen_line", "add_line")):
            o, a = r.get(ro, {}), r.get(ad, {})
            if not o and not a:
                continue
            rss = (o["rss_after_mb"] - o["rss_before_mb"]) if "rss_after_mb" in o else None
            rows2.append(
                [
                    n,
                    variant,
                    o.get("reopen_s"),
                    o.get("maxrss_delta_mb"),
                    rss,
                    o.get("group_access_s") if variant == "+line" else None,
                    o.get("first_query_s"),
                    o.get("queries_1000_s"),
                    o.get("rss_growth_1000_queries_mb"),
                    _med(a.get("add_s", [])),
                    _med(a.get("group_access_s", [])),
                    _med(a.get("query_s", [])),
                    "; ".join(e for e in (_fmt_err(o), _fmt_err(a)) if e),
                ]
            )
    md = [
        f"# Store: build, reopen and add one text ({args.label or 'unlabelled'})",
        "",
        (
            f"Seeded synthetic texts (seed {args.seed}, 13-37 Zipf pseudo-words, ~190 chars), "
            "one fresh store per size under /tmp; every step in its own process after a warm-up "
            '(imports, numba) on a tiny in-memory Document. Queries are root (or "line") BM25, '
            "topk=3; the first query after build builds and persists the index."
        ),
        "",
        "## Build (informational)",
        "",
        markdown_table(
            [
                "texts",
                "build s",
                "1st query s",
                "store MB",
                "manifest MB",
                "line build s",
                "store MB +line",
                "manifest MB +line",
                "note",
            ],
            rows1,
        ),
        "",
        "## Reopen and add one text",
        "",
        (
            f"Reopen: `Document(store=path)` in a fresh process; Δpeak RSS is the growth of "
            f"`ru_maxrss` across the reopen, ΔRSS that of the current RSS (VmRSS). "
            f"Add: median of {args.repeats} repeats, each "
            'reopen -> `doc.add([text])` -> next access; "next query" is the BM25 query '
            'right after the add (compare with "1st query", before any add); '
            '"next 1,000 queries" is one batch of 3-word queries after the first query, and '
            "the growth of VmRSS over it (the postings they touched). For +line, the "
            '"line" group (a 2-way split of each text) is built and registered; "group s" '
            'is `doc.group("line")`.'
        ),
        "",
        markdown_table(
            [
                "texts",
                "variant",
                "reopen s",
                "reopen Δpeak RSS MB",
                "reopen ΔRSS MB",
                "open group s",
                "1st query s",
                "next 1,000 queries s",
                "RSS growth over them MB",
                "add 1 s (median)",
                "group after add s",
                "next query s",
                "note",
            ],
            rows2,
        ),
        "",
        (
            f"Machine: {info['cpu']}, {info['usable_cores']} cores, {info.get('mem_total_gb')}"
            f" GB; load average at start {info['loadavg_at_start']}, at end "
            f"{info['loadavg_at_end']}; numba {info.get('numba')}, numpy {info['numpy']}, "
            f"pyarrow {info.get('pyarrow')}; fastrag from {info['fastrag_root']} at commit "
            f"{info['fastrag_commit']}; total wall {info['wall_s']:.0f} s."
        ),
        "",
        f"Reproduce: `{info['command']}`",
    ]
    return "\n".join(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated text counts")
    ap.add_argument("--repeats", type=int, default=5, help="adds per variant (median)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 2 repeats (CI, seconds)")
    ap.add_argument("--out", default=None, help="results folder (default bench/results/)")
    ap.add_argument("--label", default="", help="stored in the file name: store_<label>.json")
    ap.add_argument(
        "--max-minutes",
        type=float,
        default=15.0,
        help="skip a size whose extrapolated wall time exceeds this",
    )
    ap.add_argument(
        "--step-timeout",
        type=float,
        default=1800.0,
        help="seconds before one step is killed and recorded as a timeout",
    )
    ap.add_argument("--tmp", default="/tmp", help="where the temp stores go")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--group", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        print(
            json.dumps(
                child(args.child, Path(args.dir), args.n, args.seed, args.repeats, args.group)
            )
        )
        return

    if args.smoke:
        args.sizes, args.repeats = "1000", 2
    try:
        sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        ap.error("--sizes takes comma-separated integers, e.g. 10000,100000")
    if not sizes or min(sizes) < 1 or args.repeats < 1:
        ap.error("--sizes must be >= 1 and --repeats >= 1")
    sizes = sorted(sizes)
    info = machine_info(["pyarrow"])
    info["fastrag_root"] = str(ROOT)
    info["fastrag_commit"] = git_commit()  # the checkout whose fastrag runs
    label = f"_{args.label}" if args.label else ""
    info["command"] = "python bench/bench_store.py " + " ".join(a for a in sys.argv[1:])
    print(
        f"load average {info['loadavg_at_start']}; fastrag at {ROOT} ({info['fastrag_commit']})",
        flush=True,
    )
    t_start = time.perf_counter()
    runs: list[dict] = []
    tmp = Path(tempfile.mkdtemp(prefix="fastrag-bench-store-", dir=args.tmp))
    try:
        prev = None
        for n in sizes:
            if prev is not None and "wall_s" in prev:
                est = prev["wall_s"] * n / prev["n"] / 60
                if est > args.max_minutes:
                    note = (
                        f"skipped: {prev['n']:,} texts took {prev['wall_s'] / 60:.1f} min, "
                        f"extrapolates to {est:.0f} min > {args.max_minutes:g}"
                    )
                    print(f"  {n:>9,d} {note}", flush=True)
                    runs.append({"n": n, "skipped": note, "extrapolated_min": est})
                    continue
            prev = run_size(n, args, tmp)
            runs.append(prev)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    info["loadavg_at_end"] = list(os.getloadavg())
    info["wall_s"] = time.perf_counter() - t_start
    md = report(runs, args, info)
    name = f"store{label}" + ("_smoke" if args.smoke else "")
    payload = {
        "machine": info,
        "label": args.label,
        "seed": args.seed,
        "repeats": args.repeats,
        "sizes": sizes,
        "runs": runs,
    }
    jp, mp = write_results(name, payload, md, Path(args.out) if args.out else None)
    print(md)
    print(f"wrote {jp} and {mp}")


if __name__ == "__main__":
    main()
