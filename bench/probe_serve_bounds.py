"""Issue 38's defects, measured from the outside: two processes x 200 messages on one chat
memory, and requests that used to make a server embed or build a whole group.

    python bench/probe_serve_bounds.py [--tree DIR] [--limit S]

``--tree`` runs another checkout's code (e.g. ``git worktree add /tmp/old 830ace5``: the
tree before the fix); the kernels still come from this checkout's installed package.
Prints, per chat memory kind, how many of the 400 messages each session kept; then, against a
``fastrag serve`` process over a 203-chunk store of the bundled English docs without vectors,
the seconds and status of a ``hybrid``, a ``sparse`` and a built-in-group request, and of a
1-line upload after them (``--limit``: seconds to wait for each)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
WRITER = ROOT / "tests" / "chat" / "memory_writer.py"
COUNT = """import sys
from fastrag.chat import ChatMemory
m = ChatMemory(path=sys.argv[1])
print(len(m.get("own-A")) + len(m.get("own-B")), len(m.get("shared")))"""


def chat_memory(tree: Path, env: dict) -> None:
    for name in ("mem.json", "memdir"):
        where = str(Path(tempfile.mkdtemp()) / name)
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(WRITER),
                    where,
                    tag,
                    "200",
                    f"own-{tag}",
                    "shared",
                    "--window",
                    "1000",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                cwd=tree,
                text=True,
            )
            for tag in "AB"
        ]
        for p in procs:  # both imported, then released together
            p.stdout.readline()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            p.communicate()
        own, shared = subprocess.run(
            [sys.executable, "-c", COUNT, where],
            env=env,
            cwd=tree,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        print(f"chat memory {name:8s}: own sessions kept {own}/400, shared kept {shared}/400")


def serve(tree: Path, env: dict, limit: float) -> None:
    base = Path(tempfile.mkdtemp())
    src = base / "docs"
    src.mkdir()
    for i, f in enumerate(sorted((ROOT / "bench/data/mixed_docs/corpus/en").rglob("*.md"))[:26]):
        shutil.copy(f, src / f"{i}.md")
    env = {**env, "XDG_STATE_HOME": str(base / "state")}
    cli = [sys.executable, "-m", "fastrag.cli"]
    subprocess.run(
        [*cli, "ingest", str(src), "--store", str(base / "s"), "-q"],
        env=env,
        cwd=tree,
        check=True,
        capture_output=True,
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with open(base / "log", "wb") as log:
        proc = subprocess.Popen(
            [*cli, "serve", str(base / "s"), "--port", str(port)],
            env=env,
            cwd=tree,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(1200):
            try:
                if httpx.get(url + "/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        groups = httpx.get(url + "/v1/groups").json()["data"]
        print("groups:", ", ".join(f"{g['name']} {g['nodes']}" for g in groups))
        for extra in (
            {"similarity": "hybrid"},
            {"similarity": "sparse"},
            {"group": "CoarseChunk"},
            {},
        ):
            t0 = time.perf_counter()
            try:
                r = httpx.post(
                    url + "/v1/retrieve",
                    timeout=limit,
                    json={"queries": ["how to upload a file"], **extra},
                )
                out = f"{r.status_code} {r.text[:90]}"
            except httpx.TimeoutException:
                out = f"no answer within {limit:g} s"
            print(f"{json.dumps(extra):28s} {time.perf_counter() - t0:8.3f} s  {out}")
        t0 = time.perf_counter()
        tid = httpx.post(url + "/v1/documents", json={"texts": ["one new line"]}).json()["task_id"]
        while (st := httpx.get(f"{url}/v1/tasks/{tid}").json()["status"]) not in (
            "done",
            "failed",
        ) and time.perf_counter() - t0 < limit:
            time.sleep(0.1)
        print(f"1-line upload after them: {st} after {time.perf_counter() - t0:.2f} s")
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, default=ROOT)
    ap.add_argument("--limit", type=float, default=60.0)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.tree), "FASTRAG_BACKGROUND_COMPILE": "0"}
    chat_memory(args.tree, env)
    serve(args.tree, env, args.limit)


if __name__ == "__main__":
    main()
