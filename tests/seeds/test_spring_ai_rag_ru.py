"""seeds/001: Spring AI "Генерация с использованием извлечения" (Russian translation), adapted to
fastrag's names (QuestionAnswerAdvisor / RetrievalAugmentationAdvisor -> ``fr.RAGPipeline``,
VectorStoreDocumentRetriever -> ``fr.Retriever`` over a Document embedded by the test server).
tests/query/test_seed_examples.py already covers naive RAG with a 0.50 threshold,
allowEmptyContext, the per-query filter on ``retrieve``, advanced RAG with a rewrite and
MultiQueryExpander + ConcatenationDocumentJoiner over lists; these tests cover the rest."""

from __future__ import annotations

import pytest
from seed_support import prompts

import fastrag as fr
from fastrag.query.prompts import query_prompt

DOCS = [
    "Spring Boot приложения запускаются методом main класса SpringApplication.",
    "Анаклет и Бирба живут в Шепчущих лесах.",
    "Столица Дании — Копенгаген.",
    "Spring AI поддерживает RAG через API Advisor.",
    "Анаклет — главный герой сказки.",
]
META = [
    {"type": "Spring", "tenant": "acme"},
    {"type": "сказка", "genre": "сказка", "location": "Шепчущие леса", "tenant": "acme"},
    {"type": "geo", "tenant": "globex"},
    {"type": "Spring", "tenant": "globex"},
    {"type": "сказка", "genre": "сказка", "location": "Замок", "tenant": "acme"},
]
AUGMENT = query_prompt("augment", "en").template


@pytest.fixture
def vector_store(server):
    server.dim = 256  # hash vectors: different texts have cosine near 0, the same text 1.0
    return fr.Document.from_texts(
        DOCS, metadatas=META, embed=fr.OpenAIEmbedding(server.url, "test-embed")
    )


def _answer(server, text="ОТВЕТ"):
    server.reply = text


# -- QuestionAnswerAdvisor --
def test_question_answer_advisor_adds_retrieved_documents_to_the_user_text(
    server, llm, vector_store
):
    _answer(server)
    qa_advisor = fr.RAGPipeline(fr.Retriever(vector_store, "root", "cosine", topk=4), llm=llm)
    user_text = DOCS[2]
    response = qa_advisor.query(user_text)
    assert response.response == "ОТВЕТ"
    hits = response.source_nodes
    assert len(hits) == 4 and hits[0].text == DOCS[2]
    chat = prompts(server)
    assert chat == [
        AUGMENT.replace("{context}", "\n".join(h.text for h in hits)).replace("{query}", user_text)
    ]


def test_question_answer_advisor_threshold_and_top_k(server, llm, vector_store):
    # SearchRequest.builder().similarityThreshold(0.8d).topK(6)
    ret = fr.Retriever(vector_store, "root", "cosine", similarity_cut_off=0.8, topk=6)
    hits = fr.RAGPipeline(ret, llm=llm).retrieve(DOCS[0])
    assert [h.text for h in hits] == [DOCS[0]] and hits[0].score >= 0.8
    loose = fr.Retriever(vector_store, "root", "cosine", similarity_cut_off=-1.0, topk=6)
    assert len(loose(DOCS[0])) == 5  # all documents, topK 6 > 5 documents


def test_dynamic_filter_expression_at_call_time(server, llm, vector_store):
    # .advisors(a -> a.param(QuestionAnswerAdvisor.FILTER_EXPRESSION, "type == 'Spring'"))
    _answer(server)
    advisor = fr.RAGPipeline(fr.Retriever(vector_store, "root", "cosine", topk=4), llm=llm)
    content = advisor.query(
        fr.Query(
            "Пожалуйста, ответьте на мой вопрос XYZ",
            context={fr.RAGPipeline.FILTER_EXPRESSION: "type == 'Spring'"},
        )
    )
    assert sorted(h.text for h in content.source_nodes) == sorted([DOCS[0], DOCS[3]])
    p = prompts(server)[0]
    assert DOCS[0] in p and DOCS[3] in p and DOCS[1] not in p and DOCS[2] not in p


