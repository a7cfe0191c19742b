"""A real ``redis-server`` for tests (Debian's ``redis-server`` package; ``.ci/run`` installs
it): started on a free port of 127.0.0.1 with its data in a temporary folder, stopped after.

``FASTRAG_TEST_REDIS_URL`` points the tests at a server of your own instead (its keys under
a per-test prefix). Without either, the tests that need one skip, saying why; on CI
(``CI=true``) they fail instead, so the full pass cannot skip them by accident.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

ENV = "FASTRAG_TEST_REDIS_URL"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """``redis-server`` on 127.0.0.1 (``url``), its files under ``folder``."""

    def __init__(self, folder: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            msg = "needs redis-server (Debian: apt-get install redis-server) or " + ENV
            if os.environ.get("CI"):
                pytest.fail(msg)
            pytest.skip(msg)
        for _ in range(5):  # a free port may be taken between the probe and the bind
            self.port = _free_port()
            self.proc = subprocess.Popen(
                [
                    binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    str(folder),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "no",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._wait_up():
                break
            self.proc.kill()
            self.proc.wait()
        else:
            pytest.fail("redis-server did not start on 127.0.0.1 after 5 tries")
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def _wait_up(self, timeout: float = 60.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return True
            except OSError:
                time.sleep(0.05)
        return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def redis_url(server: RedisServer | None) -> str:
    """A URL with a prefix of its own, on ``server`` or the one ``FASTRAG_TEST_REDIS_URL``
    names."""
    base = os.environ.get(ENV) or server.url
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}prefix=fastrag-test-{uuid.uuid4().hex[:12]}"
