"""The write side of ``fastrag serve``: ``POST /v1/documents`` (multipart files, or JSON
``{"texts", "metadatas"}``), ``DELETE /v1/documents/{doc_id}`` and ``GET /v1/tasks/{task_id}``.

Each write becomes a task (:mod:`fastrag.serve.tasks`) that the single writer runs; the answer
is ``202 {"task_id", "status", ...}`` at once. With an ``Idempotency-Key`` header a retried
request gets its first task back instead of a second one (:mod:`fastrag.serve.idempotency`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from fastrag.errors import ConfigError
from fastrag.serve.guard import ApiError, BodyTooLarge, ServeSettings
from fastrag.serve.idempotency import HEADER, IdempotencyKeys, check_key, fingerprint
from fastrag.serve.parsing import checked_retriever, load_json, parse_body
from fastrag.serve.schemas import AddTextsRequest
from fastrag.serve.tasks import TaskStore, Writer

__all__ = ["install_document_routes", "task_view"]

MAX_TEXTS = 100_000


def install_document_routes(
    app: FastAPI,
    engine: Any,
    tasks: TaskStore,
    writer: Writer,
    keys: IdempotencyKeys,
    settings: ServeSettings,
    ready_engine: Callable[[], Any],
) -> None:
    """Add the upload, delete and task routes to ``app`` (``ready_engine()`` returns the
    engine once the server is ready, else raises a 503)."""

    @app.post("/v1/documents", status_code=202)
    async def add_documents(request: Request) -> Any:
        eng = ready_engine()
        eng.require_doc()
        key = check_key(request.headers.get(HEADER))
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            rec, replayed = await _upload(request, eng, tasks, keys, key, settings)
        else:
            req = await parse_body(request, AddTextsRequest)
            if req.group is not None:
                await checked_retriever(eng, req.group)
            if len(req.texts) > MAX_TEXTS:
                raise ApiError(
                    400,
                    f"{len(req.texts)} texts exceed the limit of {MAX_TEXTS} per request; "
                    "split them",
                    param="texts",
                )
            from fastrag.documents.sources import check_texts

            try:
                check_texts(req.texts, req.metadatas, None)
                json.dumps(req.metadatas)
            except (ConfigError, TypeError, ValueError) as exc:
                raise ApiError(
                    400, str(exc), param="metadatas" if "metadata" in str(exc) else "texts"
                ) from None
            rec, replayed = await _submit(
                keys,
                key,
                "POST /v1/documents",
                req.model_dump(),
                lambda task_id: tasks.add_texts(req.texts, req.metadatas, task_id=task_id),
            )
        writer.wake()
        return _accepted(rec, replayed)

    @app.delete("/v1/documents/{doc_id}", status_code=202)
    async def delete_document(request: Request, doc_id: str) -> Any:
        eng = ready_engine()
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
            return tasks.delete(doc_id, task_id=task_id)

        rec, replayed = await _submit(keys, key, f"DELETE /v1/documents/{doc_id}", None, create)
        writer.wake()
        return _accepted(rec, replayed)

    @app.get("/v1/tasks/{task_id}")
    async def task(task_id: str) -> Any:
        ready_engine()
        rec = await asyncio.to_thread(tasks.get, task_id)
        if rec is None:
            raise ApiError(404, f"no task {task_id!r}", "not_found_error", param="task_id")
        return task_view(rec)


async def _submit(
    keys: IdempotencyKeys,
    key: str | None,
    request: str,
    body: Any,
    create: Callable[[str | None], dict[str, Any]],
) -> tuple[dict[str, Any], bool]:
    """``(task record, replayed)``: ``create(task_id)`` makes the task, unless ``key`` names
    an earlier task of the same request (then that one, replayed)."""
    if key is None:
        return await asyncio.to_thread(create, None), False
    task_id, replay = await asyncio.to_thread(keys.claim, key, fingerprint(request, body), request)
    if replay is not None:
        return replay, True
    try:
        return await asyncio.to_thread(create, task_id), False
    except BaseException:
        keys.release(key, task_id)
        raise


def _accepted(rec: dict[str, Any], replayed: bool) -> JSONResponse:
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return JSONResponse(task_view(rec), status_code=202, headers=headers)


def task_view(rec: dict[str, Any]) -> dict[str, Any]:
    """A task record as the API shows it."""
    out = {k: v for k, v in rec.items() if k != "created_ns"}
    out["task_id"] = rec["id"]
    if rec["status"] == "done":
        out["result"] = (
            {"deleted": rec["deleted"]}
            if rec["kind"] == "delete"
            else {"documents": len(rec["doc_ids"]), "texts": rec.get("n_texts")}
        )
    return out


def _file_digests(files: list[tuple[str, Any]]) -> list[list[str]]:
    out = []
    for name, fobj in files:
        h = hashlib.sha256()
        fobj.seek(0)
        for chunk in iter(lambda f=fobj: f.read(1 << 20), b""):
            h.update(chunk)
        fobj.seek(0)
        out.append([name, h.hexdigest()])
    return out


async def _upload(
    request: Request,
    engine: Any,
    tasks: TaskStore,
    keys: IdempotencyKeys,
    key: str | None,
    settings: ServeSettings,
) -> tuple[dict[str, Any], bool]:
    from starlette.datastructures import UploadFile

    try:
        form = await request.form(
            max_files=settings.max_upload_files,
            max_fields=64,
            max_part_size=settings.max_upload_bytes,
        )
    except BodyTooLarge:
        raise
    except Exception as exc:  # python-multipart / starlette parse errors
        raise ApiError(400, f"malformed multipart upload: {exc}", param="file") from None
    try:
        files: list[tuple[str, Any]] = []
        meta: Any = {}
        group: str | None = None
        for field, value in form.multi_items():
            if isinstance(value, UploadFile):
                if field not in ("file", "files"):
                    raise ApiError(
                        400, f"unknown upload field {field!r}; send files as 'file'", param=field
                    )
                files.append((value.filename or "upload.txt", value.file))
            elif field == "group":
                group = value  # checked below: documents go to the root, every group follows
            elif field == "metadata":
                meta = load_json(value, "metadata", param="metadata")
                if not isinstance(meta, dict):
                    raise ApiError(400, "metadata must be a JSON object", param="metadata")
            else:
                raise ApiError(
                    400,
                    f"unknown form field {field!r}; send 'file' (repeatable) and optionally "
                    "'metadata' (a JSON object)",
                    param=field,
                )
        if not files:
            raise ApiError(400, "no file in the upload: send multipart field 'file'", param="file")
        if group is not None:
            await checked_retriever(engine, group)
        body = None
        if key is not None:
            digests = await asyncio.to_thread(_file_digests, files)
            body = {"files": digests, "metadata": meta, "group": group}
        return await _submit(
            keys,
            key,
            "POST /v1/documents",
            body,
            lambda task_id: tasks.add_files(files, meta, task_id=task_id),
        )
    finally:
        await form.close()
