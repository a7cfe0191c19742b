"""seeds/002: LlamaIndex "Response Synthesizer" docs (English), every code example adapted to
fastrag's names (``llama_index.response_synthesizers`` -> ``fastrag``; ``service_context`` ->
``llm``), against the local OpenAI-compatible test server."""

from __future__ import annotations

import json
import re
import threading

import pytest
from seed_support import prompts

import fastrag as fr

# LlamaIndex's default English prompts, written out: fastrag sends them token for token.
LI_TEXT_QA = (
    "Context information is below.\n"
    "---------------------\n"
    "{context_str}\n"
    "---------------------\n"
    "Given the context information and not prior knowledge, answer the query.\n"
    "Query: {query_str}\n"
    "Answer: "
)
LI_REFINE = (
    "The original query is as follows: {query_str}\n"
    "We have provided an existing answer: {existing_answer}\n"
    "We have the opportunity to refine the existing answer (only if needed) with some more "
    "context below.\n"
    "------------\n"
    "{context_msg}\n"
    "------------\n"
    "Given the new context, refine the original answer to better answer the query. If the "
    "context isn't useful, return the original answer.\n"
    "Refined Answer: "
)


def _numbered():
    lock, n = threading.Lock(), [0]

    def reply(messages):
        with lock:
            n[0] += 1
            return f"A{n[0]}"

    return reply


def test_usage_pattern_response_mode_compact(server, settings_llm):
    # from llama_index.response_synthesizers import ResponseMode, get_response_synthesizer
    server.reply = "the answer"
    response_synthesizer = fr.get_response_synthesizer(response_mode=fr.ResponseMode.COMPACT)
    response = response_synthesizer.synthesize("query text", nodes=[fr.Node(text="text")])
    assert response.response == "the answer"
    assert prompts(server) == [LI_TEXT_QA.format(context_str="text", query_str="query text")]


def test_get_started_node_with_score_and_query_engine(server, settings_llm):
    server.reply = "the answer"
    response_synthesizer = fr.get_response_synthesizer(response_mode="compact")
    response = response_synthesizer.synthesize(
        "query text", nodes=[fr.NodeWithScore(node=fr.Node(text="text"), score=1.0)]
    )
    assert response.source_nodes[0].score == 1.0 and response.response == "the answer"
    server.reset()
    doc = fr.Document.from_texts(["query_text lives here", "nothing related", "also nothing"])
    query_engine = doc.as_query_engine(response_synthesizer=response_synthesizer)
    response = query_engine.query("query_text")
    assert [n.text for n in response.source_nodes] == ["query_text lives here"]
    assert prompts(server) == [
        LI_TEXT_QA.format(context_str="query_text lives here", query_str="query_text")
    ]


def test_default_response_mode_is_compact(llm):
    assert fr.get_response_synthesizer(llm=llm).response_mode == "compact"


CHUNKS = ["Alpha fact.", "Beta fact.", "Gamma fact.", "Delta fact."]

# mode -> LLM calls for four short chunks (as the seed describes each mode)
CALLS = {
    "refine": 4,
    "compact": 1,
    "tree_summarize": 1,
    "simple_summarize": 1,
    "no_text": 0,
    "context_only": 0,
    "accumulate": 4,
    "compact_accumulate": 1,
}


@pytest.mark.parametrize("mode", list(CALLS))
def test_configuring_the_response_mode_llm_calls(mode, server, llm):
    server.reply = "x"
    resp = fr.get_response_synthesizer(response_mode=mode, llm=llm).synthesize("q?", CHUNKS)
    assert len(prompts(server)) == CALLS[mode]
    assert resp.metadata["response_mode"] == mode
    assert [n.text for n in resp.source_nodes] == CHUNKS


def test_refine_sequence_of_prompts(server, llm):
    server.reply = _numbered()
    resp = fr.get_response_synthesizer(response_mode="refine", llm=llm).synthesize("q?", CHUNKS)
    ps = prompts(server)
    assert ps[0] == LI_TEXT_QA.format(context_str="Alpha fact.", query_str="q?")
    assert ps[1:] == [
        LI_REFINE.format(query_str="q?", existing_answer=f"A{i}", context_msg=c)
        for i, c in enumerate(CHUNKS[1:], start=1)
    ]
    assert resp.response == "A4"


def test_compact_splits_text_too_long_for_one_prompt(server, llm):
    server.reply = _numbered()
    long_text = " ".join(f"tok{i}" for i in range(2000))
    syn = fr.get_response_synthesizer(
        response_mode="compact", llm=llm, context_window=900, num_output=100
    )
    resp = syn.synthesize("q?", [long_text])
    ps = prompts(server)
    assert len(ps) >= 3 and all(fr.count_tokens(p) <= 800 for p in ps)
    assert set(re.findall(r"tok\d+", " ".join(ps))) == {f"tok{i}" for i in range(2000)}
    assert resp.response == f"A{len(ps)}"


