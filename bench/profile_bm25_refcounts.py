"""Where BM25 search time goes inside the numba kernels, by function, and how much of it is
numba's reference counting (``NRT_incref`` / ``NRT_decref``): the kernels of git revision
``--base`` against the working tree's, each in its own process under ``perf record``.

perf cannot name JIT code by itself; each child writes ``/tmp/perf-<pid>.map`` for the
functions of the compiled search kernel (compiled fresh: numba keeps no code to name for a
kernel loaded from its cache) and profiling starts only when the timed loop does (perf's
``--control`` FIFO), so compiling, data generation and the index build are not in the
profile. Needs Linux ``perf`` with software events (``cpu-clock``).

    python bench/profile_bm25_refcounts.py --base a34887e --docs 300000 --rounds 3

A share is of the samples in kernel code: named kernel functions, the refcount calls and
unnamed JIT code (kernels of other compiled libraries).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import machine_info, markdown_table, median, write_results

HERE = Path(__file__).resolve().parent
NRT = ("NRT_incref", "NRT_decref")


def write_perf_map(dispatcher) -> int:
    """Name the functions linked into ``dispatcher``'s first compiled signature for perf
    (``/tmp/perf-<pid>.map``; a function's size is the gap to the next one). Returns how many
    functions were named."""
    lib = dispatcher.overloads[dispatcher.signatures[0]].library
    names = set(re.findall(r'define [^@]*@"?([^"( ]+)"?\(', lib.get_llvm_str()))
    addrs = sorted((lib.get_pointer_to_function(n), n) for n in names)
    addrs = [(a, n) for a, n in addrs if a]
    with open(f"/tmp/perf-{os.getpid()}.map", "w") as fh:
        for i, (a, n) in enumerate(addrs):
            size = addrs[i + 1][0] - a if i + 1 < len(addrs) else 4096
            short = re.sub(r"B\d+v\d+B.*", "", n)  # drop numba's signature mangling
            short = re.sub(r"^_ZN(\d+\w+?)*?\d+(?=[a-z_])", "", short) or n
            fh.write(f"{a:x} {min(size, 1 << 20):x} {short}\n")
    return len(addrs)


def child(args: argparse.Namespace) -> None:
    """One side: build, warm (compile), name the JIT code, signal perf, run the timed loop."""
    from ab_bm25_kernel_args import old_kernels, run  # lazy: numba, in the child only
    from fastrag._kernels.bm25 import search as new_search  # lazy: as above
    from gen_bm25_corpus import corpus_queries, make_named_corpus  # lazy: as above

    from fastrag.indexes import BM25Index  # lazy: as above

    kern = new_search
    if args.side == "old":
        kern = old_kernels(args.base, Path(tempfile.mkdtemp(prefix="fastrag-prof-")))
    c = make_named_corpus(args.corpus, args.docs)
    qv, qo = corpus_queries(c, args.queries)
    index = BM25Index.build(c["values"], c["offsets"], c["n_vocab"])
    index.build_rank_directories()
    run(args.side, kern, index, qv, qo, args.strategy, None, None, 1)
    write_perf_map(kern.search_batch_serial)
    with open(args.ctl, "w") as fh:
        fh.write("enable\n")
    with open(args.ack) as fh:
        fh.readline()
    t0 = time.process_time()
    for _ in range(args.repeats):
        run(args.side, kern, index, qv, qo, args.strategy, None, None, 1)
    print(f"cpu_s {time.process_time() - t0:.4f}")


def _record(
    side: str, args: argparse.Namespace, ctl: Path, ack: Path, data: Path, env: dict
) -> str:
    """One side's child under ``perf record`` (fresh numba cache in ``env``); its stdout."""
    cmd = [
        "perf", "record", "-q", "-e", "cpu-clock", "-F", "2000", "-D", "-1",
        f"--control=fifo:{ctl},{ack}", "-o", str(data), "--",
        sys.executable, __file__, "--child", side, "--ctl", str(ctl), "--ack", str(ack),
        "--base", args.base, "--docs", str(args.docs), "--queries", str(args.queries),
        "--repeats", str(args.repeats), "--corpus", args.corpus, "--strategy", args.strategy,
    ]  # fmt: skip
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout


def profile_side(side: str, args: argparse.Namespace, work: Path) -> dict:
    """Run one side under perf; samples by category and by kernel function."""
    ctl, ack, data = work / f"ctl.{side}", work / f"ack.{side}", work / f"perf.{side}.data"
    for fifo in (ctl, ack):
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
    with tempfile.TemporaryDirectory(prefix="fastrag-prof-nc-") as cache:
        out = _record(side, args, ctl, ack, data, dict(os.environ, NUMBA_CACHE_DIR=cache))
    cpu_s = float(re.search(r"cpu_s ([\d.]+)", out).group(1))
    report = subprocess.run(
        ["perf", "report", "-i", str(data), "-n", "--sort", "sym", "--stdio"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    by_fn: dict[str, int] = {}
    nrt = unnamed = 0
    for line in report.splitlines():
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+\[\.\]\s+(\S+)", line)
        if not m:
            continue
        n, sym = int(m.group(1)), m.group(2)
        if sym in NRT:
            nrt += n
        elif sym.startswith("0x0000"):
            unnamed += n
        elif "bm25" in sym or "topk" in sym or "kold" in sym or "_kernels" in sym:
            name = re.sub(r".*\d(?=[a-z_])", "", sym)
            by_fn[name] = by_fn.get(name, 0) + n
    kernel = sum(by_fn.values())
    return {"cpu_s": cpu_s, "nrt": nrt, "named": kernel, "unnamed": unnamed, "by_fn": by_fn}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="a34887e", help="git revision of the old kernels")
    ap.add_argument("--docs", type=int, default=300_000)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=30, help="timed batches per process")
    ap.add_argument("--rounds", type=int, default=3, help="old/new process pairs")
    ap.add_argument("--corpus", default="zipf")
    ap.add_argument("--strategy", default="auto")
    ap.add_argument("--name", default="bm25_kernel_refcounts")
    ap.add_argument("--child", choices=("old", "new"), dest="side")
    ap.add_argument("--ctl")
    ap.add_argument("--ack")
    args = ap.parse_args(argv)
    if args.side:
        child(args)
        return
    if shutil.which("perf") is None:
        sys.exit("perf is not installed (Debian: apt install linux-perf)")
    work = Path(tempfile.mkdtemp(prefix="fastrag-prof-"))
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for r in range(args.rounds):
        for side in ("old", "new") if r % 2 == 0 else ("new", "old"):
            runs[side].append(profile_side(side, args, work))
            print(side, runs[side][-1]["cpu_s"], file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)

    def share(res: dict) -> float:
        return res["nrt"] / max(res["nrt"] + res["named"] + res["unnamed"], 1)

    rows = []
    for side in ("old", "new"):
        rs = runs[side]
        rows.append(
            [
                side,
                f"{median([x['cpu_s'] for x in rs]):.2f}",
                f"{median([share(x) for x in rs]):.1%}",
                f"{min(share(x) for x in rs):.1%}-{max(share(x) for x in rs):.1%}",
                f"{median([x['nrt'] for x in rs]):,.0f}",
                f"{median([x['named'] + x['unnamed'] for x in rs]):,.0f}",
            ]
        )
    fns = sorted(runs["new"][0]["by_fn"], key=lambda f: -runs["new"][0]["by_fn"][f])[:12]
    fn_rows = [
        [f"`{f}`"] + [f"{median([x['by_fn'].get(f, 0) for x in runs[s]]):,.0f}" for s in runs]
        for f in fns
    ]
    info = machine_info()
    md = "\n\n".join(
        [
            f"# BM25 search kernels: reference counting's share (old {args.base} vs new)",
            f"`python bench/profile_bm25_refcounts.py --base {args.base} --docs {args.docs} "
            f"--queries {args.queries} --repeats {args.repeats} --rounds {args.rounds} "
            f"--corpus {args.corpus} --strategy {args.strategy}`; CPU {info.get('cpu')}, load "
            f"at start {info.get('loadavg_at_start')}; 1 thread, top-10; perf cpu-clock at "
            "2 kHz over the timed loop only; one process per side per round, interleaved.",
            markdown_table(
                [
                    "kernels",
                    "CPU s (timed loop)",
                    "NRT_incref+decref share",
                    "range",
                    "NRT samples",
                    "other kernel samples",
                ],
                rows,
            ),
            "Samples per kernel function (median over rounds):",
            markdown_table(["function", "old", "new"], fn_rows),
        ]
    )
    write_results(args.name, {"runs": runs, "machine": info}, md)
    print(md)


if __name__ == "__main__":
    main()
