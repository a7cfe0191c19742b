"""seeds/000: LlamaIndex "响应合成器" docs (Chinese translation), every code example adapted to
fastrag's names (``llama_index.core`` -> ``fastrag``), run against the local OpenAI-compatible
test server: the prompts it receives, the number of calls and the answers are checked."""

from __future__ import annotations

import json
import re
import threading

from seed_support import prompts

import fastrag as fr
from fastrag.synth import default_prompts

TEXT_QA = default_prompts("en")["text_qa"]
REFINE = default_prompts("en")["refine"]
SUMMARY = default_prompts("en")["summary"]


def _counter_model(prefix: str = "answer"):
    """A model answering ``answer1``, ``answer2``, ... in call order (thread-safe)."""
    lock = threading.Lock()
    n = [0]

    def reply(messages):
        with lock:
            n[0] += 1
            return f"{prefix}{n[0]}"

    return reply


def _chunk_model(messages: list[dict]) -> str:
    """A model answering ``answer1`` to a prompt that holds "text one", else ``answer2``: the
    same answers whatever order concurrent calls arrive in."""
    return "answer1" if "text one" in messages[-1]["content"] else "answer2"


# -- 使用模式: a standalone synthesizer, then in a query engine --
def test_standalone_synthesizer_response_mode_compact(server, settings_llm):
    # response_synthesizer = get_response_synthesizer(response_mode=ResponseMode.COMPACT)
    # response = response_synthesizer.synthesize("query text", nodes=[Node(text="text"), ...])
    server.reply = "合成的回答"
    response_synthesizer = fr.get_response_synthesizer(response_mode=fr.ResponseMode.COMPACT)
    response = response_synthesizer.synthesize(
        "query text", nodes=[fr.Node(text="text"), fr.Node(text="more text")]
    )
    assert isinstance(response, fr.Response)
    assert str(response) == response.response == "合成的回答"
    # compact: both chunks packed into one text_qa prompt, one LLM call (from fr.Settings.llm)
    assert prompts(server) == [
        TEXT_QA.format(context_str="text\n\nmore text", query_str="query text")
    ]
    assert response.metadata["llm_calls"] == 1
    assert [n.text for n in response.source_nodes] == ["text", "more text"]


def test_synthesizer_in_a_query_engine(server, settings_llm):
    # query_engine = index.as_query_engine(response_synthesizer=response_synthesizer)
    # response = query_engine.query("query_text")
    server.reply = "引擎的回答"
    doc = fr.Document.from_texts(
        [
            "The query_text is answered from this node.",
            "Paris is the capital of France.",
            "BM25 ranks documents by term frequency.",
        ]
    )
    response_synthesizer = fr.get_response_synthesizer(response_mode="compact")
    query_engine = doc.as_query_engine(response_synthesizer=response_synthesizer)
    response = query_engine.query("query_text")
    assert response.response == "引擎的回答"
    assert [n.text for n in response.source_nodes] == ["The query_text is answered from this node."]
    assert prompts(server) == [
        TEXT_QA.format(
            context_str="The query_text is answered from this node.", query_str="query_text"
        )
    ]


def test_get_started_nodes_with_score(server, settings_llm):
    # get_response_synthesizer(response_mode="compact").synthesize(
    #     "query text", nodes=[NodeWithScore(node=Node(text="text"), score=1.0), ...])
    server.reply = "ok"
    response_synthesizer = fr.get_response_synthesizer(response_mode="compact")
    response = response_synthesizer.synthesize(
        "query text",
        nodes=[
            fr.NodeWithScore(node=fr.Node(text="text"), score=1.0),
            fr.NodeWithScore(node=fr.Node(text="other"), score=0.5),
        ],
    )
    assert response.response == "ok"
    assert [(n.text, n.score) for n in response.source_nodes] == [("text", 1.0), ("other", 0.5)]
    assert len(prompts(server)) == 1


# -- 配置响应模式 --
CHUNKS = ["Chunk A: the sky is blue.", "Chunk B: grass is green.", "Chunk C: snow is white."]


