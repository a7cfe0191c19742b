"""Every Python code block of the LlamaIndex seeds (000: the response synthesizer docs; 003:
response synthesis from scratch) run as written: its text is read from the seed file, its
``llama_index`` import lines are pointed at fastrag's names (tests/seeds/seed_imports.py holds
the table) and nothing else changes, except the docs' ``...`` "and more" list items. A block
runs in the namespace its earlier blocks left, as a notebook's cells do; names the docs take
from elsewhere (``index``, ``text``, ``retriever``, typing names) are given beforehand. The
Spring AI seed (001) is Java and seed 002's blocks lost their line breaks in the copy, so
neither can run as text (tests/seeds/test_spring_ai_rag_ru.py and
test_llamaindex_response_synthesizer_en.py port them)."""

from __future__ import annotations

import abc
import ast
import asyncio
import re
import threading
import typing

import pytest
import seed_imports
from seed_blocks import COPIES, SEEDS, port, python_blocks, run_block
from seed_support import prompts

import fastrag as fr


@pytest.mark.skipif(not SEEDS.is_dir(), reason=f"no seed files at {SEEDS} to compare with")
@pytest.mark.parametrize("prefix", ["000", "003"])
def test_the_checked_in_copies_are_the_seeds(prefix):
    (copy,) = sorted(COPIES.glob(f"{prefix}_*.txt"))
    assert copy.read_bytes() == (SEEDS / copy.name).read_bytes()


LI_TEXT_QA = (
    "Context information is below.\n"
    "---------------------\n"
    "{context_str}\n"
    "---------------------\n"
    "Given the context information and not prior knowledge, answer the query.\n"
    "Query: {query_str}\n"
    "Answer: "
)
KB = ["query_text lives here", "nothing related", "also nothing"]
PAUL = "Paul Graham is an essayist and the co-founder of Y Combinator."


@pytest.fixture
def ns(server, settings_llm, monkeypatch):
    """The namespace the blocks run in: what the docs assume from elsewhere."""
    monkeypatch.setattr(seed_imports, "BASE_URL", server.url)
    space = {
        "index": fr.Document.from_texts(KB),
        "text": PAUL,
        # the names seed 000's BaseSynthesizer block uses without importing them
        "ABC": abc.ABC,
        "abstractmethod": abc.abstractmethod,
        "Optional": typing.Optional,
        "Sequence": typing.Sequence,
        "Any": typing.Any,
        "LLM": fr.BaseLLM,
        "RESPONSE_TEXT_TYPE": str,
    }
    return space


def test_the_blocks_found():
    assert [line for line, _ in python_blocks("000")] == [20, 35, 49, 63, 115, 157, 175]
    assert [line for line, _ in python_blocks("003")] == [12, 59, 143]


# -- seed 000 -----------------------------------------------------------------------------------
def test_000_block_1_standalone_compact(server, ns):
    server.reply = "the answer"
    run_block("000", 0, ns)
    assert ns["response"].response == "the answer"
    assert ns["response_synthesizer"].response_mode == "compact"
    assert prompts(server) == [LI_TEXT_QA.format(context_str="text", query_str="query text")]


@pytest.mark.parametrize("first", [0, 2])
def test_000_blocks_2_and_4_in_a_query_engine(server, ns, first):
    server.reply = "the answer"
    run_block("000", first, ns)
    server.reset()
    run_block("000", first + 1, ns)
    assert ns["response"].response == "the answer"
    assert [n.text for n in ns["response"].source_nodes] == ["query_text lives here"]
    assert prompts(server) == [
        LI_TEXT_QA.format(context_str="query_text lives here", query_str="query_text")
    ]


def test_000_block_3_nodes_with_score(server, ns):
    server.reply = "the answer"
    run_block("000", 2, ns)
    resp = ns["response"]
    assert resp.response == "the answer" and [n.score for n in resp.source_nodes] == [1.0]


def test_000_block_5_base_synthesizer_init_body(server, ns):
    run_block("000", 4, ns)
    seed_base = ns["BaseSynthesizer"]
    assert seed_base.__abstractmethods__ == frozenset({"get_response", "aget_response"})

    class Shout(seed_base, fr.BaseSynthesizer):  # the seed's base, implemented
        def get_response(self, query_str, text_chunks, **response_kwargs):
            return self._llm.complete(query_str + ": " + " | ".join(text_chunks)).upper()

        async def aget_response(self, query_str, text_chunks, **response_kwargs):
            return self.get_response(query_str, text_chunks)

    server.reply = "an answer"
    syn = Shout()  # the seed's __init__ body: Settings.llm, Settings.callback_manager
    assert syn.llm is fr.Settings.llm and syn.streaming is False
    assert syn._callback_manager is fr.Settings.callback_manager
    resp = syn.synthesize("q", [fr.Node(text="a"), fr.Node(text="b")])
    assert resp.response == "AN ANSWER" and prompts(server) == ["q: a | b"]


