"""Two checkouts timed in turn: each round runs a child process per checkout, and each child
imports ``fastrag`` *and* ``fastrag._kernels`` from its own checkout (an editable install maps
``fastrag._kernels`` to the installed tree's ``kernels/``, so ``PYTHONPATH`` alone would time
one set of kernels twice), with its own ``NUMBA_CACHE_DIR``. The children print one JSON
object; ``fastrag`` and ``kernels`` in it must lie in the checkout, or the run stops.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _harness import WORK_DIR, machine_info, markdown_table, median, write_results

#: child code to put first: ``ROOT`` is the checkout (argv[1]), ``OUT`` the dict to print,
#: holding where ``fastrag`` and ``fastrag._kernels`` came from
PRELUDE = r"""
import importlib.util, json, os, sys
ROOT = sys.argv[1]
sys.path[:0] = [ROOT, os.path.join(ROOT, "bench")]
import fastrag
_spec = importlib.util.spec_from_file_location(
    "fastrag._kernels", os.path.join(ROOT, "kernels", "__init__.py"),
    submodule_search_locations=[os.path.join(ROOT, "kernels")],
)
_kernels = importlib.util.module_from_spec(_spec)
sys.modules["fastrag._kernels"] = _kernels
_spec.loader.exec_module(_kernels)
fastrag._kernels = _kernels
OUT = {"fastrag": fastrag.__file__, "kernels": _kernels.__file__}
"""


def checkout_args(description: str, rounds: int, name: str) -> argparse.ArgumentParser:
    """A parser with ``before``, ``after``, ``--rounds`` and ``--name``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--name", default=name)
    return ap


def run_child(checkout: Path, code: str, args: Sequence[str], cache: str) -> dict[str, Any]:
    """``PRELUDE + code`` run in a fresh process for ``checkout`` (argv: checkout, *args), one
    thread, numba cache ``bench/.work/<cache>/numba-<checkout name>``; its last output line."""
    folder = WORK_DIR / cache / f"numba-{checkout.resolve().name}"
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "NUMBA_CACHE_DIR": str(folder)}
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + code, str(checkout), *args],
        env=env,
        cwd=checkout,
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


def interleave(
    args: argparse.Namespace, code: str, child_args: Sequence[str], cache: str
) -> list[dict[str, Any]]:
    """``args.rounds`` rounds of ``run_child`` for ``args.before`` then ``args.after``, each
    round with the load average at its start."""
    done = []
    for r in range(args.rounds):
        load = os.getloadavg()[0]
        before, after = (run_child(c, code, child_args, cache) for c in (args.before, args.after))
        done.append({"load": load, "before": before, "after": after})
        print(f"round {r + 1}/{args.rounds} done (load {load:.2f})", flush=True)
    return done


def paired(
    rounds: list[dict[str, Any]], pick: Callable[[dict[str, Any]], float]
) -> tuple[list[float], list[float], float]:
    """Each round's ``pick(before)`` and ``pick(after)``, and the median of after / before."""
    b = [pick(x["before"]) for x in rounds]
    a = [pick(x["after"]) for x in rounds]
    return b, a, median([y / x for x, y in zip(b, a, strict=True)])


def report(
    args: argparse.Namespace,
    title: str,
    what: str,
    headers: Sequence[str],
    table: Sequence[Sequence[Any]],
    rows: list[dict[str, Any]],
    rounds: list[dict[str, Any]],
) -> None:
    """Write ``bench/results/<args.name>.{json,md}``: the command, CPU, load, ``what`` was
    measured and the table; print the Markdown."""
    info = machine_info(["numpy", "numba"])
    loads = [x["load"] for x in rounds]
    md = "\n".join(
        [
            f"# {title}, two checkouts interleaved",
            "",
            f"`python bench/{Path(sys.argv[0]).name} {args.before} {args.after} --rounds "
            f"{args.rounds}`; {info['cpu']} ({info.get('cpu_class', '')}), {args.rounds} rounds, "
            f"load {min(loads):.2f}-{max(loads):.2f}, {info['date']}. {what}; medians over "
            "rounds, and the median of the per-round after/before ratios.",
            "",
            markdown_table(headers, table),
        ]
    )
    write_results(args.name, {"machine": info, "rounds": rounds, "rows": rows}, md)
    print(md)
