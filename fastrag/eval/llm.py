"""LLM-judged metrics on top of fastrag's async LLM layer.

``LLMContextRecall(llm)`` is LazyLLM's metric of the same name: the judge LLM splits the answer
into statements and scores each 1 (supported by the retrieved context) or 0 (unsupported or
contradicted); an item's score is the mean, the metric the mean over items. Items are judged
concurrently (bounded by ``concurrency``), each answer parsed tolerantly (code fences, a bare
object instead of a list) and retried up to ``retry`` times when it is not valid; an item
whose every attempt fails scores 0.0 and records the last error.

    recall = LLMContextRecall(llm)
    recall([{"question": q, "answer": a, "context_retrieved": [c1, c2]}])   # -> float
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from typing import Any

from fastrag._async import run_sync
from fastrag._checks import check_choice, check_int, check_list, check_str
from fastrag.errors import ConfigError
from fastrag.llms.base import balanced_spans
from fastrag.llms.resolve import resolve_llm

__all__ = ["LLMContextRecall", "parse_json_list"]

_EVAL_PROMPT_EN = (
    "[Task Description]\n"
    "Given a context, and an answer, analyze each sentence in the answer and classify if the "
    "sentence can be attributed to the given context or not:\n"
    "Fully supported by context: 1\n"
    "Unsupported/contradictory: 0\n"
    "[Output Requirements]\n"
    "1. JSON format with array of objects\n"
    "2. Each object contains:\n"
    '    - "statement": Original text\n'
    '    - "reason": the reason why it is scored 1/0\n'
    '    - "score": 1 or 0\n'
    "3. Wrap output in ```json code block\n"
    "[Example Input]\n"
    "Question: What is Photosynthesis?\n"
    "Context: Photosynthesis occurs in chloroplasts. Light reactions produce ATP using "
    "sunlight.\n"
    "Statements: Photosynthesis was discovered in 1780s. It occurs in chloroplasts and produce "
    "ATP using sunlight.\n"
    "[Example Output]\n"
    '[{"statement": "Photosynthesis was discovered in 1780s", "reason": "The time when '
    'photosynthesis discovered was not mentioned in the given context", "score": 0}, '
    '{"statement": "It occurs in chloroplasts and produce ATP using sunlight.", "reason": '
    '"The exact sentence is present in the given context", "score": 1}]\n'
)

_EVAL_PROMPT_ZH = (
    "[任务描述]\n"
    "给定一个上下文和一个答案，分析答案中的每个句子并判断该句子是否可以归因于给定的上下文：\n"
    "完全受上下文支持：1\n"
    "不支持/矛盾：0\n"
    "[输出要求]\n"
    "1. 带有对象数组的 JSON 格式\n"
    "2. 每个对象包含：\n"
    ' - "statement"：原始文本\n'
    ' - "reason"：评分原因\n'
    ' - "score"：1 或 0\n'
    "3. 将输出包裹在 ```json 代码块中\n"
    "[示例输入]\n"
    "question：什么是光合作用？\n"
    "context：光合作用发生在叶绿体中，利用阳光产生 ATP。\n"
    "statement：光合作用于 1780 年代被发现。光合作用发生在叶绿体中，并利用阳光产生 ATP。\n"
    "[示例输出]\n"
    '[{"statement": "光合作用于 1780 年代被发现", '
    '"reason": "给定上下文中未提及光合作用被发现的时间", '
    '"score": 0}, {"statement": "光合作用发生在叶绿体中，并利用阳光产生 ATP。", '
    '"reason": "给定上下文中存在确切的句子", "score": 1}]\n'
)

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_NECESSARY_KEYS = ("question", "answer", "context_retrieved")


def _loads(s: str) -> Any:
    try:
        return json.loads(s)
    except RecursionError:
        raise ValueError("the JSON nests too deeply to read") from None
    except json.JSONDecodeError:
        fixed = re.sub(r",\s*([}\]])", r"\1", s)
        return json.loads(fixed)


def parse_json_list(text: str) -> list:
    """The JSON array (or single object, as a one-item list) in an LLM answer: the whole
    text, a fenced code block, or the first balanced ``[...]`` / ``{...}``."""
    if not isinstance(text, str):
        raise TypeError(f"expected text, got {type(text).__name__}")
    candidates = [text.strip()] + [m.group(1).strip() for m in _FENCE.finditer(text)]
    candidates += [*balanced_spans(text, "[", "]"), *balanced_spans(text, "{", "}")]
    for cand in candidates:
        if not cand:
            continue
        try:
            value = _loads(cand)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(value, dict):
            return [value]
        if isinstance(value, list):
            return value
    head = " ".join(text.split())[:120]
    raise ValueError(f"no JSON array in the judge's answer {head!r}")


def _score(value: Any) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return float(value.strip())
    raise ValueError(f"score {value!r} is not a number")


class LLMContextRecall:
    """LLM-judged context recall (LazyLLM's ``LLMContextRecall``).

    Args:
        llm: the judge (a fastrag LLM, an object with async ``acomplete``, or a function).
        eval_prompt: replaces the default instructions.
        prompt_lang: "en" or "zh" default instructions.
        retry: attempts per item before it scores 0.0.
        concurrency: items judged at once.
    """

    def __init__(
        self,
        llm: Any,
        eval_prompt: str | None = None,
        prompt_lang: str = "en",
        retry: int = 3,
        concurrency: int = 16,
    ) -> None:
        check_choice("prompt_lang", prompt_lang, ("en", "zh"))
        check_str("eval_prompt", eval_prompt, none="the default")
        check_int("retry", retry, min=1)
        check_int("concurrency", concurrency, min=1)
        self.llm = resolve_llm(llm)
        default_prompt = _EVAL_PROMPT_ZH if prompt_lang == "zh" else _EVAL_PROMPT_EN
        self.eval_prompt = eval_prompt or default_prompt
        self.retry = retry
        self.concurrency = concurrency
        self.necessary_keys = list(_NECESSARY_KEYS)

    # -- input ---------------------------------------------------------------------------------
    def validate_inputs_key(self, data: Any) -> None:
        if not isinstance(data, list):  # a list, not any sequence: items are updated in place
            raise ConfigError(f"data must be a list of dicts, got {type(data).__name__}")
        for i, item in enumerate(data):
            if not isinstance(item, dict):
                raise ConfigError(f"data[{i}] must be a dict, got {type(item).__name__}")
            missing = [k for k in self.necessary_keys if k not in item]
            if missing:
                raise ConfigError(
                    f"data[{i}] lacks key(s) {missing}; each item needs {self.necessary_keys}"
                )
            check_list(f"data[{i}]['context_retrieved']", item["context_retrieved"], "str")

    def build_prompt(self, item: dict) -> str:
        """The judge's prompt for one item (instructions, then the item)."""
        context = "\n".join(str(c) for c in item["context_retrieved"])
        query = f"question: {item['question']}\ncontext: {context}\nstatement: {item['answer']}"
        return f"{self.eval_prompt}\n{query}"

    # -- judging -------------------------------------------------------------------------------
    async def _judge(self, item: dict, sem: asyncio.Semaphore) -> dict:
        res = copy.deepcopy(item)
        prompt = self.build_prompt(item)
        error = None
        verdicts: list = []
        for attempt in range(1, self.retry + 1):
            async with sem:
                text = await self.llm.acomplete(prompt)
            try:
                verdicts = parse_json_list(text)
                if not verdicts or not all(isinstance(v, dict) and "score" in v for v in verdicts):
                    raise ValueError("the judge's list is empty or an object lacks 'score'")
                scores = [_score(v["score"]) for v in verdicts]
                res["final_score"] = round(sum(scores) / len(scores), 4)
                res["statements"] = verdicts
                res["attempts"] = attempt
                return res
            except ValueError as exc:
                error = str(exc)
        res["final_score"] = 0.0
        res["attempts"] = self.retry
        res["error"] = error
        return res

    async def aevaluate(self, data: list[dict]) -> list[dict]:
        """Per-item results: a copy of each item plus ``final_score`` (and ``statements``)."""
        self.validate_inputs_key(data)
        sem = asyncio.Semaphore(self.concurrency)
        return list(await asyncio.gather(*(self._judge(item, sem) for item in data)))

    def evaluate(self, data: list[dict]) -> list[dict]:
        """Sync :meth:`aevaluate`."""
        return run_sync(self.aevaluate(data))

    async def acall(self, data: list[dict]) -> float:
        """The mean ``final_score`` over ``data`` (0.0 for an empty list)."""
        if isinstance(data, list) and not data:
            return 0.0
        results = await self.aevaluate(data)
        return sum(r["final_score"] for r in results) / len(results)

    def __call__(self, data: list[dict]) -> float:
        """The mean ``final_score`` over ``data`` (LazyLLM's ``evaluator(data)``)."""
        return run_sync(self.acall(data))

    def __repr__(self) -> str:
        return f"LLMContextRecall(llm={self.llm!r}, retry={self.retry})"
