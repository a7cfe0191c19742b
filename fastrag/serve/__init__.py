"""``fastrag serve``: an OpenAI-compatible RAG server (FastAPI + uvicorn, the ``[serve]`` extra).

``create_app(target, ...)`` returns the ASGI app (mount it in your own service);
``serve(target, ...)`` runs it with uvicorn. ``target`` is a store path, a
:class:`~fastrag.Document` or a :class:`~fastrag.RAGPipeline`. See :mod:`fastrag.serve.app` for
the endpoints. This package imports nothing heavy: FastAPI loads on the first call, and a
missing extra is a :class:`~fastrag.MissingExtraError` naming it.

The module itself is callable, so ``fastrag.serve(doc)`` is ``fastrag.serve.serve(doc)``.
"""

from __future__ import annotations

import json
import os
import sys
import types
from typing import Any

__all__ = ["create_app", "serve", "serve_config"]


def _require_extra() -> None:
    from fastrag.errors import missing_extra

    for modules, package in (
        (("fastapi",), "fastapi"),
        (("uvicorn",), "uvicorn"),
        (("python_multipart", "multipart"), "python-multipart"),
    ):
        for module in modules:
            try:
                __import__(module)
                break
            except ImportError:
                continue
        else:
            raise missing_extra(package, "serve", "fastrag serve")


def create_app(target: Any, **kw: Any) -> Any:
    """The ASGI app serving ``target`` (see :func:`fastrag.serve.app.create_app` for the
    options)."""
    _require_extra()
    from fastrag.serve.app import create_app as _create

    return _create(target, **kw)


def serve(
    target: Any, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info", **kw: Any
) -> None:
    """Serve ``target`` over HTTP on ``host:port`` (127.0.0.1 by default: pass
    ``host="0.0.0.0"`` deliberately to listen on every interface) until interrupted. Keyword
    arguments go to :func:`create_app`."""
    _require_extra()
    import uvicorn

    from fastrag.serve.app import setup_logging

    setup_logging(log_level)
    app = create_app(target, **kw)
    uvicorn.run(
        app, host=host, port=port, log_level=log_level, proxy_headers=False, server_header=False
    )


def serve_config(
    cfg: dict[str, Any],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    log_level: str = "info",
) -> None:
    """Serve a ``fastrag serve`` command line's config (see
    :func:`fastrag.serve.app.app_from_config`); ``workers > 1`` starts that many processes,
    each opening the store read-only, one of them the writer, all sharing one tasks folder
    (``cfg["tasks_dir"]``, default the store's :func:`~fastrag.serve.tasks.default_tasks_dir`)."""
    _require_extra()
    import uvicorn

    from fastrag.serve.app import CONFIG_ENV, app_from_config
    from fastrag.serve.tasks import default_tasks_dir

    cfg = dict(cfg, log_level=log_level)
    opts = {
        "host": host,
        "port": port,
        "log_level": log_level,
        "proxy_headers": False,
        "server_header": False,
    }
    if workers <= 1:
        uvicorn.run(app_from_config(cfg), **opts)
        return
    if not cfg.get("tasks_dir"):
        cfg["tasks_dir"] = str(default_tasks_dir(cfg["store"]))
    app_from_config(cfg)  # fail here, once, on a bad config (not in every worker)
    os.environ[CONFIG_ENV] = json.dumps(cfg)
    uvicorn.run("fastrag.serve.app:app_from_env", factory=True, workers=workers, **opts)


class _CallableModule(types.ModuleType):
    def __call__(self, target: Any, **kw: Any) -> None:
        return serve(target, **kw)


sys.modules[__name__].__class__ = _CallableModule
