"""seeds/003: "Building Response Synthesis from Scratch": stuffing, create-and-refine and
hierarchical (async) summarization, written as in the article with fastrag's names
(``fr.OpenAILike``, ``fr.PromptTemplate``, ``fr.Retriever.retrieve``), then checked against
fastrag's own synthesizers (simple_summarize / refine / tree_summarize), which must send the
same prompts."""

from __future__ import annotations

import asyncio
import re
import threading

import pytest
from seed_support import prompts

import fastrag as fr

qa_prompt = fr.PromptTemplate(
    """\
Context information is below.
---------------------
{context_str}
---------------------
Given the context information and not prior knowledge, answer the query.
Query: {query_str}
Answer: \
"""
)

refine_prompt = fr.PromptTemplate(
    """\
The original query is as follows: {query_str}
We have provided an existing answer: {existing_answer}
We have the opportunity to refine the existing answer \
(only if needed) with some more context below.
------------
{context_str}
------------
Given the new context, refine the original answer to better answer the query. \
If the context isn't useful, return the original answer.
Refined Answer: \
"""
)

TEXTS = [
    "Paul Graham wrote essays about startups.",
    "Paul Graham co-founded Y Combinator in 2005.",
    "Paul Graham created the Arc programming language.",
    "Paul Graham painted before he programmed.",
]
query_str = "What did Paul Graham do?"


@pytest.fixture
def retriever():
    doc = fr.Document.from_texts(TEXTS + ["Bananas are yellow.", "Rust has a borrow checker."])
    return fr.Retriever(doc, "root", "bm25", topk=4)


def _numbered():
    lock, n = threading.Lock(), [0]

    def reply(messages):
        with lock:
            n[0] += 1
            return f"response {n[0]}"

    return reply


# -- 最簡單的 prompt 策略 (stuffing) --
def generate_response(retrieved_nodes, query_str, qa_prompt, llm):
    context_str = "\n\n".join([r.get_content() for r in retrieved_nodes])
    fmt_qa_prompt = qa_prompt.format(context_str=context_str, query_str=query_str)
    response = llm.complete(fmt_qa_prompt)
    return str(response), fmt_qa_prompt


def test_stuffing_all_nodes_into_one_prompt(server, llm, retriever):
    server.reply = "stuffed"
    retrieved_nodes = retriever.retrieve(query_str)
    assert {n.text for n in retrieved_nodes} == set(TEXTS)
    response, fmt_qa_prompt = generate_response(retrieved_nodes, query_str, qa_prompt, llm)
    assert response == "stuffed"
    assert prompts(server) == [fmt_qa_prompt]
    # fastrag's simple_summarize stuffs the same way: the same prompt, one call
    server.reset()
    syn = fr.get_response_synthesizer("simple_summarize", llm=llm, text_qa_template=qa_prompt)
    assert syn.synthesize(query_str, retrieved_nodes).response == "stuffed"
    assert prompts(server) == [fmt_qa_prompt]


def test_stuffing_overflows_the_window_where_packing_does_not(server, llm):
    # larger top-k or oversized chunks overflow the context window; fastrag's compact mode
    # keeps every prompt within it
    server.reply = "x"
    nodes = [fr.Node(text=" ".join(f"n{i}w{j}" for j in range(300))) for i in range(8)]
    _resp, fmt = generate_response(nodes, query_str, qa_prompt, llm)
    assert fr.count_tokens(fmt) > 1000
    server.reset()
    syn = fr.get_response_synthesizer(
        "compact",
        llm=llm,
        text_qa_template=qa_prompt,
        refine_template=refine_prompt,
        context_window=1000,
        num_output=100,
    )
    syn.synthesize(query_str, nodes)
    assert len(prompts(server)) > 1 and all(fr.count_tokens(p) <= 900 for p in prompts(server))


# -- Refine --
def generate_response_cr(retrieved_nodes, query_str, qa_prompt, refine_prompt, llm):
    """Generate a response using create and refine strategy.

    The first node uses the 'QA' prompt.
    All subsequent nodes use the 'refine' prompt.
    """
    cur_response = None
    fmt_prompts = []
    for idx, node in enumerate(retrieved_nodes):
        context_str = node.get_content()
        if idx == 0:
            fmt_prompt = qa_prompt.format(context_str=context_str, query_str=query_str)
        else:
            fmt_prompt = refine_prompt.format(
                context_str=context_str,
                query_str=query_str,
                existing_answer=str(cur_response),
            )
        cur_response = llm.complete(fmt_prompt)
        fmt_prompts.append(fmt_prompt)
    return str(cur_response), fmt_prompts