def test_000_block_6_structured_answer_filtering(ns):
    run_block("000", 5, ns)
    syn = ns["response_synthesizer"]
    assert syn.response_mode == "compact" and syn.structured_answer_filtering is True


def test_000_block_7_tree_summarize_with_an_extra_variable(server, ns, capsys):
    server.reply = "Forsooth, an essayist."
    run_block("000", 6, ns)
    assert ns["response"] == "Forsooth, an essayist."
    assert prompts(server) == [
        "Context information is below.\n---------------------\n"
        f"{PAUL}\n---------------------\n"
        "Given the context information and not prior knowledge, answer the query.\n"
        "Please also write the answer in the tone of a Shakespeare play.\n"
        "Query: who is Paul Graham?\nAnswer: "
    ]


# -- seed 003 -----------------------------------------------------------------------------------
PG = [
    "Paul Graham wrote essays about startups.",
    "Paul Graham co-founded Y Combinator in 2005.",
    "Paul Graham created the Arc programming language.",
]


@pytest.fixture
def ns003(ns):
    doc = fr.Document.from_texts(PG + ["Bananas are yellow."])
    ns["retriever"] = fr.Retriever(doc, "root", "bm25", topk=3)
    return ns


def _numbered():
    lock, n = threading.Lock(), [0]

    def reply(messages):
        with lock:
            n[0] += 1
            return f"response {n[0]}"

    return reply


def test_003_block_1_stuffing(server, ns003, capsys):
    server.reply = "stuffed"
    run_block("003", 0, ns003)
    hits = ns003["retrieved_nodes"]
    assert ns003["query_str"] == "..." and ns003["llm"].model == "text-davinci-003"
    context = "\n\n".join(h.get_content() for h in hits)
    want = (
        "Context information is below.\n---------------------\n"
        f"{context}\n---------------------\n...\nQuery: ...\nAnswer: "
    )
    assert ns003["response"] == "stuffed" and ns003["fmt_qa_prompt"] == want
    assert prompts(server) == [want]
    assert "*****Response******:\nstuffed" in capsys.readouterr().out


def test_003_block_2_create_and_refine(server, ns003, capsys):
    server.reply = "stuffed"
    run_block("003", 0, ns003)
    ns003["retriever"] = fr.Retriever(fr.Document.from_texts(PG), "root", "bm25", topk=3)
    ns003["query_str"] = "Paul Graham"
    ns003["retrieved_nodes"] = ns003["retriever"].retrieve("Paul Graham")
    server.reset()
    server.reply = _numbered()
    run_block("003", 1, ns003)
    n = len(ns003["retrieved_nodes"])
    assert n == 3 and ns003["response"] == f"response {n}"
    sent = prompts(server)
    assert sent == ns003["fmt_prompts"] and len(sent) == n
    assert sent[1].startswith("The original query is as follows: Paul Graham\n")
    assert "We have provided an existing answer: response 1\n" in sent[1]
    out = capsys.readouterr().out
    assert re.findall(r"\[Node (\d)\]", out) == ["0", "1", "2"]


def test_003_block_3_as_written_cannot_run(server, ns003):
    """The article's block awaits at top level (a notebook cell) and calls
    ``combine_results``, which it never defines (it defines ``acombine_results``): as written
    it is no Python module, and run as a notebook cell it fails on that name.
    (test_response_synthesis_from_scratch.py runs the corrected version.)"""
    server.reply = "x"
    run_block("003", 0, ns003)
    ns003["asyncio"] = asyncio
    with pytest.raises(SyntaxError, match="'await' outside function"):
        run_block("003", 2, ns003)
    line, text = python_blocks("003")[2]
    cell = compile(port(text), f"003:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    ns003["retrieved_nodes"] = ns003["retriever"].retrieve("Paul Graham")
    with pytest.raises(NameError, match="name 'combine_results' is not defined"):
        asyncio.run(eval(cell, ns003))  # noqa: S307 - the seed's own cell
    assert len(prompts(server)) == 1 + 3  # block 1's call, then one per node before the error
