"""Startup and shutdown of one ``fastrag serve`` app, and the readiness check every data route
makes first.

The app's parts live on ``app.state`` (set by :func:`fastrag.serve.app.create_app`):
``engine``, ``settings``, ``metrics``, ``tasks``, ``writer``, ``keys``, ``static_dir`` and
``lifecycle`` (a :class:`Lifecycle`); the routes in :mod:`fastrag.serve.routes` read them from
``request.app.state``.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from fastrag.serve.engine import ServeEngine
from fastrag.serve.guard import ApiError, ServeSettings, install_log_filter
from fastrag.serve.metrics import Metrics
from fastrag.serve.tasks import Writer

__all__ = ["Lifecycle", "ready_engine"]

log = logging.getLogger("fastrag.serve")


class Lifecycle:
    """Startup (in the background, so /health answers at once) and shutdown of one app.
    ``start`` runs from the lifespan, or from the first request when the app is mounted in
    another app (Starlette runs no lifespan of a mounted app)."""

    def __init__(
        self,
        engine: ServeEngine,
        writer: Writer,
        metrics: Metrics,
        settings: ServeSettings,
        tasks_dir: Path,
        owned_tasks_dir: bool,
    ) -> None:
        self.engine, self.writer, self.metrics, self.settings = engine, writer, metrics, settings
        self.tasks_dir = tasks_dir
        self.remove_at_stop = tasks_dir if owned_tasks_dir else None
        self.ready = False
        self.error: str | None = None
        self.started = time.time()
        self.seconds: float | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None:
            install_log_filter(self.settings.scrub)
            self._task = asyncio.get_running_loop().create_task(self._startup())

    async def _startup(self) -> None:
        engine = self.engine
        t0 = time.perf_counter()
        try:
            await asyncio.to_thread(engine.start)
        except Exception as exc:
            self.error = self.settings.scrub(f"{type(exc).__name__}: {exc}")
            log.error("fastrag serve could not start: %s", self.error)
            return
        if engine.doc is not None:
            self.writer.start()
        self.seconds = time.perf_counter() - t0
        self.ready = True
        self.metrics.set("fastrag_ready", 1)
        batching = "on" if engine.batcher is not None else "off"
        temporary = " (temporary)" if self.remove_at_stop is not None else ""
        log.info(
            "fastrag serve ready in %.1f s: group %r, micro-batching %s; upload tasks in %s%s",
            self.seconds,
            engine.default_group,
            batching,
            self.tasks_dir,
            temporary,
        )

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.writer.stop()
        self.engine.close()
        if self.remove_at_stop is not None:
            shutil.rmtree(self.remove_at_stop, ignore_errors=True)

    def ready_engine(self) -> ServeEngine:
        """The engine once startup is done; a 503 saying why before that."""
        if not self.ready:
            if self.error is not None:
                raise ApiError(503, f"the server failed to start: {self.error}", "unavailable")
            raise ApiError(
                503,
                "the server is starting (opening the store, compiling kernels); poll GET /ready",
                "unavailable",
            )
        return self.engine


def ready_engine(request: Any) -> ServeEngine:
    """The engine of ``request``'s app once it is ready, else a 503 (see
    :meth:`Lifecycle.ready_engine`)."""
    return request.app.state.lifecycle.ready_engine()
