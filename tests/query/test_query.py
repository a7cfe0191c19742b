"""Query, transformers, expanders, the augmenter and the multi-step loop, through the real
OpenAILike HTTP path against the local test server."""

from __future__ import annotations

import dataclasses
import time

import pytest
from query_support import prompts
from wallclock import below

import fastrag as fr
from fastrag.errors import ConfigError
from fastrag.llms import LLMError
from fastrag.query.expanders import parse_lines
from fastrag.query.multistep import parse_judgement
from fastrag.query.prompts import QUERY_PROMPTS
from fastrag.query.transformers import clean_answer, is_in_language


# -- Query ----------------------------------------------------------------------------------------
class _Msg:
    def __init__(self, role, content):
        self.role, self.content = role, content


def test_query_accepts_pairs_dicts_and_message_objects():
    q = fr.Query(
        "And its second city?",
        history=[
            ("user", "Capital of Denmark?"),
            {"role": "assistant", "content": "Copenhagen."},
            _Msg("USER", "ok"),
        ],
        context={"filter": "type == 'city'"},
    )
    assert q.history == (
        ("user", "Capital of Denmark?"),
        ("assistant", "Copenhagen."),
        ("user", "ok"),
    )
    assert q.history_text() == "user: Capital of Denmark?\nassistant: Copenhagen.\nuser: ok"
    assert q.context["filter"] == "type == 'city'"
    q2 = q.mutate(text="x")
    assert (q2.text, q2.history, q.text) == ("x", q.history, "And its second city?")
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.text = "y"
    with pytest.raises(TypeError):
        q.context["filter"] = 1  # read-only view


@pytest.mark.parametrize(
    "history, match",
    [
        ([("robot", "hi")], r"history\[0\] role must be one of"),
        ([("user", 3)], r"history\[0\] content must be a str"),
        ("user: hi", "history must be a list"),
        ([42], r"history\[0\] must be a \(role, content\) pair"),
    ],
)
def test_query_bad_history(history, match):
    with pytest.raises(ConfigError, match=match):
        fr.Query("q", history=history)


def test_query_bad_text_and_mutate():
    with pytest.raises(ConfigError, match="Query text must be a str"):
        fr.Query(3)
    with pytest.raises(ConfigError, match="unknown field"):
        fr.Query("q").mutate(txt="x")


# -- transformers ------------------------------------------------------------------------------
def test_rewrite_sends_spring_ai_prompt_and_cleans_answer(server, llm):
    t = fr.RewriteQueryTransformer(llm, target_search_system="web search engine")
    out = t.transform("I'm studying machine learning. What is an LLM?")
    assert out.text == "I'm studying machine learning. What is an LLM explained"
    assert prompts(server) == [
        QUERY_PROMPTS["en"]["rewrite"].format(
            query="I'm studying machine learning. What is an LLM?", target="web search engine"
        )
    ]
    assert "when querying a web search engine." in prompts(server)[0]


def test_rewrite_uses_chinese_prompt_for_chinese_query(server, llm):
    fr.RewriteQueryTransformer(llm).transform("MIT OpenCourseWare是啥？")
    (p,) = prompts(server)
    assert p.startswith("给定一个用户查询") and "MIT OpenCourseWare是啥？" in p


def test_custom_template_needs_its_variables(llm):
    # Spring AI's delimiters and LazyLLM's instruction without a placeholder both work
    t = fr.RewriteQueryTransformer(llm, prompt_template="Rewrite: <query>")
    assert t.prompt_template.template == "Rewrite: {query}"
    t = fr.RewriteQueryTransformer(llm, prompt_template="改写用户的查询。用户输入为：")
    assert t.prompt_template.format(query="RAG") == "改写用户的查询。用户输入为：\nRAG"
    with pytest.raises(
        ConfigError,
        match=r"prompt_template cannot be filled: it has no place "
        r"for \{history\} \(it has \['\{query\}'\]\)",
    ):
        fr.CompressionQueryTransformer(llm, prompt_template="{query}")
    with pytest.raises(ConfigError, match=r"no place for \{answer\} \(it has \['\{query\}'\]\)"):
        fr.MultiStepQuery(llm, lambda q: [], judge_template="Judge {query}")
    t = fr.RewriteQueryTransformer(llm, prompt_template="Rewrite for {target}: {query}\n")
    assert t.prompt_template.template_vars == ["target", "query"]