def test_custom_prompt_template_with_query_and_question_answer_context(server, llm, vector_store):
    _answer(server, "В Шепчущих лесах.")
    template = (
        "<query>\n\n"
        "Информация о контексте ниже.\n\n"
        "---------------------\n"
        "<question_answer_context>\n"
        "---------------------\n\n"
        "Учитывая информацию о контексте и отсутствие предварительных знаний, ответьте на "
        "запрос.\n\n"
        "Следуйте этим правилам:\n\n"
        "1. Если ответа нет в контексте, просто скажите, что не знаете.\n"
        '2. Избегайте утверждений, таких как "Основываясь на контексте..." или '
        '"Предоставленная информация...".\n'
    )
    question = "Где происходит приключение Анаклетуса и Бирбы?"
    qa_advisor = fr.RAGPipeline(
        fr.Retriever(
            vector_store,
            "root",
            "cosine",
            topk=2,
            similarity_cut_off=-1.0,
            filter="location == 'Шепчущие леса'",
        ),
        augmenter=fr.ContextualQueryAugmenter(prompt_template=template),
        llm=llm,
    )
    response = qa_advisor.query(question)
    assert response.response == "В Шепчущих лесах."
    assert prompts(server) == [
        template.replace("<query>", question).replace("<question_answer_context>", DOCS[1])
    ]


# -- RetrievalAugmentationAdvisor: naive RAG, filter per request, post-processing ---------------
def test_naive_rag_query_filter_wins_over_the_retriever_filter(server, llm, vector_store):
    # both a query filter and a retriever filter: the query's takes precedence
    ret = fr.Retriever(
        vector_store, "root", "cosine", topk=5, similarity_cut_off=-1.0, filter="type == 'Spring'"
    )
    # .context(Map.of(VectorStoreDocumentRetriever.FILTER_EXPRESSION, "location == '...'"))
    query = fr.Query(
        "Кто такой Анаклет?",
        context={fr.Retriever.FILTER_EXPRESSION: "location == 'Шепчущие леса'"},
    )
    assert [h.text for h in ret.retrieve(query)] == [DOCS[1]]
    assert {h.text for h in ret.retrieve("Кто такой Анаклет?")} == {DOCS[0], DOCS[3]}


def test_document_post_processor_runs_before_the_model(server, llm, vector_store):
    # DocumentPostProcessor: rerank / drop irrelevant or redundant / compress documents
    _answer(server)
    seen = []

    def compress(hits, query):
        seen.append(query)
        return [
            fr.NodeWithScore(fr.Node(text=h.text[:12]), h.score) for h in hits if "Spring" in h.text
        ]

    ret = fr.Retriever(vector_store, "root", "cosine", topk=5, similarity_cut_off=-1.0)
    advisor = fr.RAGPipeline(ret, postprocessors=[compress], llm=llm)
    r = advisor.query("Как запустить Spring?")
    want = [h.text[:12] for h in ret("Как запустить Spring?") if "Spring" in h.text]
    assert [h.text for h in r.source_nodes] == want and len(want) == 2
    assert len(seen) == 1
    assert all(d[:12] in prompts(server)[0] for d in (DOCS[0], DOCS[3]))
    assert DOCS[0] not in prompts(server)[0]  # only the compressed text reached the model


# -- Pre-retrieval: query transformers -----------------------------------------------------------
def test_compression_query_transformer(server, llm):
    server.reply = "Какой второй по величине город Дании?"
    query = fr.Query(
        "А какой у него второй по величине город?",
        history=[("user", "Какова столица Дании?"), ("assistant", "Копенгаген — столица Дании.")],
    )
    query_transformer = fr.CompressionQueryTransformer(llm)
    transformed_query = query_transformer.transform(query)
    assert transformed_query.text == "Какой второй по величине город Дании?"
    assert transformed_query.history == ()
    p = prompts(server)
    assert len(p) == 1
    assert "user: Какова столица Дании?\nassistant: Копенгаген — столица Дании." in p[0]
    assert "А какой у него второй по величине город?" in p[0]
    # low temperature (the seed's advice) is what is sent
    assert server.requests[0].body["temperature"] == 0.0


