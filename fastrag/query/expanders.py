"""Query expanders: one query in, several out (Spring AI's ``MultiQueryExpander``; LazyLLM's
sub-question decomposition). One LLM call per query; the answer is parsed leniently (numbered
or bulleted lists, blank lines, code fences), de-duplicated and never longer than asked for.
"""

from __future__ import annotations

import re
from typing import Any

from fastrag._checks import check_bool, check_int
from fastrag.query.base import Call, Query, QueryComponent, as_query, run
from fastrag.query.prompts import check_template

__all__ = ["MultiQueryExpander", "QueryExpander", "SubQuestionExpander", "parse_lines"]

_BULLET = re.compile(
    r"^\s*(?:[-*•·]+|\(?\d{1,3}[.)、:：]|\(?[a-zA-Z][.)](?=\s)|[一二三四五六七八九十]+[、.．]|"
    r"(?:q|query|question|variant|问题|子问题)\s*\d*\s*[:：.])\s*",
    re.IGNORECASE,
)
_HEADER = re.compile(
    r"^(?:here (?:are|is)\b.*|(?:query )?variants?\s*[:：]|sub-?questions?\s*[:：]|"
    r"子问题\s*[:：]|查询版本\s*[:：]|以下是.*[:：])$",
    re.IGNORECASE,
)


def parse_lines(text: str, limit: int, exclude: str = "") -> list[str]:
    """The items of a list-shaped LLM answer, in order, de-duplicated (also against
    ``exclude``, case- and space-insensitively), at most ``limit``."""
    seen = {_key(exclude)} if exclude else set()
    out: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("```") or _HEADER.match(line):
            continue
        line = _BULLET.sub("", line, count=1).strip()
        line = line.strip("\"'“”「」").strip()
        if len(line) > 2 and line.startswith("**") and line.endswith("**"):
            line = line[2:-2].strip()
        k = _key(line)
        if not k or k in seen:
            continue
        seen.add(k)
        out.append(line)
        if len(out) >= limit:
            break
    return out


def _key(s: str) -> str:
    return " ".join(s.lower().split()).rstrip("?？.。!！ ")


class QueryExpander(QueryComponent):
    """Base of expanders: subclasses implement ``_aone(query, call) -> list[Query]``."""

    stage = "expand"

    def expand(self, query: Query | str) -> list[Query]:
        """The expanded queries of one query."""
        return run(self.aexpand(query))

    __call__ = expand

    async def aexpand(self, query: Query | str) -> list[Query]:
        """Async :meth:`expand`."""
        return (await self._abatch([as_query(query)], False))[0]

    def batch(
        self, queries: list[Query | str], *, return_exceptions: bool = False
    ) -> list[list[Query]]:
        """Expand many queries; all LLM calls concurrent under ``max_concurrency``."""
        return run(self.abatch(queries, return_exceptions=return_exceptions))

    async def abatch(
        self, queries: list[Query | str], *, return_exceptions: bool = False
    ) -> list[list[Query]]:
        """Async :meth:`batch`."""
        return await self._abatch(queries, return_exceptions)

    async def _expand(
        self, query: Query, kind: str, n: int, include_original: bool, call: Call
    ) -> list[Query]:
        if not query.text.strip():
            return [query]
        tmpl = self._prompt(kind, query.text, self.prompt_template)
        answer = await call(tmpl.format(query=query.text, number=n))
        exclude = query.text if include_original else ""
        variants = [query.mutate(text=t) for t in parse_lines(answer, n, exclude)]
        if include_original:
            return [query, *variants]
        return variants or [query]  # nothing usable came back: retrieve with the query itself


class MultiQueryExpander(QueryExpander):
    """Expands a query into ``number_of_queries`` semantically diverse variants (plus the
    original first, unless ``include_original=False``)."""

    def __init__(
        self,
        llm: Any = None,
        number_of_queries: int = 3,
        include_original: bool = True,
        prompt_template: Any = None,
        **kw: Any,
    ) -> None:
        super().__init__(llm, prompt_template=check_template(prompt_template, "multi_query"), **kw)
        self.number_of_queries = check_int("number_of_queries", number_of_queries, min=1)
        self.include_original = check_bool("include_original", include_original)

    async def _aone(self, query: Query, call: Call) -> list[Query]:
        return await self._expand(
            query, "multi_query", self.number_of_queries, self.include_original, call
        )


class SubQuestionExpander(QueryExpander):
    """Decomposes an abstract or compound query into at most ``max_questions`` sub-questions,
    each retrieved on its own (LazyLLM's sub-question strategy); the answer is still
    synthesized for the original query. ``include_original=True`` retrieves it as well."""

    def __init__(
        self,
        llm: Any = None,
        max_questions: int = 4,
        include_original: bool = False,
        prompt_template: Any = None,
        **kw: Any,
    ) -> None:
        super().__init__(llm, prompt_template=check_template(prompt_template, "sub_question"), **kw)
        self.max_questions = check_int("max_questions", max_questions, min=1)
        self.include_original = check_bool("include_original", include_original)

    async def _aone(self, query: Query, call: Call) -> list[Query]:
        return await self._expand(
            query, "sub_question", self.max_questions, self.include_original, call
        )
