"""``fastrag serve`` on a mixed English/Chinese folder: the default ``bm25`` finds both
languages, requests choose their similarity, groups have their own, and an empty result says
why (in /v1/retrieve and in chat answers, never a bare "Empty Response")."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
from openai_server import OpenAIServer
from serve_support import ServeProcess

import fastrag as fr

DOCS = Path(__file__).resolve().parents[2] / "bench" / "data" / "mixed_docs" / "corpus"
PAGES = ["components/upload", "components/table", "components/button", "docs/react/i18n"]


@pytest.fixture(scope="module")
def llm():
    with OpenAIServer(model="fake-llm", reply="an answer from the fake LLM") as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory, llm):
    base = tmp_path_factory.mktemp("mixed")
    for lang in ("en", "zh"):
        for page in PAGES:
            dest = base / "docs" / lang / f"{page}.md"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(DOCS / lang / f"{page}.md", dest)
    doc = fr.Document(str(base / "docs"), store=str(base / "store"))
    doc.create_node_group("chunk", transform=fr.SentenceSplitter(chunk_size=256, chunk_overlap=32))
    fr.Retriever(doc, "chunk", "bm25", topk=1)("warm")
    proc = ServeProcess(
        [
            str(base / "store"),
            "--group",
            "chunk",
            "--similarity",
            "bm25,root=bm25_cjk",
            "--topk",
            "3",
            "--llm-base-url",
            llm.url,
            "--llm-model",
            "fake-llm",
            "--llm-max-retries",
            "0",
        ],
        base / "server.log",
    )
    yield proc
    proc.stop()
    assert "Traceback" not in proc.text()


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def _files(result: list[dict]) -> list[str]:
    return [h["metadata"]["file_path"].replace("\\", "/") for h in result]


def test_default_bm25_answers_both_languages(http):
    body = http.post("/v1/retrieve", json={"queries": ["如何上传文件", "disable a button"]}).json()
    assert body["similarity"] == "bm25" and "no_hits" not in body
    assert _files(body["results"][0])[0].endswith("zh/components/upload.md")
    assert _files(body["results"][1])[0].endswith("components/button.md")  # code: both


def test_requests_and_groups_choose_their_similarity(http):
    groups = http.get("/v1/groups").json()
    by_name = {g["name"]: g["similarity"] for g in groups["data"]}
    assert by_name["chunk"] == "bm25" and by_name["root"] == "bm25_cjk"
    assert {"bm25", "bm25_english", "bm25_chinese", "bm25_cjk"} <= set(groups["similarities"])
    root = http.post("/v1/retrieve", json={"queries": ["上传"], "group": "root"}).json()
    assert root["similarity"] == "bm25_cjk" and root["results"][0]
    chosen = http.post(
        "/v1/retrieve", json={"queries": ["如何上传文件"], "similarity": "bm25_english"}
    ).json()
    assert chosen["similarity"] == "bm25_english" and chosen["results"] == [[]]
    reason = chosen["no_hits"][0]
    assert reason["query_idx"] == 0
    assert "keeps a run of Chinese characters as one word" in reason["reason"]
    bad = http.post("/v1/retrieve", json={"queries": ["x"], "similarity": "bm26"})
    assert bad.status_code == 400
    err = bad.json()["error"]
    assert err["param"] == "similarity" and "unknown similarity 'bm26'" in err["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_without_hits_says_why_and_calls_no_llm(http, llm, stream):
    before = len(llm.requests)
    resp = http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "the of and"}], "stream": stream},
    )
    assert resp.status_code == 200
    if stream:
        text = "".join(
            (__import__("json").loads(line[6:])["choices"][0]["delta"].get("content") or "")
            for line in resp.text.splitlines()
            if line.startswith("data: {")
        )
    else:
        text = resp.json()["choices"][0]["message"]["content"]
    assert text.startswith(
        "No passage in the knowledge base matches the question: the query has no indexable terms"
    )
    assert "Empty Response" not in text
    assert len(llm.requests) == before


def test_a_session_continues_the_conversation(http, llm):
    """Chats with a ``session_id`` (or OpenAI's ``user``) keep their history on the server:
    the second turn's retrieval query is condensed from the first."""
    first = http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "如何上传文件"}], "session_id": "s1"},
    )
    assert first.status_code == 200, first.text
    before = len(llm.requests)
    second = http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "and tables?"}], "user": "s1"},
    )
    assert second.status_code == 200
    prompts = [r.body["messages"][-1]["content"] for r in llm.requests[before:]]
    condense = [p for p in prompts if "standalone query" in p]
    assert len(condense) == 1 and "如何上传文件" in condense[0] and "and tables?" in condense[0]
    other = http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "and tables?"}], "session_id": "s2"},
    )
    assert other.status_code == 200
    assert not any(
        "standalone query" in r.body["messages"][-1]["content"]
        for r in llm.requests[len(llm.requests) - 1 :]
    )
