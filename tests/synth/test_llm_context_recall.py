"""fastrag.eval.llm.LLMContextRecall (LazyLLM's LLM-judged context recall)."""

from __future__ import annotations

import json

import pytest

from fastrag.errors import ConfigError
from fastrag.eval.llm import LLMContextRecall, parse_json_list
from fastrag.llms import MockLLM

DATA = [
    {
        "question": "What is photosynthesis?",
        "answer": "It occurs in chloroplasts. It was discovered in 1780.",
        "context_retrieved": ["Photosynthesis occurs in chloroplasts.", "Light makes ATP."],
    },
    {
        "question": "Where is Paris?",
        "answer": "Paris is in France.",
        "context_retrieved": ["Paris is the capital of France."],
    },
]


def judge(prompt: str) -> str:
    """Scores a statement 1 when its first word appears in the context (a toy judge)."""
    item = prompt.rsplit("question: ", 1)[1]
    context = item.split("\ncontext: ", 1)[1].split("\nstatement: ", 1)[0]
    statement = item.split("\nstatement: ", 1)[1]
    verdicts = []
    for sent in [s.strip() for s in statement.split(".") if s.strip()]:
        ok = "1780" not in sent and any(w in context for w in sent.split()[-1:])
        verdicts.append({"statement": sent, "reason": "toy", "score": int(ok)})
    return "```json\n" + json.dumps(verdicts) + "\n```"


def test_scores_and_prompt_format():
    llm = MockLLM(judge)
    metric = LLMContextRecall(llm)
    results = metric.evaluate(DATA)
    assert [r["final_score"] for r in results] == [0.5, 1.0]
    assert results[0]["statements"][1]["score"] == 0
    assert results[0]["question"] == DATA[0]["question"]  # a copy of the item plus scores
    assert "final_score" not in DATA[0]
    assert metric(DATA) == 0.75
    # the prompt: instructions, then LazyLLM's "question/context/statement" block
    p = llm.prompts[0]
    assert p.startswith("[Task Description]\nGiven a context, and an answer")
    assert p.endswith(
        "question: What is photosynthesis?\ncontext: Photosynthesis occurs in chloroplasts.\n"
        "Light makes ATP.\nstatement: It occurs in chloroplasts. It was discovered in 1780."
    )
    zh = LLMContextRecall(MockLLM(judge), prompt_lang="zh")
    assert zh.build_prompt(DATA[1]).startswith("[任务描述]")
    assert metric([]) == 0.0


def test_retries_then_zero_and_tolerant_parsing():
    answers = iter(["not json", '{"statement": "x", "score": "1"}'])
    metric = LLMContextRecall(MockLLM(lambda p: next(answers)), retry=3)
    (res,) = metric.evaluate(DATA[1:])
    assert res["final_score"] == 1.0 and res["attempts"] == 2  # a bare object counts as a list

    bad = LLMContextRecall(MockLLM("no verdicts here"), retry=2)
    (res,) = bad.evaluate(DATA[1:])
    assert res["final_score"] == 0.0 and res["attempts"] == 2 and "no JSON array" in res["error"]
    assert parse_json_list('Sure: [{"score": 1},]') == [{"score": 1}]
    with pytest.raises(ValueError, match="no JSON array"):
        parse_json_list("nothing")


def test_concurrency_and_validation():
    llm = MockLLM(judge, latency=0.02)
    LLMContextRecall(llm, concurrency=3).evaluate(DATA * 5)
    assert llm.max_in_flight == 3
    metric = LLMContextRecall(llm)
    with pytest.raises(ConfigError, match=r"data\[0\] lacks key\(s\) \['context_retrieved'\]"):
        metric([{"question": "q", "answer": "a"}])
    with pytest.raises(ConfigError, match="must be a list of str"):
        metric([{"question": "q", "answer": "a", "context_retrieved": "ctx"}])
    with pytest.raises(ConfigError, match="data must be a list"):
        metric({"question": "q"})
    with pytest.raises(ConfigError, match="prompt_lang must be 'en' or 'zh', got 'fr'"):
        LLMContextRecall(llm, prompt_lang="fr")
    with pytest.raises(ConfigError, match="retry must be an int >= 1, got 0"):
        LLMContextRecall(llm, retry=0)
