"""Upload and delete tasks survive a crash of ``fastrag serve`` (kill -9), and retries with an
``Idempotency-Key`` never add a document twice.

The server runs in its own process over a small CMRC store. The crash points are hit
deterministically: "before the commit" by holding the store's writer lock (``STORE/.lock``)
from the test, so the task is ``running`` but cannot commit; "still queued" by holding the
tasks folder's ``writer.lock``, so no writer picks the task; "after the commit, before done"
with the test-only hook ``FASTRAG_TEST_WRITER_CRASH=after_commit`` (the writer's process
``os._exit``\\ s right after the commit, as kill -9 would).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import httpx
import pytest
from filelock import FileLock
from serve_support import ServeProcess, make_cmrc_store

import fastrag as fr
from fastrag.serve.guard import ApiError
from fastrag.serve.idempotency import IdempotencyKeys, fingerprint
from fastrag.serve.tasks import INTERRUPTED, KEEP_S, TaskStore, default_tasks_dir

TEXT = "Zorblax 是一种只在崩溃测试里出现的蓝色萤火虫，住在火山口。"
KEY = "Idempotency-Key"


@pytest.fixture(scope="module")
def base_store(tmp_path_factory):
    return make_cmrc_store(tmp_path_factory.mktemp("recovery"), n_articles=3)


@pytest.fixture
def store(base_store, tmp_path):
    """A fresh copy of the store per test (each test counts its documents)."""
    dst = tmp_path / "store"
    shutil.copytree(base_store, dst)
    return dst


def _serve(store: Path, tasks_dir: Path | None, log: Path, **env: str) -> ServeProcess:
    args = [str(store), "--group", "block", "--topk", "1"]
    if tasks_dir is not None:
        args += ["--tasks-dir", str(tasks_dir)]
    return ServeProcess(args, log, env=env)


def _kill9(server: ServeProcess) -> None:
    server.proc.send_signal(signal.SIGKILL)
    assert server.proc.wait(10) == -signal.SIGKILL


def _task(url: str, task_id: str) -> dict:
    resp = httpx.get(f"{url}/v1/tasks/{task_id}")
    assert resp.status_code == 200, resp.text
    return resp.json()


def _wait(url: str, task_id: str, statuses=("done", "failed"), timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        task = _task(url, task_id)
        if task["status"] in statuses or time.monotonic() > deadline:
            return task
        time.sleep(0.05)


def _gone(path: Path, timeout: float = 60) -> bool:
    """Whether ``path`` is removed within ``timeout`` s: a task's payload goes right after its
    final status is recorded, so a client may see the status a moment first."""
    deadline = time.monotonic() + timeout
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not path.exists()


def _on_disk(tasks_dir: Path, task_id: str) -> dict:
    return json.loads((tasks_dir / f"{task_id}.json").read_text("utf-8"))


def _copies(store: Path, text: str = TEXT) -> list[str]:
    """The root ids of the store's documents whose text is ``text``."""
    doc = fr.Document(store=str(store), mode="r")
    root = doc.group("root")
    return [i for i, t in zip(root.ids, root.texts(), strict=True) if t == text]


def _upload(url: str, key: str | None = None, text: str = TEXT) -> httpx.Response:
    headers = {KEY: key} if key is not None else {}
    return httpx.post(url + "/v1/documents", json={"texts": [text]}, headers=headers)


# -- crashes ---------------------------------------------------------------------------------
def test_killed_before_the_commit_fails_as_interrupted_and_its_key_resubmits(store, tmp_path):
    tasks_dir = tmp_path / "tasks"
    server = _serve(store, tasks_dir, tmp_path / "a.log")
    try:
        with FileLock(str(store / ".lock"), timeout=10):  # the writer cannot commit meanwhile
            resp = _upload(server.url, key="k-before")
            assert resp.status_code == 202, resp.text
            tid = resp.json()["task_id"]
            assert _wait(server.url, tid, ("running",), timeout=300)["status"] == "running"
            _kill9(server)
    finally:
        server.stop()
    assert _on_disk(tasks_dir, tid)["status"] == "running"
    assert (tasks_dir / tid).is_dir()  # its payload, left behind
    assert _copies(store) == []

    server = _serve(store, tasks_dir, tmp_path / "b.log")
    try:
        task = _wait(server.url, tid)
        assert task["status"] == "failed" and task["error"] == INTERRUPTED, task
        assert _gone(tasks_dir / tid)
        assert "was interrupted by a crash" in server.text()
        # the failed task's key is free again: the retry is a new task, and it lands once
        resp = _upload(server.url, key="k-before")
        assert resp.status_code == 202 and "idempotent-replayed" not in resp.headers
        new = resp.json()["task_id"]
        assert new != tid
        assert _wait(server.url, new)["status"] == "done"
        again = _upload(server.url, key="k-before")  # from now on the key names the new task
        assert again.json()["task_id"] == new and again.headers["idempotent-replayed"] == "true"
    finally:
        server.stop()
    assert len(_copies(store)) == 1


