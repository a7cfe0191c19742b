"""Retrieval: ``POST /v1/retrieve`` (JSON, or an Arrow IPC stream with
``Accept: application/vnd.apache.arrow.stream``) and ``GET /v1/groups``."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from fastapi import APIRouter, Request
from fastapi.responses import Response

from fastrag.errors import ConfigError
from fastrag.serve.guard import ApiError
from fastrag.serve.lifecycle import ready_engine
from fastrag.serve.parsing import check_filter, check_lengths, checked_retriever, parse_body
from fastrag.serve.schemas import RetrieveRequest

__all__ = ["ARROW_STREAM", "router"]

ARROW_STREAM = "application/vnd.apache.arrow.stream"

router = APIRouter()


@router.post("/v1/retrieve")
async def retrieve(request: Request) -> Any:
    eng = ready_engine(request)
    settings = request.app.state.settings
    req = await parse_body(request, RetrieveRequest)
    if len(req.queries) > settings.max_queries:
        raise ApiError(
            400,
            f"{len(req.queries)} queries exceed the limit of "
            f"{settings.max_queries} per request; split them",
            param="queries",
        )
    check_lengths(req.queries, "queries", settings.max_query_chars)
    flt = check_filter(req.filter)
    ret = await checked_retriever(eng, req.group, req.similarity)
    arrow = ARROW_STREAM in request.headers.get("accept", "")
    try:
        hits = await eng.search(ret, req.queries, flt=flt, topk=req.topk, as_json=not arrow)
    except ConfigError as exc:  # e.g. a filter naming a field the metadata lacks
        raise ApiError(
            400, str(exc), param="filter" if flt and "filter" in str(exc) else None
        ) from None
    if arrow:
        return Response(arrow_ipc(hits), media_type=ARROW_STREAM)
    enc = json.encoder.encode_basestring  # each query's hits came as JSON from the batch
    empty = [i for i, h in enumerate(hits) if h == "[]"]
    notes = ""
    if empty:
        reasons = await eng.why_no_hits(ret, [req.queries[i] for i in empty], flt)
        notes = ',"no_hits":' + json.dumps(
            [{"query_idx": i, "reason": r} for i, r in zip(empty, reasons, strict=True)],
            ensure_ascii=False,
        )
    return Response(
        f'{{"object":"list","group":{enc(ret.group_name)},"similarity":'
        f'{enc(ret.similarity)},"results":[{",".join(hits)}]{notes}}}'.encode(),
        media_type="application/json",
    )


@router.get("/v1/groups")
async def groups(request: Request) -> dict[str, Any]:
    eng = ready_engine(request)
    listed = await asyncio.to_thread(eng.groups)
    return {
        "object": "list",
        "default": eng.default_group,
        "data": listed,
        "similarities": eng.similarities(),
    }


def arrow_ipc(hits: Sequence[Sequence[Any]]) -> bytes:
    """The hits as one Arrow IPC stream: ``batch_arrow``'s columns (query_idx, rank, node_id,
    score) plus ``text`` and ``metadata`` (JSON)."""
    qidx, rank, ids, scores, texts, metas = [], [], [], [], [], []
    for qi, hs in enumerate(hits):
        for r, h in enumerate(hs, 1):
            qidx.append(qi)
            rank.append(r)
            ids.append(h.id)
            scores.append(h.score)
            texts.append(h.text)
            metas.append(json.dumps(h.metadata, ensure_ascii=False))
    table = pa.table(
        {
            "query_idx": pa.array(qidx, pa.int32()),
            "rank": pa.array(rank, pa.int32()),
            "node_id": pa.array(ids, pa.string()),
            "score": pa.array(scores, pa.float32()),
            "text": pa.array(texts, pa.large_string()),
            "metadata": pa.array(metas, pa.string()),
        }
    )
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()
