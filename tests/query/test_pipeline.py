"""RAGPipeline: batch shape (call counts), trace, errors, streaming, the one-line engine."""

from __future__ import annotations

import asyncio

import pytest
from query_support import DOCS, prompts

import fastrag as fr
from fastrag.errors import ConfigError
from fastrag.llms import LLMError
from fastrag.query.prompts import QUERY_PROMPTS

QUESTIONS = [
    "capital of Denmark?",
    "second largest city of Denmark?",
    "capital of France?",
    "How to start a Spring Boot application?",
    "What is an LLM?",
]


class CountingRetriever:
    """A callable retriever that counts its calls (the pipeline calls it per variant)."""

    def __init__(self, inner: fr.Retriever) -> None:
        self.inner, self.texts = inner, []

    def __call__(self, text: str):
        self.texts.append(text)
        return self.inner(text)


def _ids(hits):
    return [[h.node.id, h.score] for h in hits]


def test_batch_calls_each_retriever_once_with_every_variant(server, llm, doc, monkeypatch):
    bm25 = fr.Retriever(doc, "root", "bm25", topk=3)
    bm25_b = fr.Retriever(doc, "root", "bm25", topk=2, k1=1.2)
    calls = []
    for r in (bm25, bm25_b):
        orig = r.batch
        monkeypatch.setattr(
            r, "batch", lambda qs, _o=orig, **kw: calls.append(list(qs)) or _o(qs, **kw)
        )
    pipe = fr.RAGPipeline(
        [bm25, bm25_b],
        query_transformers=[
            fr.RewriteQueryTransformer(llm),
            fr.TranslationQueryTransformer(llm, target_language="english"),
        ],
        query_expander=fr.MultiQueryExpander(llm, number_of_queries=3),
        joiner=fr.ReciprocalRankFusionJoiner(),
        llm=llm,
    )
    resps = pipe.batch(QUESTIONS)
    n = len(QUESTIONS)
    # one call per retriever, with all 4 variants of all 5 queries
    assert len(calls) == 2 and calls[0] == calls[1] and len(calls[0]) == 4 * n
    # LLM: one rewrite, one expansion, one answer per query; translation passes through
    p = prompts(server)
    assert len(p) == 3 * n
    assert sum("rewrite it to provide better results" in x for x in p) == n
    assert sum("different versions" in x for x in p) == n
    assert sum(x.startswith("Context information is below") for x in p) == n
    assert [r.response for r in resps] == ["ANSWER"] * n
    for q, r in zip(QUESTIONS, resps, strict=True):
        t = r.metadata["trace"]
        rewritten = q.rstrip("?") + " explained"
        assert t["transformed"] == [
            {"transformer": "RewriteQueryTransformer", "query": rewritten},
            {"transformer": "TranslationQueryTransformer", "query": rewritten},
        ]
        assert t["expanded"] == [rewritten] + [
            f"{rewritten} variant {w}" for w in ("one", "two", "three")
        ]
        lists = [ret(v) for v in t["expanded"] for ret in (bm25, bm25_b)]
        assert [e["hits"] for e in t["retrieved"]] == [_ids(h) for h in lists]
        joined = fr.ReciprocalRankFusionJoiner()(lists)
        assert t["joined"] == _ids(joined)
        assert [h.id for h in r.source_nodes] == [h.id for h in joined]
        # the answer prompt is the augmenter's, for the original question
        ctx = "\n".join(h.text for h in joined)
        assert QUERY_PROMPTS["en"]["augment"].format(query=q, context=ctx) in p
        assert set(t["llm"]) == {"transform", "expand", "answer"}
        assert r.metadata["llm_calls"] == 3


def test_token_counts_are_what_the_server_reported(server, llm, doc):
    server.usage = (7, 3)
    pipe = fr.RAGPipeline(
        fr.Retriever(doc, "root", "bm25", topk=2),
        query_transformers=[fr.RewriteQueryTransformer(llm)],
        synthesizer=fr.get_response_synthesizer("compact", llm=llm),
    )
    resps = pipe.batch(QUESTIONS[:3])
    assert len(server.requests) == 6
    for r in resps:
        assert (
            r.metadata["llm_calls"],
            r.metadata["prompt_tokens"],
            r.metadata["completion_tokens"],
        ) == (2, 14, 6)
        assert r.metadata["trace"]["llm"] == {
            "transform": {"llm_calls": 1, "prompt_tokens": 7, "completion_tokens": 3},
            "synthesize": {"llm_calls": 1, "prompt_tokens": 7, "completion_tokens": 3},
        }
        assert r.metadata["response_mode"] == "compact"