def test_compression_without_history_makes_no_call(server, llm):
    t = fr.CompressionQueryTransformer(llm)
    q = fr.Query("What is the capital of Denmark?")
    assert t.transform(q) is q
    assert server.requests == []
    follow = fr.Query(
        "And its second largest city?",
        history=[
            ("user", "What is the capital of Denmark?"),
            ("assistant", "Copenhagen is the capital of Denmark."),
        ],
    )
    out = t.transform(follow)
    assert out.text == "What is the second largest city of Denmark?" and out.history == ()
    (p,) = prompts(server)
    assert (
        "Conversation history:\nuser: What is the capital of Denmark?\nassistant: "
        "Copenhagen is the capital of Denmark.\n\nFollow-up query:\nAnd its second "
        "largest city?"
    ) in p


@pytest.mark.parametrize(
    "text, target, calls",
    [
        ("What is the capital of Denmark?", "english", 0),
        ("Hvad er Danmarks hovedstad?", "english", 1),  # Danish: Latin script, not English
        ("丹麦的首都是哪里？", "chinese", 0),
        ("丹麦的首都是哪里？", "english", 1),
        ("デンマークの首都はどこですか", "chinese", 1),  # Japanese (kana) is not Chinese
        ("Какая столица Дании?", "russian", 0),
        ("Яка столиця Данії?", "russian", 1),  # Ukrainian letters
        ("LLM", "english", 1),  # unsure: ask the model
    ],
)
def test_translation_skips_queries_already_in_the_target_language(server, llm, text, target, calls):
    out = fr.TranslationQueryTransformer(llm, target_language=target).transform(text)
    assert len(server.requests) == calls
    assert out.text == (text if calls == 0 else "What is the capital of Denmark?")


def test_is_in_language_unknown_language_is_unsure():
    assert not is_in_language("Bonjour le monde", "french")
    assert not is_in_language("", "english")


def test_transformer_batch_is_concurrent_and_bounded(server, llm):
    server.script(["slow:0.2"] * 12)
    t = fr.RewriteQueryTransformer(llm, max_concurrency=4)
    t0 = time.perf_counter()
    out = t.batch([f"question {i}?" for i in range(12)])
    wall = time.perf_counter() - t0
    assert [q.text for q in out] == [f"question {i} explained" for i in range(12)]
    assert server.max_in_flight == 4
    below(wall, 12 * 0.2 / 2, "12 calls of 0.2 s, 4 at a time")  # 3 rounds, not 12


def test_transformer_batch_failure_names_query_and_stage(server):
    llm = fr.OpenAILike("m", server.url, max_retries=0, timeout=5.0)
    t = fr.RewriteQueryTransformer(llm, max_concurrency=1)
    server.script(["ok", "400", "ok"])
    with pytest.raises(LLMError) as ei:
        t.batch(["a?", "b?", "c?"])
    assert "RewriteQueryTransformer (stage 'transform'), query index 1: 'b?'" in "\n".join(
        ei.value.__notes__
    )
    server.reset()
    server.reply = lambda m: "Rewritten query: ok"
    server.script(["ok", "400", "ok"])
    out = t.batch(["a?", "b?", "c?"], return_exceptions=True)
    assert out[0].text == "ok" and isinstance(out[1], LLMError) and out[2].text == "ok"


def test_empty_answer_keeps_the_query(server, llm):
    server.reply = lambda m: "  \n"
    assert fr.RewriteQueryTransformer(llm).transform("keep me").text == "keep me"


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("```\nWhat is BM25?\n```", "What is BM25?"),
        ('Rewritten query: "What is BM25?"', "What is BM25?"),
        ("改写后的查询：什么是RAG？", "什么是RAG？"),
        ("What is BM25?", "What is BM25?"),
    ],
)
def test_clean_answer(raw, clean):
    assert clean_answer(raw) == clean


