"""OpenAIRerank against the local server's /v1/rerank (real HTTP): exact scores, batching,
splitting, retries, bad answers, the API key, and use inside ModuleReranker / RAGPipeline."""

from __future__ import annotations

import numpy as np
import pytest
from openai_server import OpenAIServer

import fastrag as fr
from fastrag.errors import ConfigError
from fastrag.retrieval.online import RerankServiceError

DOCS = [
    "Copenhagen is the capital of Denmark",
    "Paris is in France",
    "Denmark has many islands",
    "the capital city",
]


def make(server, **kw) -> fr.OpenAIRerank:
    kw.setdefault("retry_backoff", 0.01)
    return fr.OpenAIRerank(server.url, "bge-reranker", **kw)


def want(query, docs):
    return np.array([OpenAIServer.rerank_score(query, d) for d in docs])


def rerank_requests(server):
    return [r for r in server.requests if r.path == "/v1/rerank"]


def test_scores_are_the_servers_in_input_order(openai_server):
    rr = make(openai_server)
    s = rr.score("capital of Denmark", DOCS)
    assert s.tolist() == want("capital of Denmark", DOCS).tolist()
    (req,) = rerank_requests(openai_server)
    assert req.body == {"model": "bge-reranker", "query": "capital of Denmark", "documents": DOCS}
    openai_server.rerank_format = "tei"  # a bare list of {index, score}
    assert rr.score("capital of Denmark", DOCS).tolist() == s.tolist()


def test_batch_sends_every_query_concurrently_and_splits_long_lists(openai_server):
    openai_server.script(["slow:0.2"] * 6)
    rr = make(openai_server, max_documents_per_request=2, max_concurrency=8)
    queries = ["capital", "Denmark", "France"]
    docs = [DOCS, DOCS[:3], DOCS[:1]]
    out = rr.score_batch(queries, docs)
    for q, d, s in zip(queries, docs, out, strict=True):
        assert s.tolist() == want(q, d).tolist()
    reqs = rerank_requests(openai_server)
    assert sorted(len(r.body["documents"]) for r in reqs) == [1, 1, 2, 2, 2]
    assert openai_server.max_in_flight == 5


def test_retries_then_succeeds_and_fails_clearly(openai_server):
    rr = make(openai_server, api_key="sk-secret-key", max_retries=2)
    openai_server.api_key = "sk-secret-key"
    openai_server.script(["429", "503", "ok"])
    assert rr.score("capital", DOCS).tolist() == want("capital", DOCS).tolist()
    assert len(rerank_requests(openai_server)) == 3
    assert rerank_requests(openai_server)[0].headers["authorization"] == "Bearer sk-secret-key"
    openai_server.reset()
    openai_server.script(["500", "500", "500"])
    with pytest.raises(
        RerankServiceError, match=r"failed after 3 attempts; last error: HTTP 500"
    ) as ei:
        rr.score("capital", DOCS)
    assert "sk-secret" not in str(ei.value) and ei.value.status == 500
    openai_server.reset()
    openai_server.script(["400:bad model"])
    with pytest.raises(RerankServiceError, match="refused the request: .*bad model") as ei:
        rr.score("capital", DOCS)
    assert len(rerank_requests(openai_server)) == 1  # 400 is not retried


def test_bad_answers_are_errors(openai_server):
    rr = make(openai_server, max_retries=0)
    openai_server.script(["malformed"])
    with pytest.raises(RerankServiceError, match="malformed JSON"):
        rr.score("capital", DOCS)
    for content, match in [
        (b'{"results": [{"index": 0, "relevance_score": 1}]}', "1 results"),
        (b'[{"index": 0, "score": 1}, {"index": 0, "score": 2}]', "repeated index 0"),
        (b'[{"index": 0, "score": "high"}, {"index": 1, "score": 2}]', "score 'high'"),
    ]:
        with pytest.raises(RerankServiceError, match=match):
            fr.OpenAIRerank._parse(content, 2, "[here]")


def test_arguments_are_checked(openai_server):
    with pytest.raises(ConfigError, match="base_url"):
        fr.OpenAIRerank("localhost", "m")
    with pytest.raises(ConfigError, match="rerank"):
        fr.OpenAIRerank(openai_server.url + "/rerank", "m")
    with pytest.raises(ConfigError, match="max_documents_per_request"):
        make(openai_server, max_documents_per_request=0)


def test_module_reranker_and_pipeline(openai_server):
    rr = make(openai_server)
    reranker = fr.Reranker("ModuleReranker", model=rr, topk=2)
    hits = [fr.NodeWithScore(fr.DocNode(t), 0.0) for t in DOCS]
    out = reranker(hits, "capital of Denmark")
    scores = want("capital of Denmark", DOCS)
    order = np.argsort(-scores, kind="stable")[:2]
    assert [h.text for h in out] == [DOCS[i] for i in order]
    assert [h.score for h in out] == pytest.approx(scores[order].tolist())
    doc = fr.Document.from_texts(DOCS)
    pipe = fr.RAGPipeline(fr.Retriever(doc, "root", "bm25", topk=4), reranker=reranker)
    openai_server.reset()
    res = pipe.retrieve_batch(["capital of Denmark", "France"])
    assert [h.text for h in res[0]] == [DOCS[i] for i in order]
    assert len(rerank_requests(openai_server)) == 2  # one per query, sent together
