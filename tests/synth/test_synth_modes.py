"""Every response mode, checked by the prompts and calls a recording fake LLM receives."""

from __future__ import annotations

import itertools
import random

import pytest

from fastrag.analysis.tokens import get_encoding
from fastrag.errors import ConfigError
from fastrag.llms import FunctionLLM, LLMError, MockLLM
from fastrag.schema import DocNode, NodeWithScore
from fastrag.synth import (
    PromptTemplate,
    ResponseMode,
    default_prompts,
    get_response_synthesizer,
)

ENC = get_encoding()
EN = default_prompts("en")
ZH = default_prompts("zh")
Q = "What is the river called?"


def ntok(text: str) -> int:
    return len(ENC.encode_ordinary(text))


def paragraphs(n: int, words: int = 60, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    vocab = [
        "the",
        "river",
        "city",
        "school",
        "music",
        "north",
        "energy",
        "bridge",
        "law",
        "of",
        "and",
        "to",
        "in",
        "was",
    ]
    out = []
    for i in range(n):
        body = " ".join(rng.choice(vocab) for _ in range(words))
        out.append(f"Paragraph {i}: {body.capitalize()}.")
    return out


def counter_llm(prefix: str = "A", **kw) -> MockLLM:
    """Answers A1, A2, ... in call order."""
    state = {"n": 0}

    def answer(prompt: str) -> str:
        state["n"] += 1
        return f"{prefix}{state['n']}"

    return MockLLM(answer, **kw)


def test_refine_prompts_are_exact_and_sequential():
    chunks = ["alpha one", "beta two", "gamma three"]
    llm = counter_llm()
    syn = get_response_synthesizer("refine", llm=llm)
    resp = syn.synthesize(Q, chunks)
    assert str(resp) == "A3"
    assert llm.prompts == [
        EN["text_qa"].format(context_str="alpha one", query_str=Q),
        EN["refine"].format(query_str=Q, existing_answer="A1", context_msg="beta two"),
        EN["refine"].format(query_str=Q, existing_answer="A2", context_msg="gamma three"),
    ]
    # sequential: each call starts after the previous ended
    calls = llm.calls
    assert all(b.started >= a.ended for a, b in itertools.pairwise(calls))
    assert resp.metadata["llm_calls"] == 3 and resp.metadata["steps"] == 3


def test_empty_answer_never_replaces_previous():
    answers = iter(["First answer", "", "   ", "\n"])
    llm = MockLLM(lambda p: next(answers))
    resp = get_response_synthesizer("refine", llm=llm).synthesize(Q, ["a", "b", "c", "d"])
    assert str(resp) == "First answer"
    # the refine prompts kept carrying the last non-empty answer
    assert all("existing answer: First answer" in p for p in llm.prompts[1:])
    blank = MockLLM("")
    assert str(get_response_synthesizer("compact", llm=blank).synthesize(Q, ["a"])) == (
        "Empty Response"
    )


def test_compact_packs_full_prompts_without_overlap():
    chunks = paragraphs(40, words=60)
    window, num_output = 1200, 100
    llm = MockLLM(answer_tokens=40)
    syn = get_response_synthesizer("compact", llm=llm, context_window=window, num_output=num_output)
    resp = syn.synthesize(Q, chunks)
    sizes = [ntok(c) for c in chunks]
    # every prompt fits; every chunk is sent exactly once, in order
    for p in llm.prompts:
        assert ntok(p) <= window - num_output
    sent = [c for p in llm.prompts for c in chunks if c in p]
    assert sent == chunks
    # greedy with exact budgets (counted as the sum of the parts, template parts with the
    # actual existing answer): the next chunk would not have fit into the previous prompt
    for i, (prev, nxt) in enumerate(zip(llm.prompts, llm.prompts[1:], strict=False)):
        if i == 0:
            tmpl, vals = EN["text_qa"], {"query_str": Q, "context_str": ""}
        else:
            tmpl = EN["refine"]
            vals = {"query_str": Q, "existing_answer": llm.calls[i - 1].response, "context_msg": ""}
        overhead = sum(ntok(part) for part in tmpl.parts(vals) if part)
        inside = [c for c in chunks if c in prev]
        used = overhead + sum(ntok(c) for c in inside) + len(inside) - 1
        first_next = next(c for c in chunks if c in nxt)
        assert used <= window - num_output < used + 1 + ntok(first_next)
    assert resp.metadata["llm_calls"] == len(llm.prompts) < len(chunks)
    assert sum(sizes) > window  # really needed several prompts
    # metadata agrees with what the LLM saw
    assert resp.metadata["prompt_tokens"] == llm.prompt_tokens
    assert resp.metadata["completion_tokens"] == llm.completion_tokens


def test_compact_calls_and_tokens_not_above_llamaindex():
    from llama_index.core import get_response_synthesizer as li_get
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
    from llama_index.core.llms.callbacks import llm_completion_callback
    from llama_index.core.schema import NodeWithScore as LINode
    from llama_index.core.schema import TextNode

    li_mock = MockLLM(answer_tokens=60)

    class Sim(CustomLLM):
        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(context_window=2048, num_output=128)

        @llm_completion_callback()
        def complete(self, prompt, formatted=False, **kw):
            return CompletionResponse(text=li_mock.complete(prompt))

        @llm_completion_callback()
        def stream_complete(self, prompt, formatted=False, **kw):  # pragma: no cover
            raise NotImplementedError

    chunks = paragraphs(30, words=90, seed=2)
    for mode in ("compact", "tree_summarize"):
        li_mock.reset()
        li_get(response_mode=mode, llm=Sim()).synthesize(
            Q, [LINode(node=TextNode(text=c), score=1.0) for c in chunks]
        )
        ours = MockLLM(answer_tokens=60)
        get_response_synthesizer(mode, llm=ours, context_window=2048, num_output=128).synthesize(
            Q, chunks
        )
        assert len(ours.calls) <= len(li_mock.calls), mode
        assert ours.prompt_tokens <= li_mock.prompt_tokens, mode


def test_tree_summarize_levels_are_concurrent_gathers():
    chunks = paragraphs(40, words=70)
    llm = MockLLM(latency=0.01, answer_tokens=150)
    syn = get_response_synthesizer(
        "tree_summarize", llm=llm, context_window=700, num_output=100, max_concurrency=3
    )
    resp = syn.synthesize(Q, chunks)
    levels = resp.metadata["levels"]
    assert levels[-1] == 1 and len(levels) >= 3
    assert sum(levels) == len(llm.calls) == resp.metadata["llm_calls"]
    assert llm.max_in_flight == 3  # bounded by max_concurrency
    # level by level: level k+1 starts after level k ended
    start = 0
    prev_end = 0.0
    for n in levels:
        level = llm.calls[start : start + n]
        assert min(c.started for c in level) >= prev_end
        prev_end = max(c.ended for c in level)
        start += n
    # the first level sees the chunks, later levels only answers
    assert all("Paragraph" in c.prompt for c in llm.calls[: levels[0]])
    assert not any("Paragraph" in c.prompt for c in llm.calls[levels[0] :])
    for c in llm.calls:
        assert ntok(c.prompt) <= 600


def test_tree_summarize_terminates_when_summaries_do_not_shrink():
    # answers as long as half the window: a plain repack would never shrink a level
    chunks = paragraphs(12, words=120)
    llm = MockLLM(answer_tokens=400)
    syn = get_response_synthesizer("tree_summarize", llm=llm, context_window=900, num_output=100)
    resp = syn.synthesize(Q, chunks)
    levels = resp.metadata["levels"]
    assert levels[-1] == 1
    assert all(b < a for a, b in itertools.pairwise(levels))
    assert resp.metadata["truncated_tokens"] > 0
    assert all(ntok(p) <= 800 for p in llm.prompts)


def test_simple_summarize_joins_with_blank_lines_and_reports_dropped():
    chunks = ["first chunk", "second chunk", "third chunk"]
    llm = MockLLM("ok")
    resp = get_response_synthesizer("simple_summarize", llm=llm).synthesize(Q, chunks)
    assert llm.prompts == [EN["text_qa"].format(context_str="\n\n".join(chunks), query_str=Q)]
    assert "['" not in llm.prompts[0]  # never a Python list repr
    assert resp.metadata["dropped_tokens"] == 0
    big = paragraphs(30, words=80)
    llm2 = MockLLM("ok")
    resp2 = get_response_synthesizer(
        "simple_summarize", llm=llm2, context_window=1000, num_output=100
    ).synthesize(Q, big)
    assert len(llm2.calls) == 1 and ntok(llm2.prompts[0]) <= 900
    total = sum(ntok(c) for c in big) + len(big) - 1
    assert resp2.metadata["dropped_tokens"] == total - resp2.metadata["context_tokens"] > 0


def test_accumulate_and_compact_accumulate():
    chunks = ["one", "two", "three"]
    answers = {"one": "x", "two": "", "three": "z"}

    def ans(prompt: str) -> str:
        return next(v for k, v in answers.items() if f"\n{k}\n" in prompt)

    llm = MockLLM(ans, latency=0.02)
    resp = get_response_synthesizer("accumulate", llm=llm).synthesize(Q, chunks)
    assert str(resp) == (
        "Response 1: x\n---------------------\nResponse 2: Empty Response"
        "\n---------------------\nResponse 3: z"
    )
    assert llm.max_in_flight == 3  # concurrent
    many = paragraphs(20, words=60)
    llm2 = MockLLM("ok")
    resp2 = get_response_synthesizer(
        "compact_accumulate", llm=llm2, context_window=800, num_output=100
    ).synthesize(Q, many)
    assert 1 < len(llm2.calls) < 20
    assert str(resp2).count("Response ") == len(llm2.calls)
    assert all(ntok(p) <= 700 for p in llm2.prompts)


def test_generation_no_text_context_only():
    llm = MockLLM("gen")
    nodes = [NodeWithScore(DocNode("ctx a"), 0.9), DocNode("ctx b"), "ctx c"]
    resp = get_response_synthesizer("generation", llm=llm).synthesize(Q, nodes)
    assert str(resp) == "gen" and llm.prompts == [Q]
    llm.reset()
    r2 = get_response_synthesizer("no_text", llm=llm).synthesize(Q, nodes)
    assert str(r2) == "" and not llm.calls
    assert [n.text for n in r2.source_nodes] == ["ctx a", "ctx b", "ctx c"]
    assert [n.score for n in r2.source_nodes] == [0.9, None, None]
    assert all(isinstance(n, NodeWithScore) for n in r2.source_nodes)
    r3 = get_response_synthesizer("context_only").synthesize(Q, nodes)
    assert str(r3) == "ctx a\n\nctx b\n\nctx c"


def test_node_types_give_identical_prompts():
    texts = ["node one", "node two"]
    prompts = []
    node_lists = (
        texts,
        [DocNode(t) for t in texts],
        [NodeWithScore(DocNode(t), 1.0) for t in texts],
    )
    for nodes in node_lists:
        llm = MockLLM("ok")
        get_response_synthesizer("compact", llm=llm).synthesize(Q, nodes)
        prompts.append(llm.prompts)
    assert prompts[0] == prompts[1] == prompts[2]


def test_extra_template_variables_reach_every_template():
    qa = PromptTemplate(
        "Context:\n{context_str}\nAnswer in the tone of {tone_name}.\nQ: {query_str}\nA: "
    )
    refine = PromptTemplate(
        "Q: {query_str}\nOld: {existing_answer}\nMore:\n{context_msg}\nTone: {tone_name}\nA: "
    )
    llm = counter_llm()
    syn = get_response_synthesizer("refine", llm=llm, text_qa_template=qa, refine_template=refine)
    syn.synthesize(Q, ["c1", "c2"], tone_name="a Shakespeare play")
    assert llm.prompts == [
        qa.format(context_str="c1", tone_name="a Shakespeare play", query_str=Q),
        refine.format(
            query_str=Q, existing_answer="A1", context_msg="c2", tone_name="a Shakespeare play"
        ),
    ]
    llm.reset()
    with pytest.raises(ConfigError, match=r"tone_name.*synthesize\(query, nodes, tone_name="):
        syn.synthesize(Q, ["c1", "c2"])
    assert not llm.calls  # failed before calling the LLM


def test_language_selection():
    llm = MockLLM("好")
    get_response_synthesizer("compact", llm=llm, language="auto").synthesize(
        "河流叫什么名字？", ["长江是中国最长的河流。"]
    )
    assert llm.prompts == [
        ZH["text_qa"].format(context_str="长江是中国最长的河流。", query_str="河流叫什么名字？")
    ]
    llm.reset()
    get_response_synthesizer("compact", llm=llm, language="auto").synthesize(Q, ["x"])
    assert llm.prompts[0].startswith("Context information is below.")
    with pytest.raises(ConfigError, match="language='de' is not supported"):
        get_response_synthesizer("compact", llm=llm, language="de")


def test_empty_node_list_paths():
    llm = MockLLM("from the model")
    r = get_response_synthesizer("compact", llm=llm).synthesize(Q, [])
    assert str(r) == "Empty Response" and not llm.calls and r.metadata["empty_context"]
    r = get_response_synthesizer("compact", llm=llm, empty_response="No context.").synthesize(
        Q, ["  ", ""]
    )
    assert str(r) == "No context."
    r = get_response_synthesizer("tree_summarize", llm=llm, on_empty="generate").synthesize(Q, [])
    assert str(r) == "from the model" and llm.prompts == [Q]
    with pytest.raises(ConfigError, match="node list is empty"):
        get_response_synthesizer("compact", llm=llm, on_empty="raise").synthesize(Q, [])
    with pytest.raises(ConfigError, match="on_empty='ask' is not one of"):
        get_response_synthesizer("compact", llm=llm, on_empty="ask")


def test_bad_arguments():
    llm = MockLLM()
    with pytest.raises(ConfigError, match=r"unknown response_mode 'fancy'.*refine, compact"):
        get_response_synthesizer("fancy", llm=llm)
    assert get_response_synthesizer(ResponseMode.TREE_SUMMARIZE, llm=llm).response_mode == (
        "tree_summarize"
    )
    with pytest.raises(
        ConfigError,
        match=r"text_qa_template is missing required variable\(s\) "
        r"\{context_str\}",
    ):
        get_response_synthesizer("compact", llm=llm, text_qa_template="Q: {query_str}")
    with pytest.raises(ConfigError, match=r"refine_template is missing.*\{existing_answer\}"):
        get_response_synthesizer("refine", llm=llm, refine_template="{query_str} {context_msg}")
    with pytest.raises(ConfigError, match="exactly once"):
        get_response_synthesizer(
            "tree_summarize", llm=llm, summary_template="{context_str} {context_str}"
        )
    with pytest.raises(ConfigError, match="structured_answer_filtering applies to"):
        get_response_synthesizer("tree_summarize", llm=llm, structured_answer_filtering=True)
    with pytest.raises(ConfigError, match="nodes must be a list"):
        get_response_synthesizer("compact", llm=llm).synthesize(Q, "a single string")
    with pytest.raises(ConfigError, match=r"nodes\[1\] is a int"):
        get_response_synthesizer("compact", llm=llm).synthesize(Q, ["ok", 3])
    with pytest.raises(ConfigError, match="needs an LLM"):
        get_response_synthesizer("compact").synthesize(Q, ["x"])
    with pytest.raises(ConfigError, match="max_concurrency must be an int >= 1, got 0"):
        get_response_synthesizer("compact", llm=llm, max_concurrency=0)
    with pytest.raises(ConfigError, match=r"unexpected argument\(s\) \['temprature'\]"):
        get_response_synthesizer("compact", llm=llm, temprature=0.1)
    with pytest.raises(ConfigError, match="no room for context"):
        get_response_synthesizer("compact", llm=llm, context_window=40, num_output=10).synthesize(
            Q, ["x"]
        )


def test_llm_errors_surface_with_the_query():
    def boom(prompt: str) -> str:
        if "second" in prompt:
            raise LLMError("server said 500", request={"model": "m", "prompt": prompt}, status=500)
        return "fine"

    syn = get_response_synthesizer("refine", llm=FunctionLLM(boom))
    with pytest.raises(LLMError, match="server said 500") as info:
        syn.synthesize(Q, ["first", "second"])
    assert info.value.status == 500
    assert any("response_mode='refine'" in n for n in getattr(info.value, "__notes__", []))


def test_metadata_matches_llm_usage_for_every_mode():
    chunks = paragraphs(15, words=50)
    for mode in ResponseMode:
        llm = MockLLM(answer_tokens=20)
        resp = get_response_synthesizer(
            mode, llm=llm, context_window=800, num_output=100
        ).synthesize(Q, chunks)
        md = resp.metadata
        assert md["response_mode"] == mode.value
        assert md["llm_calls"] == len(llm.calls)
        assert md["prompt_tokens"] == llm.prompt_tokens
        assert md["completion_tokens"] == llm.completion_tokens
        assert md["seconds"] > 0 and md["n_nodes"] == 15


def test_duck_typed_llms_and_functions():
    class Echo:  # only an async acomplete: usage is counted with tiktoken
        def __init__(self) -> None:
            self.prompts: list[str] = []

        async def acomplete(self, prompt: str, **kw) -> str:
            self.prompts.append(prompt)
            return "duck answer"

    duck = Echo()
    resp = get_response_synthesizer("compact", llm=duck).synthesize(Q, ["ctx one", "ctx two"])
    assert str(resp) == "duck answer"
    assert resp.metadata["prompt_tokens"] == ntok(duck.prompts[0])
    assert resp.metadata["completion_tokens"] == ntok("duck answer")
    fn = get_response_synthesizer("generation", llm=lambda p: p.upper()).synthesize(Q, ["x"])
    assert str(fn) == Q.upper() and fn.metadata["llm_calls"] == 1
    with pytest.raises(ConfigError, match="llm must be"):
        get_response_synthesizer("compact", llm=42)
