"""Every bad request to ``fastrag serve`` is a 4xx naming what was wrong, and secrets in a URL
never reach the log: the server runs in its own process (with an API key) and its log is read
back. ``load_json``'s depth rule is also checked directly."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from serve_support import ServeProcess, make_cmrc_store

import fastrag as fr
from fastrag.serve.guard import ApiError
from fastrag.serve.parsing import MAX_JSON_DEPTH, load_json

API_KEY = "fr-bad-requests-key-5f1e0c"
DEEP = b"[" * 100_000  # 100 KB of nesting that is never closed
DEEP_CLOSED = b"[" * 100_000 + b"]" * 100_000  # valid JSON, 200 KB, 100,000 levels


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("bad")
    store = make_cmrc_store(base, n_articles=2)
    proc = ServeProcess(
        [
            str(store),
            "--group",
            "block",
            "--topk",
            "1",
            "--api-key-env",
            "FR_BAD_KEY",
            "--tasks-dir",
            str(base / "tasks"),
        ],
        base / "server.log",
        env={"FR_BAD_KEY": API_KEY},
        api_key=API_KEY,
    )
    proc.query = fr.Document(store=str(store), mode="r").group("block").texts()[0][:16]
    yield proc
    proc.stop()


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url, headers=server.headers(), timeout=30) as client:
        yield client


def _nested(depth: int, leaf: str = '"x"') -> str:
    return "[" * depth + leaf + "]" * depth


def _deep_metadata(depth: int) -> bytes:
    return ('{"texts": ["a"], "metadatas": [{"m": ' + _nested(depth) + "}]}").encode()


def _deep_chat(depth: int) -> bytes:
    return (
        '{"messages": [{"role": "user", "content": "hi"}], "tools": ' + _nested(depth) + "}"
    ).encode()


@pytest.mark.parametrize("path", ["/v1/retrieve", "/v1/chat/completions", "/v1/documents"])
@pytest.mark.parametrize(
    "body", [DEEP, DEEP_CLOSED, b'{"queries": ' + DEEP], ids=["open", "closed", "in-a-field"]
)
def test_deeply_nested_json_is_a_400_and_the_server_stays_healthy(server, http, path, body):
    resp = http.post(path, content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == 400, resp.text
    msg = resp.json()["error"]["message"]
    assert msg.startswith("request body nests JSON") and f"{MAX_JSON_DEPTH} levels" in msg
    assert http.get("/health").status_code == 200
    ok = http.post("/v1/retrieve", json={"queries": [server.query]})
    assert ok.status_code == 200 and len(ok.json()["results"][0]) == 1


@pytest.mark.parametrize(
    "path, make, outer",
    [
        ("/v1/documents", _deep_metadata, 3),  # {"metadatas": [{"m": ...}]}: 3 levels around
        ("/v1/chat/completions", _deep_chat, 1),  # {"tools": ...}: 1 level around
    ],
)
def test_the_depth_limit_counts_every_level_of_the_body(http, path, make, outer):
    headers = {"Content-Type": "application/json"}
    over = http.post(path, content=make(MAX_JSON_DEPTH + 1 - outer), headers=headers)
    assert over.status_code == 400 and "nests JSON" in over.json()["error"]["message"]
    at = http.post(path, content=make(MAX_JSON_DEPTH - outer), headers=headers)
    assert "nests JSON" not in at.text  # accepted, or refused for another reason
    assert at.status_code == (202 if path == "/v1/documents" else 400), at.text


def test_deep_multipart_metadata_is_a_400_naming_the_field(http):
    for meta in ('{"m": ' + _nested(100_000) + "}", "[" * 100_000):
        resp = http.post(
            "/v1/documents", files={"file": ("a.txt", b"some text")}, data={"metadata": meta}
        )
        assert resp.status_code == 400, resp.text
        err = resp.json()["error"]
        assert err["param"] == "metadata" and err["message"].startswith("metadata nests JSON")
    bad = http.post("/v1/documents", files={"file": ("a.txt", b"x")}, data={"metadata": "{"})
    assert bad.status_code == 400 and "metadata is not valid JSON" in bad.json()["error"]["message"]


def test_no_traceback_in_the_log_after_bad_bodies(server, http):
    http.post("/v1/retrieve", content=DEEP, headers={"Content-Type": "application/json"})
    assert http.get("/health").status_code == 200
    log = server.text()
    assert "Traceback" not in log and "RecursionError" not in log


def _lines_with(server: ServeProcess, marker: str, timeout: float = 60) -> list[str]:
    """The log lines holding ``marker``, once there is one (uvicorn logs after the reply)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [ln for ln in server.text().splitlines() if marker in ln]
        if lines or time.monotonic() > deadline:
            time.sleep(0.3)  # a second line (or a logging error) would show up by now
            return [ln for ln in server.text().splitlines() if marker in ln]
        time.sleep(0.05)


@pytest.mark.parametrize(
    "query, shown",
    [
        (f"api_key={API_KEY}&marker=m1", "api_key=***&marker=m1"),  # the server's own key
        ("api_key=not-the-key-31337&marker=m2", "api_key=***&marker=m2"),
        (
            "marker=m3&token=tok-9a8b7c&key=k-123&access_token=at-456",
            "marker=m3&token=***&key=***&access_token=***",
        ),
        ("marker=m4&monkey=banana&keyword=kiwi", "marker=m4&monkey=banana&keyword=kiwi"),
    ],
    ids=["the-server-key", "another-api-key", "token-key-access-token", "look-alikes-kept"],
)
def test_secret_query_parameters_are_redacted_in_one_access_line(server, http, query, shown):
    before = server.text()
    assert http.get(f"/v1/models?{query}").status_code == 200
    marker = re.search(r"marker=(m\d)", query).group(0)
    lines = _lines_with(server, marker)
    assert len(lines) == 1, lines
    assert f'"GET /v1/models?{shown} HTTP/1.1" 200' in lines[0]
    new = server.text()[len(before) :]
    for secret in (API_KEY, "not-the-key-31337", "tok-9a8b7c", "k-123", "at-456"):
        assert secret not in new
    assert "Logging error" not in new and "Traceback" not in new


def test_an_unauthorized_request_with_the_key_in_the_url_is_redacted_too(server):
    resp = httpx.get(f"{server.url}/v1/groups?api_key={API_KEY}&marker=m5")
    assert resp.status_code == 401  # a key in the URL is not a way to authenticate
    (line,) = _lines_with(server, "marker=m5")
    assert "api_key=***" in line and API_KEY not in server.text()


# -- load_json, directly ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "depth, ok", [(1, True), (MAX_JSON_DEPTH, True), (MAX_JSON_DEPTH + 1, False), (5000, False)]
)
def test_load_json_allows_exactly_max_json_depth_levels(depth, ok):
    raw = _nested(depth - 1, "[]")  # ``depth`` arrays in all
    if ok:
        assert load_json(raw) is not None
    else:
        with pytest.raises(ApiError, match=f"more than {MAX_JSON_DEPTH} levels deep") as info:
            load_json(raw)
        assert info.value.status == 400


def test_load_json_names_what_is_not_json():
    with pytest.raises(ApiError, match="metadata is not valid JSON") as info:
        load_json("{", "metadata", param="metadata")
    assert info.value.param == "metadata"
