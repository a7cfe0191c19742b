"""``MultiStepQuery``: LazyLLM's multi-step strategy as one component.

Each step: rewrite the query (after the first step, told which query and draft fell short)
-> retrieve -> draft an answer from the hits -> ask the judge "does this answer the
question?". A query stops when the judge says yes or after ``max_steps``. In a batch every
step runs for all unfinished queries together: each LLM stage is one concurrent round, the
retriever is called once per step with every query's rewrite.
"""

from __future__ import annotations

import re
import time
from typing import Any

from fastrag._checks import check_bool, check_int
from fastrag.errors import ConfigError
from fastrag.llms.usage import Usage
from fastrag.query.base import Call, Query, QueryComponent, as_queries, as_query, run
from fastrag.query.prompts import check_template
from fastrag.query.retrieve import as_retriever
from fastrag.query.transformers import clean_answer
from fastrag.synth.response import Response

__all__ = ["MultiStepQuery", "parse_judgement"]

_YES = re.compile(r"^\W*(?:(?:true|yes|resolved)\b|是|对|正确|能|可以|足够)", re.IGNORECASE)
_NO = re.compile(r"^\W*(?:(?:false|no|not)\b|否|不|错误|没有)", re.IGNORECASE)


def parse_judgement(text: str) -> bool:
    """The judge's verdict: True / yes / 是 ... at the start of the answer is yes; anything else
    (False, no, unclear) is no. (LazyLLM's ``bool(answer)`` takes "False" for yes.)"""
    s = text.strip().strip("*`\"'“”")
    if _NO.match(s):
        return False
    return bool(_YES.match(s))


