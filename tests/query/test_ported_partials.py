"""The calls a user porting LazyLLM, LlamaIndex or Spring AI code writes, as written:
``retriever(query=Query)`` with the Query's filter, Spring AI's ``FILTER_EXPRESSION`` keys,
``set().update(hits)`` de-duplicating by node, ``Settings.callback_manager`` in a custom
synthesizer's ``__init__``, ``as_query_engine(node_postprocessors=...)`` and QA-pair answers in
the prompt."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest
from query_support import DOCS, META

import fastrag as fr
from fastrag.embeddings import CallableEmbedding
from fastrag.errors import ConfigError
from fastrag.settings import CallbackManager

CITY = [DOCS[0], DOCS[1], DOCS[2]]


def _bag(texts: list[str]) -> np.ndarray:
    """A bag-of-words embedding (16 buckets by a stable hash): cosine has real neighbours."""
    out = np.zeros((len(texts), 16), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in t.lower().replace(".", " ").replace("?", " ").split():
            out[i, sum(map(ord, w)) % 16] += 1.0
    return out


@pytest.fixture(scope="module")
def vdoc() -> fr.Document:
    return fr.Document.from_texts(DOCS, metadatas=META, embed={"bag": CallableEmbedding(_bag)})


@pytest.mark.parametrize("similarity", ["bm25", "cosine", "hybrid"])
def test_retriever_query_keyword_with_a_query_object(vdoc, similarity):
    ret = fr.Retriever(vdoc, "root", similarity, topk=6)
    plain = [h.text for h in ret(query="capital city of Denmark")]
    assert plain and [h.text for h in ret(query=fr.Query("capital city of Denmark"))] == plain
    for flt in (
        {"type": "city"},
        "type == 'city'",
        fr.FilterExpressionBuilder().eq("type", "city"),
    ):
        q = fr.Query("capital city of Denmark", context={"filter": flt})
        got = [h.text for h in ret(query=q)]
        assert got == [t for t in plain if t in CITY] and len(got) >= 2
    # the Query's filter wins over the retriever's own (Spring AI's rule)
    ml_only = fr.Retriever(vdoc, "root", similarity, topk=6, filter="type == 'ml'")
    q = fr.Query("capital city of Denmark", context={"filter": "type == 'city'"})
    assert {h.text for h in ml_only(query=q)} <= set(CITY)


@pytest.mark.parametrize(
    "key",
    [
        fr.Retriever.FILTER_EXPRESSION,  # VectorStoreDocumentRetriever.FILTER_EXPRESSION
        fr.RAGPipeline.FILTER_EXPRESSION,  # QuestionAnswerAdvisor.FILTER_EXPRESSION
        "FILTER_EXPRESSION",
        "filter_expression",
        "filter",
    ],
)
def test_spring_filter_expression_keys_filter(doc, key):
    ret = fr.Retriever(doc, "root", "bm25", topk=6)
    q = fr.Query("Spring Boot applications capital", context={key: "type == 'Spring'"})
    assert [h.text for h in ret(q)] == [DOCS[3]]
    pipe = fr.RAGPipeline(ret, llm=fr.FunctionLLM(lambda p: "ok"))
    assert [h.text for h in pipe.retrieve(q)] == [DOCS[3]]
    assert [n.text for n in pipe.query(q).source_nodes] == [DOCS[3]]
    assert fr.Retriever.FILTER_EXPRESSION == "vector_store_filter_expression"
    assert fr.RAGPipeline.FILTER_EXPRESSION == "qa_filter_expression"


def test_a_filter_under_an_unknown_key_or_two_filters_fail(doc):
    ret = fr.Retriever(doc, "root", "bm25", topk=6)
    with pytest.raises(ConfigError, match=r"Query context key 'filters' is not a filter key"):
        ret(fr.Query("capital", context={"filters": {"type": "city"}}))
    with pytest.raises(ConfigError, match=r"two different filters"):
        ret(fr.Query("capital", context={"filter": "type == 'ml'", "FILTER_EXPRESSION": "x == 1"}))
    same = {"filter": "type == 'city'", fr.Retriever.FILTER_EXPRESSION: "type == 'city'"}
    assert {h.text for h in ret(fr.Query("capital Spring", context=same))} == {DOCS[0], DOCS[2]}
    # other context keys are the user's own
    assert len(ret(fr.Query("capital Spring", context={"user": "u1"}))) == 3


def test_set_update_deduplicates_a_node_found_by_two_retrievers(vdoc):
    bm25 = fr.Retriever(vdoc, "root", "bm25", topk=3)("capital of Denmark")
    cosine = fr.Retriever(vdoc, "root", "cosine", topk=3)("capital of Denmark")
    both = {h.id for h in bm25} & {h.id for h in cosine}
    assert both  # the same node, two scores
    h1 = next(h for h in bm25 if h.id in both)
    h2 = next(h for h in cosine if h.id in both)
    assert h1 is not h2 and h1.score != h2.score
    assert h1 == h2 and hash(h1) == hash(h2)
    nodes: set = set()
    nodes.update(bm25)
    nodes.update(cosine)
    assert len(nodes) == len({h.id for h in bm25 + cosine})
    assert fr.NodeWithScore(fr.DocNode("a"), 1.0) != fr.NodeWithScore(fr.DocNode("b"), 1.0)
    assert fr.NodeWithScore(fr.DocNode("a"), 1.0) != fr.DocNode("a")  # a hit is not its node
    assert {(h.id, h.score) for h in (h1, h2)} == {(h1.id, h1.score), (h2.id, h2.score)}


def test_settings_callback_manager_is_an_empty_manager():
    cm = fr.Settings.callback_manager
    assert isinstance(cm, CallbackManager) and cm.handlers == []
    with pytest.raises(ConfigError, match=r"fastrag sends no LlamaIndex callback events"):
        cm.add_handler(object())

    def on_event(*args):  # a handler (not print: some installs replace builtins.print)
        pass

    with pytest.raises(ConfigError, match=r"CallbackManager\(handlers=\[<function .*on_event"):
        CallbackManager(handlers=[on_event])
    llama_like = types.SimpleNamespace(handlers=[on_event])  # LlamaIndex's manager with one
    with pytest.raises(ConfigError, match=r"resp.metadata\['trace'\]"):
        fr.Settings.callback_manager = llama_like
    fr.Settings.callback_manager = CallbackManager()  # an empty one is fine
    assert fr.Settings.callback_manager.handlers == []


class SeedSynthesizer(fr.BaseSynthesizer):
    """LlamaIndex's custom synthesizer: its own ``__init__`` body, no ``super().__init__``."""

    def __init__(self, llm: Any = None, streaming: bool = False) -> None:
        """Init params."""
        self._llm = llm or fr.Settings.llm
        self._callback_manager = fr.Settings.callback_manager
        self._streaming = streaming

    def get_response(self, query_str: str, text_chunks, **response_kwargs: Any) -> str:
        return self._llm.complete(f"{query_str} | {' / '.join(text_chunks)}")

    async def aget_response(self, query_str: str, text_chunks, **response_kwargs: Any) -> str:
        return await self._llm.acomplete(f"{query_str} | {' / '.join(text_chunks)}")


