"""fastrag.WebModule (LazyLLM's web UI for a flow): real HTTP on 127.0.0.1, free ports."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
import threading

import httpx
import pytest

import fastrag as fr
from fastrag.errors import MissingExtraError
from fastrag.serve.webmodule import WebModule

pytest.importorskip("fastapi")


@pytest.fixture(autouse=True)
def _stop_all():
    yield
    for module in WebModule.running():
        module.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask(module: WebModule, text: str, **extra) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": text}], **extra}
    return httpx.post(module.url + "v1/chat/completions", json=body, timeout=30)


def answer(module: WebModule, text: str) -> str:
    r = ask(module, text)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def test_is_lazyllms_name():
    assert fr.WebModule is WebModule


def test_a_plain_callable_answers_and_stops():
    threads = []

    def flow(q: str) -> str:
        threads.append(threading.current_thread().name)
        return f"echo: {q}"

    m = WebModule(flow)
    assert m.url is None and m.port is None
    assert m.start() is m
    assert WebModule.running() == (m,)
    assert m.url == f"http://127.0.0.1:{m.port}/"
    r = ask(m, "你好")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "echo: 你好"},
            "finish_reason": "stop",
        }
    ]
    assert len(threads) == 1 and threads[0].startswith("fastrag-worker")  # the worker pool
    assert httpx.get(m.url + "health").json() == {"status": "ok"}
    assert httpx.get(m.url + "v1/groups").json() == {"groups": []}
    assert httpx.get(m.url + "v1/models").json()["data"][0]["id"] == "fastrag-webmodule"
    port = m.port
    assert m.stop() is m
    assert WebModule.running() == () and m.url is None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
    m.stop()  # stopping twice does nothing


def test_the_chat_page_is_served_with_the_title():
    m = WebModule(str.upper, title="RAG <demo>").start()
    r = httpx.get(m.url)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    page = r.text
    assert "<title>RAG &lt;demo&gt;</title>" in page and "<h1>RAG &lt;demo&gt;</h1>" in page
    assert 'fetch("v1/chat/completions"' in page  # fastrag serve's page, unchanged otherwise
    assert "section#upload-box { display: none; }" in page  # a flow has no document store


def test_a_pipeline_flow_answers_as_it_does_when_called():
    with fr.pipeline() as ppl2:
        ppl2.words = lambda q: q.split()
        ppl2.joined = (lambda ws, q: f"{len(ws)} words in {q!r}") | fr.bind(q=ppl2.input)
    m = WebModule(ppl2, port=free_port()).start()
    for q in ("one two three", "a"):
        assert answer(m, q) == ppl2(q) == f"{len(q.split())} words in {q!r}"


def test_an_async_flow_is_awaited():
    async def flow(q: str) -> str:
        await asyncio.sleep(0)
        return q[::-1]

    m = WebModule(flow).start()
    assert answer(m, "abc") == "cba"


def test_streaming_sends_the_answer_then_done():
    m = WebModule(lambda q: "答：" + q).start()
    r = ask(m, "问题", stream=True)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [e.removeprefix("data: ") for e in r.text.split("\n\n") if e]
    assert events[-1] == "[DONE]" and len(events) == 3
    first, last = json.loads(events[0]), json.loads(events[1])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "答：问题"}
    assert last["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}


def test_bad_requests_and_flow_failures_say_what_is_wrong():
    def flow(q: str):
        if q == "boom":
            raise ValueError("no answer for boom")
        return None if q == "none" else 42

    m = WebModule(flow).start()
    url = m.url + "v1/chat/completions"
    r = httpx.post(url, content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["message"] == "the body is not JSON"
    r = httpx.post(url, json={"messages": []})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith('"messages" must be a non-empty list')
    r = httpx.post(url, json={"messages": [{"role": "assistant", "content": "hi"}]})
    assert r.status_code == 400
    assert (
        r.json()["error"]["message"] == "the last message must be the user's, got role 'assistant'"
    )
    r = httpx.post(url, json={"messages": [{"role": "user", "content": "  "}]})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "the last user message has no text content"
    r = ask(m, "boom")
    assert r.status_code == 500
    assert r.json()["error"] == {
        "message": "the flow failed: ValueError: no answer for boom",
        "type": "flow_error",
        "param": None,
    }
    r = ask(m, "none")
    assert r.status_code == 500
    assert r.json()["error"]["message"] == "the flow returned None, not the answer text"
    assert answer(m, "x") == "42"  # a non-str answer is its str()
    parts = [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]
    r = httpx.post(url, json={"messages": [{"role": "user", "content": parts}]})
    assert r.json()["choices"][0]["message"]["content"] == "42"


def test_stop_frees_the_port_and_a_port_in_use_is_named():
    port = free_port()
    first = WebModule(str.upper, port=port).start()
    second = WebModule(str.lower, port=port)
    with pytest.raises(OSError, match=f"port {port} on 127.0.0.1 is in use"):
        second.start()
    assert second.url is None and WebModule.running() == (first,)
    first.stop()
    second.start()
    assert second.port == port and answer(second, "ABC") == "abc"
    with pytest.raises(RuntimeError, match="already serving at http://127.0.0.1"):
        second.start()
    second.stop()
    second.start()  # a stopped module starts again
    assert answer(second, "DEF") == "def"


def test_wait_blocks_until_stop():
    m = WebModule(str.upper)
    with pytest.raises(RuntimeError, match="not serving: call start"):
        m.wait()
    m.start()
    done = threading.Event()
    t = threading.Thread(target=lambda: (m.wait(), done.set()))
    t.start()
    assert not done.wait(0.3)  # still serving
    assert answer(m, "x") == "X"
    m.stop()
    assert done.wait(10)
    t.join(10)


@pytest.mark.parametrize(
    ("args", "kw", "error", "match"),
    [
        (("not callable",), {}, TypeError, r"flow must be callable .* got str"),
        ((str,), {"port": 0}, ValueError, r"port must be an int in 1\.\.65535, or None"),
        ((str,), {"port": 65536}, ValueError, r"WebModule\(port=65536\)"),
        ((str,), {"port": "8080"}, ValueError, r"WebModule\(port='8080'\)"),
        ((str,), {"port": True}, ValueError, r"WebModule\(port=True\)"),
        ((str,), {"host": ""}, ValueError, "host must be a non-empty str"),
        ((str,), {"title": 3}, TypeError, "title must be a str"),
        (
            (str,),
            {"history": [str]},
            ValueError,
            r"history=.* is not supported.*leave history= out",
        ),
        ((str,), {"audio": True}, ValueError, r"WebModule\(audio=True\) is not supported"),
        ((str,), {"stream": "yes"}, TypeError, r"WebModule\(stream='yes'\): stream must be a bool"),
        ((str,), {"colour": "red"}, TypeError, "unexpected keyword argument 'colour'"),
    ],
)
def test_bad_arguments(args, kw, error, match):
    with pytest.raises(error, match=match):
        WebModule(*args, **kw)


def test_lazyllms_options_at_their_defaults_are_accepted():
    m = WebModule(str, port=None, components={}, history=[], audio=False, stream=True)
    assert m.url is None and m.title == "fastrag chat"


def test_ctrl_c_in_wait_stops_the_module():
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        pytest.skip("needs the main thread with Python's own SIGINT handler")
    m = WebModule(str.upper).start()
    port = m.port
    ctrl_c = threading.Timer(0.3, signal.pthread_kill, (threading.get_ident(), signal.SIGINT))
    fallback = threading.Timer(20, m.stop)  # so a failure here cannot hang the run
    ctrl_c.start()
    fallback.start()
    try:
        assert m.wait() is m
    finally:
        fallback.cancel()
    assert m.url is None and WebModule.running() == ()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)


def test_without_the_serve_extra_start_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed
    m = WebModule(str.upper)
    with pytest.raises(MissingExtraError, match=r"fastrag.WebModule needs .*'uvicorn'.*\[serve\]"):
        m.start()
    assert m.url is None and WebModule.running() == ()
