"""Default prompts of the query layer, in English (Spring AI's wording, placeholders written
``{query}`` / ``{context}`` instead of ``<query>`` / ``<context>``) and Chinese.

Each component takes ``prompt_template=`` (a :class:`~fastrag.PromptTemplate` or str) to
replace its default; :func:`check_template` rejects a replacement that lacks a required
variable, naming it.
"""

from __future__ import annotations

from typing import Any

from fastrag.errors import ConfigError
from fastrag.synth.prompts import PromptTemplate, adapt_template, as_template

__all__ = ["QUERY_PROMPTS", "check_template", "query_prompt"]

_EN = {
    "rewrite": (
        "Given a user query, rewrite it to provide better results when querying a "
        "{target}.\n"
        "Remove any irrelevant information, and ensure the query is concise and specific.\n\n"
        "Original query:\n{query}\n\n"
        "Rewritten query:\n"
    ),
    "compression": (
        "Given the following conversation history and a follow-up query, your task is to "
        "synthesize a concise, standalone query that incorporates the context from the "
        "history.\nEnsure the standalone query is clear, specific, and maintains the user's "
        "intent.\n\n"
        "Conversation history:\n{history}\n\n"
        "Follow-up query:\n{query}\n\n"
        "Standalone query:\n"
    ),
    "translation": (
        "Given a user query, translate it to {target_language}.\n"
        "If the query is already in {target_language}, return it unchanged.\n"
        "If you don't know the language of the query, return it unchanged.\n"
        "Do not add explanations nor any other text.\n\n"
        "Original query: {query}\n\n"
        "Translated query:\n"
    ),
    "multi_query": (
        "You are an expert at information retrieval and search optimization.\n"
        "Your task is to generate {number} different versions of the given query.\n\n"
        "Each variant must cover different perspectives or aspects of the topic,\n"
        "while maintaining the core intent of the original query. The goal is to\n"
        "expand the search space and improve the chances of finding relevant information.\n\n"
        "Do not explain your choices or add any other text.\n"
        "Provide the query variants separated by newlines.\n\n"
        "Original query: {query}\n\n"
        "Query variants:\n"
    ),
    "sub_question": (
        "You are a query decomposition assistant. If the user's query is abstract or "
        "compound, break it down into at most {number} specific sub-questions that together "
        "answer it, each answerable on its own.\n"
        "Do not answer them. Output one sub-question per line and nothing else.\n\n"
        "Query: {query}\n\n"
        "Sub-questions:\n"
    ),
    "step_rewrite": (
        "You are a query rewriting assistant. Rewrite the user's query to be clearer and "
        "more specific for searching a knowledge base. Do not answer it.\n"
        "{previous}"
        "Query: {query}\n\n"
        "Rewritten query:\n"
    ),
    "step_previous": (
        'A previous search used the query "{last_query}" and gave this draft answer, '
        "which was judged not to answer the question:\n{draft}\n"
        "Write a different query that finds the missing information.\n\n"
    ),
    "step_answer": (
        "Context information is below.\n---------------------\n{context}\n"
        "---------------------\n"
        "Given the context information and not prior knowledge, answer the query.\n"
        "Query: {query}\nAnswer: "
    ),
    "judge": (
        "You judge whether an answer resolves a question. Output True if it does, False if "
        "it does not. Output only True or False.\n\n"
        "Question: {query}\n\nAnswer: {answer}\n\nJudgement:"
    ),
    "augment": (
        "Context information is below.\n\n"
        "---------------------\n{context}\n---------------------\n\n"
        "Given the context information and no prior knowledge, answer the query.\n\n"
        "Follow these rules:\n\n"
        "1. If the answer is not in the context, just say that you don't know.\n"
        '2. Avoid statements like "Based on the context..." or "The provided '
        'information...".\n\n'
        "Query: {query}\n\n"
        "Answer:\n"
    ),
    "augment_empty": (
        "The user query is outside your knowledge base.\n"
        "Politely inform the user that you can't answer it.\n"
    ),
}

