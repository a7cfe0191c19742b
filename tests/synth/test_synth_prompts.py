"""PromptTemplate and the default templates."""

from __future__ import annotations

import pytest

from fastrag.errors import ConfigError
from fastrag.synth.prompts import (
    DEFAULT_PROMPTS,
    PromptTemplate,
    default_prompts,
    detect_language,
    resolve_language,
)


def test_format_fills_variables_and_ignores_extras():
    t = PromptTemplate("Q: {query_str}\nC: {context_str}\n")
    assert t.template_vars == ["query_str", "context_str"]
    assert t.format(query_str="why", context_str="because", unused=1) == "Q: why\nC: because\n"
    # str.format semantics for literal braces and repeated variables
    t2 = PromptTemplate('{{"a": {x}}} {x}')
    assert t2.template_vars == ["x"]
    assert t2.format(x=1) == '{"a": 1} 1'
    assert t2.format(x=1) == f'{{"a": {1}}} {1}'


def test_missing_variable_is_named():
    t = PromptTemplate("{context_str} in the tone of {tone_name}: {query_str}")
    with pytest.raises(ConfigError, match=r"tone_name.*have no value"):
        t.format(context_str="c", query_str="q")


def test_partial_format_binds_and_keeps_original():
    t = PromptTemplate("{a}-{b}-{c}")
    p = t.partial_format(a="1")
    assert p.free_vars == ["b", "c"]
    assert t.free_vars == ["a", "b", "c"]
    assert p.format(b=2, c=3) == "1-2-3"
    assert p.partial_format(b="x").format(c="y") == "1-x-y"
    assert p.missing({"b"}) == ["c"]


def test_bad_templates_rejected():
    with pytest.raises(ConfigError, match="plain variable name"):
        PromptTemplate("{a.b}")
    with pytest.raises(ConfigError, match="plain variable name"):
        PromptTemplate("{}")
    with pytest.raises(ConfigError, match="literal braces"):
        PromptTemplate("{unclosed")
    with pytest.raises(ConfigError, match="needs a str"):
        PromptTemplate(42)


def test_split_around_context_slot():
    t = DEFAULT_PROMPTS["en"]["text_qa"]
    pre, post = t.split_around("context_str", {"query_str": "Who?"})
    full = t.format(query_str="Who?", context_str="CTX")
    assert pre + "CTX" + post == full
    with pytest.raises(ConfigError, match="exactly once"):
        PromptTemplate("{x}{x}").split_around("x", {})


def test_default_templates_match_llamaindex_text():
    from llama_index.core.prompts.default_prompts import (
        DEFAULT_REFINE_PROMPT_TMPL,
        DEFAULT_TEXT_QA_PROMPT_TMPL,
        DEFAULT_TREE_SUMMARIZE_TMPL,
    )

    en = default_prompts("en")
    assert en["text_qa"].template == DEFAULT_TEXT_QA_PROMPT_TMPL
    assert en["refine"].template == DEFAULT_REFINE_PROMPT_TMPL
    assert en["summary"].template == DEFAULT_TREE_SUMMARIZE_TMPL
    zh = default_prompts("zh")
    for kind in ("text_qa", "refine", "summary", "simple"):
        assert set(zh[kind].template_vars) == set(en[kind].template_vars)
    assert "问题" in zh["text_qa"].template
    with pytest.raises(ConfigError, match="choose 'en' or 'zh'"):
        default_prompts("fr")


def test_language_detection():
    assert detect_language("亚硫酸盐有什么作用？") == "zh"
    assert detect_language("What do sulfites do?") == "en"
    assert detect_language("") == "en"
    assert detect_language("BM25 是什么") == "zh"  # 3 of 7 non-space chars are CJK
    assert resolve_language("auto", "", "中文上下文内容") == "zh"
    assert resolve_language("en", "中文问题", "") == "en"