def test_compression_prompt_template_is_customizable(server, llm):
    server.reply = "standalone"
    t = fr.CompressionQueryTransformer(llm, prompt_template="H:{history}|Q:{query}")
    t.transform(fr.Query("и?", history=[("user", "a"), ("assistant", "b")]))
    assert prompts(server) == ["H:user: a\nassistant: b|Q:и?"]
    with pytest.raises(fr.ConfigError):
        fr.CompressionQueryTransformer(llm, prompt_template="only {query}")


def test_rewrite_query_transformer(server, llm):
    server.reply = "Что такое LLM (большая языковая модель)?"
    query = fr.Query("Я изучаю машинное обучение. Что такое LLM?")
    query_transformer = fr.RewriteQueryTransformer(llm)
    transformed_query = query_transformer.transform(query)
    assert transformed_query.text == "Что такое LLM (большая языковая модель)?"
    assert prompts(server) == [
        query_prompt("rewrite", "en").format(
            query="Я изучаю машинное обучение. Что такое LLM?", target="vector store"
        )
    ]
    server.reset()
    web = fr.RewriteQueryTransformer(llm, target_search_system="web search engine")
    web.transform(query)
    assert "web search engine" in prompts(server)[0]


def test_translation_query_transformer(server, llm):
    server.reply = "What is the capital of Denmark?"
    query = fr.Query("Hvad er Danmarks hovedstad?")
    query_transformer = fr.TranslationQueryTransformer(llm, target_language="english")
    transformed_query = query_transformer.transform(query)
    assert transformed_query.text == "What is the capital of Denmark?"
    assert prompts(server) == [
        query_prompt("translation", "en").format(
            query="Hvad er Danmarks hovedstad?", target_language="english"
        )
    ]
    # already in the target language: returned unchanged
    server.reset()
    same = query_transformer.transform(fr.Query("What is the capital of Denmark?"))
    assert same.text == "What is the capital of Denmark?"
    assert prompts(server) == []
    # unknown language: the model returns it unchanged, and so does the transformer
    server.reply = "Xyzzy plugh?"
    assert query_transformer.transform("Xyzzy plugh?").text == "Xyzzy plugh?"


# -- Query expansion --
def test_multi_query_expander_include_original_false(server, llm):
    server.reply = "1. Запуск Spring Boot\n2. Команда mvn spring-boot:run\n3. java -jar app.jar"
    query_expander = fr.MultiQueryExpander(llm, include_original=False)
    queries = query_expander.expand(fr.Query("Как запустить приложение Spring Boot?"))
    assert [q.text for q in queries] == [
        "Запуск Spring Boot",
        "Команда mvn spring-boot:run",
        "java -jar app.jar",
    ]
    assert "3" in prompts(server)[0]  # numberOfQueries defaults to 3
    server.reset()
    with_original = fr.MultiQueryExpander(llm, number_of_queries=3)
    qs = with_original.expand(fr.Query("Как запустить приложение Spring Boot?"))
    assert qs[0].text == "Как запустить приложение Spring Boot?" and len(qs) == 4
    server.reset()
    custom = fr.MultiQueryExpander(
        llm, number_of_queries=2, prompt_template="Дай {number} варианта: {query}"
    )
    assert len(custom.expand("Spring?")) == 3
    assert prompts(server) == ["Дай 2 варианта: Spring?"]