def test_tree_summarize_packs_to_the_window_and_recurses(server, llm):
    def model(messages):
        p = messages[-1]["content"]
        return "ROOT" if "PART" in p else f"PART{len(re.findall(r'fact', p))}"

    server.reply = model
    chunks = [f"fact {i}: " + " ".join(f"v{i}z{j}" for j in range(40)) for i in range(20)]
    syn = fr.get_response_synthesizer(
        response_mode="tree_summarize", llm=llm, context_window=1200, num_output=100
    )
    resp = syn.synthesize("Summarize", chunks)
    ps = prompts(server)
    levels = resp.metadata["levels"]
    assert levels[-1] == 1 and levels[0] > 1 and len(ps) == sum(levels)
    assert all(fr.count_tokens(p) <= 1100 for p in ps)
    # no refine query in tree_summarize: every prompt is the summary template
    assert not any(p.startswith("The original query") for p in ps)
    assert resp.response == "ROOT"


def test_simple_summarize_and_no_text_and_accumulate(server, llm):
    server.reply = "ok"
    long_chunks = [" ".join(f"c{i}w{j}" for j in range(400)) for i in range(4)]
    r = fr.get_response_synthesizer(
        "simple_summarize", llm=llm, context_window=600, num_output=50
    ).synthesize("q?", long_chunks)
    assert r.metadata["dropped_tokens"] > 0 and len(prompts(server)) == 1
    server.reset()
    r = fr.get_response_synthesizer("no_text", llm=llm).synthesize("q?", CHUNKS)
    assert server.requests == [] and len(r.source_nodes) == 4
    r = fr.get_response_synthesizer("accumulate", llm=llm).synthesize("q?", CHUNKS)
    assert [f"Response {i}: ok" in r.response for i in range(1, 5)] == [True] * 4


# -- Custom Response Synthesizers --
class StreamingOrNot(fr.BaseSynthesizer):
    """The seed's interface: ``__init__(llm, streaming)`` (service_context -> llm) and the two
    abstract methods; returns a str, or a generator of str when streaming."""

    def __init__(self, llm=None, streaming: bool = False) -> None:
        super().__init__(llm, streaming)

    def get_response(self, query_str, text_chunks, **response_kwargs):
        text = self._llm.complete(f"{query_str}\n" + "\n".join(text_chunks))
        if self._streaming:
            return iter(text.split(" "))
        return text

    async def aget_response(self, query_str, text_chunks, **response_kwargs):
        text = await self._llm.acomplete(f"{query_str}\n" + "\n".join(text_chunks))
        return text


def test_custom_synthesizer_string_and_generator(server, llm):
    server.reply = "one two three"
    resp = StreamingOrNot(llm).synthesize("q", ["n1", "n2"])
    assert resp.response == "one two three" and prompts(server) == ["q\nn1\nn2"]
    gen = StreamingOrNot(llm, streaming=True).get_response("q", ["n1"])
    assert list(gen) == ["one", "two", "three"]
    doc = fr.Document.from_texts(["n1 text", "n2 text"])
    resp = doc.as_query_engine(response_synthesizer=StreamingOrNot(llm)).query("n2")
    assert resp.response == "one two three" and [n.text for n in resp.source_nodes] == ["n2 text"]


# -- Using Structured Answer Filtering --
def test_structured_answer_filtering_refine_and_compact(server, settings_llm, llm):
    def model(messages):
        p = messages[-1]["content"]
        ok = "RELEVANT" in p
        return json.dumps({"answer": "Found it." if ok else "Nothing here.", "query_satisfied": ok})

    server.reply = model
    response_synthesizer = fr.get_response_synthesizer(structured_answer_filtering=True)
    assert response_synthesizer.response_mode == "compact"
    r = response_synthesizer.synthesize("q?", ["RELEVANT chunk"])
    assert r.response == "Found it."
    server.reset()
    r = fr.get_response_synthesizer("refine", llm=llm, structured_answer_filtering=True).synthesize(
        "q?", ["RELEVANT chunk", "noise", "more noise"]
    )
    assert r.response == "Found it." and r.metadata["filtered"] == 2
    with pytest.raises(fr.ConfigError):  # only refine and compact filter
        fr.get_response_synthesizer("tree_summarize", llm=llm, structured_answer_filtering=True)


# -- Using Custom Prompt Templates (with additional variables) --
def test_tree_summarize_with_tone_name(server, settings_llm):
    server.reply = "Verily."
    qa_prompt_tmpl = (
        "Context information is below.\n"
        "---------------------\n"
        "{context_str}\n"
        "---------------------\n"
        "Given the context information and not prior knowledge, "
        "answer the query.\n"
        "Please also write the answer in the tone of {tone_name}.\n"
        "Query: {query_str}\n"
        "Answer: "
    )
    qa_prompt = fr.PromptTemplate(qa_prompt_tmpl)
    summarizer = fr.TreeSummarize(verbose=True, summary_template=qa_prompt)
    text = "Paul Graham co-founded Y Combinator."
    response = summarizer.get_response(
        "who is Paul Graham?", [text], tone_name="a Shakespeare play"
    )
    assert response == "Verily."
    assert prompts(server) == [
        qa_prompt_tmpl.format(
            context_str=text, tone_name="a Shakespeare play", query_str="who is Paul Graham?"
        )
    ]
