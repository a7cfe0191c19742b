"""A deadlock detector for tests: run a call in a thread, and when it has not returned after a
generous timeout, dump every thread's stack (``faulthandler``) and fail instead of hanging."""

from __future__ import annotations

import faulthandler
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

TIMEOUT = 120.0  # generous, so load alone never trips it


def within(fn: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    """``fn()``'s result (or its exception); a hang dumps all stacks and fails the test."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            box["error"] = exc

    faulthandler.dump_traceback_later(timeout, file=sys.stderr)
    try:
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(timeout + 5)
    finally:
        faulthandler.cancel_dump_traceback_later()
    if t.is_alive():
        pytest.fail(f"no result after {timeout:.0f} s: a deadlock (stacks above)")
    if "error" in box:
        raise box["error"]
    return box["value"]