def test_refine_one_call_per_chunk_with_refine_template(server, llm):
    # refine: the first chunk with text_qa_template, then answer + next chunk with refine_template
    server.reply = _counter_model()
    syn = fr.get_response_synthesizer(response_mode="refine", llm=llm)
    resp = syn.synthesize("What colours?", CHUNKS)
    assert prompts(server) == [
        TEXT_QA.format(context_str=CHUNKS[0], query_str="What colours?"),
        REFINE.format(context_msg=CHUNKS[1], query_str="What colours?", existing_answer="answer1"),
        REFINE.format(context_msg=CHUNKS[2], query_str="What colours?", existing_answer="answer2"),
    ]
    assert resp.response == "answer3"
    assert resp.metadata["llm_calls"] == 3


def test_refine_splits_a_chunk_too_big_for_the_window(server, llm):
    # a chunk too large for the window is split (TokenTextSplitter) and the extra pieces are
    # queried with refine_template
    server.reply = _counter_model()
    big = " ".join(f"word{i}" for i in range(1200))
    syn = fr.get_response_synthesizer(
        response_mode="refine", llm=llm, context_window=600, num_output=100
    )
    resp = syn.synthesize("Which words?", [big])
    ps = prompts(server)
    assert len(ps) >= 3
    assert ps[0].startswith("Context information is below.")
    assert all(p.startswith("The original query is as follows: Which words?") for p in ps[1:])
    assert all(fr.count_tokens(p) <= 600 - 100 for p in ps)
    # every word of the chunk reached the model
    seen = set(re.findall(r"word\d+", " ".join(ps)))
    assert seen == {f"word{i}" for i in range(1200)}
    assert resp.response == f"answer{len(ps)}"


def test_compact_packs_chunks_into_fewer_calls_than_refine(server, llm):
    server.reply = _counter_model()
    compact = fr.get_response_synthesizer(response_mode="compact", llm=llm)
    resp = compact.synthesize("What colours?", CHUNKS)
    assert prompts(server) == [
        TEXT_QA.format(context_str="\n\n".join(CHUNKS), query_str="What colours?")
    ]
    assert resp.response == "answer1"
    # when the text does not fit one prompt: as many packs as needed, refined in order
    server.reset()
    server.reply = _counter_model()
    many = [f"Fact {i}: " + " ".join(f"w{i}x{j}" for j in range(60)) for i in range(30)]
    small = fr.get_response_synthesizer(
        response_mode="compact", llm=llm, context_window=800, num_output=100
    )
    resp = small.synthesize("Facts?", many)
    ps = prompts(server)
    assert 1 < len(ps) < len(many)
    assert ps[0].startswith("Context information is below.")
    assert all(p.startswith("The original query is as follows: Facts?") for p in ps[1:])
    assert all(fr.count_tokens(p) <= 700 for p in ps)
    assert resp.response == f"answer{len(ps)}"


def test_tree_summarize_recurses_until_one_answer(server, llm):
    # summary_template over packed chunks; the answers are chunks of the next level, until one
    def model(messages):
        p = messages[-1]["content"]
        if "SUMMARY-" in p:
            return "FINAL"
        return "SUMMARY-" + "-".join(re.findall(r"item(\d+)", p))

    server.reply = model
    chunks = [f"item{i} is a fact." for i in range(25)]
    syn = fr.get_response_synthesizer(response_mode="tree_summarize", llm=llm, num_children=10)
    resp = syn.synthesize("Summarize", chunks)
    ps = prompts(server)
    assert resp.response == "FINAL"
    assert resp.metadata["levels"] == [3, 1]
    assert len(ps) == 4
    final = [p for p in ps if "SUMMARY-" in p]
    assert len(final) == 1
    assert final[0] == SUMMARY.format(
        context_str="\n\n".join(
            ["SUMMARY-" + "-".join(str(i) for i in range(a, min(a + 10, 25))) for a in (0, 10, 20)]
        ),
        query_str="Summarize",
    )


