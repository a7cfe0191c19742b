"""Synthesis: turn a query and retrieved nodes into a ``Response`` with an LLM.

Every response mode of LlamaIndex, written once as async code (sync wrappers run it), with
token-exact prompt packing and batch synthesis of many queries under one concurrency limit.
"""

from fastrag.synth.accumulate import Accumulate, CompactAndAccumulate
from fastrag.synth.base import BaseSynthesizer
from fastrag.synth.factory import SYNTHESIZERS, ResponseMode, get_response_synthesizer
from fastrag.synth.packing import Piece, PromptHelper
from fastrag.synth.prompts import DEFAULT_PROMPTS, PromptTemplate, default_prompts
from fastrag.synth.refine import REFINE_SCHEMA, CompactAndRefine, Refine
from fastrag.synth.response import Response
from fastrag.synth.simple import ContextOnly, Generation, NoText, SimpleSummarize
from fastrag.synth.tree import TreeSummarize

__all__ = [
    "DEFAULT_PROMPTS",
    "REFINE_SCHEMA",
    "SYNTHESIZERS",
    "Accumulate",
    "BaseSynthesizer",
    "CompactAndAccumulate",
    "CompactAndRefine",
    "ContextOnly",
    "Generation",
    "NoText",
    "Piece",
    "PromptHelper",
    "PromptTemplate",
    "Refine",
    "Response",
    "ResponseMode",
    "SimpleSummarize",
    "TreeSummarize",
    "default_prompts",
    "get_response_synthesizer",
]
