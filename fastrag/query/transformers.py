"""Query transformers (Spring AI's modular RAG): rewrite, compress a conversation, translate.

``transform(query) -> Query`` for one query; ``batch(queries)`` for many, every LLM call of the
batch in flight together under ``max_concurrency``. Two transformers skip the LLM when it has
nothing to do: compression without history, translation of a query already in the target
language (Spring AI asks the model every time).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from fastrag._checks import check_str
from fastrag.query.base import Call, Query, QueryComponent, as_query, run
from fastrag.query.prompts import check_template

__all__ = [
    "CompressionQueryTransformer",
    "QueryTransformer",
    "RewriteQueryTransformer",
    "TranslationQueryTransformer",
    "clean_answer",
]

_FENCE = re.compile(r"^```[\w-]*\s*\n?(.*?)\n?```$", re.DOTALL)
_LABEL = re.compile(
    r"^(?:rewritten|standalone|translated|new|final)?\s*(?:query|question)\s*[:：]\s*|"
    r"^(?:改写后的查询|独立查询|翻译后的查询|查询)\s*[:：]\s*",
    re.IGNORECASE,
)
_QUOTES = ('"', "'", "“", "”", "「", "」", "《", "》")


def clean_answer(text: str) -> str:
    """An LLM's one-query answer without code fences, a leading label or wrapping quotes."""
    s = text.strip()
    m = _FENCE.match(s)
    if m:
        s = m.group(1).strip()
    s = _LABEL.sub("", s, count=1).strip()
    if len(s) >= 2 and s[0] in _QUOTES and s[-1] in _QUOTES:
        s = s[1:-1].strip()
    return s


class QueryTransformer(QueryComponent):
    """Base of query transformers: subclasses implement ``_aone(query, call) -> Query``.

    LLM calls run at ``temperature=0.0`` unless ``llm_kwargs`` says otherwise (Spring AI's
    advice: a transformed query should be deterministic)."""

    stage = "transform"

    def __init__(self, llm: Any = None, **kw: Any) -> None:
        super().__init__(llm, **kw)
        self.llm_kwargs.setdefault("temperature", 0.0)

    def transform(self, query: Query | str) -> Query:
        """The transformed query (a str is wrapped in a :class:`Query`)."""
        return run(self.atransform(query))

    __call__ = transform

    async def atransform(self, query: Query | str) -> Query:
        """Async :meth:`transform`."""
        return (await self._abatch([as_query(query)], False))[0]

    def batch(self, queries: list[Query | str], *, return_exceptions: bool = False) -> list[Query]:
        """Transform many queries; all LLM calls concurrent under ``max_concurrency``.
        A failure raises (naming the query index) unless ``return_exceptions=True``."""
        return run(self.abatch(queries, return_exceptions=return_exceptions))

    async def abatch(
        self, queries: list[Query | str], *, return_exceptions: bool = False
    ) -> list[Query]:
        """Async :meth:`batch`."""
        return await self._abatch(queries, return_exceptions)

    async def _answer(self, query: Query, prompt: str, call: Call) -> Query:
        text = clean_answer(await call(prompt))
        return query.mutate(text=text) if text else query  # an empty answer keeps the query


class RewriteQueryTransformer(QueryTransformer):
    """Rewrites a verbose, ambiguous or noisy query into a concise one for ``target_search_system``
    ("vector store", "web search engine", ...)."""

    def __init__(
        self,
        llm: Any = None,
        target_search_system: str = "vector store",
        prompt_template: Any = None,
        **kw: Any,
    ) -> None:
        super().__init__(llm, prompt_template=check_template(prompt_template, "rewrite"), **kw)
        self.target_search_system = check_str("target_search_system", target_search_system)

    async def _aone(self, query: Query, call: Call) -> Query:
        if not query.text.strip():
            return query
        tmpl = self._prompt("rewrite", query.text, self.prompt_template)
        prompt = tmpl.format(query=query.text, target=self.target_search_system)
        return await self._answer(query, prompt, call)