def test_custom_synthesizer_init_body_as_the_seed_writes_it(doc):
    llm = fr.FunctionLLM(lambda p: "answer to " + p)
    old = fr.Settings.llm
    fr.Settings.llm = llm
    try:
        syn = SeedSynthesizer()
    finally:
        fr.Settings.llm = old
    assert syn.llm is llm and syn.streaming is False
    assert isinstance(syn._callback_manager, CallbackManager)
    assert syn.max_concurrency == 16 and syn.response_mode == "custom"
    resp = syn.synthesize("q?", [fr.DocNode("one"), fr.DocNode("two")])
    assert resp.response == "answer to q? | one / two" and llm.prompts == ["q? | one / two"]
    qe = doc.as_query_engine(response_synthesizer=syn, topk=1)
    assert qe.query("capital of Denmark").response == "answer to capital of Denmark | " + DOCS[0]


def test_as_query_engine_takes_node_postprocessors(doc):
    llm = fr.FunctionLLM(lambda p: "ok")
    hits = fr.Retriever(doc, "root", "bm25", topk=6)("capital of Denmark")
    cut = fr.SimilarityCutoff((hits[0].score + hits[-1].score) / 2)
    qe = doc.as_query_engine(llm=llm, topk=6, node_postprocessors=[cut])
    assert qe.postprocessors == [cut]
    want = [h.id for h in hits if h.score >= cut.threshold]
    assert 0 < len(want) < len(hits)
    assert [n.id for n in qe.query("capital of Denmark").source_nodes] == want
    with pytest.raises(ConfigError, match=r"both node_postprocessors= .* and postprocessors="):
        doc.as_query_engine(llm=llm, node_postprocessors=[cut], postprocessors=[cut])


def test_qa_pair_answers_reach_the_prompt(tmp_path):
    def parser_model(prompt: str) -> str:
        return "Q: What is the capital of Denmark?\nA: Copenhagen, on Zealand."

    qa = fr.LLMParser(fr.FunctionLLM(parser_model), task_type="qa")
    docs = fr.Document.from_texts([DOCS[0]])
    docs.create_node_group("qapair", transform=qa)
    node = fr.Retriever(docs, "qapair", "bm25", topk=1)("capital of Denmark")[0]
    assert node.text == "What is the capital of Denmark?"
    assert node.metadata["answer"] == "Copenhagen, on Zealand."
    shown = "query:\nWhat is the capital of Denmark?\nanswer\nCopenhagen, on Zealand."
    assert node.get_content() == shown
    assert node.get_content("none") == "What is the capital of Denmark?"
    llm = fr.FunctionLLM(lambda p: "ok")
    syn = fr.get_response_synthesizer(response_mode="simple_summarize", llm=llm)
    syn.synthesize("capital?", [node])
    assert shown in llm.prompts[0]
    # LazyLLM's formatter, as the seed writes it
    context_str = "\n".join([n.get_content() for n in [node]])
    assert context_str == shown