class MultiStepQuery(QueryComponent):
    """Rewrite -> retrieve -> draft -> judge, until the judge is satisfied or ``max_steps``.

    Args:
        llm: rewrites and drafts (None: ``fr.Settings.llm``).
        retriever: a fastrag ``Retriever`` or a callable ``str -> hits``.
        judge_llm: judges the drafts (default: ``llm``).
        max_steps: at most this many rounds per query.
        rewrite: rewrite the query before the first retrieval too (LazyLLM's loop does).
        prompt_template / judge_template / answer_template: replace the default prompts
            (``{query}``; ``{query}`` + ``{answer}``; ``{query}`` + ``{context}``).

    ``query(q) -> Response``: the last draft, the hits it came from, and
    ``metadata["steps"]`` (one entry per round: query, hit ids, draft, verdict), ``judged``,
    ``llm_calls`` / ``prompt_tokens`` / ``completion_tokens`` over all rounds.
    """

    stage = "multi_step"

    def __init__(
        self,
        llm: Any = None,
        retriever: Any = None,
        judge_llm: Any = None,
        max_steps: int = 3,
        *,
        rewrite: bool = True,
        prompt_template: Any = None,
        judge_template: Any = None,
        answer_template: Any = None,
        **kw: Any,
    ) -> None:
        super().__init__(llm, prompt_template=check_template(prompt_template, "step_rewrite"), **kw)
        if retriever is None:
            raise ConfigError(
                "MultiStepQuery needs retriever=fr.Retriever(doc, ...) (or a "
                "callable query -> hits)"
            )
        self.retriever = as_retriever(retriever, "retriever")
        self.judge = (
            QueryComponent(judge_llm, max_concurrency=self.max_concurrency)
            if judge_llm is not None
            else None
        )
        self.max_steps = check_int("max_steps", max_steps, min=1)
        self.rewrite = check_bool("rewrite", rewrite)
        self.judge_template = check_template(judge_template, "judge", "judge_template")
        self.answer_template = check_template(answer_template, "step_answer", "answer_template")

    # -- public ------------------------------------------------------------------------------
    def query(self, query: Query | str) -> Response:
        """Answer one query (see the class docstring)."""
        return run(self.aquery(query))

    __call__ = query

    async def aquery(self, query: Query | str) -> Response:
        return (await self.abatch([as_query(query)]))[0]

    def batch(
        self, queries: list[Query | str], *, return_exceptions: bool = False
    ) -> list[Response]:
        """Answer many queries, every step batched across the unfinished ones."""
        return run(self.abatch(queries, return_exceptions=return_exceptions))

    async def abatch(
        self, queries: list[Query | str], *, return_exceptions: bool = False
    ) -> list[Any]:
        qs = as_queries(queries)
        return_exceptions = check_bool("return_exceptions", return_exceptions)
        n = len(qs)
        t0 = time.perf_counter()
        usage = [Usage() for _ in range(n)]
        steps: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        errors: list[BaseException | None] = [None] * n
        drafts = [""] * n
        hits: list[list[Any]] = [[] for _ in range(n)]
        last_query = [q.text for q in qs]
        verdict = [False] * n
        active = [i for i in range(n) if qs[i].text.strip()]

        async def stage(fn, idx, component: QueryComponent) -> list[Any]:
            res = await component._amap(fn, idx, usage)
            out = []
            for i, r in zip(idx, res, strict=True):
                if isinstance(r, Exception):
                    errors[i] = r
                out.append(r)
            return out

        for step in range(self.max_steps):
            if not active:
                break
            if self.rewrite or step > 0:

                async def rewrite(i: int, call: Call, step: int = step) -> str:
                    return await self._rewrite(qs[i], step, last_query[i], drafts[i], call)

                res = await stage(rewrite, active, self)
                for i, r in zip(active, res, strict=True):
                    if not isinstance(r, Exception):
                        last_query[i] = r
                active = [i for i in active if errors[i] is None]
            found = await self.retriever.abatch([last_query[i] for i in active])
            for i, h in zip(active, found, strict=True):
                hits[i] = h

            async def draft(i: int, call: Call) -> str:
                tmpl = self._prompt("step_answer", qs[i].text, self.answer_template)
                context = "\n".join(h.get_content() for h in hits[i])
                return (await call(tmpl.format(query=last_query[i], context=context))).strip()

            res = await stage(draft, active, self)
            for i, r in zip(active, res, strict=True):
                if not isinstance(r, Exception):
                    drafts[i] = r
            active = [i for i in active if errors[i] is None]

            async def judge(i: int, call: Call) -> bool:
                tmpl = self._prompt("judge", qs[i].text, self.judge_template)
                return parse_judgement(await call(tmpl.format(query=qs[i].text, answer=drafts[i])))

            res = await stage(judge, active, self.judge or self)
            for i, r in zip(active, res, strict=True):
                if not isinstance(r, Exception):
                    verdict[i] = r
                    steps[i].append(
                        {
                            "step": step + 1,
                            "query": last_query[i],
                            "hits": [h.id for h in hits[i]],
                            "draft": drafts[i],
                            "judged": r,
                        }
                    )
            active = [i for i in active if errors[i] is None and not verdict[i]]

        out: list[Any] = []
        seconds = time.perf_counter() - t0
        for i in range(n):
            if errors[i] is not None:
                if not return_exceptions:
                    raise errors[i]
                out.append(errors[i])
                continue
            meta = {
                "response_mode": "multi_step",
                "steps": steps[i],
                "judged": verdict[i],
                "final_query": last_query[i],
                **usage[i].as_dict(),
                "seconds": seconds,
            }
            out.append(Response(drafts[i], hits[i], meta))
        return out

    async def _rewrite(self, query: Query, step: int, last: str, draft: str, call: Call) -> str:
        lang_src = query.text
        previous = ""
        if step > 0:
            previous = self._prompt("step_previous", lang_src).format(last_query=last, draft=draft)
        tmpl = self._prompt("step_rewrite", lang_src, self.prompt_template)
        text = clean_answer(await call(tmpl.format(query=query.text, previous=previous)))
        return text or query.text
