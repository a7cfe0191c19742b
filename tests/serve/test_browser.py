"""The chat page in a real headless browser (Chromium driven by Selenium) against a real
``fastrag serve`` process over a store of CMRC 2018 paragraphs, with the local OpenAI-compatible
test server (tests/openai_server.py) as the LLM.

It asks a question and watches the answer stream in (several partial texts, then exactly the
LLM's reply) with its sources; asks a follow-up (the page sends the conversation so far);
uploads a text file with a unique word, waits for the upload task to finish, asks about the
word and finds the file among the sources; sees server errors shown once, in the answer's turn
(before the stream starts, and in the middle of it); against a server without an LLM, sees the
extractive answer labelled as such; against a server with an API key, enters the key on
the page, which sends it as a bearer token and keeps it in localStorage; and, served by
``fastrag.WebModule`` for a flow, asks the flow.

Needs Chromium and its driver (Debian: ``apt-get install chromium chromium-driver``) and
selenium; skips, saying which is missing, only where the browser or its driver is not found.
``FASTRAG_SAVE_SCREENSHOT=1`` also copies the screenshot to bench/results/chat_page.png.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from openai_server import OpenAIServer

import fastrag as fr
from fastrag.datasets import build_squad_kb, load_cmrc2018_dev

ROOT = Path(__file__).resolve().parents[2]
REPLY = "根据资料，这是 fastrag 的测试回答：answers stream word by word."
UNIQUE = "Quibbleflux"

pytestmark = pytest.mark.slow


def _find(*names: str) -> str | None:
    for name in names:
        path = shutil.which(name) or (name if os.path.isfile(name) else None)
        if path:
            return path
    return None


def _browser() -> tuple[str, str]:
    """The Chromium binary and its driver, or skip saying what is missing."""
    chrome = _find(
        os.environ.get("FASTRAG_CHROMIUM", ""),
        "chromium",
        "chromium-browser",
        "google-chrome",
        "/usr/bin/chromium",
    )
    driver = _find(
        os.environ.get("FASTRAG_CHROMEDRIVER", ""),
        "chromedriver",
        "/usr/bin/chromedriver",
        "/usr/lib/chromium/chromedriver",
    )
    missing = [what for what, path in (("chromium", chrome), ("chromedriver", driver)) if not path]
    if missing:
        pytest.skip(
            f"no {' or '.join(missing)} found (Debian: apt-get install chromium "
            "chromium-driver; or set FASTRAG_CHROMIUM / FASTRAG_CHROMEDRIVER)"
        )
    try:
        import selenium  # noqa: F401
    except ImportError:  # a browser is here, so this test must run: fail, do not skip
        pytest.fail(
            "Chromium is installed but selenium is not: pip install selenium (it "
            "comes with the [dev] extra)"
        )
    return chrome, driver


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser_paths() -> tuple[str, str]:
    return _browser()


@pytest.fixture(scope="module")
def llm():
    """The fake LLM: always REPLY, streamed one word per event 80 ms apart (slow enough for the
    page to be seen mid-answer)."""
    with OpenAIServer(model="fake-llm", reply=REPLY) as server:
        server.chunk_delay = 0.08
        yield server


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A store of the first 12 CMRC articles' paragraphs, two node groups (so the knowledge
    base picker shows): ``block`` (one node per paragraph) and ``chunk`` (sentences)."""
    base = tmp_path_factory.mktemp("browser")
    squad = load_cmrc2018_dev()
    squad = {**squad, "data": squad["data"][:12]}
    build_squad_kb(squad, base / "kb")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fastrag.cli",
            "ingest",
            str(base / "kb"),
            "--store",
            str(base / "store"),
            "--group",
            "block=lines",
            "--group",
            "chunk=sentence:128:16",
            "-q",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return base / "store"