def test_simple_summarize_truncates_to_one_prompt(server, llm):
    server.reply = "short"
    chunks = [" ".join(f"t{i}y{j}" for j in range(300)) for i in range(5)]
    syn = fr.get_response_synthesizer(
        response_mode="simple_summarize", llm=llm, context_window=700, num_output=100
    )
    resp = syn.synthesize("Summarize", chunks)
    ps = prompts(server)
    assert len(ps) == 1 and fr.count_tokens(ps[0]) <= 600
    assert resp.metadata["dropped_tokens"] > 0
    assert "t0y0" in ps[0] and "t4y299" not in ps[0]  # the tail was cut
    assert resp.response == "short"


def test_no_text_returns_the_nodes_without_calling_the_llm(server, llm):
    syn = fr.get_response_synthesizer(response_mode="no_text", llm=llm)
    resp = syn.synthesize("q", CHUNKS)
    assert server.requests == []
    assert [n.text for n in resp.source_nodes] == CHUNKS
    assert not resp.response


def test_context_only_returns_the_joined_chunks(server, llm):
    syn = fr.get_response_synthesizer(response_mode="context_only", llm=llm)
    resp = syn.synthesize("q", CHUNKS)
    assert server.requests == []
    assert resp.response == "\n\n".join(CHUNKS)


def test_accumulate_asks_every_chunk_and_concatenates(server, llm):
    def model(messages):
        return "about " + re.search(r"Chunk (\w)", messages[-1]["content"]).group(1)

    server.reply = model
    syn = fr.get_response_synthesizer(response_mode="accumulate", llm=llm)
    resp = syn.synthesize("What colour?", CHUNKS)
    assert sorted(prompts(server)) == sorted(
        TEXT_QA.format(context_str=c, query_str="What colour?") for c in CHUNKS
    )
    text = resp.response
    positions = [text.index(f"Response {i}: about {x}") for i, x in ((1, "A"), (2, "B"), (3, "C"))]
    assert positions == sorted(positions)


def test_compact_accumulate_compacts_each_prompt(server, llm):
    server.reply = "all"
    syn = fr.get_response_synthesizer(response_mode="compact_accumulate", llm=llm)
    resp = syn.synthesize("What colour?", CHUNKS)
    assert prompts(server) == [
        TEXT_QA.format(context_str="\n\n".join(CHUNKS), query_str="What colour?")
    ]
    assert resp.response == "Response 1: all"


# -- 自定义响应合成器 --
class OneCallSynthesizer(fr.BaseSynthesizer):
    """A custom synthesizer: the two abstract methods of the seed's BaseSynthesizer."""

    def get_response(self, query_str, text_chunks, **response_kwargs):
        return self._llm.complete(f"Q={query_str} | " + " || ".join(text_chunks))

    async def aget_response(self, query_str, text_chunks, **response_kwargs):
        return await self._llm.acomplete(f"Q={query_str} | " + " || ".join(text_chunks))


def test_custom_synthesizer_standalone_and_in_a_query_engine(server, settings_llm):
    server.reply = "custom"
    synth = OneCallSynthesizer()  # llm from Settings.llm, as the seed's __init__ does
    assert synth.llm is settings_llm
    resp = synth.synthesize("who?", [fr.Node(text="a"), fr.Node(text="b")])
    assert resp.response == "custom"
    assert prompts(server) == ["Q=who? | a || b"]
    assert resp.metadata["llm_calls"] == 1
    server.reset()
    doc = fr.Document.from_texts(["alpha beta", "gamma delta"])
    qe = doc.as_query_engine(response_synthesizer=synth)
    r = qe.query("gamma")
    assert r.response == "custom"
    assert prompts(server) == ["Q=gamma | gamma delta"]


# -- 使用结构化答案过滤 --
def _filtering_model(messages):
    p = messages[-1]["content"]
    if "ESSAYIST" in p:
        return json.dumps({"answer": "Paul Graham writes essays.", "query_satisfied": True})
    return json.dumps({"answer": "I cannot tell.", "query_satisfied": False})