def test_synthesizer_path_answers_the_original_query_from_joined_hits(server, llm, doc):
    ret = fr.Retriever(doc, "root", "bm25", topk=2)
    syn = fr.get_response_synthesizer("compact", llm=llm)
    pipe = fr.RAGPipeline([ret], synthesizer=syn)
    r = pipe.query("capital of Denmark")
    hits = ret("capital of Denmark")
    assert [h.id for h in r.source_nodes] == [h.id for h in hits]
    (p,) = prompts(server)
    assert "Query: capital of Denmark" in p and hits[0].text in p


def test_empty_and_bad_inputs(llm, doc):
    pipe = fr.RAGPipeline(fr.Retriever(doc, "root", "bm25"), llm=llm)
    assert pipe.batch([]) == []
    with pytest.raises(ConfigError, match="queries must be a list"):
        pipe.batch("one query")
    with pytest.raises(ConfigError, match=r"queries\[1\] must be a str or fastrag.Query"):
        pipe.batch(["ok", 3])
    with pytest.raises(
        ConfigError,
        match=r"retrievers\[1\] must be a fastrag.Retriever or a "
        r"callable",
    ):
        fr.RAGPipeline([fr.Retriever(doc, "root", "bm25"), 42], llm=llm)
    with pytest.raises(ConfigError, match="retrievers is an empty list"):
        fr.RAGPipeline([], llm=llm)
    with pytest.raises(ConfigError, match=r"query_transformers\[0\] must be a QueryTransformer"):
        fr.RAGPipeline(fr.Retriever(doc, "root", "bm25"), query_transformers=[1])
    with pytest.raises(ConfigError, match="output_format=None"):
        fr.RAGPipeline(
            fr.Retriever(doc, "root", "bm25"),
            reranker=fr.Reranker("KeywordFilter", required_keys=["a"], output_format="content"),
        )
    with pytest.raises(ConfigError, match="on_error"):
        fr.RAGPipeline(fr.Retriever(doc, "root", "bm25"), on_error="ignore")
    fr.Settings.reset()
    no_llm = fr.RAGPipeline(fr.Retriever(doc, "root", "bm25"))
    with pytest.raises(ConfigError, match="no answer stage"):
        no_llm.query("capital")
    assert no_llm.retrieve("capital of France")[0].text == DOCS[2]


def test_on_error_skip_gives_that_query_an_error_response(server, doc):
    llm = fr.OpenAILike("m", server.url, max_retries=0, timeout=5.0)
    server.reply = lambda m: "Rewritten query: capital"
    pipe = fr.RAGPipeline(
        fr.Retriever(doc, "root", "bm25", topk=2),
        query_transformers=[fr.RewriteQueryTransformer(llm, max_concurrency=1)],
        llm=llm,
        on_error="skip",
    )
    server.script(["ok", "400", "ok"])
    resps = pipe.batch(["a", "b", "c"])
    assert [r.response for r in resps] == [
        "Rewritten query: capital",
        "",
        "Rewritten query: capital",
    ]
    assert resps[1].metadata["error_stage"] == "transform"
    assert resps[1].metadata["error"].startswith("LLMError")
    assert "error" not in resps[0].metadata
    # 3 rewrites + 2 answers: nothing answered twice, nothing dropped
    assert len(server.requests) == 5
    server.reset()
    server.script(["ok", "400", "ok"])
    raising = fr.RAGPipeline(
        fr.Retriever(doc, "root", "bm25"),
        query_transformers=[fr.RewriteQueryTransformer(llm, max_concurrency=1)],
        llm=llm,
    )
    with pytest.raises(LLMError) as ei:
        raising.batch(["a", "b", "c"])
    assert "in RAGPipeline stage 'transform', query index 1: 'b'" in "\n".join(ei.value.__notes__)


