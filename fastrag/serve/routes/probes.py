"""Probes and static files: ``GET /health`` and ``/ready`` (both open without the API key),
``/metrics``, ``/v1/models``, the chat page ``/`` and ``/static/{name}``."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response

from fastrag.serve.extractive import EXTRACTIVE, GENERATED
from fastrag.serve.guard import KEY_SCOPE, ApiError
from fastrag.serve.lifecycle import ready_engine

__all__ = ["router"]

router = APIRouter()


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready")
async def ready(request: Request) -> Any:
    """200 once the server answers, else 503. Open without the API key (probes send none):
    without it the body says only ``{"status": "ready"}`` (or why not, in general words);
    with it (or on a server without a key) it shows the setup."""
    if not request.scope.get(KEY_SCOPE, True):
        lifecycle = request.app.state.lifecycle
        if not lifecycle.ready:
            state = "failed to start" if lifecycle.error is not None else "is starting"
            raise ApiError(
                503,
                f"the server {state}; GET /ready with the API key, or the server's log, says more",
                "unavailable",
            )
        return {"status": "ready"}
    engine = ready_engine(request)
    doc = engine.doc
    return {
        "status": "ready",
        "group": engine.default_group,
        "similarity": engine.similarity_for(engine.default_group) if doc is not None else None,
        "documents": len(doc.group("root")) if doc is not None else None,
        "not_ready": await asyncio.to_thread(engine.not_ready),
        "batching": engine.batcher is not None,
        "chat": engine.can_chat,  # an LLM writes the answers (else they are extractive)
        "answer_type": GENERATED if engine.can_chat else EXTRACTIVE,
        "startup_seconds": request.app.state.lifecycle.seconds,
    }


@router.get("/metrics")
async def metrics_text(request: Request) -> Response:
    return Response(
        request.app.state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
    )


@router.get("/")
async def index(request: Request) -> Any:
    page = request.app.state.static_dir / "index.html"
    if not page.is_file():
        raise ApiError(
            404,
            "the chat page is not installed (fastrag/serve/static/index.html)",
            "not_found_error",
        )
    return FileResponse(page, media_type="text/html; charset=utf-8")


@router.get("/static/{name}")
async def static(request: Request, name: str) -> Any:
    root = request.app.state.static_dir
    path = (root / name).resolve()
    if path.parent != root or not path.is_file():
        raise ApiError(404, f"no static file {name!r}", "not_found_error")
    return FileResponse(path)


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    state = request.app.state
    return {
        "object": "list",
        "data": [
            {
                "id": state.settings.model_name,
                "object": "model",
                "created": int(state.lifecycle.started),
                "owned_by": "fastrag",
            }
        ],
    }