def test_killed_after_the_commit_is_done_after_restart_with_its_doc_ids(store, tmp_path):
    tasks_dir = tmp_path / "tasks"
    server = _serve(store, tasks_dir, tmp_path / "a.log", FASTRAG_TEST_WRITER_CRASH="after_commit")
    try:
        resp = _upload(server.url, key="k-after")
        assert resp.status_code == 202, resp.text
        tid = resp.json()["task_id"]
        assert server.proc.wait(60) == 70  # the hook's os._exit, right after the commit
    finally:
        server.stop()
    assert _on_disk(tasks_dir, tid)["status"] == "running"
    (landed,) = _copies(store)  # the change is in the store, the task does not know yet

    server = _serve(store, tasks_dir, tmp_path / "b.log")
    try:
        task = _wait(server.url, tid)
        assert task["status"] == "done" and task["doc_ids"] == [landed], task
        assert task["result"] == {"documents": 1, "texts": 1}
        assert _gone(tasks_dir / tid)
        # the client's retry after the crash gets the finished task, not a second document
        retry = _upload(server.url, key="k-after")
        assert retry.status_code == 202 and retry.json()["task_id"] == tid
        assert retry.json()["status"] == "done"
        hit = httpx.post(
            server.url + "/v1/retrieve", json={"queries": ["Zorblax 萤火虫"], "group": "root"}
        ).json()
        assert hit["results"][0][0]["text"] == TEXT
    finally:
        server.stop()
    assert _copies(store) == [landed]


def test_delete_killed_after_the_commit_is_done_after_restart(store, tmp_path):
    tasks_dir = tmp_path / "tasks"
    (doc_id,) = fr.Document(store=str(store), mode="a").add(texts=[TEXT])
    server = _serve(store, tasks_dir, tmp_path / "a.log", FASTRAG_TEST_WRITER_CRASH="after_commit")
    try:
        resp = httpx.delete(f"{server.url}/v1/documents/{doc_id}", headers={KEY: "k-del"})
        assert resp.status_code == 202, resp.text
        tid = resp.json()["task_id"]
        assert server.proc.wait(60) == 70
    finally:
        server.stop()
    assert _copies(store) == []
    server = _serve(store, tasks_dir, tmp_path / "b.log")
    try:
        task = _wait(server.url, tid)
        assert task["status"] == "done" and task["deleted"] == 1, task
        # a retry of the delete is its task again, not a 404 for the document now gone
        retry = httpx.delete(f"{server.url}/v1/documents/{doc_id}", headers={KEY: "k-del"})
        assert retry.status_code == 202 and retry.json()["task_id"] == tid
        assert httpx.delete(f"{server.url}/v1/documents/{doc_id}").status_code == 404
    finally:
        server.stop()


def test_queued_tasks_of_a_killed_server_run_after_restart(store, tmp_path):
    tasks_dir = tmp_path / "tasks"
    tasks_dir.mkdir()
    # the writer holds the lock from its start: take it first, so the server's writer never does
    with FileLock(str(tasks_dir / "writer.lock"), timeout=10):
        server = _serve(store, tasks_dir, tmp_path / "a.log")
        try:
            tids = [_upload(server.url, text=f"{TEXT} {i}").json()["task_id"] for i in range(3)]
            time.sleep(0.5)
            assert [_task(server.url, t)["status"] for t in tids] == ["queued"] * 3
            _kill9(server)
        finally:
            server.stop()
    server = _serve(store, tasks_dir, tmp_path / "b.log")
    try:
        tasks = [_wait(server.url, t) for t in tids]
    finally:
        server.stop()
    assert [t["status"] for t in tasks] == ["done"] * 3, tasks
    assert [len(_copies(store, f"{TEXT} {i}")) for i in range(3)] == [1, 1, 1]
    assert tasks[0]["finished"] <= tasks[1]["started"]  # in creation order, one at a time
    assert not any(p.is_dir() and p.name in tids for p in tasks_dir.iterdir())


