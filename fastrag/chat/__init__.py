"""Chat with memory: :class:`ChatEngine` over a RAG pipeline, and per-session chat memories."""

from fastrag.chat.engine import ChatEngine, as_chat_engine
from fastrag.chat.memory import ChatMemory, MessageWindowChatMemory, TokenWindowChatMemory

__all__ = [
    "ChatEngine",
    "ChatMemory",
    "MessageWindowChatMemory",
    "TokenWindowChatMemory",
    "as_chat_engine",
]