def test_create_and_refine_one_call_per_node(server, llm, retriever):
    server.reply = _numbered()
    retrieved_nodes = retriever.retrieve(query_str)
    response, fmt_prompts = generate_response_cr(
        retrieved_nodes, query_str, qa_prompt, refine_prompt, llm
    )
    assert response == "response 4"
    assert prompts(server) == fmt_prompts and len(fmt_prompts) == len(retrieved_nodes)
    assert fmt_prompts[0].startswith("Context information is below.")
    assert "We have provided an existing answer: response 1" in fmt_prompts[1]
    # fastrag's refine with the article's two templates: the same prompts, the same answer
    server.reset()
    server.reply = _numbered()
    syn = fr.get_response_synthesizer(
        "refine", llm=llm, text_qa_template=qa_prompt, refine_template=refine_prompt
    )
    resp = syn.synthesize(query_str, retrieved_nodes)
    assert prompts(server) == fmt_prompts
    assert resp.response == "response 4" and resp.metadata["llm_calls"] == 4


# -- Hierarchical Summarization Strategy --
async def acombine_results(texts, query_str, qa_prompt, llm, cur_prompt_list, num_children=10):
    fmt_prompts = []
    for idx in range(0, len(texts), num_children):
        text_batch = texts[idx : idx + num_children]
        context_str = "\n\n".join([t for t in text_batch])
        fmt_qa_prompt = qa_prompt.format(context_str=context_str, query_str=query_str)
        fmt_prompts.append(fmt_qa_prompt)
        cur_prompt_list.append(fmt_qa_prompt)

    tasks = [llm.acomplete(p) for p in fmt_prompts]
    combined_responses = await asyncio.gather(*tasks)
    new_texts = [str(r) for r in combined_responses]

    if len(new_texts) == 1:
        return new_texts[0]
    return await acombine_results(
        new_texts, query_str, qa_prompt, llm, cur_prompt_list, num_children=num_children
    )


async def agenerate_response_hs(retrieved_nodes, query_str, qa_prompt, llm, num_children=10):
    """Generate a response using hierarchical summarization strategy.

    Combine num_children nodes hierarchically until we get one root node.
    """
    fmt_prompts = []
    for node in retrieved_nodes:
        context_str = node.get_content()
        fmt_qa_prompt = qa_prompt.format(context_str=context_str, query_str=query_str)
        fmt_prompts.append(fmt_qa_prompt)

    tasks = [llm.acomplete(p) for p in fmt_prompts]
    node_responses = await asyncio.gather(*tasks)

    response_txt = await acombine_results(
        [str(r) for r in node_responses],
        query_str,
        qa_prompt,
        llm,
        fmt_prompts,
        num_children=num_children,
    )
    return response_txt, fmt_prompts


def _summary_model(messages):
    p = messages[-1]["content"]
    groups = re.findall(r"S\[([\d+]+)\]", p)
    if groups:
        return "S[" + "+".join(groups) + "]"
    return "S[" + re.search(r"node (\d+)", p).group(1) + "]"


def test_hierarchical_summarization_async(server, llm):
    server.reply = _summary_model
    server.script(["slow:0.05"] * 25)  # node calls overlap only if they are really concurrent
    nodes = [fr.NodeWithScore(fr.Node(text=f"node {i} fact"), 1.0) for i in range(25)]
    response, fmt_prompts = asyncio.run(
        agenerate_response_hs(nodes, query_str, qa_prompt, llm, num_children=10)
    )
    # 25 node calls, then 3 combine calls (10 + 10 + 5), then 1: 29 calls in all
    assert len(fmt_prompts) == 29 and prompts(server) != []
    assert sorted(prompts(server)) == sorted(fmt_prompts)
    assert server.max_in_flight > 1
    assert response == "S[" + "+".join(str(i) for i in range(25)) + "]"


def test_fastrag_tree_summarize_is_the_hierarchical_strategy(server, llm):
    # the same idea built in: num_children chunks per prompt, levels concurrent, recursion to one
    server.reply = _summary_model
    server.script(["slow:0.05"] * 3)
    chunks = [f"node {i} fact" for i in range(25)]
    syn = fr.get_response_synthesizer(
        "tree_summarize", llm=llm, summary_template=qa_prompt, num_children=10
    )

    def level0(messages):
        p = messages[-1]["content"]
        if "S[" in p:
            return "ROOT"
        return "S[" + "+".join(re.findall(r"node (\d+)", p)) + "]"

    server.reply = level0
    resp = syn.synthesize(query_str, chunks)
    ps = prompts(server)
    assert resp.metadata["levels"] == [3, 1] and len(ps) == 4
    assert resp.response == "ROOT"
    assert ps[-1] == qa_prompt.format(
        context_str="\n\n".join(
            "S[" + "+".join(str(i) for i in range(a, min(a + 10, 25))) + "]" for a in (0, 10, 20)
        ),
        query_str=query_str,
    )
    assert server.max_in_flight > 1  # the three first-level calls ran concurrently
    # more LLM calls than refine would need for 3 packed prompts, fewer than one per node
    assert resp.metadata["llm_calls"] == 4
