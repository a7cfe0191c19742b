"""Transforms: turn a parent node's text into child nodes (with offsets where known)."""

from fastrag.transforms.base import NodeTransform, has_batch, has_spans
from fastrag.transforms.sentence import SentenceSplitter, TokenTextSplitter

__all__ = ["NodeTransform", "SentenceSplitter", "TokenTextSplitter", "has_batch", "has_spans"]
