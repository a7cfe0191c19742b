"""The write side of ``fastrag serve`` behind its routes (:mod:`fastrag.serve.routes.documents`):
multipart uploads and JSON texts become tasks (:mod:`fastrag.serve.tasks`) that the single
writer runs, answered ``202 {"task_id", "status", ...}`` at once. With an ``Idempotency-Key``
header a retried request gets its first task back instead of a second one
(:mod:`fastrag.serve.idempotency`).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.datastructures import UploadFile

from fastrag.serve.guard import ApiError, BodyTooLarge, ServeSettings
from fastrag.serve.idempotency import IdempotencyKeys, fingerprint
from fastrag.serve.parsing import checked_retriever, load_json
from fastrag.serve.tasks import TaskStore

__all__ = ["MAX_TEXTS", "accepted", "submit", "submit_upload", "task_view"]

MAX_TEXTS = 100_000


async def submit(
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


def accepted(rec: dict[str, Any], replayed: bool) -> JSONResponse:
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


async def submit_upload(
    request: Request,
    engine: Any,
    tasks: TaskStore,
    keys: IdempotencyKeys,
    key: str | None,
    settings: ServeSettings,
) -> tuple[dict[str, Any], bool]:
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
        return await submit(
            keys,
            key,
            "POST /v1/documents",
            body,
            lambda task_id: tasks.add_files(files, meta, task_id=task_id),
        )
    finally:
        await form.close()
