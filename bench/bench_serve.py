"""Server benchmark: ``fastrag serve`` on loopback under 64 concurrent clients.

Setup: a store of the unique CMRC 2018 dev paragraphs (one node per paragraph, group
``block``, BM25 with jieba tokens: ``bm25_chinese``), served by ``fastrag serve`` in its own
process on 127.0.0.1; the clients run in this process (httpx.AsyncClient, keep-alive, 64
connections), each request one CMRC question.

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
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import machine_info, markdown_table, write_results

ROOT = Path(__file__).resolve().parents[1]
GROUP = "block"
SIMILARITY = "bm25_chinese"
TOPK = 5
CLIENTS = 64
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
    out = subprocess.run([sys.executable, "-m", "fastrag.cli", *args], capture_output=True,
                         text=True, cwd=ROOT, timeout=600)
    if out.returncode:
        raise SystemExit(f"fastrag {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``fastrag serve`` in a child process; ``url`` once ``/ready`` answers 200."""

    def __init__(self, store: Path, *extra: str, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fastrag.cli", "serve", str(store), "--host", "127.0.0.1",
             "--port", str(self.port), "--group", GROUP, "--similarity", SIMILARITY,
             "--topk", str(TOPK), *extra],
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)
        self.log = log

    def wait_ready(self, timeout: float = 300.0) -> float:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise SystemExit(f"fastrag serve exited with {self.proc.returncode}:\n"
                                 + self.log.read_text(errors="replace")[-3000:])
            try:
                if httpx.get(self.url + "/ready", timeout=2).status_code == 200:
                    return time.perf_counter() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise SystemExit(f"fastrag serve not ready after {timeout} s:\n"
                         + self.log.read_text(errors="replace")[-3000:])

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
    def __init__(self, latency: float, chunk_delay: float = 0.002) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _LLM_CHILD, str(ROOT / "tests"), str(latency),
             str(chunk_delay)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            raise SystemExit("the simulated LLM did not start")

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


async def load(url: str, bodies: list[dict], send, *, clients: int, time_limit: float,
               headers: dict | None = None) -> dict[str, Any]:
    """``clients`` workers send ``bodies`` (each once, in order of availability) with
    ``send(client, url, body) -> result``; stop starting new ones after ``time_limit`` s."""
    results: list[Any] = [None] * len(bodies)
    latencies: list[float] = []
    errors: list[str] = []
    nxt = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    t0 = time.perf_counter()
    async with httpx.AsyncClient(limits=limits, timeout=120, headers=headers) as client:

        async def worker() -> None:
            nonlocal nxt
            while nxt < len(bodies) and time.perf_counter() - t0 < time_limit:
                i, nxt = nxt, nxt + 1
                s = time.perf_counter()
                try:
                    results[i] = await send(client, url, bodies[i])
                    latencies.append(time.perf_counter() - s)
                except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
                    errors.append(f"{type(exc).__name__}: {exc}"[:300])

        await asyncio.gather(*(worker() for _ in range(clients)))
    wall = time.perf_counter() - t0
    sent = sum(r is not None for r in results) + len(errors)
    return {
        "requests": sent, "planned": len(bodies), "wall_s": wall,
        "requests_per_s": len(latencies) / wall if wall else float("nan"),
        "p50_ms": percentile(latencies, 50) * 1e3, "p99_ms": percentile(latencies, 99) * 1e3,
        "errors": len(errors), "error_examples": errors[:5], "results": results,
        "time_limited": sent < len(bodies),
    }


async def send_retrieve(client: httpx.AsyncClient, url: str, body: dict) -> list[str]:
    r = await client.post(url + "/v1/retrieve", json=body)
    if r.status_code != 200:
        raise RuntimeError(f"{r.status_code}: {r.text[:200]}")
    (hits,) = r.json()["results"]
    return [h["id"] for h in hits]


