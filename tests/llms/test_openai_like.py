"""OpenAILike against a real local OpenAI-compatible HTTP server (tests/openai_server.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import numpy as np
import pytest
from openai_server import OpenAIServer
from wallclock import below

from fastrag.analysis.tokens import count_tokens
from fastrag.errors import ConfigError
from fastrag.llms import (
    Completion,
    LLMError,
    LLMTimeoutError,
    OpenAILike,
    StructuredOutputError,
)

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "query_satisfied": {"type": "boolean"}},
    "required": ["answer", "query_satisfied"],
}


def make(server: OpenAIServer, **kw) -> OpenAILike:
    kw.setdefault("retry_backoff", 0.01)
    kw.setdefault("timeout", 5.0)
    return OpenAILike("test-model", server.url, **kw)


# -- plain completions ------------------------------------------------------------------------
def test_complete_reads_text_and_usage_and_sends_standard_fields(openai_server):
    openai_server.usage = (111, 22)
    llm = make(
        openai_server,
        api_key="sk-x",
        temperature=0.5,
        max_tokens=64,
        extra_body={"top_k": 3},
        system_prompt="Be brief.",
    )
    comp = llm.complete_with_usage("What is BM25?")
    assert comp == Completion("Echo: What is BM25?", 111, 22, raw=comp.raw, finish_reason="stop")
    assert comp.raw["object"] == "chat.completion"
    (req,) = openai_server.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer sk-x"
    assert req.body == {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is BM25?"},
        ],
        "temperature": 0.5,
        "max_tokens": 64,
        "top_k": 3,
    }


def test_per_call_overrides_and_finish_reason(openai_server):
    llm = make(openai_server, max_tokens=64)
    comp = llm.complete_with_usage(
        "one two three four five six seven eight", max_tokens=2, stop=["\n"], extra_body={"seed": 7}
    )
    assert comp.finish_reason == "length"
    assert comp.completion_tokens == 2
    assert openai_server.requests[0].body["max_tokens"] == 2
    assert openai_server.requests[0].body["stop"] == ["\n"]
    assert openai_server.requests[0].body["seed"] == 7


def test_usage_falls_back_to_tiktoken_counts(openai_server):
    openai_server.script(["no-usage"])
    comp = make(openai_server).complete_with_usage("count these tokens please")
    assert comp.prompt_tokens == count_tokens("count these tokens please")
    assert comp.completion_tokens == count_tokens("Echo: count these tokens please")


def test_async_complete(openai_server):
    async def main():
        llm = make(openai_server)
        async with llm:
            return await asyncio.gather(*(llm.acomplete(f"q{i}") for i in range(5)))

    assert asyncio.run(main()) == [f"Echo: q{i}" for i in range(5)]


# -- streaming --------------------------------------------------------------------------------
def test_stream_chunks_reassemble_and_usage_event_is_read(openai_server):
    openai_server.usage = (9, 4)
    llm = make(openai_server)

    async def main():
        return [x async for x in llm.astream_with_usage("alpha beta gamma")]

    items = asyncio.run(main())
    chunks, final = items[:-1], items[-1]
    assert chunks == ["Echo:", " alpha", " beta", " gamma"]
    assert final == Completion("Echo: alpha beta gamma", 9, 4, raw=final.raw, finish_reason="stop")
    body = openai_server.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert list(llm.stream("x y")) == ["Echo:", " x", " y"]


def test_stream_without_usage_counts_tokens(openai_server):
    openai_server.script(["no-usage"])
    llm = make(openai_server)

    async def main():
        return [x async for x in llm.astream_with_usage("one two")]

    final = asyncio.run(main())[-1]
    assert (final.prompt_tokens, final.completion_tokens) == (
        count_tokens("one two"),
        count_tokens("Echo: one two"),
    )


def test_stream_retries_before_first_chunk(openai_server):
    openai_server.script(["503", "ok"])
    assert "".join(make(openai_server).stream("a b")) == "Echo: a b"
    assert len(openai_server.requests) == 2


def test_stream_errors_are_clear(openai_server):
    llm = make(openai_server)
    openai_server.script(["malformed"])
    with pytest.raises(LLMError, match="malformed JSON in the event stream"):
        list(llm.stream("a"))
    openai_server.script(["error-event"])
    with pytest.raises(LLMError, match="mid-stream: scripted mid-stream failure"):
        list(llm.stream("a b c"))
    openai_server.script(["stall:3"])
    t0 = time.perf_counter()
    with pytest.raises(
        LLMTimeoutError, match="stream broken after 1 chunk: no answer within timeout=0.2 s"
    ):
        list(make(openai_server, timeout=0.2).stream("a b c"))
    below(time.perf_counter() - t0, 2.0, "the stalled stream")


# -- retries ----------------------------------------------------------------------------------
def test_429_then_success(openai_server):
    openai_server.script(["429", "429", "ok"])
    assert make(openai_server).complete("hi") == "Echo: hi"
    assert [r.status for r in openai_server.requests] == [429, 429, 200]


def test_retry_after_is_honoured(openai_server):
    openai_server.script(["retry-after:0.3", "ok"])
    t0 = time.perf_counter()
    assert make(openai_server, retry_backoff=0.0).complete("hi") == "Echo: hi"
    elapsed = time.perf_counter() - t0
    first, second = openai_server.requests
    assert 0.3 <= second.started - first.started
    below(second.started - first.started, 0.3 * 1.1 + 0.5, "the wait before the retry")
    below(elapsed, 1.5, "the call")


def test_500_exhausts_retries_and_names_the_request(openai_server):
    openai_server.script(["500"] * 3)
    llm = make(openai_server, max_retries=2)
    with pytest.raises(LLMError, match=r"after 3 attempts; last error: HTTP 500") as info:
        llm.complete("Which river is longest? " + "context " * 50)
    err = info.value
    assert err.status == 500 and err.attempts == 3
    assert err.request["model"] == "test-model"
    assert err.request["url"] == openai_server.url + "/chat/completions"
    assert "Which river is longest?" in str(err) and "test-model" in str(err)
    assert len(openai_server.requests) == 3


def test_client_errors_are_not_retried(openai_server):
    openai_server.script(["400"])
    with pytest.raises(LLMError, match="refused the request: HTTP 400: scripted error 400"):
        make(openai_server).complete("hi")
    assert len(openai_server.requests) == 1
    openai_server.api_key = "sk-right"
    with pytest.raises(LLMError, match="HTTP 401.*check api_key") as info:
        make(openai_server, api_key="sk-wrong").complete("hi")
    assert info.value.status == 401
    with pytest.raises(LLMError, match="HTTP 404.*check base_url"):
        OpenAILike("m", openai_server.url + "/nope", api_key="sk-right").complete("hi")


def test_dropped_connection_is_retried(openai_server):
    openai_server.script(["drop", "ok"])
    assert make(openai_server).complete("hi") == "Echo: hi"
    assert len(openai_server.requests) == 2


def test_connection_refused_after_retries():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens
    llm = OpenAILike("m", f"http://127.0.0.1:{port}/v1", max_retries=1, retry_backoff=0.01)
    with pytest.raises(LLMError, match=r"after 2 attempts; last error: ConnectError") as info:
        llm.complete("hi")
    assert info.value.status is None


def test_slow_response_times_out(openai_server):
    openai_server.script(["slow:3", "slow:3"])
    llm = make(openai_server, timeout=0.2, max_retries=1)
    t0 = time.perf_counter()
    with pytest.raises(LLMTimeoutError, match=r"after 2 attempts.*timeout=0.2 s") as info:
        llm.complete("hi")
    below(time.perf_counter() - t0, 1.5, "two attempts of timeout=0.2 s")
    assert info.value.status is None and len(openai_server.requests) == 2


def test_malformed_json_is_a_clear_error(openai_server):
    openai_server.script(["malformed"])
    with pytest.raises(LLMError, match="HTTP 200 with malformed JSON") as info:
        make(openai_server).complete("hi")
    assert info.value.status == 200 and len(openai_server.requests) == 1


def test_unexpected_shape_is_a_clear_error(openai_server):
    async def main():
        llm = make(openai_server)
        return llm._parse_completion({"result": "x"}, {"messages": []}, "p")

    with pytest.raises(LLMError, match=r"expected choices\[0\].message.content"):
        asyncio.run(main())


# -- concurrency, loops, cancellation ----------------------------------------------------------
def test_concurrency_limit_is_respected(openai_server):
    openai_server.script(["slow:0.15"] * 9)
    llm = make(openai_server, max_concurrency=3)

    async def main():
        return await asyncio.gather(*(llm.acomplete(f"q{i}") for i in range(9)))

    t0 = time.perf_counter()
    assert asyncio.run(main()) == [f"Echo: q{i}" for i in range(9)]
    assert openai_server.max_in_flight == 3
    assert time.perf_counter() - t0 >= 3 * 0.15


def test_sync_call_inside_running_loop(openai_server):
    llm = make(openai_server)

    async def main():
        a = llm.complete("sync in loop")  # blocking call from a coroutine, as in Jupyter
        b = await llm.acomplete("async")
        return a, b

    assert asyncio.run(main()) == ("Echo: sync in loop", "Echo: async")
    assert llm.complete("again") == "Echo: again"


def test_client_is_closed_when_its_loop_shuts_down(openai_server):
    llm = make(openai_server)
    clients = []

    async def main():
        await llm.acomplete("hi")
        clients.append(llm._states[asyncio.get_running_loop()].client)

    asyncio.run(main())
    asyncio.run(main())
    assert clients[0] is not clients[1]
    assert all(c.is_closed for c in clients)


def test_cancelling_a_batch_cancels_in_flight_requests(openai_server):
    openai_server.script(["slow:5"] * 4)
    llm = make(openai_server)

    async def main():
        batch = asyncio.ensure_future(asyncio.gather(*(llm.acomplete(f"q{i}") for i in range(4))))
        while openai_server.in_flight < 4:
            await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        batch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await batch
        return time.perf_counter() - t0

    below(asyncio.run(main()), 1.0, "cancelling")
    assert openai_server.wait_for(lambda: openai_server.disconnects == 4, timeout=60)
    assert all(r.disconnected for r in openai_server.requests)


# -- structured output -------------------------------------------------------------------------
def test_structured_uses_json_mode(openai_server):
    openai_server.reply = lambda messages: '{"answer": "Paris", "query_satisfied": true}'
    out = make(openai_server).structured("Capital of France?", SCHEMA)
    assert out == {"answer": "Paris", "query_satisfied": True}
    body = openai_server.requests[0].body
    assert body["response_format"] == {"type": "json_object"}
    assert json.dumps(SCHEMA) in body["messages"][-1]["content"]

    make(openai_server, json_mode="json_schema").structured("again", SCHEMA)
    fmt = openai_server.requests[1].body["response_format"]
    assert fmt == {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}


def test_structured_text_mode_parses_code_fences(openai_server):
    openai_server.reply = lambda m: (
        'Sure:\n```json\n{"answer": "no", "query_satisfied": "false"}\n```'
    )
    out = make(openai_server, json_mode=None).structured("q", SCHEMA)
    assert out == {"answer": "no", "query_satisfied": False}
    assert "response_format" not in openai_server.requests[0].body
    openai_server.reply = "I cannot answer."
    with pytest.raises(StructuredOutputError, match="no JSON object found"):
        make(openai_server).structured("q", SCHEMA)


# -- bad arguments -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": ""}, "model must be a non-empty str"),
        ({"model": None}, "model must be a non-empty str"),
        ({"base_url": "localhost:8000"}, "base_url must be an http"),
        ({"base_url": "ftp://host/v1"}, "base_url must be an http"),
        ({"base_url": ""}, "base_url must be an http"),
        ({"base_url": "http://h/v1/chat/completions"}, "API root.*'http://h/v1'"),
        ({"max_concurrency": 0}, "max_concurrency must be an int >= 1, got 0"),
        ({"max_concurrency": 2.5}, "max_concurrency must be an int >= 1"),
        ({"max_retries": -1}, "max_retries must be an int >= 0.*disable retries"),
        ({"timeout": 0}, "timeout must be a finite number > 0"),
        ({"timeout": float("inf")}, "timeout must be a finite number > 0"),
        ({"temperature": 3}, r"temperature must be None or a number in \[0, 2\]"),
        ({"max_tokens": 0}, r"max_tokens must be None \(the server's default\) or an int >= 1"),
        ({"extra_body": [1]}, "extra_body must be a dict"),
        ({"extra_body": {"x": object()}}, "extra_body must be JSON-serializable"),
        ({"json_mode": "yaml"}, "json_mode must be"),
        ({"api_key": ""}, "api_key must be None"),
        ({"headers": {"a": 1}}, "headers must be a dict of str to str"),
        ({"retry_backoff": -1}, "retry_backoff must be a finite number >= 0"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    args = {"model": "m", "base_url": "http://localhost:8000/v1", **kwargs}
    with pytest.raises(ConfigError, match=match):
        OpenAILike(**args)


def test_bad_call_arguments(openai_server):
    llm = make(openai_server)
    with pytest.raises(ConfigError, match=r"unknown keyword argument\(s\) \['tone'\].*extra_body"):
        llm.complete("hi", tone="dry")
    with pytest.raises(ConfigError, match="prompt must be a str, got list"):
        llm.complete(["hi"])
    with pytest.raises(ConfigError, match="schema must be a non-empty JSON-schema dict"):
        llm.structured("hi", {})
    assert openai_server.requests == []


# -- fallbacks for servers without optional fields ---------------------------------------------
def test_servers_rejecting_optional_fields_get_a_plain_request(openai_server):
    llm = make(openai_server)
    openai_server.script(["400:stream_options is not supported"])
    assert "".join(llm.stream("a b")) == "Echo: a b"
    first, second = openai_server.requests
    assert "stream_options" in first.body and "stream_options" not in second.body

    openai_server.reset()
    openai_server.reply = '{"answer": "x", "query_satisfied": false}'
    openai_server.script(["422:response_format: json_object unsupported"])
    assert llm.structured("q", SCHEMA) == {"answer": "x", "query_satisfied": False}
    first, second = openai_server.requests
    assert "response_format" in first.body and "response_format" not in second.body

    openai_server.script(["400:context too long"])
    with pytest.raises(LLMError, match="HTTP 400: context too long"):
        llm.structured("q", SCHEMA)


def test_pickle_roundtrip_keeps_settings(openai_server):
    import pickle

    llm = make(openai_server, max_concurrency=2, temperature=0.1)
    llm.complete("warm")  # has a live client now
    copy = pickle.loads(pickle.dumps(llm))
    assert (copy.model, copy.base_url, copy.max_concurrency, copy.temperature) == (
        "test-model",
        openai_server.url,
        2,
        0.1,
    )
    assert copy.complete("hi") == "Echo: hi"


# -- the test server's own contract (used by the embedding tests too) ----------------------------
def test_server_embeddings_endpoint(openai_server):
    openai_server.dim = 16
    url = openai_server.url + "/embeddings"
    r = httpx.post(url, json={"model": "e", "input": ["alpha", "beta gamma"]}).json()
    vecs = np.array([d["embedding"] for d in r["data"]], dtype=np.float32)
    expected = np.stack([OpenAIServer.embedding(t, 16) for t in ["alpha", "beta gamma"]])
    np.testing.assert_array_equal(vecs, expected)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-6)
    assert r["usage"] == {"prompt_tokens": 1 + 2, "total_tokens": 3}

    import base64

    openai_server.script(["shuffle"])
    r = httpx.post(
        url, json={"input": ["a", "b", "c"], "encoding_format": "base64", "dimensions": 4}
    ).json()
    assert [d["index"] for d in r["data"]] == [2, 1, 0]
    got = np.frombuffer(base64.b64decode(r["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_array_equal(got, OpenAIServer.embedding("c", 4))

    openai_server.max_inputs = 2
    r = httpx.post(url, json={"input": ["a", "b", "c"]})
    assert r.status_code == 400 and "too many inputs: 3 > 2" in r.json()["error"]["message"]
    assert httpx.post(url, json={"input": []}).status_code == 400
    assert httpx.get(openai_server.url + "/models").json()["data"][0]["id"] == "test-model"
    with pytest.raises(ValueError, match=r"unknown behaviour\(s\) \['teapot'\]"):
        openai_server.script(["teapot"])


def test_breaking_out_of_a_sync_stream_closes_the_request(openai_server):
    openai_server.script(["stall:5"])
    llm = make(openai_server)
    t0 = time.perf_counter()
    for chunk in llm.stream("a b c"):
        assert chunk == "Echo:"
        break
    assert openai_server.wait_for(lambda: openai_server.disconnects == 1, timeout=60)
    below(time.perf_counter() - t0, 2.0, "closing the stream")
