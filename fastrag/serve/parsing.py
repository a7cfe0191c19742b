"""Request parsing and the checks the routes share: JSON bodies (any malformed, too deeply
nested or mistyped body is a 400 naming what was wrong), text lengths, filters and groups.

Every JSON a client sends goes through :func:`load_json`, so no request can reach a
``RecursionError`` (``json.loads`` recurses once per nesting level) or hand a pathologically
deep value to the code behind the routes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fastapi import Request
from pydantic import ValidationError

from fastrag.errors import ConfigError
from fastrag.serve.guard import ApiError, validation_error
from fastrag.serve.readiness import NotReady, check_filter_text

__all__ = [
    "MAX_JSON_DEPTH",
    "check_filter",
    "check_lengths",
    "checked_retriever",
    "load_json",
    "not_ready",
    "parse_body",
]

# no API body nests deeper than ~6 levels (chat: messages > message > content > part); user
# metadata gets the rest
MAX_JSON_DEPTH = 64


def load_json(raw: bytes | str, what: str = "request body", param: str | None = None) -> Any:
    """``raw`` parsed as JSON; a 400 naming ``what`` when it is not JSON or nests deeper than
    :data:`MAX_JSON_DEPTH` levels."""
    try:
        obj = json.loads(raw)
    except RecursionError:
        obj = None
        too_deep = True
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"{what} is not valid JSON: {exc}", param=param) from None
    else:
        too_deep = _depth_over(obj, MAX_JSON_DEPTH)
    if too_deep:
        raise ApiError(
            400,
            f"{what} nests JSON arrays/objects more than {MAX_JSON_DEPTH} levels deep; flatten it",
            param=param,
        )
    return obj


def _depth_over(obj: Any, limit: int) -> bool:
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


async def parse_body(request: Request, model: type) -> Any:
    """The request body (JSON whatever the Content-Type says: curl -d sends a form's) as
    ``model``; a 400 naming the field otherwise."""
    raw = await request.body()
    obj = load_json(raw) if raw else None
    if not isinstance(obj, dict):
        raise ApiError(
            400,
            f"request body must be a JSON object, got "
            f"{'nothing' if obj is None else type(obj).__name__}",
        )
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise validation_error(exc.errors()) from None


def check_lengths(texts: Sequence[str], field: str, limit: int) -> None:
    for i, t in enumerate(texts):
        if len(t) > limit:
            raise ApiError(
                400,
                f"{field}[{i}] has {len(t)} characters, over the limit of {limit}; shorten it",
                param=f"{field}.{i}",
            )


def check_filter(text: str | None) -> str | None:
    try:
        return check_filter_text(text)
    except ConfigError as exc:
        raise ApiError(400, str(exc), param="filter") from None


def not_ready(exc: NotReady, param: str | None) -> ApiError:
    """The 409 of a request whose data is not built (``Retry-After`` while it is built)."""
    headers = {"Retry-After": "10"} if exc.building else None
    return ApiError(409, str(exc), "not_ready", param=param, headers=headers)


async def checked_retriever(engine: Any, group: str | None, similarity: str | None = None) -> Any:
    """The engine's retriever of ``group`` with ``similarity``; an unknown group or
    similarity is a 400 naming it."""
    try:
        return await engine.aretriever(group, similarity)
    except NotReady as exc:
        raise not_ready(exc, "group" if str(exc).startswith("group") else "similarity") from None
    except ConfigError as exc:
        param = "similarity" if similarity is not None and "similarit" in str(exc) else "group"
        raise ApiError(400, str(exc), param=param) from None
