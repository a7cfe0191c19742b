"""Server benchmark: ``fastrag serve`` on loopback under 64 concurrent clients.

Setup: a store of the unique CMRC 2018 dev paragraphs (one node per paragraph, group
``block``, BM25 with jieba tokens: ``bm25_chinese``), served by ``fastrag serve`` in its own
process on 127.0.0.1; 64 clients run in this process (asyncio, one keep-alive HTTP/1.1
connection each, a minimal client so that little of the shared CPU goes to the clients), each
request one CMRC question.

Sections:
1. ``POST /v1/retrieve``, one question per request, topk 5, micro-batching on (the default)
   and off (``--no-batching``), each in a fresh server: requests/s, p50/p99 latency, errors.
   Every answer is checked against ``Retriever.batch`` run in this process on the same store
   (same ids in the same order), so coalescing requests cannot mix up their results.
2. ``POST /v1/chat/completions`` with a simulated LLM (``tests/openai_server.py`` in a child
   process, LATENCY seconds per call, its reply naming the question id it was asked about),
   streamed and not: p50/p99 latency, and no lost or duplicated answers (each request gets
   exactly the answer to its own question, and the LLM sees each question once).

Each phase sends a fixed number of requests and stops at a time limit (then it reports how
many it sent). Speed is never asserted; the correctness checks are.

    python bench/bench_serve.py            # full run (~2 min)
    python bench/bench_serve.py --smoke    # tiny CI run (< 1 min)

Writes bench/results/serve.{json,md,png} (``--smoke``: serve_smoke.*).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # this checkout's fastrag

from _harness import machine_info, markdown_table, write_results

ROOT = Path(__file__).resolve().parents[1]
GROUP = "block"
SIMILARITY = "bm25_chinese"
TOPK = 5
CLIENTS = 64
WORKERS = 1  # server processes (--workers)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


LATENCY = 0.05  # simulated LLM seconds per call
SHARED_DATA = ROOT.parent / "shared" / "data" / "cmrc2018_dev.json"


# ----------------------------------------------------------------------------------------------
# Data and processes
# ----------------------------------------------------------------------------------------------


def load_cmrc() -> dict:
    if SHARED_DATA.exists():
        return json.loads(SHARED_DATA.read_text(encoding="utf-8"))
    from fastrag.datasets import load_cmrc2018_dev

    return load_cmrc2018_dev()


def build_store(workdir: Path, n_articles: int | None) -> tuple[Path, list[str]]:
    """A store of the CMRC paragraphs (group ``block``: one node per paragraph) and the
    questions, in file order. ``n_articles`` keeps the first articles only (``--smoke``)."""
    from fastrag.datasets import build_squad_kb, squad_questions

    squad = load_cmrc()
    if n_articles is not None:
        squad = {**squad, "data": squad["data"][:n_articles]}
    questions, _, _ = squad_questions(squad)
    kb, store = workdir / "kb", workdir / "store"
    build_squad_kb(squad, kb)
    cli(["ingest", str(kb), "--store", str(store), "--group", f"{GROUP}=lines", "-q"])
    return store, questions


def cli(args: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fastrag.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    if out.returncode:
        raise SystemExit(f"fastrag {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``fastrag serve`` in a child process; ``url`` once ``/ready`` answers 200."""

    def __init__(
        self, store: Path, *extra: str, log: Path, env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fastrag.cli",
                "serve",
                str(store),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--group",
                GROUP,
                "--similarity",
                SIMILARITY,
                "--topk",
                str(TOPK),
                "--workers",
                str(WORKERS),
                *extra,
            ],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        self.log = log

    def wait_ready(self, timeout: float = 300.0) -> float:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise SystemExit(
                    f"fastrag serve exited with {self.proc.returncode}:\n"
                    + self.log.read_text(errors="replace")[-3000:]
                )
            try:
                if httpx.get(self.url + "/ready", timeout=2).status_code == 200:
                    return time.perf_counter() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise SystemExit(
            f"fastrag serve not ready after {timeout} s:\n"
            + self.log.read_text(errors="replace")[-3000:]
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# The simulated LLM: tests/openai_server.py in a child process (its threads would otherwise
# share this process's GIL with the clients). Its reply names the question's id ("[q00042]"
# in the question) and it records every id it was asked about; on stdin EOF it prints them.
_LLM_CHILD = textwrap.dedent("""
    import json, re, sys, threading
    sys.path.insert(0, sys.argv[1])
    from openai_server import OpenAIServer
    seen, lock = [], threading.Lock()
    def reply(messages):
        ids = re.findall(r"\\[(q[a-z]\\d+)\\]", messages[-1]["content"])
        with lock:
            seen.append(ids[-1] if ids else None)
        return f"answer to {ids[-1] if ids else 'nothing'}: " + "word " * 15
    with OpenAIServer(model="sim", reply=reply) as server:
        server.chunk_delay = float(sys.argv[3])
        server.script([f"slow:{sys.argv[2]}"] * 100000)
        print(server.url, flush=True)
        sys.stdin.read()
        print(json.dumps({"seen": seen}), flush=True)
""")


class SimLLM:
    """The simulated LLM process: ``latency`` s per call, then its reply streamed a word every
    ``chunk_delay`` s. Its stderr (connection resets at shutdown, say) goes to ``log``."""

    def __init__(self, latency: float, log: Path, chunk_delay: float = 0.002) -> None:
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _LLM_CHILD,
                    str(ROOT / "tests"),
                    str(latency),
                    str(chunk_delay),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            raise SystemExit(f"the simulated LLM did not start:\n{log.read_text()[-2000:]}")

    def finish(self) -> list[str | None]:
        out, _ = self.proc.communicate(timeout=30)
        return json.loads(out.strip().splitlines()[-1])["seen"]


# ----------------------------------------------------------------------------------------------
# Load generation
# ----------------------------------------------------------------------------------------------


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


class Conn:
    """One keep-alive HTTP/1.1 connection on asyncio streams: the leanest client there is, so
    that the clients, which share the machine's cores with the server, take as little CPU as
    possible (httpx.AsyncClient with 64 connections spends more per request than the server).
    Content-Length and chunked bodies; ``events`` yields SSE ``data:`` payloads as they come."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _send(self, path: str, body: dict | None) -> tuple[int, dict[str, str]]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (
            f"{'GET' if body is None else 'POST'} {path} HTTP/1.1\r\n"
            f"Host: {self.host}:{self.port}\r\n"
        )
        if body is None:
            self.writer.write(head.encode() + b"\r\n")
        else:
            data = json.dumps(body, ensure_ascii=False).encode()
            self.writer.write(
                f"{head}Content-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n".encode()
                + data
            )
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        headers = {}
        for line in head[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        return status, headers

    async def _chunks(self, headers: dict[str, str]) -> Any:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                chunk = await self.reader.readexactly(size + 2)
                yield chunk[:-2]
        else:
            yield await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            await self.close()

    async def post(self, path: str, body: dict | None) -> tuple[int, bytes]:
        """POST ``body`` as JSON (``None``: a GET); the status and the whole body."""
        status, headers = await self._send(path, body)
        return status, b"".join([c async for c in self._chunks(headers)])

    async def events(self, path: str, body: dict) -> Any:
        """(status, None) then the SSE data payloads; a non-200 yields (status, body)."""
        status, headers = await self._send(path, body)
        if status != 200:
            yield status, b"".join([c async for c in self._chunks(headers)])
            return
        buf = b""
        async for chunk in self._chunks(headers):
            buf += chunk
            *events, buf = buf.split(b"\n\n")
            for ev in events:
                for line in ev.split(b"\n"):
                    if line.startswith(b"data:"):
                        yield 200, line[5:].strip()

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


async def load(
    url: str, bodies: list[dict], send, *, clients: int, time_limit: float
) -> dict[str, Any]:
    """``clients`` workers, one connection each, send ``bodies`` (each once, taken in order)
    with ``send(conn, body) -> result``; no new request starts after ``time_limit`` s."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    results: list[Any] = [None] * len(bodies)
    latencies: list[float] = []
    errors: list[str] = []
    nxt = 0
    t0 = time.perf_counter()

    async def worker() -> None:
        nonlocal nxt
        conn = Conn(host, int(port))
        try:
            while nxt < len(bodies) and time.perf_counter() - t0 < time_limit:
                i, nxt = nxt, nxt + 1
                s = time.perf_counter()
                try:
                    results[i] = await send(conn, bodies[i])
                    latencies.append(time.perf_counter() - s)
                except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
                    errors.append(f"{type(exc).__name__}: {exc}"[:300])
                    await conn.close()
        finally:
            await conn.close()

    await asyncio.gather(*(worker() for _ in range(clients)))
    wall = time.perf_counter() - t0
    sent = min(nxt, len(bodies))
    return {
        "requests": sent,
        "planned": len(bodies),
        "wall_s": wall,
        "requests_per_s": len(latencies) / wall if wall else float("nan"),
        "p50_ms": percentile(latencies, 50) * 1e3,
        "p99_ms": percentile(latencies, 99) * 1e3,
        "errors": len(errors),
        "error_examples": errors[:5],
        "results": results,
        "time_limited": sent < len(bodies),
    }


async def send_retrieve(conn: Conn, body: dict) -> list[str]:
    status, data = await conn.post("/v1/retrieve", body)
    if status != 200:
        raise RuntimeError(f"{status}: {data[:200]!r}")
    (hits,) = json.loads(data)["results"]
    return [h["id"] for h in hits]


async def send_health(conn: Conn, body: dict) -> bool:
    status, data = await conn.post("/health", None)
    if status != 200:
        raise RuntimeError(f"{status}: {data[:200]!r}")
    return True


async def send_chat(conn: Conn, body: dict) -> dict[str, Any]:
    if not body.get("stream"):
        status, raw = await conn.post("/v1/chat/completions", body)
        if status != 200:
            raise RuntimeError(f"{status}: {raw[:200]!r}")
        data = json.loads(raw)
        return {
            "text": data["choices"][0]["message"]["content"],
            "sources": len(data.get("sources") or []),
        }
    text, sources, done = [], 0, False
    async for status, data in conn.events("/v1/chat/completions", body):
        if status != 200:
            raise RuntimeError(f"{status}: {data[:200]!r}")
        if data == b"[DONE]":
            done = True
            continue  # read the stream to its end, so the connection can be reused
        obj = json.loads(data)
        if "error" in obj:
            raise RuntimeError(f"error event: {obj['error']}")
        for ch in obj.get("choices") or []:
            text.append((ch.get("delta") or {}).get("content") or "")
        sources = max(sources, len(obj.get("sources") or []))
    if not done:
        raise RuntimeError("stream ended without [DONE]")
    return {"text": "".join(text), "sources": sources}


# ----------------------------------------------------------------------------------------------
# Phases
# ----------------------------------------------------------------------------------------------


def expected_ids(store: Path, questions: list[str]) -> tuple[list[list[str]], dict[str, Any]]:
    """The top-``TOPK`` ids of every question from ``Retriever.batch`` in this process, all
    questions in one call (what the server's answers are checked against), and how many
    questions get other ids when each is its own batch of one (0 when retrieval does not
    depend on a query's batch companions, as it must not)."""
    import fastrag as fr

    doc = fr.Document(store=store, mode="r")
    ret = fr.Retriever(doc, GROUP, SIMILARITY, topk=TOPK)
    full = [[h.node.id for h in hits] for hits in ret.batch(questions)]
    single = [[h.node.id for h in ret.batch([q])[0]] for q in questions]
    differ = [i for i, (a, b) in enumerate(zip(full, single, strict=True)) if a != b]
    return full, {"questions": len(questions), "differ": len(differ), "examples": differ[:10]}


def _counter(metrics: str | None, name: str) -> float | None:
    for line in (metrics or "").splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median round (by requests/s) of a setting, with every round's numbers."""
    ordered = sorted(runs, key=lambda r: r["requests_per_s"])
    mid = ordered[len(ordered) // 2]
    keep = ("requests", "requests_per_s", "p50_ms", "p99_ms", "errors", "wall_s", "time_limited")
    return {
        **{k: mid[k] for k in keep},
        "errors": sum(r["errors"] for r in runs),
        "error_examples": [e for r in runs for e in r["error_examples"]][:5],
        "rounds": [{k: r[k] for k in keep} for r in runs],
    }


def retrieve_phase(
    store: Path,
    questions: list[str],
    expected: list[list[str]],
    n: int,
    rounds: int,
    time_limit: float,
    log_dir: Path,
    env: dict[str, str],
) -> list[dict[str, Any]]:
    """Batching on and off, each its own server, both started first; the rounds alternate
    between them (on, off, on, off, ...) so that a change in the machine's load hits both."""
    bodies = [{"queries": [questions[i % len(questions)]], "topk": TOPK} for i in range(n)]
    labels = ("on", "off")
    runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": [], "health": []}
    wrong: dict[str, list[int]] = {"on": [], "off": []}
    servers = [
        Server(
            store,
            *([] if label == "on" else ["--no-batching"]),
            log=log_dir / f"serve_retrieve_{label}.log",
            env=env,
        )
        for label in labels
    ]
    try:
        ready = {label: srv.wait_ready() for label, srv in zip(labels, servers, strict=True)}
        for srv in servers:  # warm-up: first requests, connections, the batcher's threads
            asyncio.run(
                load(
                    srv.url,
                    bodies[: 4 * CLIENTS],
                    send_retrieve,
                    clients=CLIENTS,
                    time_limit=time_limit,
                )
            )
        for r in range(rounds):
            for label, srv in zip(labels, servers, strict=True):
                out = asyncio.run(
                    load(srv.url, bodies, send_retrieve, clients=CLIENTS, time_limit=time_limit)
                )
                wrong[label] += [
                    i
                    for i, got in enumerate(out["results"])
                    if got is not None and got != expected[i % len(questions)]
                ]
                runs[label].append(out)
                print(
                    f"  round {r + 1}: retrieve batching={label:3s} {out['requests']:6d} req "
                    f"{out['requests_per_s']:8.1f} req/s p50={out['p50_ms']:7.2f} ms "
                    f"p99={out['p99_ms']:7.2f} ms errors={out['errors']} "
                    f"wrong={len(wrong[label])}",
                    flush=True,
                )
            # the HTTP stack alone (GET /health, same server, same clients): the ceiling
            out = asyncio.run(
                load(servers[0].url, [{}] * n, send_health, clients=CLIENTS, time_limit=time_limit)
            )
            runs["health"].append(out)
            print(
                f"  round {r + 1}: GET /health         {out['requests']:6d} req "
                f"{out['requests_per_s']:8.1f} req/s p50={out['p50_ms']:7.2f} ms",
                flush=True,
            )
        metrics = {label: _metrics(srv.url) for label, srv in zip(labels, servers, strict=True)}
    finally:
        for srv in servers:
            srv.stop()
    rows = []
    for label in labels:
        batches = _counter(metrics[label], "fastrag_retrieve_batches_total")
        queries = _counter(metrics[label], "fastrag_retrieve_queries_total")
        rows.append(
            {
                "endpoint": "POST /v1/retrieve",
                "batching": label,
                **_summary(runs[label]),
                "ready_s": ready[label],
                "wrong_results": len(wrong[label]),
                "wrong_examples": wrong[label][:5],
                "server_batches": batches,
                "server_queries": queries,
                "mean_batch": queries / batches if batches else None,
            }
        )
    rows.append(
        {
            "endpoint": "GET /health (HTTP ceiling)",
            "batching": "on",
            **_summary(runs["health"]),
            "wrong_results": 0,
        }
    )
    return rows


def chat_phase(
    store: Path, questions: list[str], n: int, time_limit: float, log_dir: Path, env: dict[str, str]
) -> list[dict[str, Any]]:
    """Non-streamed, then streamed chats (fresh ids each). Checks: every request answered
    with its own question's id; the LLM saw every question; the LLM received exactly the
    calls the server counted (``fastrag_llm_calls_total``; a compact answer over a long
    context takes two calls, a retry would be one more)."""
    llm = SimLLM(LATENCY, log_dir / "sim_llm.log")
    rows = []
    try:
        with Server(
            store,
            "--llm-base-url",
            llm.url,
            "--llm-model",
            "sim",
            log=log_dir / "serve_chat.log",
            env=env,
        ) as srv:
            srv.wait_ready()
            warm = [
                {
                    "stream": st,
                    "messages": [
                        {"role": "user", "content": f"[qw{i:05d}] {questions[i % len(questions)]}"}
                    ],
                }
                for i, st in enumerate([False, True] * 8)
            ]
            asyncio.run(load(srv.url, warm, send_chat, clients=8, time_limit=time_limit))
            for stream in (False, True):
                tag = "s" if stream else "n"
                bodies = [
                    {
                        "model": "fastrag",
                        "stream": stream,
                        "messages": [
                            {
                                "role": "user",
                                "content": f"[q{tag}{i:05d}] {questions[i % len(questions)]}",
                            }
                        ],
                    }
                    for i in range(n)
                ]
                before = _counter(_metrics(srv.url), "fastrag_llm_calls_total") or 0.0
                out = asyncio.run(
                    load(srv.url, bodies, send_chat, clients=CLIENTS, time_limit=time_limit)
                )
                after = _counter(_metrics(srv.url), "fastrag_llm_calls_total") or 0.0
                lost = wrong = 0
                for i, res in enumerate(out["results"]):
                    if res is None:
                        lost += 1
                    elif not res["text"].startswith(f"answer to q{tag}{i:05d}:"):
                        wrong += 1
                lost -= out["planned"] - out["requests"]  # unsent (time limit) is not lost
                out.update(
                    stream=stream,
                    lost=lost,
                    wrong_answer=wrong,
                    with_sources=sum(1 for r in out["results"] if r and r["sources"]),
                    llm_calls_reported=int(after - before),
                )
                # workers take the bodies in order, so the first `requests` ones were sent
                out["sent_ids"] = [f"q{tag}{i:05d}" for i in range(out["requests"])]
                del out["results"]
                rows.append(out)
    finally:
        seen = llm.finish()
    for out in rows:
        tag = "s" if out["stream"] else "n"
        mine = [s for s in seen if s and s.startswith("q" + tag)]
        out["llm_calls"] = len(mine)
        out["llm_extra_calls"] = len(mine) - out["llm_calls_reported"]
        out["llm_missing"] = len(set(out.pop("sent_ids")) - set(mine))
        print(
            f"  chat stream={out['stream']!s:5s} {out['requests']:5d} req "
            f"{out['requests_per_s']:7.1f} req/s p50={out['p50_ms']:7.1f} ms "
            f"p99={out['p99_ms']:7.1f} ms errors={out['errors']} lost={out['lost']} "
            f"wrong={out['wrong_answer']} llm_calls={out['llm_calls']} "
            f"(server counted {out['llm_calls_reported']}) "
            f"llm_missing={out['llm_missing']}",
            flush=True,
        )
    return rows


def _metrics(url: str) -> str | None:
    try:
        r = httpx.get(url + "/metrics", timeout=5)
        return r.text if r.status_code == 200 else None
    except httpx.HTTPError:
        return None


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------


def plot(retrieve: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    labels = [
        f"retrieve\nbatching {r['batching']}"
        if "retrieve" in r["endpoint"]
        else "GET /health\n(HTTP ceiling)"
        for r in retrieve
    ]
    a.bar(labels, [r["requests_per_s"] for r in retrieve], color=["#2456c9", "#8a94a8", "#ccc"])
    a.set_ylabel("requests / s")
    a.set_title(f"{CLIENTS} concurrent clients, loopback")
    x = range(len(retrieve))
    b.bar([i - 0.2 for i in x], [r["p50_ms"] for r in retrieve], 0.4, label="p50")
    b.bar([i + 0.2 for i in x], [r["p99_ms"] for r in retrieve], 0.4, label="p99")
    b.set_xticks(list(x), labels)
    b.set_ylabel("latency (ms)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _env(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"--server-env {pair!r}: expected NAME=VALUE")
        k, v = pair.split("=", 1)
        out[k] = v
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny run for CI")
    ap.add_argument("--requests", type=int, help="retrieve requests per round and setting")
    ap.add_argument("--rounds", type=int, help="alternating rounds of batching on / off")
    ap.add_argument("--chat-requests", type=int, help="chat requests per setting")
    ap.add_argument("--time-limit", type=float, help="seconds per round at most")
    ap.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment of the servers (e.g. NUMBA_NUM_THREADS=1)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes of each server (fastrag serve --workers)",
    )
    ap.add_argument("--name", help="results file name (default serve, or serve_smoke)")
    args = ap.parse_args(argv)
    n_req = args.requests or (256 if args.smoke else 3000)
    rounds = args.rounds or (1 if args.smoke else 5)
    n_chat = args.chat_requests or (64 if args.smoke else 640)
    limit = args.time_limit or (30.0 if args.smoke else 60.0)
    name = args.name or ("serve_smoke" if args.smoke else "serve")
    env = _env(args.server_env)
    global WORKERS
    WORKERS = max(1, args.workers)
    info = machine_info(
        extra_versions=("fastapi", "uvicorn", "starlette", "pydantic", "httptools", "uvloop")
    )
    print(f"machine: {info['cpu']}, {info['usable_cores']} cores, load {info['loadavg_at_start']}")

    with tempfile.TemporaryDirectory(prefix="bench_serve_") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        store, questions = build_store(work, 3 if args.smoke else None)
        print(f"store: {len(questions)} questions, built in {time.perf_counter() - t0:.1f} s")
        expected, alone = expected_ids(store, questions)
        print(
            f"in-process: a batch of one vs all questions at once: {alone['differ']} of "
            f"{alone['questions']} questions get other ids",
            flush=True,
        )
        retrieve = retrieve_phase(store, questions, expected, n_req, rounds, limit, work, env)
        chat = chat_phase(store, questions, n_chat, limit, work, env)

    on, off = retrieve[0], retrieve[1]
    ratio = on["requests_per_s"] / off["requests_per_s"] if off["requests_per_s"] else None
    # paired by round (each pair ran back to back, under the same load): steadier on a
    # shared machine than the ratio of the medians
    pairs = [
        a["requests_per_s"] / b["requests_per_s"]
        for a, b in zip(on["rounds"], off["rounds"], strict=True)
        if b["requests_per_s"]
    ]
    paired = float(statistics.median(pairs)) if pairs else None
    payload = {
        "machine": info,
        "loadavg_at_end": list(os.getloadavg()),
        "setup": {
            "group": GROUP,
            "similarity": SIMILARITY,
            "topk": TOPK,
            "clients": CLIENTS,
            "questions": len(questions),
            "retrieve_requests": n_req,
            "rounds": rounds,
            "chat_requests": n_chat,
            "llm_latency_s": LATENCY,
            "time_limit_s": limit,
            "server_env": env,
            "smoke": args.smoke,
            "workers": WORKERS,
        },
        "in_process_batch_of_one_vs_all": alone,
        "retrieve": retrieve,
        "batching_speedup": ratio,
        "batching_speedup_per_round": pairs,
        "batching_speedup_paired_median": paired,
        "chat": chat,
    }
    load_s = ", ".join(f"{x:.1f}" for x in info["loadavg_at_start"])
    load_e = ", ".join(f"{x:.1f}" for x in payload["loadavg_at_end"])
    md = [
        f"# fastrag serve on loopback ({'smoke' if args.smoke else 'full'})",
        "",
        f"{info['cpu']}, {info['usable_cores']} usable cores (load average {load_s} at "
        f"start, {load_e} at end), commit {info['commit']}, {info['date']}. "
        f"{CLIENTS} concurrent clients (asyncio, one keep-alive connection each) in one "
        f"process, the server (uvicorn, {WORKERS} worker process(es), httptools "
        f"{'on' if _has('httptools') else 'off'}, uvloop {'on' if _has('uvloop') else 'off'}) "
        "in another, on the same cores" + (f"; server environment {env}" if env else "") + ".",
        "",
        f"## /v1/retrieve: one CMRC question per request ({SIMILARITY}, topk {TOPK}, "
        f"{len(questions):,} questions over the CMRC paragraphs)",
        "",
        f"Median of {rounds} alternating round(s) of {n_req:,} requests per setting; every "
        "answer checked against `Retriever.batch` of all questions in-process (same ids, "
        "same order; *wrong* counts the differing answers over all rounds). In-process, "
        f"{alone['differ']} of {alone['questions']:,} questions get other ids as a batch of "
        "one than in the batch of all"
        + (
            " (so retrieval depends on a query's batch companions: a library bug the server "
            "only exposes)"
            if alone["differ"]
            else ""
        )
        + ".",
        "",
        markdown_table(
            [
                "endpoint",
                "micro-batching",
                "requests",
                "req/s",
                "p50 ms",
                "p99 ms",
                "errors",
                "wrong",
                "mean batch",
            ],
            [
                [
                    r["endpoint"],
                    r["batching"],
                    r["requests"],
                    r["requests_per_s"],
                    r["p50_ms"],
                    r["p99_ms"],
                    r["errors"],
                    r["wrong_results"],
                    r.get("mean_batch"),
                ]
                for r in retrieve
            ],
        ),
        "",
        (
            f"Batching on / off: **{ratio:.2f}x** requests/s (medians); round by round "
            f"{', '.join(f'{x:.2f}x' for x in pairs)}, median **{paired:.2f}x**."
            if ratio and paired
            else ""
        ),
        "",
        f"## /v1/chat/completions: simulated LLM ({LATENCY * 1e3:.0f} ms per call, "
        "tests/openai_server.py in its own process)",
        "",
        "Each question carries an id; the LLM's reply names the id it was asked about, so a "
        "lost, swapped or duplicated answer is seen. Calls received by the LLM equal the "
        "calls the server counted (a compact answer over a long context takes two).",
        "",
        markdown_table(
            [
                "stream",
                "requests",
                "req/s",
                "p50 ms",
                "p99 ms",
                "errors",
                "lost",
                "wrong answer",
                "LLM calls received",
                "counted by the server",
                "questions the LLM never saw",
            ],
            [
                [
                    r["stream"],
                    r["requests"],
                    r["requests_per_s"],
                    r["p50_ms"],
                    r["p99_ms"],
                    r["errors"],
                    r["lost"],
                    r["wrong_answer"],
                    r["llm_calls"],
                    r["llm_calls_reported"],
                    r["llm_missing"],
                ]
                for r in chat
            ],
        ),
    ]
    jp, mp = write_results(name, payload, "\n".join(md))
    plot(retrieve, jp.with_suffix(".png"))
    print(f"wrote {jp} and {mp}")
    bad = [
        f"{r['endpoint']} batching={r['batching']}: {r['wrong_results']} wrong, "
        f"{r['errors']} errors"
        for r in retrieve
        if r["wrong_results"] or r["errors"]
    ]
    bad += [
        f"chat stream={r['stream']}: lost={r['lost']} wrong={r['wrong_answer']} "
        f"errors={r['errors']} llm_extra_calls={r['llm_extra_calls']} "
        f"llm_missing={r['llm_missing']}"
        for r in chat
        if r["lost"] or r["wrong_answer"] or r["errors"] or r["llm_extra_calls"] or r["llm_missing"]
    ]
    if bad:
        print("CHECK FAILED:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