@contextlib.contextmanager
def _serve(store: Path, llm: OpenAIServer | None, log: Path, *extra: str, env: dict | None = None):
    """``fastrag serve`` in its own process on a free port (``llm`` None: without an LLM); its
    URL once /ready says yes."""
    port = _free_port()
    llm_args = [] if llm is None else ["--llm-base-url", llm.url, "--llm-model", "fake-llm"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fastrag.cli",
                "serve",
                str(store),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--group",
                "block",
                "--similarity",
                "bm25_chinese",
                "--topk",
                "3",
                *llm_args,
                *extra,
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {env['FASTRAG_TEST_KEY']}"} if env else {}
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            try:
                if httpx.get(url + "/ready", headers=headers, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "not ready: " + log.read_text()[-3000:]
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def server(browser_paths, store, llm, tmp_path_factory):
    with _serve(store, llm, tmp_path_factory.mktemp("serve_log") / "serve.log") as url:
        yield url


@pytest.fixture(scope="module")
def driver(browser_paths, tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chrome, chromedriver = browser_paths
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    profile = tmp_path_factory.mktemp("chromium_profile")
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1200,1000",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(flag)
    drv = webdriver.Chrome(service=Service(chromedriver), options=opts)
    drv.set_page_load_timeout(60)
    try:
        yield drv
    finally:
        drv.quit()


# -- helpers -----------------------------------------------------------------------------------
def _wait(predicate, timeout: float = 30.0, what: str = "condition", driver=None):
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            page = driver.find_element("tag name", "body").text[-2000:] if driver else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{page}")
        time.sleep(0.02)


def _ask(driver, question: str) -> list[str]:
    """Type and send ``question``; return the distinct texts #answer showed until done."""
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "question")
    box.clear()
    box.send_keys(question)
    n_before = len(driver.find_elements(By.CSS_SELECTOR, ".turn.assistant"))
    driver.find_element(By.ID, "send").click()
    _wait(
        lambda: len(driver.find_elements(By.CSS_SELECTOR, ".turn.assistant")) > n_before,
        what="the answer bubble",
        driver=driver,
    )
    seen: list[str] = []
    turn = driver.find_element(By.ID, "answer-turn")
    end = time.monotonic() + 60
    while turn.get_attribute("data-state") is None:
        text = driver.find_element(By.ID, "answer").text
        if text and (not seen or seen[-1] != text):
            seen.append(text)
        assert time.monotonic() < end, "the answer did not finish: " + turn.text
        time.sleep(0.01)
    seen.append(driver.find_element(By.ID, "answer").text)
    return seen


def _sources(driver) -> list[dict]:
    from selenium.webdriver.common.by import By

    turn = driver.find_element(By.ID, "answer-turn")
    return [
        {
            "file": s.find_element(By.CLASS_NAME, "file").text,
            "score": s.find_element(By.CLASS_NAME, "score").text,
            "snippet": s.find_element(By.CLASS_NAME, "snippet").text,
        }
        for s in turn.find_elements(By.CLASS_NAME, "source")
    ]


# -- the test ----------------------------------------------------------------------------------
def test_chat_page_streams_answers_sources_and_uploads(driver, server, llm, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.get(server + "/")
    assert driver.title == "fastrag chat"
    # record what the page sends, to check the conversation goes with each question
    driver.execute_script("""
        window.__sent = [];
        const orig = window.fetch;
        window.fetch = (url, opts) => {
          if (opts && typeof opts.body === 'string') window.__sent.push([url, opts.body]);
          return orig(url, opts);
        };""")

    # the knowledge-base picker lists both groups
    kb = _wait(
        lambda: (
            driver.find_element(By.ID, "kb").is_displayed() and driver.find_element(By.ID, "kb")
        ),
        what="the knowledge-base picker",
        driver=driver,
    )
    names = [o.get_attribute("value") for o in Select(kb).options]
    assert {"block", "chunk"} <= set(names), names
    Select(kb).select_by_value("block")

    # 1. a CMRC question: the answer streams in, ends equal to the LLM's reply, with sources
    squad = load_cmrc2018_dev()
    question = squad["data"][0]["paragraphs"][0]["qas"][0]["question"]
    seen = _ask(driver, question)
    assert seen[-1] == REPLY
    assert len(seen) >= 3, f"the answer did not stream (texts seen: {seen})"
    assert all(REPLY.startswith(s) for s in seen), seen
    sources = _sources(driver)
    assert 1 <= len(sources) <= 3
    assert all(s["file"].startswith("part_") and s["snippet"] for s in sources), sources
    assert all(float(s["score"]) > 0 for s in sources), sources
    assert driver.find_element(By.ID, "error").is_displayed() is False

    # 2. a follow-up carries the conversation so far
    _ask(driver, "请再说一遍")
    chat = [
        json.loads(body)
        for url, body in driver.execute_script("return window.__sent")
        if "chat/completions" in url
    ]
    assert [m["role"] for m in chat[-1]["messages"]] == ["user", "assistant", "user"]
    assert chat[-1]["messages"][1]["content"] == REPLY
    assert chat[-1]["stream"] is True

    # 3. upload a file with a unique word, wait for its task, ask about the word
    note = tmp_path / "lighthouse_note.txt"
    note.write_text(
        f"The lighthouse keeper on the northern cape is called {UNIQUE}.\n"
        f"{UNIQUE} has kept the light burning for forty years.\n",
        encoding="utf-8",
    )
    driver.find_element(By.ID, "files").send_keys(str(note))
    driver.find_element(By.ID, "upload").click()
    status = driver.find_element(By.ID, "upload-status")
    _wait(
        lambda: status.get_attribute("data-state") in ("done", "failed"),
        timeout=120,
        what="the upload task",
        driver=driver,
    )
    assert status.get_attribute("data-state") == "done", status.text
    seen = _ask(driver, f"Who is {UNIQUE}?")
    assert seen[-1] == REPLY
    files = [s["file"] for s in _sources(driver)]
    assert any("lighthouse_note.txt" in f for f in files), files

    shot = tmp_path / "chat_page.png"  # the whole page: the window grown to its height
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1200, min(int(height) + 140, 4000))
    assert driver.save_screenshot(str(shot))
    driver.set_window_size(1200, 1000)
    if os.environ.get("FASTRAG_SAVE_SCREENSHOT") == "1":
        dest = ROOT / "bench" / "results" / "chat_page.png"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, dest)

    # 4. an error from the server is shown, not swallowed (the LLM refuses: 400, not retried)
    llm.script(["400:the fake LLM refuses"] * 8)
    try:
        _ask(driver, "这个问题会失败吗？")
    finally:
        llm.script([])
    turn = driver.find_element(By.ID, "answer-turn")
    assert turn.get_attribute("data-state") == "error"
    assert "fake LLM refuses" in turn.find_element(By.CLASS_NAME, "error").text
    # shown once: in the answer's turn, not again in the page's box
    assert not driver.find_element(By.ID, "error").is_displayed()
    assert driver.find_element(By.TAG_NAME, "body").text.count("fake LLM refuses") == 1

    # 5. a failure in the middle of the stream (an error event after the first words) too
    llm.script(["error-event"])
    seen = _ask(driver, "这个回答会中断吗？")
    turn = driver.find_element(By.ID, "answer-turn")
    assert turn.get_attribute("data-state") == "error"
    assert seen[-1] and REPLY.startswith(seen[-1]) and seen[-1] != REPLY, seen
    assert "mid-stream failure" in turn.find_element(By.CLASS_NAME, "error").text
    assert not driver.find_element(By.ID, "error").is_displayed()
    assert driver.find_element(By.TAG_NAME, "body").text.count("mid-stream failure") == 1


def test_chat_page_without_an_llm_shows_the_extractive_answer_labelled(
    browser_paths, driver, store, tmp_path
):
    """A server without an LLM: the page shows `fastrag ask`'s extractive answer (the
    best-matching sentences with their sources), says it is extractive, and shows no error."""
    from selenium.webdriver.common.by import By

    import fastrag as fr
    from fastrag.retrieval.present import hit_label, hit_record
    from fastrag.synth.extractive import extractive_text

    squad = load_cmrc2018_dev()
    question = squad["data"][0]["paragraphs"][0]["qas"][0]["question"]
    doc = fr.Document(store=str(store), mode="r")
    hits = fr.Retriever(doc, "block", "bm25_chinese", topk=3)(question)
    want = extractive_text(
        question, hits, "bm25_chinese", lambda h: hit_label(hit_record(h, doc.source_path))
    )
    with _serve(store, None, tmp_path / "serve.log") as url:
        driver.get(url + "/")
        seen = _ask(driver, question)
        assert seen[-1] == want
        assert seen[-1].startswith("Best-matching passages (extractive answer):\n- ")
        turn = driver.find_element(By.ID, "answer-turn")
        assert turn.get_attribute("data-state") == "done"
        assert turn.get_attribute("data-answer-type") == "extractive"
        assert "extractive" in turn.find_element(By.CLASS_NAME, "who").text
        note = turn.find_element(By.CLASS_NAME, "note")
        assert note.is_displayed() and note.text.startswith("No LLM is configured")
        assert len(_sources(driver)) == len(hits)
        assert not driver.find_element(By.ID, "error").is_displayed()
        assert not turn.find_elements(By.CLASS_NAME, "error")


def test_chat_page_api_key(browser_paths, driver, store, llm, tmp_path):
    """A server with an API key: the page shows the 401 and asks for the key; typed in, it is
    sent as a bearer token, kept in localStorage and still there after a reload."""
    from selenium.webdriver.common.by import By

    key = "test-key-0123456789"
    with _serve(
        store,
        llm,
        tmp_path / "serve.log",
        "--api-key-env",
        "FASTRAG_TEST_KEY",
        env={"FASTRAG_TEST_KEY": key},
    ) as url:
        driver.get(url + "/")
        driver.execute_script("localStorage.clear()")
        driver.refresh()
        err = driver.find_element(By.ID, "error")
        _wait(lambda: err.is_displayed() and "401" in err.text, what="the 401", driver=driver)
        assert "API key" in err.text
        box = driver.find_element(By.ID, "api-key")
        box.send_keys(key)
        driver.find_element(By.ID, "question").click()  # leaving the field saves the key
        _wait(
            lambda: not driver.find_element(By.ID, "error").is_displayed(),
            what="the error to clear once the key is in",
            driver=driver,
        )
        assert driver.execute_script("return localStorage.getItem('fastrag.apiKey')") == key
        seen = _ask(driver, "《战国无双3》是由哪两个公司合作开发的？")
        assert seen[-1] == REPLY
        assert llm.requests[-1].path.endswith("/chat/completions")
        driver.refresh()
        assert driver.find_element(By.ID, "api-key").get_attribute("value") == key
        driver.execute_script("localStorage.clear()")


def test_chat_page_of_a_web_module(driver):
    """fastrag.WebModule serves the same page for a flow: no knowledge-base picker, no upload
    box, and each question answered with the flow's answer to it."""
    from selenium.webdriver.common.by import By

    asked: list[str] = []

    def flow(q: str) -> str:
        asked.append(q)
        return f"流的回答：{q}"

    web = fr.WebModule(flow, title="Flow <QA>").start()
    try:
        driver.get(web.url)
        assert driver.title == "Flow <QA>"
        assert driver.find_element(By.TAG_NAME, "h1").text == "Flow <QA>"
        assert not driver.find_element(By.ID, "upload-box").is_displayed()
        assert not driver.find_element(By.ID, "kb").is_displayed()
        assert _ask(driver, "2008年有哪些赛事？")[-1] == "流的回答：2008年有哪些赛事？"
        assert _ask(driver, "请再说一遍")[-1] == "流的回答：请再说一遍"
        assert asked == ["2008年有哪些赛事？", "请再说一遍"]  # the last message only
        turns = driver.find_elements(By.CSS_SELECTOR, ".turn.assistant")
        assert [t.get_attribute("data-state") for t in turns] == ["done", "done"]
        assert driver.find_element(By.ID, "error").is_displayed() is False
    finally:
        web.stop()
