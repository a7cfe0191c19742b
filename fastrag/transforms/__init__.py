"""Transforms: turn a parent node's text into child nodes (with offsets where known)."""

from fastrag.transforms.base import NodeTransform, has_batch, has_spans
from fastrag.transforms.sentence import SentenceSplitter, TokenTextSplitter
from fastrag.transforms.simple import LineSplitter, ParagraphSplitter

__all__ = [
    "LineSplitter",
    "NodeTransform",
    "ParagraphSplitter",
    "SentenceSplitter",
    "TokenTextSplitter",
    "has_batch",
    "has_spans",
]

# transforms a store may rebuild from its recorded spec (fastrag's own, never arbitrary code)
SPEC_CLASSES = {
    c.__name__: c for c in (LineSplitter, ParagraphSplitter, SentenceSplitter, TokenTextSplitter)
}
