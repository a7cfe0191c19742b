"""MockLLM, FunctionLLM, the base-class helpers and run_sync."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from wallclock import below

from fastrag._async import iter_sync, run_sync, shared_loop
from fastrag.analysis.tokens import count_tokens
from fastrag.errors import ConfigError
from fastrag.llms import (
    BaseLLM,
    Completion,
    FunctionLLM,
    LLMError,
    LLMProtocol,
    MockLLM,
    StructuredOutputError,
    check_schema,
    default_answer,
    parse_json_object,
    resolve_llm,
)

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "query_satisfied": {"type": "boolean"}},
    "required": ["answer", "query_satisfied"],
}


# -- MockLLM ----------------------------------------------------------------------------------
def test_default_answer_is_deterministic_and_recorded():
    llm = MockLLM()
    prompt = "Context: rivers.\nQuestion: longest river?"
    comp = llm.complete_with_usage(prompt)
    assert comp.text == default_answer(prompt) == MockLLM().complete(prompt)
    assert comp.text.startswith("Answer ") and comp.text.endswith("Question: longest river?")
    assert comp.prompt_tokens == count_tokens(prompt)
    assert comp.completion_tokens == count_tokens(comp.text)
    assert llm.prompts == [prompt]
    (call,) = llm.calls
    assert (call.method, call.response, call.prompt_tokens) == (
        "complete",
        comp.text,
        comp.prompt_tokens,
    )
    assert llm.prompt_tokens == comp.prompt_tokens and llm.n_calls == 1
    llm.reset()
    assert llm.prompts == [] and llm.calls == []


def test_fixed_sync_and_async_responses():
    assert MockLLM("fixed").complete("x") == "fixed"
    assert MockLLM(lambda p: p[::-1]).complete("abc") == "cba"

    async def upper(p):
        await asyncio.sleep(0)
        return p.upper()

    assert MockLLM(upper).complete("abc") == "ABC"
    with pytest.raises(LLMError, match="response function returned int, expected str"):
        MockLLM(lambda p: 3).complete("abc")


def test_answer_tokens_and_max_tokens():
    llm = MockLLM(answer_tokens=128)
    comp = llm.complete_with_usage("question")
    assert comp.completion_tokens == 128 == count_tokens(comp.text)
    cut = MockLLM("one two three four five six", max_tokens=3).complete("q")
    assert cut == "one two three"


def test_token_counter_replaces_tiktoken_for_usage():
    llm = MockLLM("four words of answer", latency_per_token=0.001, token_counter=len)
    comp = llm.complete_with_usage("x" * 100)
    assert (comp.prompt_tokens, comp.completion_tokens) == (100, len("four words of answer"))
    assert llm.count_tokens("x" * 100) == count_tokens("x" * 100)
    with pytest.raises(ConfigError, match="token_counter returned -1"):
        MockLLM(token_counter=lambda s: -1).complete("x")


def test_latency_is_simulated_and_calls_overlap():
    llm = MockLLM(latency=0.1)

    async def main():
        return await asyncio.gather(*(llm.acomplete(f"p{i}") for i in range(10)))

    t0 = time.perf_counter()
    asyncio.run(main())
    wall = time.perf_counter() - t0
    assert wall >= 0.1
    below(wall, 1.0, "10 calls of 0.1 s")  # serial: 1.0 s (the overlap itself: max_in_flight)
    assert llm.max_in_flight == 10 and llm.in_flight == 0

    per_token = MockLLM(latency=0.02, latency_per_token=0.01)
    prompt = "one two three four five six seven eight nine ten"  # 10 tokens
    t0 = time.perf_counter()
    per_token.complete(prompt)
    assert time.perf_counter() - t0 >= 0.02 + 0.01 * count_tokens(prompt)


def test_stream_chunks_join_to_the_answer():
    llm = MockLLM("Rivers flow to the sea. 长江是中国最长的河流，全长六千三百公里。")
    chunks = list(llm.stream("q"))
    assert "".join(chunks) == llm.complete("q")
    assert len(chunks) > 3 and all(len(c) <= 16 for c in chunks)

    async def main():
        return [x async for x in llm.astream_with_usage("q")]

    items = asyncio.run(main())
    assert isinstance(items[-1], Completion) and items[-1].text == "".join(items[:-1])
    assert [c.method for c in llm.calls] == ["stream", "complete", "stream"]


def test_recording_is_thread_safe():
    llm = MockLLM(latency=0.01)
    threads = [
        threading.Thread(target=lambda i=i: [llm.complete(f"t{i}-{j}") for j in range(5)])
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(llm.prompts) == sorted(f"t{i}-{j}" for i in range(8) for j in range(5))
    assert len(llm.calls) == 40 and llm.in_flight == 0


def test_structured_mock_and_function_llm():
    out = MockLLM().structured("Is it relevant?", SCHEMA)
    assert out["query_satisfied"] is True and out["answer"].startswith("Answer ")
    llm = MockLLM()
    llm.structured("q", SCHEMA)
    assert "matches this JSON schema" in llm.prompts[0]
    json_llm = MockLLM(supports_json_mode=True)
    json_llm.structured("q", SCHEMA)
    assert json_llm.prompts == ["q"]

    fenced = FunctionLLM(lambda p: '```json\n{"answer": "x", "query_satisfied": "no",}\n```')
    assert fenced.structured("q", SCHEMA) == {"answer": "x", "query_satisfied": False}
    with pytest.raises(StructuredOutputError, match="missing required key 'query_satisfied'"):
        FunctionLLM(lambda p: '{"answer": "x"}').structured("q", SCHEMA)
    with pytest.raises(StructuredOutputError, match="no JSON object found"):
        FunctionLLM(lambda p: "nothing here").structured("q", SCHEMA)


def test_function_llm_to_thread_overlaps_blocking_calls():
    def blocking(p: str) -> str:
        time.sleep(0.2)
        return p + "!"

    llm = FunctionLLM(blocking, to_thread=True)

    async def main():
        return await asyncio.gather(*(llm.acomplete(f"p{i}") for i in range(5)))

    t0 = time.perf_counter()
    assert asyncio.run(main()) == [f"p{i}!" for i in range(5)]
    below(time.perf_counter() - t0, 0.7, "5 calls of 0.2 s")  # serial would take 1.0 s
    assert llm.max_in_flight == 5


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: MockLLM(response=123), "response must be None, a str, or a function"),
        (lambda: MockLLM(latency=-1), "latency must be a finite number >= 0"),
        (lambda: MockLLM(latency_per_token=float("nan")), "latency_per_token must be"),
        (lambda: MockLLM(max_tokens=0), "max_tokens must be None or an int >= 1"),
        (lambda: MockLLM(answer_tokens=1.5), "answer_tokens must be None or an int >= 1"),
        (lambda: MockLLM(model=""), "model must be a non-empty str"),
        (lambda: FunctionLLM("not callable"), "FunctionLLM needs a function"),
        (lambda: MockLLM(token_counter=3), "token_counter must be None"),
        (
            lambda: MockLLM().complete(None),
            "prompt must be a str, got None; format the template first",
        ),
    ],
)
def test_bad_arguments(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


# -- base helpers -----------------------------------------------------------------------------
def test_resolve_llm_adapts_duck_types_and_functions():
    class Duck:
        model = "duck"

        async def acomplete(self, prompt: str, **kw) -> str:
            return "quack " + prompt

    duck = Duck()
    assert isinstance(duck, LLMProtocol) is False  # no astream: not the full protocol
    wrapped = resolve_llm(duck)
    assert isinstance(wrapped, BaseLLM) and wrapped.model == "duck"
    comp = wrapped.complete_with_usage("hi")
    assert comp == Completion("quack hi", count_tokens("hi"), count_tokens("quack hi"))
    assert list(wrapped.stream("hi")) == ["quack hi"]
    assert resolve_llm(str.upper).complete("abc") == "ABC"
    mock = MockLLM()
    assert resolve_llm(mock) is mock and isinstance(mock, LLMProtocol)
    with pytest.raises(ConfigError, match="no LLM given"):
        resolve_llm(None)
    with pytest.raises(ConfigError, match="llm must be a fastrag LLM.*got int"):
        resolve_llm(3)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('Here you go:\n```json\n{"a": 1}\n```\nDone.', {"a": 1}),
        ('Answer: {"a": "x {not} y", "b": [1, 2,],} trailing', {"a": "x {not} y", "b": [1, 2]}),
        ("{'a': 1}".replace("'", '"') + ' and {"b": 2}', {"a": 1}),
        ('{"ok": True, "v": None}', {"ok": True, "v": None}),
    ],
)
def test_parse_json_object(text, expected):
    assert parse_json_object(text) == expected


def test_check_schema_coerces_and_rejects():
    schema = {
        "properties": {
            "n": {"type": "integer"},
            "x": {"type": ["number", "null"]},
            "s": {"type": "string"},
        },
        "required": ["n"],
    }
    assert check_schema({"n": "3", "x": None, "s": 5}, schema) == {"n": 3, "x": None, "s": "5"}
    with pytest.raises(ValueError, match="key 'n' should be of type integer, got str 'three'"):
        check_schema({"n": "three"}, schema)
    with pytest.raises(ValueError, match="key 'n' should be of type integer, got bool"):
        check_schema({"n": True}, schema)


# -- run_sync / iter_sync ----------------------------------------------------------------------
def test_run_sync_with_and_without_a_running_loop():
    async def add(a, b):
        await asyncio.sleep(0)
        return a + b

    assert run_sync(add(1, 2)) == 3

    async def outer():
        return run_sync(add(3, 4))  # a loop is running in this thread

    assert asyncio.run(outer()) == 7
    with pytest.raises(ConfigError, match="run_sync expects a coroutine object"):
        run_sync(add)


def test_run_sync_nested_inside_the_shared_loop():
    inner = MockLLM("inner")
    outer = FunctionLLM(lambda p: inner.complete(p) + "+outer")  # sync call on the shared loop
    assert outer.complete("x") == "inner+outer"


def test_run_sync_propagates_exceptions_and_contextvars():
    import contextvars

    var = contextvars.ContextVar("var", default="unset")

    async def read():
        return var.get()

    async def boom():
        raise KeyError("nope")

    var.set("caller")
    assert run_sync(read()) == "caller"
    with pytest.raises(KeyError, match="nope"):
        run_sync(boom())


def test_iter_sync_closes_the_generator_on_break():
    closed = []

    async def gen():
        try:
            for i in range(100):
                yield i
        finally:
            closed.append(asyncio.get_running_loop())

    it = iter_sync(gen())
    assert [next(it), next(it)] == [0, 1]
    it.close()
    assert closed == [shared_loop()]


def test_subclass_overriding_only_astream_streams_with_usage():
    class Streamer(BaseLLM):
        model = "streamer"

        async def acomplete_with_usage(self, prompt, **kw):
            return Completion("whole", 1, 1)

        async def astream(self, prompt, **kw):
            for piece in ("a", "b", "c"):
                yield piece

    async def main():
        return [x async for x in Streamer().astream_with_usage("p")]

    items = asyncio.run(main())
    assert items == ["a", "b", "c", Completion("abc", count_tokens("p"), count_tokens("abc"))]
