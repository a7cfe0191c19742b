"""Helpers shared by the tests of tests/query (a module of its own, so test folders can be
collected together)."""

from __future__ import annotations

import re

DOCS = [
    "Copenhagen is the capital of Denmark and its largest city.",
    "Aarhus is the second largest city of Denmark.",
    "Paris is the capital of France.",
    "Spring Boot applications start with the main method of a SpringApplication class.",
    "An LLM is a large language model trained on text.",
    "BM25 ranks documents by term frequency and inverse document frequency.",
]


META = [
    {"type": "city"},
    {"type": "city"},
    {"type": "city"},
    {"type": "Spring"},
    {"type": "ml"},
    {"type": "ml"},
]


def route(messages: list[dict]) -> str:
    """The test model: answers each kind of prompt the query layer sends."""
    p = messages[-1]["content"]
    if "rewrite it to provide better results" in p or "改写" in p and "改写后的查询" in p:
        q = re.search(r"(?:Original query|原始查询)[:：]\n(.*)\n", p).group(1)
        return f"Rewritten query: {q.rstrip('?？')} explained"
    if "standalone query" in p:
        return "What is the second largest city of Denmark?"
    if "translate it to" in p or "翻译成" in p:
        return "What is the capital of Denmark?"
    if "different versions of the given query" in p:
        q = re.search(r"Original query: (.*)\n", p).group(1)
        return f"1. {q} variant one\n2. {q} variant two\n3. {q} variant three"
    if "Context information is below" in p or "上下文" in p:
        return "ANSWER"
    return "OTHER"


def prompts(server, path: str = "/v1/chat/completions") -> list[str]:
    return [r.body["messages"][-1]["content"] for r in server.requests if r.path == path]