# -- the default tasks folder -------------------------------------------------------------------
def test_default_tasks_dir_is_per_store_outside_it_and_outlives_the_server(store, tmp_path):
    expected = default_tasks_dir(store)
    assert expected.is_relative_to(Path(os.environ["XDG_STATE_HOME"]))  # see conftest.py
    assert not expected.resolve().is_relative_to(store.resolve())
    twin = tmp_path / "elsewhere" / "store"  # same name, another folder: another tasks folder
    assert default_tasks_dir(twin) != expected and default_tasks_dir(twin).name[:6] == "store-"
    assert default_tasks_dir(tmp_path / "." / "store") == expected

    server = _serve(store, None, tmp_path / "a.log")
    try:
        assert f"upload tasks in {expected}" in server.text()
        tid = _upload(server.url).json()["task_id"]
        assert _wait(server.url, tid)["status"] == "done"
    finally:
        server.stop()
    assert _on_disk(expected, tid)["status"] == "done"
    server = _serve(store, None, tmp_path / "b.log")
    try:
        assert _task(server.url, tid)["status"] == "done"  # remembered across the restart
    finally:
        server.stop()


# -- idempotency --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def keyed(base_store, tmp_path_factory):
    """One server for the Idempotency-Key tests (its own store and tasks folder)."""
    base = tmp_path_factory.mktemp("keyed")
    shutil.copytree(base_store, base / "store")
    server = _serve(base / "store", base / "tasks", base / "server.log")
    yield server, base / "store", base / "tasks"
    server.stop()
    assert "Traceback" not in server.text()


def test_the_same_upload_twice_with_one_key_is_one_task_and_one_document(keyed):
    server, store, _ = keyed
    text = f"{TEXT} once"
    first = _upload(server.url, key="k-once", text=text)
    second = _upload(server.url, key="k-once", text=text)
    assert first.status_code == second.status_code == 202
    assert second.json()["task_id"] == first.json()["task_id"]
    assert "idempotent-replayed" not in first.headers
    assert second.headers["idempotent-replayed"] == "true"
    assert _wait(server.url, first.json()["task_id"])["status"] == "done"
    third = _upload(server.url, key="k-once", text=text)
    assert third.json()["task_id"] == first.json()["task_id"]
    assert third.json()["status"] == "done"
    assert len(_copies(store, text)) == 1
    # no key: every request is its own task
    a, b = _upload(server.url, text=f"{TEXT} twice"), _upload(server.url, text=f"{TEXT} twice")
    assert a.json()["task_id"] != b.json()["task_id"]


def test_a_key_reused_for_another_request_is_a_422(keyed):
    server, store, _ = keyed
    tid = _upload(server.url, key="k-reuse", text=f"{TEXT} r1").json()["task_id"]
    resp = _upload(server.url, key="k-reuse", text=f"{TEXT} r2")
    assert resp.status_code == 422
    err = resp.json()["error"]
    assert err["param"] == KEY and "different request" in err["message"]
    assert tid in err["message"] and "new key" in err["message"]
    other = httpx.delete(f"{server.url}/v1/documents/{'0' * 32}", headers={KEY: "k-reuse"})
    assert other.status_code == 422
    _wait(server.url, tid)
    assert _copies(store, f"{TEXT} r2") == []
    too_long = _upload(server.url, key="k" * 256)
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == KEY


def test_multipart_retries_match_by_content_not_by_boundary(keyed):
    server, store, _ = keyed
    text = f"{TEXT} multipart"

    def send(content: str) -> httpx.Response:  # httpx picks a new random boundary each time
        return httpx.post(
            server.url + "/v1/documents",
            headers={KEY: "k-multi"},
            files={"file": ("note.txt", content.encode())},
            data={"metadata": '{"team": "qa"}'},
        )

    first, second = send(text), send(text)
    assert first.status_code == second.status_code == 202, first.text
    assert first.json()["task_id"] == second.json()["task_id"]
    assert send(text + " changed").status_code == 422
    assert _wait(server.url, first.json()["task_id"])["status"] == "done"
    assert len(_copies(store, text)) == 1


