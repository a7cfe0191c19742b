"""Helpers shared by the tests of tests/serve (a module of its own, so test folders can be
collected together)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


def make_cmrc_store(base: Path, n_articles: int | None = None) -> Path:
    """A store of CMRC 2018 dev paragraphs (one ``.txt`` per 10) with group ``block`` (one node
    per paragraph) and its bm25_chinese index built."""
    import fastrag as fr
    from fastrag.datasets import build_squad_kb, load_cmrc2018_dev

    squad = load_cmrc2018_dev()
    if n_articles is not None:
        squad = {**squad, "data": squad["data"][:n_articles]}
    build_squad_kb(squad, base / "kb")
    doc = fr.Document(str(base / "kb"), store=str(base / "store"))
    doc.create_node_group("block", transform=fr.LineSplitter())
    fr.Retriever(doc, "block", "bm25_chinese", topk=3)("warm")  # builds and stores the index
    return base / "store"


class ServeProcess:
    """``fastrag serve ARGS --port 0`` in a subprocess (stdout and stderr to ``log``); ``url`` once
    ``/ready`` answers 200. ``stop()`` terminates it (kills it if it lingers)."""

    def __init__(
        self,
        args: list[str],
        log: Path,
        *,
        env: dict[str, str] | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
    ) -> None:
        self.log = log
        self.api_key = api_key
        pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        full_env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1", **(env or {})}
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "fastrag.cli",
                    "serve",
                    *args,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                ],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=full_env,
            )
        try:
            self.url = self._wait(timeout)
        except BaseException:
            self.stop()
            raise

    def wait_all_workers(self, timeout: float = 120.0) -> None:
        """With ``--workers N``: wait until /ready answers 200 twenty times in a row (fresh
        connections land on any worker, so every worker is ready, not just one)."""
        deadline, streak = time.monotonic() + timeout, 0
        while streak < 20 and time.monotonic() < deadline:
            ok = httpx.get(self.url + "/ready", headers=self.headers()).status_code == 200
            streak = streak + 1 if ok else 0
            time.sleep(0.02 if ok else 0.2)
        assert streak == 20, self.text()[-2000:]

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def _wait(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        url = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"fastrag serve exited ({self.proc.returncode}):\n{self.text()[-3000:]}"
                )
            if url is None:
                m = _LISTENING.search(self.text())
                if m:
                    url = f"http://127.0.0.1:{m.group(1)}"
            if url is not None:
                try:
                    if (
                        httpx.get(url + "/ready", headers=self.headers(), timeout=2).status_code
                        == 200
                    ):
                        return url
                except httpx.TransportError:
                    pass
            time.sleep(0.05)
        raise AssertionError(f"fastrag serve was not ready in {timeout} s:\n{self.text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