def test_answer_stage_failure_is_named(server, doc):
    llm = fr.OpenAILike("m", server.url, max_retries=0, timeout=5.0)
    pipe = fr.RAGPipeline(
        fr.Retriever(doc, "root", "bm25"), llm=llm, on_error="skip", max_concurrency=1
    )
    server.script(["500", "ok"])
    resps = pipe.batch(["capital", "France"])
    assert resps[0].metadata["error_stage"] == "answer" and resps[1].response
    assert len(server.requests) == 2


def test_per_query_filters_group_retriever_calls(llm, doc, monkeypatch):
    ret = fr.Retriever(doc, "root", "bm25", topk=3)
    seen = []
    orig = ret.batch
    monkeypatch.setattr(
        ret, "batch", lambda qs, **kw: seen.append((list(qs), kw.get("filter"))) or orig(qs, **kw)
    )
    pipe = fr.RAGPipeline(ret, llm=llm)
    qs = [
        fr.Query("capital", context={"filter": "type == 'city'"}),
        fr.Query("Spring application", context={"filter_expression": "type == 'Spring'"}),
        fr.Query("capital city", context={"filter": "type == 'city'"}),
    ]
    hits = pipe.retrieve_batch(qs)
    assert seen == [
        (["capital", "capital city"], "type == 'city'"),
        (["Spring application"], "type == 'Spring'"),
    ]
    assert all(h.metadata["type"] == "city" for h in hits[0] + hits[2])
    assert [h.text for h in hits[1]] == [DOCS[3]]


def test_callable_retrievers_postprocessors_and_reranker(llm, doc):
    counting = CountingRetriever(fr.Retriever(doc, "root", "bm25", topk=4))
    reranker = fr.Reranker("ModuleReranker", model=lambda q, texts: [len(t) for t in texts], topk=2)
    pipe = fr.RAGPipeline(
        counting, postprocessors=[fr.SimilarityCutoff(0.01)], reranker=reranker, llm=llm
    )
    r = pipe.retrieve("capital of Denmark")
    assert counting.texts == ["capital of Denmark"]
    base = [h for h in counting.inner("capital of Denmark") if h.score >= 0.01]
    want = sorted(base, key=lambda h: -len(h.text))[:2]
    assert [h.id for h in r] == [h.id for h in want]
    t = pipe.batch(["capital of Denmark"])[0].metadata["trace"]
    assert t["postprocessed"][0]["postprocessor"] == "SimilarityCutoff"
    assert [x[0] for x in t["reranked"]] == [h.id for h in want]


def test_augmenter_governs_empty_context_with_a_synthesizer(server, llm, doc):
    ret = fr.Retriever(doc, "root", "bm25", similarity_cut_off=100.0)  # nothing passes
    syn = fr.get_response_synthesizer("compact", llm=llm)
    pipe = fr.RAGPipeline(ret, augmenter=fr.ContextualQueryAugmenter(), synthesizer=syn)
    pipe.query("Who is Anacletus?")
    (p,) = prompts(server)
    assert p.startswith("The user query is outside your knowledge base.")
    server.reset()
    pipe = fr.RAGPipeline(
        ret, augmenter=fr.ContextualQueryAugmenter(allow_empty_context=True), synthesizer=syn
    )
    pipe.query("Who is Anacletus?")
    assert prompts(server) == ["Who is Anacletus?"]


def test_answer_query_auto_uses_the_compressed_query_with_history(server, llm, doc):
    pipe = fr.RAGPipeline(
        fr.Retriever(doc, "root", "bm25", topk=1),
        query_transformers=[fr.CompressionQueryTransformer(llm)],
        llm=llm,
    )
    q = fr.Query(
        "And its second largest city?",
        history=[("user", "What is the capital of Denmark?"), ("assistant", "Copenhagen.")],
    )
    r = pipe.query(q)
    assert r.source_nodes[0].text == DOCS[1]
    assert "Query: What is the second largest city of Denmark?" in prompts(server)[-1]
    assert r.metadata["trace"]["history"] == 2