# -- Retrieval: VectorStoreDocumentRetriever --
def test_vector_store_document_retriever_threshold_topk_filter(server, vector_store):
    retriever = fr.Retriever(
        vector_store,
        "root",
        "cosine",
        similarity_cut_off=-1.0,
        topk=5,
        filter=fr.FilterExpressionBuilder().eq("genre", "сказка").build(),
    )
    documents = retriever.retrieve(fr.Query("Кто главный герой истории?"))
    assert {d.text for d in documents} == {DOCS[1], DOCS[4]}
    strict = fr.Retriever(
        vector_store,
        "root",
        "cosine",
        similarity_cut_off=0.73,
        topk=5,
        filter=fr.FilterExpressionBuilder().eq("genre", "сказка").build(),
    )
    assert [d.text for d in strict.retrieve(fr.Query(DOCS[4]))] == [DOCS[4]]
    assert strict.retrieve(fr.Query(DOCS[3])) == []  # the only exact match is not a tale


def test_vector_store_document_retriever_filter_supplier(server, vector_store):
    # .filterExpression(() -> new FilterExpressionBuilder().eq("tenant", TenantContextHolder
    #     .getTenantIdentifier()).build()): a Supplier, evaluated at every retrieve
    tenant = {"id": "acme"}
    retriever = fr.Retriever(
        vector_store,
        "root",
        "cosine",
        similarity_cut_off=-1.0,
        topk=5,
        filter=lambda: fr.FilterExpressionBuilder().eq("tenant", tenant["id"]).build(),
    )
    documents = retriever.retrieve(fr.Query("Какие KPI на следующий семестр?"))
    assert {d.text for d in documents} == {DOCS[0], DOCS[1], DOCS[4]}
    tenant["id"] = "globex"
    documents = retriever.retrieve(fr.Query("Какие KPI на следующий семестр?"))
    assert {d.text for d in documents} == {DOCS[2], DOCS[3]}


# -- Document joining --
def test_concatenation_document_joiner_on_documents_for_query_map(server, vector_store):
    # Map<Query, List<List<Document>>> documentsForQuery; documentJoiner.join(documentsForQuery)
    ret = fr.Retriever(vector_store, "root", "cosine", topk=2, similarity_cut_off=-1.0)
    other = fr.Retriever(vector_store, "root", "bm25", topk=2)
    q1, q2 = fr.Query(DOCS[0]), fr.Query(DOCS[1])
    documents_for_query = {q1: [ret(q1), other(q1)], q2: [ret(q2), other(q2)]}
    document_joiner = fr.ConcatenationDocumentJoiner()
    documents = document_joiner.join(documents_for_query)
    flat = [h for lists in documents_for_query.values() for lst in lists for h in lst]
    want, seen = [], set()
    for h in flat:
        if h.id not in seen:
            seen.add(h.id)
            want.append((h.id, h.score))
    assert [(d.id, d.score) for d in documents] == want


# -- Generation: ContextualQueryAugmenter --
def test_contextual_query_augmenter_defaults_and_empty_context(server):
    query_augmenter = fr.ContextualQueryAugmenter()
    docs = [fr.Node(text="Копенгаген — столица Дании."), fr.Node(text="Орхус — второй город.")]
    out = query_augmenter.augment(fr.Query("What is the capital of Denmark?"), docs)
    assert out.text == AUGMENT.format(
        context="Копенгаген — столица Дании.\nОрхус — второй город.",
        query="What is the capital of Denmark?",
    )
    empty = query_augmenter.augment(fr.Query("What is the capital of Denmark?"), [])
    assert empty.text == query_prompt("augment_empty", "en").template
    allow = fr.ContextualQueryAugmenter(allow_empty_context=True)
    assert allow.augment(fr.Query("What is the capital of Denmark?"), []).text == (
        "What is the capital of Denmark?"
    )
    custom = fr.ContextualQueryAugmenter(
        prompt_template="Q=<query> C=<context>", empty_context_prompt_template="Нет данных: {query}"
    )
    assert custom.augment(fr.Query("q"), ["d1", "d2"]).text == "Q=q C=d1\nd2"
    assert custom.augment(fr.Query("q"), []).text == "Нет данных: q"
