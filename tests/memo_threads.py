"""Threads that share one analyzer while another thread releases its memo again and again."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def errors_while_releasing(analyzer: Any, work: Callable[[], None], workers: int = 4) -> list:
    """Run ``work`` in ``workers`` threads while one more thread calls
    ``analyzer.release_memo()`` until they finish; the exceptions they raised."""
    errors: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            errors.append(exc)

    def release() -> None:
        while not done.is_set():
            analyzer.release_memo()

    releaser = threading.Thread(target=release)
    releaser.start()
    threads = [threading.Thread(target=run) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    releaser.join()
    return errors
