"""Stream plumbing of synthesizers: text out of usage streams, sync and async adapters."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from fastrag._async import iter_sync
from fastrag.llms.base import Completion
from fastrag.synth.response import Response

__all__ = ["aiter_sync", "one_piece", "text_pieces", "to_sync"]


async def text_pieces(
    agen: AsyncIterator[str | Completion], fallback: str | None
) -> AsyncIterator[str]:
    """Text chunks of a usage stream; ``fallback`` replaces an all-blank answer."""
    held: list[str] = []  # blank pieces held back until real text arrives
    seen_text = False
    try:
        async for item in agen:
            if isinstance(item, Completion):
                continue
            if seen_text:
                yield item
            elif item.strip():
                seen_text = True
                for h in held:
                    yield h
                held.clear()
                yield item
            else:
                held.append(item)
    finally:
        aclose = getattr(agen, "aclose", None)
        if aclose is not None:
            await aclose()
    if not seen_text:
        if fallback is not None:
            yield fallback
        else:
            for h in held:
                yield h


async def one_piece(text: str) -> AsyncIterator[str]:
    """A stream of one piece."""
    yield text


async def aiter_sync(it: Iterable[str]) -> AsyncIterator[str]:
    """An async stream over a sync iterator of pieces."""
    for piece in it:
        yield piece


def to_sync(resp: Response) -> Response:
    """A sync-streaming copy of an async-streaming response (same metadata dict)."""
    if resp._agen is None:
        return resp
    out = Response(
        None,
        resp.source_nodes,
        None,
        response_gen=iter_sync(resp._agen),
        on_done=resp._on_done,
    )
    out.metadata = resp.metadata
    # the on_done hook updates the async response's metadata dict, shared with ``out``
    return out
