"""Conversations shared by server processes: two ``fastrag serve`` servers, and one server with
``--workers 2``, on one ``--chat-memory`` (a SQLite file, or a real Redis server) keep every
turn of every session, each process's turns in its order.

The defect they guard: each process kept its own view of a ``.json`` memory and replaced the
whole file on every write, so two servers kept half of every conversation, with no error."""

from __future__ import annotations

import threading

import httpx
import pytest
from openai_server import OpenAIServer
from serve_support import ServeProcess, make_cmrc_store

from fastrag.chat import ChatMemory

TURNS = 50  # per session and server process: 2 sessions x 50 turns x 2 messages = 200 each


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_cmrc_store(tmp_path_factory.mktemp("memstore"), n_articles=2)


@pytest.fixture(scope="module")
def llm():
    with OpenAIServer(model="fake-llm", reply="an answer") as server:
        yield server


def _serve(store, llm, memory: str, log, *extra: str) -> ServeProcess:
    return ServeProcess(
        [
            str(store),
            "--group",
            "block",
            "--chat-memory",
            memory,
            "--chat-window",
            "1000",
            "--llm-base-url",
            llm.url,
            "--llm-model",
            "fake-llm",
            "--llm-max-retries",
            "0",
            *extra,
        ],
        log,
    )


def _talk(url: str, tag: str, session: str, errors: list[str]) -> None:
    """TURNS chat turns of ``session``, user messages ``TAG-i``, a new connection each (so a
    server's workers share them)."""
    for i in range(TURNS):
        with httpx.Client(base_url=url, timeout=60) as client:
            resp = client.post(
                "/v1/chat/completions",
                json={"messages": [{"role": "user", "content": f"{tag}-{i}"}], "user": session},
            )
        if resp.status_code != 200:
            errors.append(f"{tag} turn {i}: {resp.status_code} {resp.text[:300]}")
            return


def _check(memory: ChatMemory, tags: list[str]) -> None:
    for tag in tags:
        own = memory.get(f"own-{tag}")
        assert [c for r, c in own if r == "user"] == [f"{tag}-{i}" for i in range(TURNS)]
        assert len(own) == 2 * TURNS
    shared = memory.get("shared")
    assert len(shared) == 2 * TURNS * len(tags)  # 400 of 400 with two processes
    for tag in tags:
        mine = [c for r, c in shared if r == "user" and c.startswith(tag + "-")]
        assert mine == [f"{tag}-{i}" for i in range(TURNS)]
    roles = [r for r, _ in shared]
    assert roles.count("user") == roles.count("assistant")


def _run(urls: dict[str, str]) -> None:
    errors: list[str] = []
    threads = [
        threading.Thread(target=_talk, args=(url, tag, session, errors))
        for tag, url in urls.items()
        for session in (f"own-{tag}", "shared")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_two_servers_keep_every_turn(store, llm, tmp_path, backend, request):
    memory = (
        request.getfixturevalue("redis_url")
        if backend == "redis"
        else str(tmp_path / "chats.sqlite3")
    )
    a = _serve(store, llm, memory, tmp_path / "a.log")
    try:
        b = _serve(store, llm, memory, tmp_path / "b.log")
        try:
            _run({"A": a.url, "B": b.url})
        finally:
            b.stop()
    finally:
        a.stop()
    _check(ChatMemory(path=memory), ["A", "B"])
    assert "Traceback" not in a.text() + b.text()


@pytest.mark.slow
def test_two_workers_keep_every_turn(store, llm, tmp_path):
    memory = str(tmp_path / "chats")
    proc = _serve(store, llm, memory, tmp_path / "w.log", "--workers", "2")
    try:
        proc.wait_all_workers()
        _run({"A": proc.url, "B": proc.url})
    finally:
        proc.stop()
    _check(ChatMemory(path=memory), ["A", "B"])
    assert proc.text().count("Started server process") >= 2