def test_streaming_synthesizer_and_augmenter(server, llm, doc):
    ret = fr.Retriever(doc, "root", "bm25", topk=2)
    pipe = fr.RAGPipeline(
        ret, synthesizer=fr.get_response_synthesizer("compact", llm=llm, streaming=True)
    )
    r = pipe.query("capital of Denmark")
    assert "".join(r.response_gen) == "ANSWER" and r.response == "ANSWER"
    assert r.metadata["llm_calls"] == 1
    apipe = fr.RAGPipeline(ret, llm=llm, streaming=True)

    async def consume():
        resp = await apipe.aquery("capital of Denmark")
        return [p async for p in resp.async_response_gen], resp

    pieces, resp = asyncio.run(consume())
    assert "".join(pieces) == "ANSWER" and resp.metadata["llm_calls"] == 1
    assert resp.metadata["trace"]["llm"]["answer"]["llm_calls"] == 1
    sync = apipe.query("capital of Denmark")
    assert "".join(sync.response_gen) == "ANSWER"
    # batch drains: complete responses
    assert [x.response for x in pipe.batch(["capital", "France"])] == ["ANSWER", "ANSWER"]


def test_as_query_engine_and_settings(server, llm, doc):
    qe = doc.as_query_engine(
        group_name="root",
        similarity="bm25",
        topk=2,
        llm=llm,
        filter={"type": "city"},
        max_concurrency=4,
        query_transformers=[fr.RewriteQueryTransformer(llm)],
    )
    r = qe.query("capital of Denmark")
    assert r.response == "ANSWER" and r.metadata["response_mode"] == "compact"
    assert all(h.metadata["type"] == "city" for h in r.source_nodes)
    assert qe.synthesizer.max_concurrency == 4
    fr.Settings.llm = llm
    try:
        assert doc.as_query_engine(topk=1).query("France").response == "ANSWER"
    finally:
        fr.Settings.reset()


def test_lazyllm_positional_cut_off(doc):
    r = fr.Retriever(doc, "root", "bm25", 0.003, topk=3)
    assert (r.topk, r.similarity_cut_off) == (3, 0.003)
    r = fr.Retriever(doc, "root", "bm25", 2, 0.5)
    assert (r.topk, r.similarity_cut_off) == (2, 0.5)
    with pytest.raises(ConfigError, match="topk given both by position and by keyword"):
        fr.Retriever(doc, "root", "bm25", 0.5, "default", 3, topk=3)
    with pytest.raises(
        ConfigError,
        match=r"pass the rest by keyword: Retriever\(doc, "
        r"group_name, similarity, topk=\.\.\.",
    ):
        fr.Retriever(doc, "root", "bm25", 1, None, "default", None, 5)


def test_sync_batch_inside_a_running_loop(llm, doc):
    pipe = fr.RAGPipeline(fr.Retriever(doc, "root", "bm25"), llm=llm)

    async def main():
        return pipe.batch(["capital"]), await pipe.abatch(["capital"])

    a, b = asyncio.run(main())
    assert a[0].response == b[0].response == "ANSWER"


def test_one_pipeline_shared_by_many_threads(server, llm, doc):
    from concurrent.futures import ThreadPoolExecutor

    server.script(["slow:0.05"] * 200)
    pipe = fr.RAGPipeline(
        [
            fr.Retriever(doc, "root", "bm25", topk=2),
            fr.Retriever(doc, "root", "bm25", topk=3, k1=1.2),
        ],
        query_transformers=[fr.RewriteQueryTransformer(llm)],
        query_expander=fr.MultiQueryExpander(llm, number_of_queries=2),
        joiner=fr.ReciprocalRankFusionJoiner(topk=3),
        llm=llm,
    )
    batches = [[f"{q} #{t}" for q in QUESTIONS] for t in range(8)]
    with ThreadPoolExecutor(8) as ex:
        got = list(ex.map(pipe.batch, batches))
    assert len(server.requests) == 8 * len(QUESTIONS) * 3  # rewrite, expand, answer: once each
    for batch, resps in zip(batches, got, strict=True):
        for q, r in zip(batch, resps, strict=True):
            assert r.metadata["trace"]["query"] == q and r.response == "ANSWER"
            rewritten = q.rstrip("?") + " explained"
            assert r.metadata["trace"]["transformed_query"] == rewritten
            alone = pipe.retrieve(q)  # the same hits as computed alone
            assert [h.id for h in r.source_nodes] == [h.id for h in alone]
