"""Writes: ``POST /v1/documents`` (multipart files, or JSON ``{"texts", "metadatas"}``),
``DELETE /v1/documents/{doc_id}`` (each ``202 {"task_id", ...}``, run by the single writer)
and ``GET /v1/tasks/{task_id}``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Request

from fastrag.documents.sources import check_texts
from fastrag.errors import ConfigError
from fastrag.serve.guard import ApiError
from fastrag.serve.idempotency import HEADER, check_key
from fastrag.serve.lifecycle import ready_engine
from fastrag.serve.parsing import checked_retriever, parse_body
from fastrag.serve.schemas import AddTextsRequest
from fastrag.serve.uploads import MAX_TEXTS, accepted, submit, submit_upload, task_view

__all__ = ["router"]

router = APIRouter()


@router.post("/v1/documents", status_code=202)
async def add_documents(request: Request) -> Any:
    eng = ready_engine(request)
    state = request.app.state
    eng.require_doc()
    key = check_key(request.headers.get(HEADER))
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        rec, replayed = await submit_upload(
            request, eng, state.tasks, state.keys, key, state.settings
        )
    else:
        req = await parse_body(request, AddTextsRequest)
        if req.group is not None:
            await checked_retriever(eng, req.group)
        if len(req.texts) > MAX_TEXTS:
            raise ApiError(
                400,
                f"{len(req.texts)} texts exceed the limit of {MAX_TEXTS} per request; split them",
                param="texts",
            )
        try:
            check_texts(req.texts, req.metadatas, None)
            json.dumps(req.metadatas)
        except (ConfigError, TypeError, ValueError) as exc:
            raise ApiError(
                400, str(exc), param="metadatas" if "metadata" in str(exc) else "texts"
            ) from None
        rec, replayed = await submit(
            state.keys,
            key,
            "POST /v1/documents",
            req.model_dump(),
            lambda task_id: state.tasks.add_texts(req.texts, req.metadatas, task_id=task_id),
        )
    state.writer.wake()
    return accepted(rec, replayed)


@router.delete("/v1/documents/{doc_id}", status_code=202)
async def delete_document(request: Request, doc_id: str) -> Any:
    eng = ready_engine(request)
    state = request.app.state
    key = check_key(request.headers.get(HEADER))

    def create(task_id: str | None) -> dict[str, Any]:
        if not eng.has_document(doc_id):
            raise ApiError(
                404,
                f"no document with id {doc_id!r}; ids are the doc_ids of upload tasks (or "
                "a hit's metadata doc_id)",
                "not_found_error",
                param="doc_id",
            )
        return state.tasks.delete(doc_id, task_id=task_id)

    rec, replayed = await submit(state.keys, key, f"DELETE /v1/documents/{doc_id}", None, create)
    state.writer.wake()
    return accepted(rec, replayed)


@router.get("/v1/tasks/{task_id}")
async def task(request: Request, task_id: str) -> Any:
    ready_engine(request)
    rec = await asyncio.to_thread(request.app.state.tasks.get, task_id)
    if rec is None:
        raise ApiError(404, f"no task {task_id!r}", "not_found_error", param="task_id")
    return task_view(rec)
