"""``LLMParser``: node groups written by an LLM (LazyLLM's summary / keywords / QA groups).

Used as a transform: ``doc.create_node_group("doc-summary", transform=fr.LLMParser(llm,
task_type="summary"), parent=...)``. A group calls :meth:`LLMParser.batch_transform` once
with all its parent nodes, so every LLM call of the group is in flight together (bounded by
``max_concurrency``). The group is persisted like any other: its identity (task, language,
prompt, model) is stable, so reopening a store runs no LLM call and adding a file parses only
that file's nodes.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import warnings
from typing import Any

from fastrag._async import run_sync
from fastrag._checks import check_choice, check_int
from fastrag.errors import ConfigError
from fastrag.llms.base import LLMError
from fastrag.llms.resolve import resolve_llm
from fastrag.schema import QA_PAIR_KEY, DocNode
from fastrag.synth.prompts import PromptTemplate, as_template
from fastrag.transforms.base import NodeTransform

__all__ = ["LLMParser", "parse_keywords", "parse_qa"]

TASKS = ("summary", "keywords", "qa")
ERROR_KEY = "llm_parser_error"

_PROMPTS: dict[str, dict[str, str]] = {
    "en": {
        "summary": (
            "Summarize the following text in one paragraph of at most 120 words. Output only "
            "the summary.\n\nText:\n{text}\n\nSummary:"
        ),
        "keywords": (
            "Extract at most 5 keywords from the following text. Output them on one line, "
            "separated by commas, and nothing else.\n\nText:\n{text}\n\nKeywords:"
        ),
        "qa": (
            "Write question and answer pairs that the following text answers. Output each pair "
            "as two lines, 'Q: <question>' then 'A: <answer>', and nothing else.\n\n"
            "Text:\n{text}\n\nPairs:"
        ),
    },
    "zh": {
        "summary": (
            "请用一段话总结下面的文本，不超过120字，只输出摘要。\n\n文本：\n{text}\n\n摘要："
        ),
        "keywords": (
            "请从下面的文本中提取不超过5个关键词，用逗号分隔，写在一行，不要输出其他内容。\n\n"
            "文本：\n{text}\n\n关键词："
        ),
        "qa": (
            "请根据下面的文本生成若干问答对。每对写两行：“问：<问题>”和“答：<答案>”，"
            "不要输出其他内容。\n\n文本：\n{text}\n\n问答对："
        ),
    },
}

_KW_SPLIT = re.compile(r"[,，、;；\n]+")
_BULLET = re.compile(r"^\s*(?:[-*•·]+|\d{1,3}[.)、:：]|#+)\s*")
_KW_LABEL = re.compile(r"^(?:keywords?|关键词)\s*[:：]\s*", re.IGNORECASE)
_Q = re.compile(
    r"^\s*(?:[-*•]\s*)?(?:\d{1,3}[.)、]\s*)?(?:\*\*)?(?:Q|Question|问题?)\s*\d*"
    r"(?:\*\*)?\s*[:：.]\s*(?:\*\*)?",
    re.IGNORECASE,
)
_A = re.compile(
    r"^\s*(?:[-*•]\s*)?(?:\*\*)?(?:A|Answer|答案?)\s*\d*(?:\*\*)?\s*[:：.]\s*"
    r"(?:\*\*)?",
    re.IGNORECASE,
)


def parse_keywords(text: str) -> list[str]:
    """Keywords of an answer: comma / 、 / ; / newline separated or a list, de-duplicated."""
    text = re.sub(r"```\w*", "", _KW_LABEL.sub("", text.strip()))
    out: list[str] = []
    seen: set[str] = set()
    for part in _KW_SPLIT.split(text):
        kw = _BULLET.sub("", part).strip().strip("\"'“”「」*").strip(" .。")
        if kw and kw.lower() not in seen:
            seen.add(kw.lower())
            out.append(kw)
    return out


def parse_qa(text: str) -> list[tuple[str, str]]:
    """``(question, answer)`` pairs of an answer in ``Q: ... A: ...`` (or 问：/答：) form;
    an answer may span several lines; a question without an answer is dropped."""
    pairs: list[tuple[str, str]] = []
    q: str | None = None
    a: list[str] | None = None
    for line in text.splitlines():
        if _Q.match(line):
            if q is not None and a:
                pairs.append((q, "\n".join(a).strip()))
            q, a = _Q.sub("", line, count=1).strip().strip("*"), None
        elif _A.match(line) and q is not None:
            a = [_A.sub("", line, count=1).strip()]
        elif a is not None and line.strip():
            a.append(line.strip())
    if q is not None and a:
        pairs.append((q, "\n".join(a).strip()))
    return [(q, a) for q, a in pairs if q and a]


class LLMParser(NodeTransform):
    """A node transform that asks an LLM about each parent node.

    Args:
        llm: a fastrag LLM (``fr.OpenAILike``), an object with async ``acomplete``, or a
            function ``prompt -> str``.
        language: "en" or "zh" (the default prompts' language).
        task_type: "summary" (one child node: the summary), "keywords" (one child per
            keyword) or "qa" (one child per question, its answer in ``metadata["answer"]``;
            the child's ``get_content()``, what prompts show, holds both, as LazyLLM's).
        max_concurrency: LLM calls in flight at once for a whole group.
        prompt_template: replaces the default prompt; it must contain ``{text}``.
        on_error: "raise" (a parse that fails after the LLM's retries stops the build, naming
            the node and its file) or "skip" (that parent gets one child holding its own text
            and ``metadata["llm_parser_error"]``, and a warning lists the failures).
        show_progress: a progress bar while parsing (None: for 64+ nodes on a terminal).
        llm_kwargs: keyword arguments of every LLM call (e.g. ``temperature=0``).
    """

    trans_node = True

    def __init__(
        self,
        llm: Any,
        language: str = "en",
        task_type: str = "summary",
        max_concurrency: int = 16,
        *,
        prompt_template: Any = None,
        on_error: str = "raise",
        show_progress: bool | None = None,
        llm_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self._llm = resolve_llm(llm)
        self.language = check_choice("language", language, ("en", "zh"))
        self.task_type = check_choice("task_type", task_type, TASKS)
        self.max_concurrency = check_int("max_concurrency", max_concurrency, min=1)
        self.on_error = check_choice("on_error", on_error, ("raise", "skip"))
        self.show_progress = show_progress
        if llm_kwargs is not None and not isinstance(llm_kwargs, dict):
            raise ConfigError(f"llm_kwargs must be a dict, got {type(llm_kwargs).__name__}")
        self._llm_kwargs = dict(llm_kwargs or {})
        tmpl = as_template(prompt_template, "prompt_template")
        if tmpl is not None and "text" not in tmpl.free_vars:
            raise ConfigError(
                f"prompt_template is missing required variable {{text}} (the node's text); it "
                f"has {['{' + v + '}' for v in tmpl.template_vars]}"
            )
        self._template = tmpl or PromptTemplate(_PROMPTS[self.language][self.task_type])
        self.calls = 0  # LLM calls made (for tests and progress reports)

    @property
    def llm(self) -> Any:
        return self._llm

    def identity(self) -> str:
        """Task, language, prompt and model: what the children depend on (no object ids, no
        API key), so a store keeps the parsed group across processes."""
        h = hashlib.blake2b(self._template.template.encode("utf-8"), digest_size=8).hexdigest()
        kw = sorted(self._llm_kwargs.items())
        return (
            f"fastrag.LLMParser(task_type={self.task_type!r}, language={self.language!r}, "
            f"prompt={h}, model={getattr(self._llm, 'model', '?')!r}, llm_kwargs={kw!r})"
        )

    def transform(self, node: DocNode) -> list[Any]:
        """The children of one node."""
        return self.batch_transform([node])[0]

    def batch_transform(self, nodes: list[Any]) -> list[list[Any]]:
        """The children of every node, all LLM calls concurrent under ``max_concurrency``."""
        nodes = [n if isinstance(n, DocNode) else DocNode(str(n)) for n in nodes]
        return run_sync(self._abatch(nodes))

    async def _abatch(self, nodes: list[DocNode]) -> list[list[Any]]:
        from tqdm.auto import tqdm

        n = len(nodes)
        show = self.show_progress
        disable: bool | None = (None if n >= 64 else True) if show is None else not show
        bar = tqdm(total=n, desc=f"LLMParser ({self.task_type})", disable=disable)
        sem = asyncio.Semaphore(self.max_concurrency)

        async def one(node: DocNode) -> str:
            try:
                async with sem:
                    self.calls += 1
                    comp = await self._llm.acomplete_with_usage(
                        self._template.format(text=node.text), **self._llm_kwargs
                    )
                return comp.text
            finally:
                bar.update(1)

        try:
            answers = await asyncio.gather(*(one(nd) for nd in nodes), return_exceptions=True)
        finally:
            bar.close()
        out: list[list[Any]] = []
        failed: list[str] = []
        for node, ans in zip(nodes, answers, strict=True):
            if isinstance(ans, BaseException) and not isinstance(ans, Exception):
                raise ans
            if isinstance(ans, Exception):
                where = self._where(node)
                if self.on_error == "raise":
                    raise LLMError(
                        f"LLMParser(task_type={self.task_type!r}) failed on {where}: {ans}"
                    ) from ans
                failed.append(where)
                out.append(
                    [
                        DocNode(
                            node.text,
                            metadata={
                                ERROR_KEY: f"{type(ans).__name__}: {ans}",
                                "llm_parser_task": self.task_type,
                            },
                        )
                    ]
                )
                continue
            out.append(self._children(ans))
        if failed:
            more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
            warnings.warn(
                f"LLMParser(task_type={self.task_type!r}) failed on {len(failed)} of {n} nodes "
                f"({'; '.join(failed[:3])}{more}); each keeps its own text with "
                f"metadata[{ERROR_KEY!r}] (on_error='skip')",
                UserWarning,
                stacklevel=2,
            )
        return out

    @staticmethod
    def _where(node: DocNode) -> str:
        meta = node.metadata or {}
        path = meta.get("abs_path") or meta.get("file_path") or meta.get("file_name")
        return f"node {node.id!r}" + (f" of file {path!r}" if path else "")

    def _children(self, answer: str) -> list[Any]:
        if self.task_type == "summary":
            text = answer.strip()
            return [text] if text else []
        if self.task_type == "keywords":
            return parse_keywords(answer)
        return [DocNode(q, metadata={"answer": a, QA_PAIR_KEY: True}) for q, a in parse_qa(answer)]

    def __repr__(self) -> str:
        return (
            f"LLMParser(llm={self._llm!r}, task_type={self.task_type!r}, "
            f"language={self.language!r})"
        )
