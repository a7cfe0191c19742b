"""Fixes found by running the reference documents' examples against fastrag (issue 11):
structured-output token counts, several embed keys for a custom similarity, lineage on hits,
and refine templates written with ``{context_str}``."""

from __future__ import annotations

import json

import numpy as np
import pytest

import fastrag as fr
from fastrag._async import run_sync
from fastrag.analysis.tokens import count_tokens
from fastrag.errors import ConfigError
from fastrag.retrieval.similarity import register_similarity


# -- structured answer filtering: token counts are what was sent --------------------------------
def _json_reply(messages):
    return json.dumps({"answer": "Copenhagen", "query_satisfied": True})


@pytest.mark.parametrize("json_mode", ["json_object", None])
def test_structured_refine_counts_what_the_server_received(openai_server, json_mode):
    openai_server.reply = _json_reply
    llm = fr.OpenAILike("m", openai_server.url, json_mode=json_mode, retry_backoff=0.01)
    syn = fr.get_response_synthesizer("refine", llm=llm, structured_answer_filtering=True)
    chunks = [
        "Copenhagen is the capital of Denmark.",
        "Aarhus is its second city.",
        "Denmark is in Scandinavia.",
    ]
    r = syn.synthesize("What is the capital of Denmark?", chunks)
    reqs = openai_server.requests
    assert len(reqs) == r.metadata["llm_calls"] == 3
    sent = sum(count_tokens(m["content"]) for q in reqs for m in q.body["messages"])
    # the schema instruction is part of every prompt, and counted
    assert all('"query_satisfied"' in q.body["messages"][-1]["content"] for q in reqs)
    assert r.metadata["prompt_tokens"] == sent
    assert r.metadata["completion_tokens"] == 3 * count_tokens(_json_reply(None))
    openai_server.reset()
    openai_server.reply = _json_reply
    openai_server.usage = (101, 7)  # the server's own usage wins over counting
    r = syn.synthesize("What is the capital of Denmark?", chunks)
    assert (r.metadata["prompt_tokens"], r.metadata["completion_tokens"]) == (303, 21)


def test_structured_with_usage_on_function_llms():
    llm = fr.MockLLM(token_counter=lambda s: 5)
    obj, comp = run_sync(
        llm.astructured_with_usage(
            "q", {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
        )
    )
    assert set(obj) == {"a"} and (comp.prompt_tokens, comp.completion_tokens) == (5, 5)


# -- a custom embedding similarity merges every embed key ----------------------------------------
class _TableEmbed:
    """Fixed vectors per text (the same for queries), dim 2."""

    def __init__(self, table):
        self.table = table

    def embed(self, texts):
        return np.array([self.table[t] for t in texts], dtype=np.float32)


def test_custom_embedding_similarity_merges_all_keys():
    texts = ["a", "b", "c", "q"]
    k1 = _TableEmbed({"a": [1, 0], "b": [0.5, 0], "c": [0, 0], "q": [1, 0]})
    k2 = _TableEmbed({"a": [0, 0], "b": [0, 0], "c": [0, 3], "q": [0, 1]})
    doc = fr.Document.from_texts(texts[:3], embed={"k1": k1, "k2": k2})

    @register_similarity(name="neg_l1_test", mode="embedding", batch=True)
    def dotp(qv, vecs):
        return vecs @ qv

    ret = fr.Retriever(doc, "root", "neg_l1_test", topk=3)
    hits = ret("q")
    # k1 scores: a 1, b 0.5, c 0; k2 scores: c 3, a 0, b 0 -> best per node: c 3, a 1, b 0.5
    assert [(h.text, h.score) for h in hits] == [("c", 3.0), ("a", 1.0), ("b", 0.5)]
    only_k1 = fr.Retriever(doc, "root", "neg_l1_test", topk=3, embed_keys=["k1"])
    assert [h.text for h in only_k1("q")] == ["a", "b", "c"]
    cut = fr.Retriever(
        doc, "root", "neg_l1_test", topk=3, similarity_cut_off={"k1": 0.9, "k2": 2.0}
    )
    assert [(h.text, h.score) for h in cut("q")] == [("c", 3.0), ("a", 1.0)]


# -- hits pass lineage through --------------------------------------------------------------------
def test_node_with_score_passes_lineage_through():
    doc = fr.Document.from_texts(
        ["one. two. three.", "four. five."],
        metadatas=[{"file_path": "/a.txt"}, {"file_path": "/b.txt"}],
    )
    doc.create_node_group("sentence", transform=lambda t: t.split(". "))
    hit = fr.Retriever(doc, "sentence", "bm25", topk=1)("five")[0]
    assert isinstance(hit, fr.NodeWithScore)
    assert hit.parent == hit.node.parent and hit.parent.text == "four. five."
    assert hit.root_node.text == "four. five." and hit.doc_path == "/b.txt"
    assert hit.group == "sentence" and hit.parent_id == hit.parent.id
    assert hit.doc_id == hit.node.doc_id
    root_hit = fr.Retriever(doc, "root", "bm25", topk=1)("two")[0]
    assert [c.text for c in root_hit.children["sentence"]] == ["one", "two", "three."]
    assert hit.embedding is None


# -- refine templates with {context_str} -----------------------------------------------------------
def test_refine_template_accepts_context_str():
    llm = fr.MockLLM()
    tmpl = (
        "The original query is as follows: {query_str}\nWe have provided an existing answer: "
        "{existing_answer}\nNew context:\n{context_str}\nRefine the answer."
    )
    syn = fr.get_response_synthesizer("refine", llm=llm, refine_template=tmpl)
    syn.synthesize("q?", ["first chunk", "second chunk"])
    assert llm.prompts[1].endswith("New context:\nsecond chunk\nRefine the answer.")
    assert llm.prompts[1].startswith("The original query is as follows: q?\nWe have provided")
    assert "refine_template" in syn.get_prompts()
    with pytest.raises(ConfigError, match=r"\{context_msg\} \(or \{context_str\}\)"):
        fr.get_response_synthesizer(
            "refine", llm=llm, refine_template="{query_str} {existing_answer}"
        )
    with pytest.raises(ConfigError, match="both {context_msg} and {context_str}"):
        fr.get_response_synthesizer(
            "refine",
            llm=llm,
            refine_template=("{query_str} {existing_answer} {context_str} {context_msg}"),
        )