_ZH = {
    "rewrite": (
        "给定一个用户查询，请改写它，使其在{target}中检索时效果更好。\n"
        "去掉无关信息，让查询简洁、具体。注意，你不需要回答问题，只需要改写。\n\n"
        "原始查询：\n{query}\n\n"
        "改写后的查询：\n"
    ),
    "compression": (
        "下面是一段对话历史和一个后续问题。请把它们合成为一个简洁、独立的查询，"
        "包含历史中的必要上下文，清晰具体，并保持用户的原意。\n\n"
        "对话历史：\n{history}\n\n"
        "后续问题：\n{query}\n\n"
        "独立查询：\n"
    ),
    "translation": (
        "请把用户查询翻译成{target_language}。\n"
        "如果查询已经是{target_language}，原样返回。\n"
        "如果不知道查询的语言，原样返回。\n"
        "不要添加解释或任何其他文字。\n\n"
        "原始查询：{query}\n\n"
        "翻译后的查询：\n"
    ),
    "multi_query": (
        "你是信息检索和搜索优化专家。\n"
        "你的任务是为给定的查询生成{number}个不同的版本。\n\n"
        "每个版本应覆盖主题的不同角度，同时保持原始查询的核心意图，"
        "以扩大检索范围、提高找到相关信息的机会。\n\n"
        "不要解释，也不要输出其他文字。每行输出一个查询版本。\n\n"
        "原始查询：{query}\n\n"
        "查询版本：\n"
    ),
    "sub_question": (
        "你是一个查询重写助手，如果用户查询较为抽象或笼统，将其分解为多个角度的具体问题。\n"
        "注意，你不需要进行回答，只需要根据问题的字面进行子问题拆分，输出不要超过{number}条，"
        "每行一条，不要输出其他文字。\n\n"
        "用户输入为：{query}\n\n"
        "子问题：\n"
    ),
    "step_rewrite": (
        "你是一个查询改写助手，将用户的查询改写得更加清晰、具体，便于在知识库中检索。"
        "注意，你不需要对问题进行回答，只需要对原问题进行改写。\n"
        "{previous}"
        "用户输入为：{query}\n\n"
        "改写后的查询：\n"
    ),
    "step_previous": (
        "上一次检索使用的查询是“{last_query}”，得到的回答草稿如下，经判断不能解决问题：\n"
        "{draft}\n请换一种查询，找到缺失的信息。\n\n"
    ),
    "step_answer": (
        "你是一个友好的 AI 问答助手，你需要根据给定的上下文和问题提供答案。\n"
        "根据以下资料回答问题：\n---------------------\n{context}\n---------------------\n"
        "问题：{query}\n回答："
    ),
    "judge": (
        "你是一个判别助手，用于判断某个回答能否解决对应的问题。如果回答可以解决问题，"
        "则输出True，否则输出False。注意，你的输出只能是True或者False，不要带有任何其他输出。\n\n"
        "问题：{query}\n\n当前回答：{answer}\n\n判断："
    ),
    "augment": (
        "下面是上下文信息。\n\n"
        "---------------------\n{context}\n---------------------\n\n"
        "请只根据上下文信息、不依赖先验知识回答问题。\n\n"
        "遵守以下规则：\n\n"
        "1. 如果上下文中没有答案，直接说你不知道。\n"
        "2. 不要使用“根据上下文……”或“所提供的信息……”之类的说法。\n\n"
        "问题：{query}\n\n"
        "回答：\n"
    ),
    "augment_empty": ("用户的问题超出了你的知识库范围。\n请礼貌地告诉用户你无法回答这个问题。\n"),
}

# Variables each prompt must contain (a replacement missing one is a ConfigError).
REQUIRED: dict[str, tuple[str, ...]] = {
    "rewrite": ("query",),
    "compression": ("history", "query"),
    "translation": ("query", "target_language"),
    "multi_query": ("query",),
    "sub_question": ("query",),
    "step_rewrite": ("query",),
    "step_previous": (),
    "step_answer": ("context", "query"),
    "judge": ("query", "answer"),
    "augment": ("context", "query"),
    "augment_empty": (),
}

_ALIASES = {"query_str": "query", "context_str": "context"}

QUERY_PROMPTS: dict[str, dict[str, PromptTemplate]] = {
    lang: {k: PromptTemplate(v) for k, v in table.items()}
    for lang, table in (("en", _EN), ("zh", _ZH))
}


def query_prompt(kind: str, language: str) -> PromptTemplate:
    """The default prompt ``kind`` in ``language`` ("en" or "zh")."""
    return QUERY_PROMPTS[language][kind]


def check_template(value: Any, kind: str, name: str = "prompt_template") -> PromptTemplate | None:
    """A user's replacement template (str or PromptTemplate), checked for the variables
    prompt ``kind`` needs; None stays None (use the default). ``{query_str}`` and
    ``{context_str}`` (LlamaIndex's and LazyLLM's names) are read as ``{query}`` and
    ``{context}``."""
    tmpl = as_template(value, name)
    if tmpl is None:
        return None
    written = ["{" + v + "}" for v in tmpl.template_vars]
    if (
        kind == "augment"
        and not {"context", "context_str", "question_answer_context"} & set(tmpl.free_vars)
        and "<context>" not in tmpl.template
        and "<question_answer_context>" not in tmpl.template
    ):
        # a LazyLLM instruction with extra_keys=['context_str'] but no placeholder: the
        # context follows it (then the query)
        tmpl = PromptTemplate(tmpl.template.rstrip("\n") + "\n{context}", **tmpl.kwargs)
    tmpl = adapt_template(
        tmpl,
        {"query": "query", "context": "context", "question_answer_context": "context"},
        None if "query" not in REQUIRED[kind] or "query_str" in tmpl.free_vars else "query",
    )
    aliases = dict(_ALIASES)
    if kind == "judge":  # LazyLLM's judge prompt shows the answer to judge as {context_str}
        aliases["context_str"] = "answer"
    renamed = {
        old: new
        for old, new in aliases.items()
        if old in tmpl.free_vars and new not in tmpl.free_vars
    }
    if renamed:  # LlamaIndex / LazyLLM names: {query_str} and {context_str}
        text = tmpl.template
        for old, new in renamed.items():
            text = text.replace("{" + old + "}", "{" + new + "}")
        tmpl = PromptTemplate(text, **tmpl.kwargs)
    missing = [v for v in REQUIRED[kind] if v not in tmpl.free_vars]
    if missing:
        raise ConfigError(
            f"{name} cannot be filled: it has no place for "
            f"{', '.join('{' + v + '}' for v in missing)} (it has "
            f"{written or 'no placeholder'}); add "
            f"{' and '.join('{' + v + '}' for v in missing)} (Spring AI's <context>, "
            "LazyLLM's {context_str} work too; a missing {query} is appended)"
        )
    return tmpl