# -- expanders ---------------------------------------------------------------------------------
def test_multi_query_expander_parses_leniently_dedups_and_caps(server, llm):
    server.reply = lambda m: (
        "Here are the variants:\n```\n1. How to run Spring Boot?\n\n"
        "2) how to run spring boot\n- Starting a Spring Boot app\n"
        "* **Launch Spring Boot**\n3. Fourth one\n```"
    )
    exp = fr.MultiQueryExpander(llm, number_of_queries=3)
    out = exp.expand("How to run a Spring Boot app?")
    assert [q.text for q in out] == [
        "How to run a Spring Boot app?",
        "How to run Spring Boot?",
        "Starting a Spring Boot app",
        "Launch Spring Boot",
    ]
    assert "generate 3 different versions" in prompts(server)[0]
    out = fr.MultiQueryExpander(llm, number_of_queries=2, include_original=False).expand("q")
    assert [q.text for q in out] == ["How to run Spring Boot?", "Starting a Spring Boot app"]


def test_expander_drops_the_original_repeated_and_falls_back_to_it(server, llm):
    server.reply = lambda m: "1. Same question?\n2. same question"
    out = fr.MultiQueryExpander(llm).expand("Same question")
    assert [q.text for q in out] == ["Same question"]  # the original is not repeated
    out = fr.MultiQueryExpander(llm, include_original=False).expand("Same question")
    assert [q.text for q in out] == ["Same question?"]  # de-duplicated among themselves
    server.reply = lambda m: "```\n```"
    out = fr.MultiQueryExpander(llm, include_original=False).expand("Same question")
    assert [q.text for q in out] == ["Same question"]  # nothing usable: the query itself


def test_expanded_queries_keep_history_and_context(server, llm):
    q = fr.Query("q", history=[("user", "h")], context={"filter": "a == 1"})
    out = fr.MultiQueryExpander(llm, number_of_queries=1).expand(q)
    assert all(v.context["filter"] == "a == 1" and v.history == q.history for v in out)


def test_sub_question_expander_lazyllm_example(server, llm):
    server.reply = lambda m: (
        "1. 健康饮食的基本原则是什么？\n2. 如何合理安排一日三餐？\n"
        "3. 健康饮食中应该包含哪些食物类别及其比例？"
    )
    out = fr.SubQuestionExpander(llm, max_questions=2).expand("有哪些健康饮食的建议")
    assert [q.text for q in out] == ["健康饮食的基本原则是什么？", "如何合理安排一日三餐？"]
    (p,) = prompts(server)
    assert "输出不要超过2条" in p and "用户输入为：有哪些健康饮食的建议" in p


@pytest.mark.parametrize(
    "text, want",
    [
        ("1. a\n2. b\n3. c", ["a", "b"]),
        ("一、甲\n二、乙", ["甲", "乙"]),
        ("Q1: a\nQ2: b", ["a", "b"]),
        ("a.\nA\nb", ["a.", "b"]),
        ("", []),
    ],
)
def test_parse_lines(text, want):
    assert parse_lines(text, 2) == want


def test_expander_arguments_are_checked(llm):
    with pytest.raises(ConfigError, match="number_of_queries must be an int >= 1"):
        fr.MultiQueryExpander(llm, number_of_queries=0)
    with pytest.raises(ConfigError, match="include_original must be True or False"):
        fr.MultiQueryExpander(llm, include_original="yes")
    with pytest.raises(ConfigError, match="max_questions"):
        fr.SubQuestionExpander(llm, max_questions=-1)


def test_components_need_an_llm_or_settings():
    fr.Settings.reset()
    with pytest.raises(ConfigError, match=r"RewriteQueryTransformer needs an LLM.*Settings.llm"):
        fr.RewriteQueryTransformer()
    fr.Settings.llm = fr.MockLLM("x")
    try:
        assert fr.RewriteQueryTransformer().transform("q").text == "x"
    finally:
        fr.Settings.reset()


# -- augmenter ---------------------------------------------------------------------------------
def test_augmenter_fills_context_and_query(doc):
    hits = fr.Retriever(doc, "root", "bm25", topk=2)("capital of Denmark")
    aug = fr.ContextualQueryAugmenter()
    out = aug.augment("capital of Denmark", hits)
    context = "\n".join(h.text for h in hits)
    assert out.text == QUERY_PROMPTS["en"]["augment"].format(
        query="capital of Denmark", context=context
    )
    assert "---------------------\n" + context + "\n---------------------" in out.text


