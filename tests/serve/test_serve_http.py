"""``fastrag serve`` over real HTTP: the server runs in its own process (``python -m fastrag.cli
serve``) over a store of CMRC 2018 paragraphs, with the local OpenAI-compatible test server
(tests/openai_server.py) as its LLM. Chats go through the official ``openai`` client; everything
else through httpx. Results are compared with an in-process ``Retriever`` over the same store.

Two servers: ``server`` (API key, LLM, chat-history compression, micro-batching with a 20 ms
window) and ``plain`` (a copy of the store; no key, no LLM, no batching).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from openai_server import OpenAIServer
from serve_support import ServeProcess, make_cmrc_store

import fastrag as fr
from fastrag.cli.main import main as cli_main
from fastrag.datasets import load_cmrc2018_dev
from fastrag.errors import MissingExtraError
from fastrag.eval.loaders import squad_questions
from fastrag.serve import create_app

API_KEY = "fr-test-key-0123456789abcdef"
LLM_KEY = "sk-upstream-secret-9876543210"
REPLY = "根据资料：this is the fake LLM's answer, streamed word by word."
STANDALONE = "《战国无双3》是由哪两个公司合作开发的？"
EARLIER = "An earlier answer that only the compression prompt quotes (marker 7f3a)."
UNIQUE = "Quibbleflux"


# -- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def questions() -> list[str]:
    qs, _, _ = squad_questions(load_cmrc2018_dev())
    return qs[:40]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve")
    store = make_cmrc_store(base / "a")
    plain = base / "b" / "store"
    shutil.copytree(store, plain)
    return store, plain


def _reply(messages: list[dict]) -> str:
    """The fake LLM: the compression prompt (it quotes the history) gets the standalone query,
    every other prompt gets REPLY."""
    return STANDALONE if EARLIER in messages[-1]["content"] else REPLY


@pytest.fixture(scope="module")
def llm():
    with OpenAIServer(model="fake-llm", api_key=LLM_KEY, reply=_reply) as server:
        yield server


@pytest.fixture(scope="module")
def server(stores, llm, tmp_path_factory):
    proc = ServeProcess(
        [
            str(stores[0]),
            "--group",
            "block",
            "--similarity",
            "bm25_chinese",
            "--topk",
            "3",
            "--llm-base-url",
            llm.url,
            "--llm-model",
            "fake-llm",
            "--llm-api-key-env",
            "FAKE_LLM_KEY",
            "--llm-max-retries",
            "0",
            "--api-key-env",
            "FASTRAG_TEST_KEY",
            "--compress-history",
            "--batch-window-ms",
            "20",
        ],
        tmp_path_factory.mktemp("log") / "server.log",
        env={"FASTRAG_TEST_KEY": API_KEY, "FAKE_LLM_KEY": LLM_KEY},
        api_key=API_KEY,
    )
    yield proc
    proc.stop()
    log = proc.text()
    assert API_KEY not in log and LLM_KEY not in log  # no secret in any log line
    assert "Traceback" not in log


@pytest.fixture(scope="module")
def plain(stores, tmp_path_factory):
    proc = ServeProcess(
        [str(stores[1]), "--no-batching", "--topk", "3"],
        tmp_path_factory.mktemp("log") / "plain.log",
    )
    yield proc
    proc.stop()


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.url, headers=server.headers(), timeout=30) as client:
        yield client


def _retriever(store, topk=3) -> fr.Retriever:
    return fr.Retriever(fr.Document(store=str(store), mode="r"), "block", "bm25_chinese", topk=topk)


def _assert_error(resp: httpx.Response, status: int, param: str | None = "any") -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param"}
    assert body["error"]["message"]
    if param != "any":
        assert body["error"]["param"] == param, body
    assert "Traceback" not in resp.text
    return body["error"]


def _metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    line = f"{name}{{{want}}} " if labels else f"{name} "
    for ln in text.splitlines():
        if ln.startswith(line):
            return float(ln.split()[-1])
    return 0.0


def _wait_task(http: httpx.Client, task_id: str, timeout: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = http.get(f"/v1/tasks/{task_id}").json()
        if task["status"] in ("done", "failed"):
            return task
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} not finished in {timeout} s: {task}")


# -- probes and auth ---------------------------------------------------------------------------
def test_health_and_ready_are_open_and_ready_reports_the_setup_with_the_key(server, plain):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    for headers in ({}, {"Authorization": "Bearer wrong-key-123456789"}):  # probes send no key
        resp = httpx.get(server.url + "/ready", headers=headers)
        assert resp.status_code == 200 and resp.json() == {"status": "ready"}  # nothing more
    assert httpx.get(server.url + "/v1/groups").status_code == 401  # the rest still needs it
    ready = httpx.get(server.url + "/ready", headers=server.headers()).json()
    assert ready["status"] == "ready" and ready["group"] == "block"
    assert ready["similarity"] == "bm25_chinese" and ready["batching"] and ready["chat"]
    assert API_KEY not in json.dumps(ready) and LLM_KEY not in json.dumps(ready)
    # without a key configured, /ready shows the setup to anyone
    plain_ready = httpx.get(plain.url + "/ready").json()
    assert plain_ready["group"] == "block" and plain_ready["answer_type"] == "extractive"
    assert ready["answer_type"] == "generated"
    page = httpx.get(server.url + "/")  # the chat page holds no data: no key needed
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]


def test_every_api_endpoint_needs_the_key(server, plain):
    calls = [
        ("GET", "/v1/groups", None),
        ("GET", "/metrics", None),
        ("POST", "/v1/retrieve", {"queries": ["x"]}),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}),
        ("POST", "/v1/documents", {"texts": ["x"]}),
        ("DELETE", "/v1/documents/x", None),
        ("GET", "/v1/tasks/" + "0" * 32, None),
    ]
    bad = [
        {},
        {"Authorization": "Bearer wrong-key-123456789"},
        {"Authorization": API_KEY},
        {"Authorization": f"Basic {API_KEY}"},
    ]
    for method, path, body in calls:
        for headers in bad:
            resp = httpx.request(method, server.url + path, json=body, headers=headers)
            err = _assert_error(resp, 401, None)
            assert err["type"] == "authentication_error"
            assert resp.headers["www-authenticate"] == "Bearer"
            assert API_KEY not in resp.text
    ok = httpx.post(server.url + "/v1/retrieve", json={"queries": ["x"]}, headers=server.headers())
    assert ok.status_code == 200
    # without --api-key-env there is no auth at all
    assert httpx.post(plain.url + "/v1/retrieve", json={"queries": ["x"]}).status_code == 200


# -- chat completions --------------------------------------------------------------------------
SENGOKU = "《战国无双3》是由哪两个公司合作开发的？"
SENGOKU_SENTENCE = "《战国无双3》（）是由光荣和ω-force开发的战国无双系列的正统第三续作。"


def test_chat_without_an_llm_answers_extractively_labelled(plain, stores):
    """No LLM configured: the answer is `fastrag ask`'s extractive one (the best-matching
    sentences with their sources), labelled so, streamed or not; never a 503."""
    hits = fr.Retriever(fr.Document(store=str(stores[1]), mode="r"), "block", "bm25", topk=3)(
        SENGOKU
    )
    body = {"model": "m", "messages": [{"role": "user", "content": SENGOKU}]}
    resp = httpx.post(plain.url + "/v1/chat/completions", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    text = out["choices"][0]["message"]["content"]
    assert text.startswith("Best-matching passages (extractive answer):\n- ")
    assert f"- {SENGOKU_SENTENCE}  [part_0000.txt]" in text.splitlines()
    assert out["answer_type"] == "extractive"
    assert out["note"].startswith("No LLM is configured, so this answer is extractive")
    assert "--llm-base-url" in out["note"]
    assert [s["id"] for s in out["sources"]] == [h.id for h in hits]
    assert out["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    with httpx.stream(
        "POST", plain.url + "/v1/chat/completions", json={**body, "stream": True}, timeout=30
    ) as sse:
        assert sse.status_code == 200 and sse.headers["content-type"].startswith(
            "text/event-stream"
        )
        events = [ln[6:] for ln in sse.iter_lines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == text
    final = chunks[-1]
    assert final["choices"][0]["finish_reason"] == "stop"
    assert final["answer_type"] == "extractive" and final["note"] == out["note"]
    assert [s["id"] for s in final["sources"]] == [h.id for h in hits]
    # nothing matches: the answer says why, still labelled
    none = httpx.post(
        plain.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "the of and"}]},
        timeout=30,
    ).json()
    assert none["choices"][0]["message"]["content"].startswith(
        "No passage in the knowledge base matches the question"
    )
    assert none["answer_type"] == "extractive" and none["sources"] == []
    # a bad group is still a 400 naming it
    bad = httpx.post(plain.url + "/v1/chat/completions", json={**body, "group": "nope"})
    assert _assert_error(bad, 400, "group")["message"].startswith("unknown node group 'nope'")


def _openai(server):
    from openai import OpenAI

    return OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=30)


def test_chat_with_the_openai_client_answers_with_sources(server, llm, stores, questions):
    q = questions[0]
    llm.reset()
    resp = _openai(server).chat.completions.create(
        model="fastrag", messages=[{"role": "user", "content": q}], temperature=0.25, max_tokens=64
    )
    assert resp.choices[0].message.content == REPLY
    assert resp.choices[0].finish_reason == "stop" and resp.object == "chat.completion"
    assert resp.model_extra["answer_type"] == "generated" and "note" not in resp.model_extra
    hits = _retriever(stores[0])(q)
    sources = resp.model_extra["sources"]
    assert [s["id"] for s in sources] == [h.id for h in hits]
    for s, h in zip(sources, hits, strict=True):
        assert s["score"] == pytest.approx(h.score, rel=1e-5)
        assert list(s) == ["id", "doc_id", "score", "path", "page", "snippet"]
        assert s["path"] == h.metadata["file_name"] and s["snippet"][:20] == h.text[:20]
    assert resp.usage.completion_tokens > 0 and resp.usage.prompt_tokens > 0
    # what reached the LLM: the question with the retrieved text, the options, the LLM's key
    (call,) = llm.requests
    assert call.headers["authorization"] == f"Bearer {LLM_KEY}"
    assert call.body["temperature"] == 0.25 and call.body["max_tokens"] == 64
    prompt = call.body["messages"][-1]["content"]
    assert q in prompt and hits[0].text[:30] in prompt


def test_chat_streams_chunks_then_sources_then_done(server, llm, stores, questions):
    q = questions[1]
    stream = _openai(server).chat.completions.create(
        model="fastrag",
        messages=[{"role": "user", "content": q}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert "".join(pieces) == REPLY and len(pieces) > 3  # streamed, not one piece
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    (final,) = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert final.choices[0].finish_reason == "stop"
    assert [s["id"] for s in final.model_extra["sources"]] == [
        h.id for h in _retriever(stores[0])(q)
    ]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    # the raw wire: SSE events ending in [DONE]
    with httpx.stream(
        "POST",
        server.url + "/v1/chat/completions",
        headers=server.headers(),
        json={"model": "m", "stream": True, "messages": [{"role": "user", "content": q}]},
    ) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [ln for ln in resp.iter_lines() if ln.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-2][6:])["choices"][0]["finish_reason"] == "stop"


def test_chat_history_is_compressed_into_the_retrieval_query(server, llm, stores):
    llm.reset()
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "我想了解一个游戏。"},
        {"role": "assistant", "content": EARLIER},
        {"role": "user", "content": "它是谁开发的？"},
    ]
    resp = _openai(server).chat.completions.create(model="fastrag", messages=messages)
    assert resp.choices[0].message.content == REPLY
    compress, answer = llm.requests  # one call rewrites, one answers
    assert EARLIER in compress.body["messages"][-1]["content"]
    assert "它是谁开发的" in compress.body["messages"][-1]["content"]
    hits = _retriever(stores[0])(STANDALONE)  # retrieval used the standalone query
    assert [s["id"] for s in resp.model_extra["sources"]] == [h.id for h in hits]
    assert STANDALONE in answer.body["messages"][-1]["content"]
    assert resp.usage.prompt_tokens > 0


def test_upstream_failure_is_502_naming_its_status_and_no_secret(server, llm, questions):
    from openai import APIStatusError

    for stream in (False, True):
        llm.script(["500:upstream exploded"])
        resp = httpx.post(
            server.url + "/v1/chat/completions",
            headers=server.headers(),
            json={
                "model": "m",
                "stream": stream,
                "messages": [{"role": "user", "content": questions[2]}],
            },
        )
        err = _assert_error(resp, 502, None)
        assert err["type"] == "upstream_error"
        assert "500" in err["message"] and "upstream exploded" in err["message"]
        assert API_KEY not in resp.text and LLM_KEY not in resp.text
    llm.script(["503"])
    with pytest.raises(APIStatusError) as info:
        _openai(server).chat.completions.create(
            model="m", messages=[{"role": "user", "content": questions[2]}]
        )
    assert info.value.status_code == 502
    assert API_KEY not in server.text() and LLM_KEY not in server.text()


# -- retrieval ---------------------------------------------------------------------------------
def test_retrieve_json_and_arrow_agree_with_an_in_process_batch(http, stores, questions):
    qs = questions[:8]
    body = http.post("/v1/retrieve", json={"queries": qs, "topk": 4}).json()
    expected = _retriever(stores[0], topk=4).batch(qs)
    assert body["group"] == "block" and len(body["results"]) == len(qs)
    for got, want in zip(body["results"], expected, strict=True):
        assert [g["id"] for g in got] == [w.id for w in want]
        assert [g["text"] for g in got] == [w.text for w in want]
        assert [g["metadata"] for g in got] == [w.metadata for w in want]
        assert [g["score"] for g in got] == [w.score for w in want]  # float32 values, exact
    resp = http.post(
        "/v1/retrieve",
        json={"queries": qs, "topk": 4},
        headers={"Accept": "application/vnd.apache.arrow.stream"},
    )
    assert resp.headers["content-type"] == "application/vnd.apache.arrow.stream"
    table = pa.ipc.open_stream(resp.content).read_all()
    assert table.column_names[:4] == ["query_idx", "rank", "node_id", "score"]
    rows = table.to_pylist()
    flat = [
        (qi, r, h["id"], h["score"], h["text"], h["metadata"])
        for qi, hs in enumerate(body["results"])
        for r, h in enumerate(hs, 1)
    ]
    assert [
        (x["query_idx"], x["rank"], x["node_id"], x["text"], json.loads(x["metadata"]))
        for x in rows
    ] == [(a, b, c, e, f) for a, b, c, _, e, f in flat]
    assert [x["score"] for x in rows] == pytest.approx([f[3] for f in flat], rel=1e-6)
    # the same ids as the library's own Arrow batch
    lib = _retriever(stores[0], topk=4).batch_arrow(qs)
    assert table.column("node_id").to_pylist() == lib.column("node_id").to_pylist()


def test_retrieve_with_a_filter_and_another_group(http, stores, questions):
    flt = "file_name == 'part_0003.txt'"
    body = http.post("/v1/retrieve", json={"queries": questions[:3], "filter": flt}).json()
    expected = _retriever(stores[0]).batch(questions[:3], filter=flt)
    assert [[h["id"] for h in hs] for hs in body["results"]] == [
        [h.id for h in hs] for hs in expected
    ]
    assert all(h["metadata"]["file_name"] == "part_0003.txt" for hs in body["results"] for h in hs)
    root = http.post("/v1/retrieve", json={"queries": questions[:2], "group": "root"}).json()
    assert root["group"] == "root" and all(len(hs) == 3 for hs in root["results"])


def test_groups_list_the_knowledge_bases(http):
    body = http.get("/v1/groups").json()
    by_name = {g["name"]: g for g in body["data"]}
    assert body["default"] == "block" and by_name["block"]["default"]
    assert by_name["block"]["nodes"] >= 848 and by_name["root"]["nodes"] >= 85
    assert by_name["block"]["parent"] == "root"


# -- documents ---------------------------------------------------------------------------------
def test_upload_texts_then_retrieve_then_delete(http, plain):
    text = f"{UNIQUE} 是一种只在测试里出现的发光蘑菇，生长在月球背面。"
    resp = http.post("/v1/documents", json={"texts": [text], "metadatas": [{"source": "t"}]})
    assert resp.status_code == 202
    task = _wait_task(http, resp.json()["task_id"])
    assert task["status"] == "done", task
    (doc_id,) = task["doc_ids"]
    hit = http.post("/v1/retrieve", json={"queries": [UNIQUE], "topk": 1}).json()["results"][0][0]
    assert hit["text"] == text and hit["metadata"]["source"] == "t"
    # the other server has its own store: nothing there
    other = httpx.post(plain.url + "/v1/retrieve", json={"queries": [UNIQUE], "topk": 1}).json()
    assert all(h["text"] != text for h in other["results"][0])
    resp = http.delete(f"/v1/documents/{doc_id}")
    assert resp.status_code == 202
    task = _wait_task(http, resp.json()["task_id"])
    assert task["status"] == "done" and task["deleted"] == 1
    hits = http.post("/v1/retrieve", json={"queries": [UNIQUE], "topk": 1}).json()["results"][0]
    assert all(h["text"] != text for h in hits)
    _assert_error(http.delete(f"/v1/documents/{doc_id}"), 404, "doc_id")
    _assert_error(http.get("/v1/tasks/" + "f" * 32), 404, "task_id")
    _assert_error(http.get("/v1/tasks/../../etc/passwd"), 404)


def test_upload_files_multipart(http):
    files = [
        (
            "file",
            (
                "notes.md",
                f"# Notes\n\nThe {UNIQUE}-2 valve opens at dawn.\n".encode(),
                "text/markdown",
            ),
        ),
        ("file", ("../../evil name.txt", b"second file, harmless text", "text/plain")),
    ]
    resp = http.post("/v1/documents", files=files, data={"metadata": '{"team": "qa"}'})
    assert resp.status_code == 202, resp.text
    assert resp.json()["files"] == ["notes.md", "evil name.txt"]
    task = _wait_task(http, resp.json()["task_id"])
    assert task["status"] == "done" and len(task["doc_ids"]) == 2
    hit = http.post(
        "/v1/retrieve", json={"queries": [f"{UNIQUE}-2 valve"], "topk": 1, "group": "root"}
    ).json()["results"][0][0]
    assert hit["metadata"]["file_name"] == "notes.md" and hit["metadata"]["team"] == "qa"
    # a file no reader can read: the task fails with a reason and no server path in it
    resp = http.post("/v1/documents", files={"file": ("blob.txt", bytes(range(256)) * 8)})
    task = _wait_task(http, resp.json()["task_id"])
    assert task["status"] == "failed" and "blob.txt" in task["error"]
    assert "fastrag-serve-tasks" not in task["error"]
    _assert_error(http.post("/v1/documents", files={"other": ("a.txt", b"x")}), 400, "other")


# -- bad requests --------------------------------------------------------------------------------
R, C, D = "/v1/retrieve", "/v1/chat/completions", "/v1/documents"
USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "path, body, status, param",
    [
        (R, b"{not json", 400, None),
        (R, b"[1, 2]", 400, None),
        (R, b"", 400, None),
        (R, {"queries": ["a"], "bogus": 1}, 400, "bogus"),
        (R, {}, 400, "queries"),
        (R, {"queries": "a"}, 400, "queries"),
        (R, {"queries": []}, 400, "queries"),
        (R, {"queries": [1]}, 400, "queries.0"),
        (R, {"queries": ["x" * 9000]}, 400, "queries.0"),
        (R, {"queries": ["a"] * 1025}, 400, "queries"),
        (R, {"queries": ["a"], "topk": 0}, 400, "topk"),
        (R, {"queries": ["a"], "topk": "3"}, 400, "topk"),
        (R, {"queries": ["a"], "filter": "file_name =="}, 400, "filter"),
        (R, {"queries": ["a"], "group": "no-such-group"}, 400, "group"),
        (R, {"queries": ["a"], "filter": "no_such_key == 'x'"}, 400, "filter"),
        (C, {"model": "m", "messages": USER, "foo": 1}, 400, "foo"),
        (C, {"model": "m", "messages": []}, 400, "messages"),
        (
            C,
            {"model": "m", "messages": [{"role": "user", "content": 5}]},
            400,
            "messages.0.content",
        ),
        (
            C,
            {"model": "m", "messages": [{"role": "user", "content": "a", "x": 1}]},
            400,
            "messages.0.x",
        ),
        (
            C,
            {"model": "m", "messages": [{"role": "assistant", "content": "a"}]},
            400,
            "messages.0.role",
        ),
        (
            C,
            {"model": "m", "messages": [{"role": "user", "content": "q" * 9000}]},
            400,
            "messages.0",
        ),
        (
            C,
            {
                "model": "m",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}],
                    }
                ],
            },
            400,
            "messages.0.content.0.type",
        ),
        (C, {"model": "m", "messages": USER, "tools": [{"type": "function"}]}, 400, "tools"),
        (C, {"model": "m", "messages": USER, "n": 2}, 400, "n"),
        (C, {"model": "m", "messages": USER, "temperature": 3}, 400, "temperature"),
        (C, {"model": "m", "messages": USER, "stream": "yes"}, 400, "stream"),
        (C, {"model": "m", "messages": USER, "group": "no-such-group"}, 400, "group"),
        (D, {"texts": "abc"}, 400, "texts"),
        (D, {"texts": ["a"], "metadatas": [{}, {}]}, 400, "metadatas"),
    ],
)
def test_bad_requests_are_4xx_naming_the_field(http, path, body, status, param):
    if isinstance(body, bytes):
        resp = http.post(path, content=body, headers={"Content-Type": "application/json"})
    else:
        resp = http.post(path, json=body)
    _assert_error(resp, status, param)


def test_size_limits_routes_and_methods(http):
    big = {"queries": ["a" * 1000] * 1100}  # ~1.1 MB: over the 1 MiB JSON limit
    err = _assert_error(http.post("/v1/retrieve", json=big), 413, None)
    assert "1048576" in err["message"]

    def chunks():  # no Content-Length: counted as it arrives
        yield b'{"queries": ["'
        for _ in range(1200):
            yield b"a" * 1000
        yield b'"]}'

    _assert_error(http.post("/v1/retrieve", content=chunks()), 413, None)
    _assert_error(http.get("/v1/nothing-here"), 404, None)
    _assert_error(http.put("/v1/retrieve", json={"queries": ["a"]}), 405, None)


# -- metrics and micro-batching -------------------------------------------------------------------
def test_metrics_count_requests_batches_and_llm_tokens(http, questions):
    before = http.get("/metrics").text
    assert "# TYPE fastrag_http_requests_total counter" in before
    assert "# TYPE fastrag_http_request_duration_seconds histogram" in before
    http.post("/v1/retrieve", json={"queries": questions[:3]})
    http.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": questions[3]}]}
    )
    after = http.get("/metrics").text
    for name, labels, delta in [
        (
            "fastrag_http_requests_total",
            {"method": "POST", "path": "/v1/retrieve", "status": "200"},
            1,
        ),
        (
            "fastrag_http_requests_total",
            {"method": "POST", "path": "/v1/chat/completions", "status": "200"},
            1,
        ),
        ("fastrag_retrieve_queries_total", {}, 4),
        ("fastrag_llm_calls_total", {}, 1),
        ("fastrag_chat_completions_total", {"stream": "false"}, 1),
    ]:
        assert _metric(after, name, **labels) - _metric(before, name, **labels) == delta, name
    for name in ("fastrag_llm_prompt_tokens_total", "fastrag_llm_completion_tokens_total"):
        assert _metric(after, name) > _metric(before, name)
    assert _metric(after, "fastrag_http_request_duration_seconds_count", path="/v1/retrieve") >= 1
    assert _metric(after, "fastrag_ready") == 1


async def _burst(url: str, headers: dict, queries: list[str]) -> list[list[str]]:
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        resps = await asyncio.gather(
            *(client.post("/v1/retrieve", json={"queries": [q]}) for q in queries)
        )
    assert all(r.status_code == 200 for r in resps)
    return [[h["id"] for h in r.json()["results"][0]] for r in resps]


def test_concurrent_requests_are_coalesced_into_fewer_batch_calls(server, plain, stores, questions):
    n = 24
    qs = questions[10 : 10 + n]
    for srv, batched in ((server, True), (plain, False)):
        before = httpx.get(srv.url + "/metrics", headers=srv.headers()).text
        ids = asyncio.run(_burst(srv.url, srv.headers(), qs))
        after = httpx.get(srv.url + "/metrics", headers=srv.headers()).text
        requests = _metric(after, "fastrag_retrieve_requests_total", source="retrieve") - _metric(
            before, "fastrag_retrieve_requests_total", source="retrieve"
        )
        batches = _metric(after, "fastrag_retrieve_batches_total") - _metric(
            before, "fastrag_retrieve_batches_total"
        )
        assert requests == n
        if batched:
            assert 1 <= batches < n / 2, batches
            assert ids == [[h.id for h in hs] for hs in _retriever(stores[0]).batch(qs)]
        else:
            assert batches == n


# -- in-process and command line -------------------------------------------------------------------
def test_create_app_is_an_asgi_app_to_mount(monkeypatch, tmp_path):
    from starlette.applications import Starlette
    from starlette.routing import Mount

    import fastrag.serve.app

    monkeypatch.setattr(fastrag.serve.app, "STATIC_DIR", tmp_path)  # no chat page installed

    doc = fr.Document.from_texts(["猫坐在垫子上。", "狗在院子里跑。", "鸟在天上飞。"])
    app = create_app(doc, topk=2, api_key="k" * 16)
    outer = Starlette(routes=[Mount("/rag", app=app)])  # Starlette runs no lifespan of a mount

    async def go():
        transport = httpx.ASGITransport(app=outer)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://t",
            headers={"Authorization": "Bearer " + "k" * 16},
        ) as c:
            for _ in range(200):
                if (await c.get("/rag/ready")).status_code == 200:
                    break
                await asyncio.sleep(0.05)
            page = await c.get("/rag/")
            return (await c.post("/rag/v1/retrieve", json={"queries": ["猫在哪里？"]})), page

    resp, page = asyncio.run(go())
    body = resp.json()
    assert body["group"] == "root" and body["results"][0][0]["text"] == "猫坐在垫子上。"
    assert "chat page is not installed" in _assert_error(page, 404, None)["message"]


def test_ready_without_the_key_hides_why_a_server_failed_to_start(tmp_path):
    """/ready is open, so a server that failed to start says only that to a caller without the
    key (the reason names paths); with the key, the reason."""
    missing = tmp_path / "secret-name.store"
    app = create_app(str(missing), api_key="k" * 16, tasks_dir=str(tmp_path / "tasks"))

    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            for _ in range(200):
                anon = await c.get("/ready")
                if "failed" in anon.text:
                    break
                await asyncio.sleep(0.05)
            keyed = await c.get("/ready", headers={"Authorization": "Bearer " + "k" * 16})
            return anon, keyed, await c.get("/v1/groups")

    anon, keyed, groups = asyncio.run(go())
    msg = _assert_error(anon, 503)["message"]
    assert msg.startswith("the server failed to start;") and "secret-name" not in msg
    assert "not a fastrag store" in _assert_error(keyed, 503)["message"]
    assert "secret-name" in keyed.text
    _assert_error(groups, 401)


def test_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "fastapi", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'fastrag-engine\[serve\]'"):
        create_app("anything")


@pytest.mark.parametrize(
    "args, message",
    [
        (["/no/such/store"], "is not a fastrag store"),
        (["STORE", "--api-key-env", "FASTRAG_UNSET_TEST_VAR"], "FASTRAG_UNSET_TEST_VAR"),
        (["STORE", "--group", "nope"], "--group 'nope' is not in the store"),
        (["STORE", "--llm-model", "m"], "needs both --llm-base-url and --llm-model"),
        (["STORE", "--similarity", "nope"], "unknown similarity 'nope'"),
        (["STORE", "--topk", "0"], "--topk 0: must be at least 1"),
        (["STORE", "--max-queries", "0"], "--max-queries 0: must be at least 1"),
        (["STORE", "--search-threads", "0"], "--search-threads 0: must be at least 1"),
        (["STORE", "--llm-max-concurrency", "0"], "--llm-max-concurrency 0: must be at least 1"),
    ],
)
def test_cli_usage_errors_are_one_line(stores, args, message, capsys):
    """In this process (`fastrag serve` exits before it serves); tests/test_cli_e2e.py runs the
    command line's errors in processes of their own."""
    args = [str(stores[1]) if a == "STORE" else a for a in args]
    try:
        code = cli_main(["serve", *args])
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_two_workers_share_one_writer_and_see_its_upload(tmp_path):
    """`--workers 2`: an upload through either process is written once, its task is visible
    from both, and every later retrieval, whichever process answers it, finds the text."""
    store = make_cmrc_store(tmp_path, n_articles=3)
    proc = ServeProcess(
        [str(store), "--workers", "2", "--topk", "1", "--group", "block"], tmp_path / "workers.log"
    )
    try:
        proc.wait_all_workers()
        text = f"{UNIQUE}-W 是两个进程都要看到的新文档。"
        resp = httpx.post(proc.url + "/v1/documents", json={"texts": [text]})
        assert resp.status_code == 202, resp.text
        task_id = resp.json()["task_id"]
        deadline = time.monotonic() + 300
        while True:  # a fresh connection per poll: either worker may answer
            task = httpx.get(f"{proc.url}/v1/tasks/{task_id}").json()
            if task["status"] in ("done", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert task["status"] == "done", task
        for _ in range(30):
            with httpx.Client(base_url=proc.url) as client:  # new connection each time
                assert client.get(f"/v1/tasks/{task_id}").json()["status"] == "done"
                hit = client.post(
                    "/v1/retrieve", json={"queries": [f"{UNIQUE}-W"], "topk": 1, "group": "root"}
                ).json()
                assert hit["results"][0][0]["text"] == text
        assert proc.text().count("Started server process") >= 2, proc.text()[-2000:]
    finally:
        proc.stop()


def test_an_app_never_started_leaves_no_task_folder(tmp_path):
    """An in-memory Document's server keeps its tasks in a temporary folder, removed at stop,
    and also when the app is dropped without its lifespan ever running (a mounted app)."""
    import gc

    doc = fr.Document.from_texts(["猫坐在垫子上。", "狗在院子里跑。"])
    app = create_app(doc, topk=2)
    folder = Path(app.app.state.tasks.root)
    assert folder.is_dir() and folder.name.startswith("fastrag-serve-tasks-")
    del app
    gc.collect()
    assert not folder.exists()