async def send_chat(client: httpx.AsyncClient, url: str, body: dict) -> dict[str, Any]:
    if not body.get("stream"):
        r = await client.post(url + "/v1/chat/completions", json=body)
        if r.status_code != 200:
            raise RuntimeError(f"{r.status_code}: {r.text[:200]}")
        data = r.json()
        return {"text": data["choices"][0]["message"]["content"],
                "sources": len(data.get("sources") or [])}
    text, sources, done = [], 0, False
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{r.status_code}: {(await r.aread())[:200]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
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


def expected_ids(store: Path, questions: list[str]) -> list[list[str]]:
    import fastrag as fr

    doc = fr.Document(store=store, mode="r")
    ret = fr.Retriever(doc, GROUP, SIMILARITY, topk=TOPK)
    return [[h.node.id for h in hits] for hits in ret.batch(questions)]


def retrieve_phase(store: Path, questions: list[str], expected: list[list[str]],
                   batching: bool, n: int, time_limit: float, log_dir: Path) -> dict[str, Any]:
    extra = [] if batching else ["--no-batching"]
    label = "on" if batching else "off"
    with Server(store, *extra, log=log_dir / f"serve_retrieve_{label}.log") as srv:
        ready = srv.wait_ready()
        bodies = [{"queries": [questions[i % len(questions)]], "topk": TOPK} for i in range(n)]
        warm = asyncio.run(load(srv.url, bodies[:CLIENTS], send_retrieve, clients=CLIENTS,
                                time_limit=time_limit))
        out = asyncio.run(load(srv.url, bodies, send_retrieve, clients=CLIENTS,
                               time_limit=time_limit))
        metrics = _metrics(srv.url)
    wrong = [i for i, got in enumerate(out["results"])
             if got is not None and got != expected[i % len(questions)]]
    out.update(batching=label, ready_s=ready, warmup_errors=warm["errors"],
               wrong_results=len(wrong), wrong_examples=wrong[:5], server_metrics=metrics)
    del out["results"]
    print(f"  retrieve batching={label:3s} {out['requests']:6d} req "
          f"{out['requests_per_s']:8.1f} req/s p50={out['p50_ms']:7.2f} ms "
          f"p99={out['p99_ms']:7.2f} ms errors={out['errors']} wrong={len(wrong)}", flush=True)
    return out


def chat_phase(store: Path, questions: list[str], n: int, time_limit: float,
               log_dir: Path) -> list[dict[str, Any]]:
    llm = SimLLM(LATENCY)
    rows = []
    try:
        with Server(store, "--llm-base-url", llm.url, "--llm-model", "sim",
                    log=log_dir / "serve_chat.log") as srv:
            srv.wait_ready()
            for stream in (False, True):
                tag = "s" if stream else "n"
                bodies = [{"model": "fastrag", "stream": stream, "messages": [
                    {"role": "user", "content": f"[q{tag}{i:05d}] {questions[i % len(questions)]}"}
                ]} for i in range(n)]
                out = asyncio.run(load(srv.url, bodies, send_chat, clients=CLIENTS,
                                       time_limit=time_limit))
                lost = wrong = 0
                for i, res in enumerate(out["results"]):
                    if res is None:
                        lost += 1
                    elif not res["text"].startswith(f"answer to q{tag}{i:05d}:"):
                        wrong += 1
                lost -= out["planned"] - out["requests"]  # unsent (time limit) is not lost
                out.update(stream=stream, lost=lost, wrong_answer=wrong,
                           with_sources=sum(1 for r in out["results"] if r and r["sources"]))
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
        out["llm_duplicates"] = len(mine) - len(set(mine))
        out["llm_missing"] = len(set(out.pop("sent_ids")) - set(mine))
        print(f"  chat stream={out['stream']!s:5s} {out['requests']:5d} req "
              f"{out['requests_per_s']:7.1f} req/s p50={out['p50_ms']:7.1f} ms "
              f"p99={out['p99_ms']:7.1f} ms errors={out['errors']} lost={out['lost']} "
              f"wrong={out['wrong_answer']} llm_dups={out['llm_duplicates']} "
              f"llm_missing={out['llm_missing']}", flush=True)
    return rows


def _metrics(url: str) -> str | None:
    try:
        r = httpx.get(url + "/metrics", timeout=5)
        return r.text[:4000] if r.status_code == 200 else None
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
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    labels = [f"batching {r['batching']}" for r in retrieve]
    a.bar(labels, [r["requests_per_s"] for r in retrieve], color=["#2456c9", "#999"])
    a.set_ylabel("requests / s")
    a.set_title(f"/v1/retrieve, {CLIENTS} clients")
    x = range(len(retrieve))
    b.bar([i - 0.2 for i in x], [r["p50_ms"] for r in retrieve], 0.4, label="p50")
    b.bar([i + 0.2 for i in x], [r["p99_ms"] for r in retrieve], 0.4, label="p99")
    b.set_xticks(list(x), labels)
    b.set_ylabel("latency (ms)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny run for CI")
    ap.add_argument("--requests", type=int, help="retrieve requests per setting")
    ap.add_argument("--chat-requests", type=int, help="chat requests per setting")
    ap.add_argument("--time-limit", type=float, help="seconds per phase")
    args = ap.parse_args(argv)
    n_req = args.requests or (256 if args.smoke else 4000)
    n_chat = args.chat_requests or (64 if args.smoke else 640)
    limit = args.time_limit or (30.0 if args.smoke else 120.0)
    name = "serve_smoke" if args.smoke else "serve"
    info = machine_info(extra_versions=("fastapi", "uvicorn", "httpx"))
    print(f"machine: {info['cpu']}, {info['usable_cores']} cores, load {info['loadavg_at_start']}")

    with tempfile.TemporaryDirectory(prefix="bench_serve_") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        store, questions = build_store(work, 3 if args.smoke else None)
        print(f"store: {len(questions)} questions, built in {time.perf_counter() - t0:.1f} s")
        expected = expected_ids(store, questions)
        retrieve = [retrieve_phase(store, questions, expected, b, n_req, limit, work)
                    for b in (True, False)]
        chat = chat_phase(store, questions, n_chat, limit, work)

    on, off = retrieve
    ratio = on["requests_per_s"] / off["requests_per_s"] if off["requests_per_s"] else None
    payload = {
        "machine": info, "loadavg_at_end": list(os.getloadavg()),
        "setup": {"group": GROUP, "similarity": SIMILARITY, "topk": TOPK, "clients": CLIENTS,
                  "questions": len(questions), "retrieve_requests": n_req,
                  "chat_requests": n_chat, "llm_latency_s": LATENCY, "time_limit_s": limit,
                  "smoke": args.smoke},
        "retrieve": retrieve, "batching_speedup": ratio, "chat": chat,
    }
    md = [f"# fastrag serve on loopback ({'smoke' if args.smoke else 'full'})", "",
          f"{info['cpu']}, {info['usable_cores']} usable cores, load at start "
          f"{info['loadavg_at_start']}, at end {payload['loadavg_at_end']}; commit "
          f"{info['commit']}; {CLIENTS} concurrent clients (httpx) in one process, the server "
          "in another, on the same cores.", "",
          f"## /v1/retrieve: one CMRC question per request, {SIMILARITY}, topk {TOPK}", "",
          markdown_table(
              ["micro-batching", "requests", "req/s", "p50 ms", "p99 ms", "errors",
               "wrong results"],
              [[r["batching"], r["requests"], r["requests_per_s"], r["p50_ms"], r["p99_ms"],
                r["errors"], r["wrong_results"]] for r in retrieve]), "",
          f"Batching on / off: **{ratio:.2f}x** requests/s." if ratio else "", "",
          f"## /v1/chat/completions: simulated LLM ({LATENCY * 1e3:.0f} ms per call)", "",
          markdown_table(
              ["stream", "requests", "req/s", "p50 ms", "p99 ms", "errors", "lost",
               "wrong answer", "LLM calls", "LLM duplicates"],
              [[r["stream"], r["requests"], r["requests_per_s"], r["p50_ms"], r["p99_ms"],
                r["errors"], r["lost"], r["wrong_answer"], r["llm_calls"],
                r["llm_duplicates"]] for r in chat])]
    jp, mp = write_results(name, payload, "\n".join(md))
    plot(retrieve, jp.with_suffix(".png"))
    print(f"wrote {jp} and {mp}")
    bad = [f"retrieve batching={r['batching']}: {r['wrong_results']} wrong, {r['errors']} errors"
           for r in retrieve if r["wrong_results"] or r["errors"]]
    bad += [f"chat stream={r['stream']}: lost={r['lost']} wrong={r['wrong_answer']} "
            f"errors={r['errors']} llm_dups={r['llm_duplicates']} llm_missing={r['llm_missing']}"
            for r in chat if r["lost"] or r["wrong_answer"] or r["errors"]
            or r["llm_duplicates"] or r["llm_missing"]]
    if bad:
        print("CHECK FAILED:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