def test_the_key_of_a_failed_task_takes_a_new_request(keyed):
    server, store, _ = keyed

    def send(content: bytes) -> httpx.Response:
        return httpx.post(
            server.url + "/v1/documents",
            headers={KEY: "k-failed"},
            files={"file": ("blob.txt", content)},
        )

    bad = send(bytes(range(256)) * 8)  # no reader finds text in it: the task fails
    assert _wait(server.url, bad.json()["task_id"])["status"] == "failed"
    good = send(f"{TEXT} fixed".encode())
    assert good.status_code == 202 and good.json()["task_id"] != bad.json()["task_id"]
    assert _wait(server.url, good.json()["task_id"])["status"] == "done"
    assert len(_copies(store, f"{TEXT} fixed")) == 1


def test_concurrent_retries_with_one_key_make_one_task(keyed):
    server, store, _ = keyed
    text = f"{TEXT} concurrent"
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        resps = list(pool.map(lambda _: _upload(server.url, key="k-race", text=text), range(8)))
    codes = {r.status_code for r in resps}
    assert codes <= {202, 409} and 202 in codes, [r.text for r in resps]
    ids = {r.json()["task_id"] for r in resps if r.status_code == 202}
    assert len(ids) == 1
    for r in resps:
        if r.status_code == 409:
            assert re.search("still being accepted; retry", r.json()["error"]["message"])
    assert _wait(server.url, ids.pop())["status"] == "done"
    assert len(_copies(store, text)) == 1


# -- the tasks folder's bookkeeping, in process ------------------------------------------------
def test_prune_forgets_old_finished_tasks_and_dead_payloads_but_keeps_the_queue(tmp_path):
    tasks = TaskStore(tmp_path / "tasks")
    now = time.time()
    old = tasks.add_texts(["a"], None)["id"]
    tasks.update(old, status="done", finished=now - KEEP_S - 1)
    recent = tasks.add_texts(["b"], None)["id"]
    tasks.update(recent, status="failed", finished=now)
    queued = tasks.add_texts(["c"], None)["id"]
    dead, young = tasks.root / ("d" * 32), tasks.root / ("e" * 32)  # payloads without a record
    dead.mkdir()
    young.mkdir()  # an upload being written right now: its record comes next
    os.utime(dead, (now - 7200, now - 7200))
    tasks.prune()
    assert tasks.get(old) is None and not tasks.payload(old).exists()
    assert tasks.get(recent)["status"] == "failed" and not tasks.payload(recent).exists()
    assert tasks.get(queued)["status"] == "queued" and tasks.payload(queued).is_dir()
    assert not dead.exists() and young.is_dir()
    assert [r["id"] for r in tasks.queued()] == [queued]


def test_keys_claim_replay_conflict_and_expiry(tmp_path):
    tasks = TaskStore(tmp_path / "tasks")
    keys = IdempotencyKeys(tasks, keep_s=1.0)
    digest = fingerprint("POST /v1/documents", {"texts": ["a"]})
    assert fingerprint("POST /v1/documents", {"texts": ["a"], "group": None}) != digest
    tid, replay = keys.claim("k", digest, "POST /v1/documents")
    assert replay is None
    with pytest.raises(ApiError, match="still being accepted") as info:
        keys.claim("k", digest, "POST /v1/documents")  # its task is not written yet
    assert info.value.status == 409
    tasks.add_texts(["a"], None, task_id=tid)
    assert keys.claim("k", digest, "POST /v1/documents") == (tid, tasks.get(tid))
    with pytest.raises(ApiError, match=f"different request .first: POST /v1/documents, task {tid}"):
        keys.claim("k", "another digest", "POST /v1/documents")
    keys.release("k", "not-its-task")  # only the claim's own task releases it
    assert keys.claim("k", digest, "POST /v1/documents")[0] == tid
    time.sleep(1.1)
    assert keys.claim("k", digest, "POST /v1/documents")[0] != tid  # expired: a new task
    time.sleep(1.1)
    assert keys.prune() == 1 and list(keys.root.glob("*.json")) == []