class CompressionQueryTransformer(QueryTransformer):
    """Compresses the chat history and a follow-up query into one standalone query. A query
    without history passes through unchanged, with no LLM call. The result has no history."""

    def __init__(self, llm: Any = None, prompt_template: Any = None, **kw: Any) -> None:
        super().__init__(llm, prompt_template=check_template(prompt_template, "compression"), **kw)

    async def _aone(self, query: Query, call: Call) -> Query:
        if not query.history:
            return query
        tmpl = self._prompt("compression", query.text, self.prompt_template)
        prompt = tmpl.format(query=query.text, history=query.history_text())
        out = await self._answer(query, prompt, call)
        return out.mutate(history=())


# -- language of a query, by script (and English function words) ----------------------------------

_LANGS: dict[str, str] = {
    "english": "en",
    "en": "en",
    "英语": "en",
    "英文": "en",
    "chinese": "zh",
    "zh": "zh",
    "中文": "zh",
    "汉语": "zh",
    "simplified chinese": "zh",
    "japanese": "ja",
    "ja": "ja",
    "日语": "ja",
    "korean": "ko",
    "ko": "ko",
    "韩语": "ko",
    "russian": "ru",
    "ru": "ru",
    "俄语": "ru",
    "greek": "el",
    "el": "el",
    "arabic": "ar",
    "ar": "ar",
    "hebrew": "he",
    "he": "he",
    "thai": "th",
    "th": "th",
}
# Cyrillic letters that Russian does not use (Ukrainian, Belarusian, Serbian, ...).
_NOT_RUSSIAN = set("іїєґўђјљњћџѕ")
_EN_FUNCTION = frozenset(
    "a an and are as at be but by can do does for from has have how i if in into is it its me "
    "my no not of on or our should that the their then there these they this to was we what "
    "when where which who why will with you your".split()
)


def _script_counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for ch in text:
        if not ch.isalpha():
            continue
        o = ord(ch)
        if 0x3040 <= o <= 0x30FF:
            s = "kana"
        elif 0xAC00 <= o <= 0xD7AF or 0x1100 <= o <= 0x11FF:
            s = "hangul"
        elif 0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0x20000 <= o <= 0x2A6DF:
            s = "han"
        else:
            name = unicodedata.name(ch, "")
            s = name.split(" ", 1)[0].lower() if name else "other"
        counts[s] = counts.get(s, 0) + 1
    return counts


def is_in_language(text: str, language: str) -> bool:
    """True only when ``text`` is confidently in ``language`` (its script, and for English
    ASCII letters plus an English function word); unsure means False (ask the model)."""
    code = _LANGS.get(language.strip().lower())
    counts = _script_counts(text)
    total = sum(counts.values())
    if code is None or total == 0:
        return False
    if code == "en":
        if any(ord(c) > 127 for c in text if c.isalpha()):
            return False
        words = re.findall(r"[a-z]+", text.lower())
        return any(w in _EN_FUNCTION for w in words)
    share = {
        "zh": counts.get("han", 0) if not counts.get("kana") and not counts.get("hangul") else 0,
        "ja": counts.get("kana", 0) + counts.get("han", 0) if counts.get("kana") else 0,
        "ko": counts.get("hangul", 0),
        "ru": counts.get("cyrillic", 0) if not (_NOT_RUSSIAN & set(text.lower())) else 0,
        "el": counts.get("greek", 0),
        "ar": counts.get("arabic", 0),
        "he": counts.get("hebrew", 0),
        "th": counts.get("thai", 0),
    }[code]
    return share * 10 >= 8 * total


class TranslationQueryTransformer(QueryTransformer):
    """Translates the query into ``target_language`` (the language the embedding model was
    trained on). A query already in that language (decided by script, and for English by
    function words) passes through with no LLM call; when unsure, the model decides."""

    def __init__(
        self,
        llm: Any = None,
        target_language: str = "english",
        prompt_template: Any = None,
        **kw: Any,
    ) -> None:
        super().__init__(llm, prompt_template=check_template(prompt_template, "translation"), **kw)
        self.target_language = check_str("target_language", target_language, strip=True)

    async def _aone(self, query: Query, call: Call) -> Query:
        if not query.text.strip() or is_in_language(query.text, self.target_language):
            return query
        tmpl = self._prompt("translation", query.text, self.prompt_template)
        prompt = tmpl.format(query=query.text, target_language=self.target_language)
        return await self._answer(query, prompt, call)
