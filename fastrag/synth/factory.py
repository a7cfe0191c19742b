"""``ResponseMode`` and ``get_response_synthesizer``: mode name -> synthesizer class."""

from __future__ import annotations

from enum import Enum
from typing import Any

from fastrag.errors import ConfigError
from fastrag.synth.accumulate import Accumulate, CompactAndAccumulate
from fastrag.synth.base import BaseSynthesizer
from fastrag.synth.prompts import PromptTemplate
from fastrag.synth.refine import CompactAndRefine, Refine
from fastrag.synth.simple import ContextOnly, Generation, NoText, SimpleSummarize
from fastrag.synth.tree import TreeSummarize

__all__ = ["SYNTHESIZERS", "ResponseMode", "get_response_synthesizer"]


class ResponseMode(str, Enum):
    """How a synthesizer turns chunks into an answer (LlamaIndex's names)."""

    REFINE = "refine"
    """Answer from the first chunk, then refine the answer with each next chunk, one
    sequential LLM call per chunk (chunks too big for a prompt are split)."""

    COMPACT = "compact"
    """Pack as many whole chunks as fit into each prompt, then refine across the packs:
    refine's answer with far fewer calls. The default."""

    SIMPLE_SUMMARIZE = "simple_summarize"
    """Join all chunks, truncate to one prompt, one LLM call; ``metadata["dropped_tokens"]``
    says how much context did not fit."""

    TREE_SUMMARIZE = "tree_summarize"
    """Pack chunks, summarize all packs concurrently, and recurse on the summaries until one
    answer remains; the final call streams."""

    GENERATION = "generation"
    """Ignore the context and ask the LLM the query alone."""

    NO_TEXT = "no_text"
    """No LLM call: return the nodes (``source_nodes``) with an empty answer."""

    CONTEXT_ONLY = "context_only"
    """No LLM call: the answer is the chunks joined with blank lines."""

    ACCUMULATE = "accumulate"
    """Ask the query of every chunk concurrently and list the answers
    (``Response 1: ...``)."""

    COMPACT_ACCUMULATE = "compact_accumulate"
    """Accumulate over packs of whole chunks instead of single chunks (fewer calls)."""

    def __str__(self) -> str:
        return self.value


SYNTHESIZERS: dict[ResponseMode, type[BaseSynthesizer]] = {
    ResponseMode.REFINE: Refine,
    ResponseMode.COMPACT: CompactAndRefine,
    ResponseMode.SIMPLE_SUMMARIZE: SimpleSummarize,
    ResponseMode.TREE_SUMMARIZE: TreeSummarize,
    ResponseMode.GENERATION: Generation,
    ResponseMode.NO_TEXT: NoText,
    ResponseMode.CONTEXT_ONLY: ContextOnly,
    ResponseMode.ACCUMULATE: Accumulate,
    ResponseMode.COMPACT_ACCUMULATE: CompactAndAccumulate,
}

# Which optional constructor arguments each class takes (templates it uses, filtering).
_TEMPLATE_ARGS: dict[type[BaseSynthesizer], tuple[str, ...]] = {
    Refine: ("text_qa_template", "refine_template", "structured_answer_filtering"),
    CompactAndRefine: ("text_qa_template", "refine_template", "structured_answer_filtering"),
    SimpleSummarize: ("text_qa_template",),
    TreeSummarize: ("summary_template",),
    Accumulate: ("text_qa_template",),
    CompactAndAccumulate: ("text_qa_template",),
    Generation: (),
    NoText: (),
    ContextOnly: (),
}


def _mode(value: Any) -> ResponseMode:
    if isinstance(value, ResponseMode):
        return value
    try:
        return ResponseMode(getattr(value, "value", value))
    except ValueError:
        names = ", ".join(m.value for m in ResponseMode)
        raise ConfigError(f"unknown response_mode {value!r}; choose one of: {names}") from None


def get_response_synthesizer(
    response_mode: ResponseMode | str = ResponseMode.COMPACT,
    llm: Any = None,
    *,
    streaming: bool = False,
    structured_answer_filtering: bool = False,
    text_qa_template: PromptTemplate | str | None = None,
    refine_template: PromptTemplate | str | None = None,
    summary_template: PromptTemplate | str | None = None,
    simple_template: PromptTemplate | str | None = None,
    max_concurrency: int | None = None,
    context_window: int | None = None,
    num_output: int | None = None,
    **kwargs: Any,
) -> BaseSynthesizer:
    """A synthesizer for ``response_mode`` (see :class:`ResponseMode`).

    Templates a mode does not use are ignored (so one call can switch modes);
    ``structured_answer_filtering=True`` is only valid for "refine" and "compact". Other
    keyword arguments go to :class:`BaseSynthesizer` (``language``, ``prompt_helper``,
    ``tokenizer``, ``empty_response``, ``on_empty``, ``llm_kwargs``, ``show_progress``,
    ``verbose``).
    """
    mode = _mode(response_mode)
    cls = SYNTHESIZERS[mode]
    accepted = _TEMPLATE_ARGS[cls]
    if structured_answer_filtering and "structured_answer_filtering" not in accepted:
        raise ConfigError(
            f"structured_answer_filtering applies to response_mode 'refine' or 'compact', "
            f"not {mode.value!r}"
        )
    kwargs.pop("use_async", None)  # LlamaIndex compatibility: everything is async here
    options = {
        "text_qa_template": text_qa_template,
        "refine_template": refine_template,
        "summary_template": summary_template,
        "structured_answer_filtering": structured_answer_filtering,
    }
    chosen = {k: v for k, v in options.items() if k in accepted}
    return cls(
        llm,
        streaming,
        simple_template=simple_template,
        max_concurrency=max_concurrency,
        context_window=context_window,
        num_output=num_output,
        **chosen,
        **kwargs,
    )
