"""Prompt templates: ``{var}`` placeholders, partial formatting, strict variables.

``PromptTemplate("...{context_str}...{query_str}...")`` parses its text once into literal
pieces and fields, so formatting is a join (no ``str.format`` re-parse per call), the list of
variables is known up front, and a missing variable fails naming it. ``{{`` and ``}}`` are
literal braces, as in ``str.format``.

Default templates come in English (LlamaIndex's wording, so prompts and token counts match
what LlamaIndex users know) and Chinese; ``language="auto"`` picks Chinese when the query is
mostly CJK text. :func:`validate_template` checks a user's template for a synthesizer slot
(``text_qa_template``, ``refine_template``, ...) against the variables it must have.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

from fastrag.errors import ConfigError

__all__ = [
    "DEFAULT_PROMPTS",
    "LANGUAGES",
    "TEMPLATE_KINDS",
    "TEMPLATE_VARS",
    "PromptTemplate",
    "default_prompts",
    "detect_language",
    "resolve_language",
    "validate_template",
]

_FORMATTER = string.Formatter()


class PromptTemplate:
    """A text template with ``{var}`` placeholders.

    ``format(**kw)`` fills every variable (extra keyword arguments are ignored, so one set of
    response kwargs can serve several templates); ``partial_format(**kw)`` binds some now and
    returns a new template; ``template_vars`` lists the variables in order of appearance.
    """

    __slots__ = ("_pieces", "_vars", "kwargs", "template")

    def __init__(self, template: str, **kwargs: Any) -> None:
        if isinstance(template, PromptTemplate):
            kwargs = {**template.kwargs, **kwargs}
            template = template.template
        if not isinstance(template, str):
            raise ConfigError(
                f"PromptTemplate needs a str template, got {type(template).__name__}; "
                "pass the prompt text with {var} placeholders"
            )
        try:
            parsed = list(_FORMATTER.parse(template))
        except ValueError as exc:
            raise ConfigError(
                f"invalid prompt template ({exc}): {template[:80]!r}; "
                "write literal braces as '{{' and '}}'"
            ) from exc
        pieces: list[tuple[str, str | None, str, str | None]] = []
        names: list[str] = []
        for literal, field, spec, conv in parsed:
            if field is not None:
                if field == "" or not field.isidentifier():
                    raise ConfigError(
                        f"prompt template field {{{field}}} is not a plain variable name; "
                        "use names like {context_str}, and '{{' '}}' for literal braces"
                    )
                if field not in names:
                    names.append(field)
            pieces.append((literal, field, spec or "", conv))
        self.template = template
        self.kwargs = dict(kwargs)
        self._pieces = tuple(pieces)
        self._vars = tuple(names)

    # -- introspection -------------------------------------------------------------------------
    @property
    def template_vars(self) -> list[str]:
        """All variables of the template, in order of first appearance."""
        return list(self._vars)

    variables = template_vars

    @property
    def free_vars(self) -> list[str]:
        """Variables not yet bound by ``partial_format``."""
        return [v for v in self._vars if v not in self.kwargs]

    def missing(self, provided: Mapping[str, Any] | set[str] | tuple | list = ()) -> list[str]:
        """Free variables not in ``provided``."""
        return [v for v in self._vars if v not in self.kwargs and v not in provided]

    # -- formatting ----------------------------------------------------------------------------
    def partial_format(self, **kwargs: Any) -> PromptTemplate:
        """A copy with some variables bound (extra names are kept and ignored)."""
        out = PromptTemplate.__new__(PromptTemplate)
        out.template = self.template
        out.kwargs = {**self.kwargs, **kwargs}
        out._pieces = self._pieces
        out._vars = self._vars
        return out

    def format(self, **kwargs: Any) -> str:
        """The filled prompt; a variable without a value raises ``ConfigError`` naming it."""
        return "".join(self.parts(kwargs))

    def parts(self, values: Mapping[str, Any]) -> list[str]:
        """The prompt as a list of strings (literals and filled values), in order."""
        vals = {**self.kwargs, **values} if self.kwargs else values
        out: list[str] = []
        for literal, field, spec, conv in self._pieces:
            if literal:
                out.append(literal)
            if field is None:
                continue
            try:
                v = vals[field]
            except KeyError:
                missing = self.missing(vals)
                raise ConfigError(
                    f"prompt template variable(s) {', '.join(missing)} have no value; "
                    f"pass them as keyword arguments (e.g. synthesize(query, nodes, "
                    f"{missing[0]}=...)) or bind them with partial_format"
                ) from None
            if conv is not None or spec:
                v = _FORMATTER.convert_field(v, conv) if conv else v
                out.append(format(v, spec))
            else:
                out.append(v if isinstance(v, str) else str(v))
        return out

    def split_around(self, var: str, values: Mapping[str, Any]) -> tuple[str, str]:
        """``(prefix, suffix)`` of the filled prompt around the single ``{var}`` slot."""
        vals = {**self.kwargs, **values} if self.kwargs else dict(values)
        vals[var] = "\x00"
        filled = "".join(self.parts(vals))
        if filled.count("\x00") != 1:
            raise ConfigError(
                f"template must contain {{{var}}} exactly once for packing; "
                f"it has {self.template.count('{' + var + '}')}"
            )
        prefix, suffix = filled.split("\x00")
        return prefix, suffix

    def get_template(self) -> str:
        return self.template

    def __repr__(self) -> str:
        short = self.template if len(self.template) <= 60 else self.template[:57] + "..."
        return f"PromptTemplate({short!r}, vars={list(self._vars)})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PromptTemplate)
            and other.template == self.template
            and other.kwargs == self.kwargs
        )

    __hash__ = None  # type: ignore[assignment]


def as_template(value: PromptTemplate | str | None, name: str) -> PromptTemplate | None:
    """Accept a PromptTemplate, a plain str, or None (use the default)."""
    if value is None or isinstance(value, PromptTemplate):
        return value
    if isinstance(value, str):
        return PromptTemplate(value)
    # LlamaIndex PromptTemplate objects carry their text in .template
    text = getattr(value, "template", None)
    if isinstance(text, str):
        return PromptTemplate(text)
    raise ConfigError(
        f"{name} must be a fastrag.PromptTemplate or a str, got {type(value).__name__}"
    )


# Spring AI's placeholders (StTemplateRenderer with '<' '>' delimiters, and its older brace name)
_SPRING_NAMES = ("query", "context", "question_answer_context")


def adapt_template(
    tmpl: PromptTemplate, names: dict[str, str], query_var: str | None
) -> PromptTemplate:
    """``tmpl`` as fastrag fills it: Spring AI's ``<query>``, ``<context>`` and
    ``<question_answer_context>`` (and ``{question_answer_context}``) become the variables
    ``names`` maps them to; a template without ``{query_var}`` (a LazyLLM instruction, whose
    user input follows it) gets the query appended on a line of its own."""
    text = tmpl.template
    for spring in _SPRING_NAMES:
        ours = names.get(spring)
        if ours is None:
            continue
        text = text.replace(f"<{spring}>", "{" + ours + "}")
        if spring not in names.values():
            text = text.replace("{" + spring + "}", "{" + ours + "}")
    changed = text != tmpl.template
    out = PromptTemplate(text, **tmpl.kwargs) if changed else tmpl
    if query_var is not None and query_var not in out.free_vars:
        out = PromptTemplate(out.template.rstrip("\n") + "\n{" + query_var + "}", **tmpl.kwargs)
    return out


# -- the synthesizers' template slots ------------------------------------------------------------
# Required variables of each slot (the context variable must appear exactly once).
TEMPLATE_VARS: dict[str, tuple[str, ...]] = {
    "text_qa_template": ("context_str", "query_str"),
    "refine_template": ("context_msg", "existing_answer", "query_str"),
    "summary_template": ("context_str",),
    "simple_template": ("query_str",),
}
_CONTEXT_VAR = {
    "text_qa_template": "context_str",
    "refine_template": "context_msg",
    "summary_template": "context_str",
}
# slot -> its key in default_prompts()
TEMPLATE_KINDS = {
    "text_qa_template": "text_qa",
    "refine_template": "refine",
    "summary_template": "summary",
    "simple_template": "simple",
}


def _refine_context_alias(tmpl: PromptTemplate) -> PromptTemplate:
    """A refine template written with ``{context_str}`` (as in LlamaIndex tutorials) reads as
    one with ``{context_msg}``; having both is ambiguous."""
    names = set(tmpl.free_vars)
    if "context_str" not in names:
        return tmpl
    if "context_msg" in names:
        raise ConfigError(
            "refine_template has both {context_msg} and {context_str}; use one of them for "
            "the new context"
        )
    return PromptTemplate(tmpl.template.replace("{context_str}", "{context_msg}"), **tmpl.kwargs)


def validate_template(name: str, value: Any) -> PromptTemplate | None:
    """``value`` (a template, a str or None for the default) for the synthesizer slot ``name``:
    Spring AI / LlamaIndex variable names adapted, required variables checked."""
    tmpl = as_template(value, name)
    if tmpl is None:
        return None
    ctx = "context_msg" if name == "refine_template" else "context_str"
    tmpl = adapt_template(
        tmpl,
        {"query": "query_str", "context": ctx, "question_answer_context": ctx},
        "query_str" if "query_str" in TEMPLATE_VARS[name] else None,
    )
    if name == "refine_template":
        tmpl = _refine_context_alias(tmpl)
    present = set(tmpl.free_vars)
    missing = [v for v in TEMPLATE_VARS[name] if v not in present]
    if missing:
        shown = ["{" + v + "}" for v in missing]
        if name == "refine_template" and "context_msg" in missing:
            shown[missing.index("context_msg")] = "{context_msg} (or {context_str})"
        raise ConfigError(
            f"{name} is missing required variable(s) "
            f"{', '.join(shown)}; it has "
            f"{['{' + v + '}' for v in tmpl.template_vars]}"
        )
    cvar = _CONTEXT_VAR.get(name)
    if cvar is not None and tmpl.template.count("{" + cvar + "}") != 1:
        raise ConfigError(
            f"{name} must contain {{{cvar}}} exactly once, found "
            f"{tmpl.template.count('{' + cvar + '}')}"
        )
    return tmpl


# -- default templates ---------------------------------------------------------------------------
# English: LlamaIndex's default text (so prompts match what its users expect, token for token).
_EN = {
    "text_qa": (
        "Context information is below.\n"
        "---------------------\n"
        "{context_str}\n"
        "---------------------\n"
        "Given the context information and not prior knowledge, answer the query.\n"
        "Query: {query_str}\n"
        "Answer: "
    ),
    "refine": (
        "The original query is as follows: {query_str}\n"
        "We have provided an existing answer: {existing_answer}\n"
        "We have the opportunity to refine the existing answer "
        "(only if needed) with some more context below.\n"
        "------------\n"
        "{context_msg}\n"
        "------------\n"
        "Given the new context, refine the original answer to better answer the query. "
        "If the context isn't useful, return the original answer.\n"
        "Refined Answer: "
    ),
    "summary": (
        "Context information from multiple sources is below.\n"
        "---------------------\n"
        "{context_str}\n"
        "---------------------\n"
        "Given the information from multiple sources and not prior knowledge, "
        "answer the query.\n"
        "Query: {query_str}\n"
        "Answer: "
    ),
    "simple": "{query_str}",
    "structured": (
        "\n\nReply with only a JSON object, no other text: "
        '{"answer": "<the answer>", "query_satisfied": <true or false>}. '
        "Set query_satisfied to true only if the context above lets you answer the query."
    ),
}

_ZH = {
    "text_qa": (
        "以下是上下文信息。\n"
        "---------------------\n"
        "{context_str}\n"
        "---------------------\n"
        "请根据上下文信息而不是先验知识回答问题。\n"
        "问题：{query_str}\n"
        "回答："
    ),
    "refine": (
        "原始问题如下：{query_str}\n"
        "我们已有一个回答：{existing_answer}\n"
        "下面提供了更多上下文，可以（仅在需要时）用来完善已有回答。\n"
        "------------\n"
        "{context_msg}\n"
        "------------\n"
        "请根据新的上下文完善原来的回答，使其更好地回答问题。"
        "如果上下文没有帮助，请原样返回原来的回答。\n"
        "完善后的回答："
    ),
    "summary": (
        "以下是来自多个来源的上下文信息。\n"
        "---------------------\n"
        "{context_str}\n"
        "---------------------\n"
        "请根据来自多个来源的信息而不是先验知识回答问题。\n"
        "问题：{query_str}\n"
        "回答："
    ),
    "simple": "{query_str}",
    "structured": (
        "\n\n只输出一个 JSON 对象，不要输出其他文字："
        '{"answer": "<回答>", "query_satisfied": <true 或 false>}。'
        "只有当上面的上下文足以回答问题时，query_satisfied 才为 true。"
    ),
}

LANGUAGES = ("en", "zh", "auto")

DEFAULT_PROMPTS: dict[str, dict[str, PromptTemplate | str]] = {
    lang: {k: (v if k == "structured" else PromptTemplate(v)) for k, v in table.items()}
    for lang, table in (("en", _EN), ("zh", _ZH))
}


def default_prompts(language: str) -> dict[str, PromptTemplate | str]:
    """The default templates of a language ("en" or "zh")."""
    try:
        return DEFAULT_PROMPTS[language]
    except KeyError:
        raise ConfigError(
            f"no default prompts for language {language!r}; choose 'en' or 'zh'"
        ) from None


def _is_cjk(ch: str) -> bool:
    o = ord(ch)
    return (
        0x4E00 <= o <= 0x9FFF
        or 0x3400 <= o <= 0x4DBF
        or 0x3000 <= o <= 0x303F
        or 0xFF00 <= o <= 0xFFEF
        or 0x20000 <= o <= 0x2A6DF
    )


def detect_language(text: str) -> str:
    """ "zh" when at least 30% of the non-space characters of ``text`` are CJK, else "en"."""
    chars = [c for c in text[:2000] if not c.isspace()]
    if not chars:
        return "en"
    n_cjk = sum(1 for c in chars if _is_cjk(c))
    return "zh" if n_cjk * 10 >= 3 * len(chars) else "en"


def resolve_language(language: str, query: str, sample: str = "") -> str:
    """Map "auto" to "en"/"zh" from the query (falling back on a context sample)."""
    if language != "auto":
        return language
    if query.strip():
        return detect_language(query)
    return detect_language(sample)


def validate_language(language: Any) -> str:
    if language not in LANGUAGES:
        raise ConfigError(f"language={language!r} is not supported; choose one of {LANGUAGES}")
    return language
