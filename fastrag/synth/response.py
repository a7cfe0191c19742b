"""``Response``: the answer, the nodes it came from, and what it cost.

A non-streaming response holds its text in ``response``. A streaming response holds an
iterator of text pieces: ``response_gen`` (sync) or ``async_response_gen`` (async); consuming
it fills ``response`` with the joined text and completes ``metadata`` (the streamed call's
usage, total ``seconds``). ``str(resp)`` is the answer text (draining a sync stream first).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

__all__ = ["Response"]


class Response:
    """Answer text, ``source_nodes`` (list of ``NodeWithScore``) and ``metadata``.

    ``metadata`` holds at least ``llm_calls``, ``prompt_tokens``, ``completion_tokens`` and
    ``seconds`` (wall time of this query, also inside a concurrent batch), plus
    ``response_mode`` and mode-specific facts (e.g. ``dropped_tokens`` for simple_summarize).
    """

    __slots__ = (
        "_agen",
        "_consumed",
        "_gen",
        "_on_done",
        "metadata",
        "response",
        "source_nodes",
    )

    def __init__(
        self,
        response: str | None = None,
        source_nodes: list[Any] | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        response_gen: Iterator[str] | None = None,
        async_response_gen: AsyncIterator[str] | None = None,
        on_done: Callable[[str], None] | None = None,
    ) -> None:
        self.response = response
        self.source_nodes = list(source_nodes) if source_nodes is not None else []
        self.metadata = dict(metadata) if metadata else {}
        self._gen = response_gen
        self._agen = async_response_gen
        self._on_done = on_done
        self._consumed = response_gen is None and async_response_gen is None

    # -- streaming -----------------------------------------------------------------------------
    @property
    def is_streaming(self) -> bool:
        return self._gen is not None or self._agen is not None

    @property
    def response_gen(self) -> Iterator[str]:
        """Sync iterator over the answer's text pieces (streaming responses only)."""
        if self._gen is None:
            if self._agen is not None:
                raise TypeError(
                    "this Response streams asynchronously; iterate "
                    "`async for piece in resp.async_response_gen`"
                )
            raise TypeError(
                "this Response is not streaming; read resp.response (or build the "
                "synthesizer with streaming=True)"
            )
        return self._drain_sync()

    @property
    def async_response_gen(self) -> AsyncIterator[str]:
        """Async iterator over the answer's text pieces (streaming responses only)."""
        if self._agen is None:
            if self._gen is not None:
                raise TypeError(
                    "this Response streams synchronously; iterate `for piece in resp.response_gen`"
                )
            raise TypeError(
                "this Response is not streaming; read resp.response (or build the "
                "synthesizer with streaming=True)"
            )
        return self._drain_async()

    def _drain_sync(self) -> Iterator[str]:
        if self._consumed:
            if self.response:
                yield self.response
            return
        parts: list[str] = []
        gen, self._gen = self._gen, iter(())
        self._consumed = True
        for piece in gen:
            parts.append(piece)
            yield piece
        self._finish(parts)

    async def _drain_async(self) -> AsyncIterator[str]:
        if self._consumed:
            if self.response:
                yield self.response
            return
        parts: list[str] = []
        agen = self._agen
        self._consumed = True
        async for piece in agen:
            parts.append(piece)
            yield piece
        self._finish(parts)

    def _finish(self, parts: list[str]) -> None:
        self.response = "".join(parts)
        if self._on_done is not None:
            self._on_done(self.response)

    def get_response(self) -> str:
        """The full answer text (drains a sync stream)."""
        if not self._consumed and self._gen is not None:
            for _ in self._drain_sync():
                pass
        return self.response or ""

    async def aget_response(self) -> str:
        """The full answer text (drains an async stream)."""
        if not self._consumed and self._agen is not None:
            async for _ in self._drain_async():
                pass
        return self.response or ""

    # -- display -------------------------------------------------------------------------------
    def get_formatted_sources(self, length: int = 100) -> str:
        """One line per source node: ``> Source (Node id: ...): text...``."""
        lines = []
        for sn in self.source_nodes:
            text = " ".join(str(getattr(sn, "text", sn)).split())
            if len(text) > length:
                text = text[:length] + "..."
            lines.append(f"> Source (Node id: {getattr(sn, 'id', None)}): {text}")
        return "\n\n".join(lines)

    def __str__(self) -> str:
        if not self._consumed and self._gen is not None:
            return self.get_response()
        return self.response or ""

    def __repr__(self) -> str:
        text = self.response if self.response is not None else "<streaming>"
        short = text if len(text) <= 60 else text[:57] + "..."
        return (
            f"Response({short!r}, source_nodes={len(self.source_nodes)}, "
            f"llm_calls={self.metadata.get('llm_calls')})"
        )