def test_augmenter_empty_context():
    q = fr.Query("Who is Anacletus?")
    assert (
        fr.ContextualQueryAugmenter()
        .augment(q, [])
        .text.startswith("The user query is outside your knowledge base.")
    )
    assert fr.ContextualQueryAugmenter(allow_empty_context=True).augment(q, []) is q
    zh = fr.ContextualQueryAugmenter().augment("阿纳克莱特是谁？", [])
    assert zh.text.startswith("用户的问题超出了你的知识库范围")


def test_augmenter_custom_templates_and_formatter():
    aug = fr.ContextualQueryAugmenter(
        prompt_template="Q={query}\nC={context}",
        empty_context_prompt_template="Nothing for {query}",
        document_formatter=lambda docs: " | ".join(d.text.upper() for d in docs),
    )
    assert aug.augment("q", ["a", "b"]).text == "Q=q\nC=A | B"
    assert aug.augment("q", []).text == "Nothing for q"
    spring = fr.ContextualQueryAugmenter(prompt_template="<query> <question_answer_context>")
    assert spring.augment("q", ["a"]).text == "q a"
    lazy = fr.ContextualQueryAugmenter(prompt_template="Answer from the documents.")
    assert lazy.augment("q", ["a"]).text == "Answer from the documents.\na\nq"  # LazyLLM's way
    with pytest.raises(ConfigError, match="document_formatter must be a function"):
        fr.ContextualQueryAugmenter(document_formatter="x")
    with pytest.raises(ConfigError, match="not a single str"):
        aug.augment("q", "abc")


# -- multi-step ---------------------------------------------------------------------------------
def test_parse_judgement():
    assert parse_judgement("True") and parse_judgement(" **yes**, it does")
    assert parse_judgement("是的") and not parse_judgement("不能")
    assert not parse_judgement("False")  # LazyLLM's bool("False") is True; ours is not
    assert not parse_judgement("maybe")


def test_multi_step_loops_until_the_judge_agrees(server, llm, doc):
    verdicts = {"q0": iter(["False", "True"]), "q1": iter(["True"]), "q2": iter(["False"] * 9)}

    def reply(messages):
        p = messages[-1]["content"]
        if p.startswith("You judge"):
            q = p.split("Question: ")[1].split("\n")[0]
            return next(verdicts[q])
        if p.startswith("You are a query rewriting"):
            q = p.split("Query: ")[1].split("\n")[0]
            return f"capital of Denmark {q}"
        return "draft"

    server.reply = reply
    ret = fr.Retriever(doc, "root", "bm25", topk=2)
    ms = fr.MultiStepQuery(llm, ret, max_steps=3)
    out = ms.batch(["q0", "q1", "q2"])
    assert [len(r.metadata["steps"]) for r in out] == [2, 1, 3]
    assert [r.metadata["judged"] for r in out] == [True, True, False]
    # 3 calls (rewrite, draft, judge) per step per query; the retriever once per step
    assert [r.metadata["llm_calls"] for r in out] == [6, 3, 9]
    assert len(server.requests) == 18
    assert ms.retriever.calls == 3
    step2 = out[0].metadata["steps"][1]
    assert step2["query"] == "capital of Denmark q0" and step2["judged"] is True
    assert out[0].response == "draft"
    assert [h.id for h in out[0].source_nodes] == step2["hits"]
    second_rewrite = [
        p for p in prompts(server) if p.startswith("You are a query rewriting") and "q0" in p
    ][1]
    assert 'A previous search used the query "capital of Denmark q0"' in second_rewrite


def test_multi_step_separate_judge_and_checks(server, llm, doc):
    judge = fr.MockLLM("True")
    ms = fr.MultiStepQuery(llm, fr.Retriever(doc, "root", "bm25"), judge_llm=judge, rewrite=False)
    r = ms.query("capital of Denmark")
    assert len(judge.calls) == 1 and r.metadata["judged"] is True
    assert len(server.requests) == 1  # the draft only: no rewrite before the first retrieval
    with pytest.raises(ConfigError, match="needs retriever="):
        fr.MultiStepQuery(llm)
    with pytest.raises(ConfigError, match="max_steps must be an int >= 1"):
        fr.MultiStepQuery(llm, fr.Retriever(doc, "root", "bm25"), max_steps=0)