def test_structured_answer_filtering_drops_irrelevant_nodes(server, settings_llm, llm):
    server.reply = _filtering_model
    # response_synthesizer = get_response_synthesizer(structured_answer_filtering=True)
    response_synthesizer = fr.get_response_synthesizer(structured_answer_filtering=True)
    resp = response_synthesizer.synthesize(
        "Who is Paul Graham?", ["Paul Graham is an ESSAYIST and investor."]
    )
    assert resp.response == "Paul Graham writes essays."
    # refine: every chunk asked; answers of chunks that do not satisfy the query are dropped
    server.reset()
    refine = fr.get_response_synthesizer("refine", llm=llm, structured_answer_filtering=True)
    resp = refine.synthesize(
        "Who is Paul Graham?",
        ["Bananas are yellow.", "Paul Graham is an ESSAYIST and investor.", "Rust is a language."],
    )
    assert len(prompts(server)) == 3
    assert resp.response == "Paul Graham writes essays."
    assert resp.metadata["filtered"] == 2
    # the request asked for JSON (function-calling style structured output)
    assert all(r.body.get("response_format") for r in server.requests)


# -- 使用自定义提示模板（带有附加变量） --
def test_custom_prompt_template_with_extra_variable(server, settings_llm):
    server.reply = "Hark!"
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
    text = "Paul Graham is a programmer, writer and investor."
    response = summarizer.get_response(
        "who is Paul Graham?", [text], tone_name="a Shakespeare play"
    )
    assert response == "Hark!"
    assert prompts(server) == [
        qa_prompt_tmpl.format(
            context_str=text, tone_name="a Shakespeare play", query_str="who is Paul Graham?"
        )
    ]


def _listed_modes() -> list[str]:
    """The response modes the seed's list names, in its order (the seed's own text)."""
    from seed_blocks import seed_file

    text = seed_file("000").read_text(encoding="utf-8")
    names = re.findall(r"^(?:\* )?([a-z_]+?)(?:summary_template)?(?:（默认）)?：", text, re.M)
    return [n for n in names if n in {m.value for m in fr.ResponseMode}]


# the LLM calls each listed mode makes for two short chunks, as the seed describes it
LISTED_CALLS = {
    "refine": 2,  # one call per chunk
    "compact": 1,  # chunks packed into one prompt
    "tree_summarize": 1,  # one packed prompt, one answer: the final one
    "simple_summarize": 1,  # truncated into one prompt
    "no_text": 0,  # the nodes only
    "context_only": 0,  # the joined chunks
    "accumulate": 2,  # the query on each chunk, answers concatenated
    "compact_accumulate": 1,  # accumulate over packed prompts
}


def test_the_listed_response_modes_run_as_described(server, llm):
    """Each mode of the seed's list runs the usage block's call (``synthesize("query text",
    nodes=[Node(text=...), ...])``) with the behaviour its line describes."""
    assert _listed_modes() == list(LISTED_CALLS)
    for mode in _listed_modes():
        server.reset()
        # accumulate asks both chunks at once: its calls may arrive in either order
        server.reply = _chunk_model if mode == "accumulate" else _counter_model()
        syn = fr.get_response_synthesizer(response_mode=mode, llm=llm)
        nodes = [fr.Node(text="text one"), fr.Node(text="text two")]
        response = syn.synthesize("query text", nodes=nodes)
        n = LISTED_CALLS[mode]
        assert len(prompts(server)) == n, mode
        assert [x.text for x in response.source_nodes] == ["text one", "text two"], mode
        if mode == "no_text":
            assert response.response == "", mode
        elif mode == "context_only":
            assert response.response == "text one\n\ntext two"
        elif mode == "compact_accumulate":
            assert response.response == "Response 1: answer1"
        elif mode == "accumulate":
            assert (
                response.response
                == "Response 1: answer1\n---------------------\nResponse 2: answer2"
            )
        else:
            assert response.response == f"answer{n}", mode
