"""The reference documents' flows, adapted to fastrag's names: Spring AI's naive and advanced
RAG (seeds/001) over a vector store, and the LazyLLM tutorial's rewrite, sub-question and
multi-step strategies (seeds/004) on the CMRC knowledge base. The model's words come from the
local OpenAI-compatible server; everything around them is the real path."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from query_support import prompts

import fastrag as fr
from fastrag.datasets import build_squad_kb, load_cmrc2018_dev
from fastrag.eval.loaders import normalize_paragraph, squad_questions

SPRING_DOCS = [
    "Spring Boot makes it easy to create stand-alone, production-grade Spring applications.",
    "Anacletus lives in the Whispering Woods with his fox.",
    "The capital of Denmark is Copenhagen.",
    "Run a Spring Boot application with the spring-boot:run Maven goal.",
]
SPRING_META = [
    {"type": "Spring"},
    {"type": "tale", "location": "Whispering Woods"},
    {"type": "geo"},
    {"type": "Spring"},
]


@pytest.fixture
def vector_doc(server):
    server.dim = 256  # random 256-d vectors: cosine of different texts is far below 0.5
    emb = fr.OpenAIEmbedding(server.url, "test-embed")
    return fr.Document.from_texts(SPRING_DOCS, metadatas=SPRING_META, embed=emb)


# -- seeds/001: Spring AI ---------------------------------------------------------------------
def test_spring_naive_rag_with_similarity_threshold(server, llm, vector_doc):
    # RetrievalAugmentationAdvisor + VectorStoreDocumentRetriever(similarityThreshold=0.50)
    advisor = fr.RAGPipeline(
        fr.Retriever(vector_doc, "root", "cosine", topk=4, similarity_cut_off=0.50), llm=llm
    )
    r = advisor.query(SPRING_DOCS[2])  # the same text embeds to the same vector: cosine 1
    assert [h.text for h in r.source_nodes] == [SPRING_DOCS[2]]
    assert r.response == "ANSWER"
    # nothing above the threshold: by default the model is told not to answer
    server.reset()
    r = advisor.query("Who is the main character of the story?")
    assert r.source_nodes == []
    assert prompts(server, "/v1/chat/completions") == [
        "The user query is outside your knowledge base.\n"
        "Politely inform the user that you can't answer it.\n"
    ]
    # .queryAugmenter(ContextualQueryAugmenter.builder().allowEmptyContext(true))
    server.reset()
    allow = fr.RAGPipeline(
        advisor.retrievers[0].inner,
        llm=llm,
        augmenter=fr.ContextualQueryAugmenter(allow_empty_context=True),
    )
    allow.query("Who is the main character of the story?")
    assert prompts(server, "/v1/chat/completions") == ["Who is the main character of the story?"]


def test_spring_filter_expression_per_query_and_per_retriever(server, llm, vector_doc):
    ret = fr.Retriever(vector_doc, "root", "cosine", topk=5, similarity_cut_off=-1.0)
    advisor = fr.RAGPipeline(ret, llm=llm)
    # .advisors(a -> a.param(VectorStoreDocumentRetriever.FILTER_EXPRESSION, "type == 'Spring'"))
    hits = advisor.retrieve(fr.Query("How do I run it?", context={"filter": "type == 'Spring'"}))
    assert sorted(h.text for h in hits) == sorted([SPRING_DOCS[0], SPRING_DOCS[3]])
    # .filterExpression(new FilterExpressionBuilder().eq("location", "Whispering Woods").build())
    b = fr.FilterExpressionBuilder()
    tale = fr.Retriever(
        vector_doc,
        "root",
        "cosine",
        topk=5,
        similarity_cut_off=-1.0,
        filter=b.eq("location", "Whispering Woods").build(),
    )
    assert [h.text for h in fr.RAGPipeline(tale, llm=llm).retrieve("Who is Anacletus?")] == [
        SPRING_DOCS[1]
    ]


def test_spring_advanced_rag_rewrites_before_retrieving(server, llm, vector_doc):
    server.reply = lambda m: (
        "Rewritten query: " + SPRING_DOCS[3]
        if "rewrite it to provide better results" in m[-1]["content"]
        else "ANSWER"
    )
    advisor = fr.RAGPipeline(
        fr.Retriever(vector_doc, "root", "cosine", topk=4, similarity_cut_off=0.50),
        query_transformers=[fr.RewriteQueryTransformer(llm)],
        llm=llm,
    )
    r = advisor.query("I'm new to Spring. How do I launch a Spring Boot app?")
    assert [h.text for h in r.source_nodes] == [SPRING_DOCS[3]]
    assert r.metadata["trace"]["transformed_query"] == SPRING_DOCS[3]
    assert r.metadata["llm_calls"] == 2


def test_spring_multi_query_expander_and_concatenation_joiner(server, llm, vector_doc):
    exp = fr.MultiQueryExpander(llm, number_of_queries=3)
    queries = exp.expand("Как запустить приложение Spring Boot?")
    assert len(queries) == 4 and queries[0].text == "Как запустить приложение Spring Boot?"
    ret = fr.Retriever(vector_doc, "root", "cosine", topk=2, similarity_cut_off=-1.0)
    lists = [ret(q.text) for q in queries]
    joined = fr.ConcatenationDocumentJoiner()(lists)
    seen, want = set(), []
    for h in (h for lst in lists for h in lst):  # first occurrence kept, score unchanged
        if h.id not in seen:
            seen.add(h.id)
            want.append((h.id, h.score))
    assert [(h.id, h.score) for h in joined] == want


# -- seeds/004: LazyLLM tutorial on CMRC ------------------------------------------------------
REWRITE_PROMPT = (
    "你是一个查询改写写助手，将用户的查询改写的更加清晰。"
    "注意，你不需要对问题进行回答，只需要对原始问题进行改写。"
    "下面是一个简单的例子：输入：RAG 输出：为我介绍下RAG。 用户输入为：{query}"
)
ROBOT_PROMPT = (
    "你是一个友好的 AI 问答助手，你需要根据给定的上下文和问题提供答案。"
    "根据以下资料回答问题：{context_str} \n问题：{query_str}"
)
SUBQ_PROMPT = (
    "你是一个查询重写助手，将用户查询分解为多个角度的具体问题。"
    "注意，你不需要对问题进行回答，只需要根据问题的字面意思进行子问题拆分，"
    "输出不要超过 3 条."
    "下面是一个简单的例子：输入：RAG是什么？输出：RAG的定义是什么？"
    "RAG是什么领域内的名词？RAG有什么特点？用户输入为：{query}"
)


@pytest.fixture(scope="module")
def cmrc(tmp_path_factory):
    squad = load_cmrc2018_dev()
    kb = tmp_path_factory.mktemp("cmrc_kb")
    build_squad_kb(squad, kb)
    doc = fr.Document(str(kb))
    questions, gold, contexts = squad_questions(squad)
    qs = [
        SimpleNamespace(question=q, context=contexts[g])
        for q, g in zip(questions[:60], gold[:60], strict=True)
    ]
    return doc, qs


def _lazyllm_model(messages):
    p = messages[-1]["content"]
    if p.startswith("你是一个查询改写写助手"):
        return "为我介绍下：" + p.rsplit("用户输入为：", 1)[1]
    if p.startswith("你是一个查询重写助手"):
        q = p.rsplit("用户输入为：", 1)[1]
        return f"1. {q}\n2. {q}的背景是什么？\n3. {q}有什么特点？"
    return "回答"


def _gold(doc, hits, context):
    """A hit overlaps the gold paragraph (chunks may start or end inside it)."""
    ctx = normalize_paragraph(context)
    for h in hits:
        text = normalize_paragraph(h.text)
        if ctx[:30] in text or ctx[-30:] in text or text[:30] in ctx:
            return True
    return False


def test_lazyllm_query_rewrite_flow(server, llm, cmrc):
    doc, qs = cmrc
    server.reply = _lazyllm_model
    retriever = fr.Retriever(doc, "CoarseChunk", "bm25_chinese", topk=3)
    ppl = fr.RAGPipeline(
        retriever,
        query_transformers=[fr.RewriteQueryTransformer(llm, prompt_template=REWRITE_PROMPT)],
        augmenter=fr.ContextualQueryAugmenter(
            prompt_template=ROBOT_PROMPT,
            document_formatter=lambda d: "".join(n.get_content() for n in d),
        ),
        answer_query="transformed",
        llm=llm,
    )
    questions = [q.question for q in qs]
    resps = ppl.batch(questions)
    assert len(server.requests) == 2 * len(questions)  # one rewrite, one answer each
    rewritten = ["为我介绍下：" + q for q in questions]
    direct = retriever.batch(rewritten)
    for r, hits in zip(resps, direct, strict=True):
        assert r.response == "回答"
        assert [h.id for h in r.source_nodes] == [h.id for h in hits]
    # the answer calls run concurrently: find question 0's prompt, not the first to arrive
    answer_prompts = [
        p
        for p in prompts(server)
        if p.startswith("你是一个友好的") and p.endswith("问题：" + rewritten[0])
    ]
    want = ROBOT_PROMPT.format(
        context_str="".join(h.get_content() for h in direct[0]), query_str=rewritten[0]
    )
    assert answer_prompts and all(p == want for p in answer_prompts)
    recall = sum(_gold(doc, r.source_nodes, q.context) for q, r in zip(qs, resps, strict=True))
    assert recall / len(qs) >= 0.9


def test_lazyllm_sub_questions_retrieve_each_and_answer_the_original(server, llm, cmrc):
    doc, qs = cmrc
    server.reply = _lazyllm_model
    retriever = fr.Retriever(doc, "CoarseChunk", "bm25_chinese", topk=3)
    ppl = fr.RAGPipeline(
        retriever,
        query_expander=fr.SubQuestionExpander(llm, max_questions=3, prompt_template=SUBQ_PROMPT),
        augmenter=fr.ContextualQueryAugmenter(prompt_template=ROBOT_PROMPT),
        llm=llm,
    )
    q = qs[0].question
    r = ppl.query(q)
    subs = [q, f"{q}的背景是什么？", f"{q}有什么特点？"]
    assert r.metadata["trace"]["expanded"] == subs
    union: dict[str, fr.NodeWithScore] = {}
    for lst in retriever.batch(subs):  # LazyLLM: retrieved_docs.update(...) per sub-question
        for h in lst:
            union.setdefault(h.id, h)
    assert [h.id for h in r.source_nodes] == list(union)
    answer = prompts(server)[-1]
    assert answer.endswith("问题：" + q)  # answered for the user's question


def test_lazyllm_multi_step_until_judged(server, llm, cmrc):
    doc, qs = cmrc
    verdicts = iter(["False", "True"])

    def model(messages):
        p = messages[-1]["content"]
        if p.startswith("你是一个判别助手"):
            return next(verdicts)
        if p.startswith("你是一个查询改写助手"):
            return "为我介绍下：" + re.search(r"用户输入为：(.*)\n", p).group(1)
        return "草稿"

    server.reply = model
    retriever = fr.Retriever(doc, "CoarseChunk", "bm25_chinese", topk=3)
    r = fr.MultiStepQuery(llm, retriever, max_steps=3).query(qs[1].question)
    assert [s["judged"] for s in r.metadata["steps"]] == [False, True]
    assert r.response == "草稿" and len(server.requests) == 6
    assert _gold(doc, r.source_nodes, qs[1].context)
