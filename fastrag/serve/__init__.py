"""``fastrag serve``: an OpenAI-compatible RAG server (FastAPI + uvicorn, the ``[serve]`` extra).

``create_app(target, ...)`` returns the ASGI app (mount it in your own service);
``serve(target, ...)`` runs it with uvicorn. ``target`` is a store path, a
:class:`~fastrag.Document` or a :class:`~fastrag.RAGPipeline`. See :mod:`fastrag.serve.app` for
the endpoints. This package imports nothing heavy: FastAPI loads on the first call, and a
missing extra is a :class:`~fastrag.MissingExtraError` naming it.

The module itself is callable, so ``fastrag.serve(doc)`` is ``fastrag.serve.serve(doc)``.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from fastrag.errors import missing_extra
from fastrag.serve.config import ServeConfig

__all__ = ["ServeConfig", "create_app", "serve", "serve_config"]


def _app_module() -> types.ModuleType:
    """:mod:`fastrag.serve.app`, once the ``[serve]`` extra is known to be installed."""
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
    from fastrag.serve import app  # lazy: the [serve] extra (FastAPI) loads here

    return app


def create_app(target: Any, **kw: Any) -> Any:
    """The ASGI app serving ``target`` (see :func:`fastrag.serve.app.create_app` for the
    options)."""
    return _app_module().create_app(target, **kw)


def serve(
    target: Any,
    *,
    host: str = ServeConfig.host,
    port: int = ServeConfig.port,
    log_level: str = ServeConfig.log_level,
    **kw: Any,
) -> None:
    """Serve ``target`` over HTTP on ``host:port`` (127.0.0.1 by default: pass
    ``host="0.0.0.0"`` deliberately to listen on every interface) until interrupted. Keyword
    arguments go to :func:`create_app`."""
    app = _app_module()
    import uvicorn

    app.setup_logging(log_level)
    uvicorn.run(
        app.create_app(target, **kw),
        host=host,
        port=port,
        log_level=log_level,
        proxy_headers=False,
        server_header=False,
    )


def serve_config(config: ServeConfig) -> None:
    """Serve a ``fastrag serve`` command line's config (see
    :func:`fastrag.serve.app.app_from_config`) on ``config.host:config.port``;
    ``config.workers > 1`` starts that many processes, each opening the store read-only, one
    of them the writer, all sharing one tasks folder (``config.tasks_dir``, default the store's
    :func:`~fastrag.serve.tasks.default_tasks_dir`)."""
    app = _app_module()
    import uvicorn

    opts = {
        "host": config.host,
        "port": config.port,
        "log_level": config.log_level,
        "proxy_headers": False,
        "server_header": False,
    }
    if config.workers <= 1:
        uvicorn.run(app.app_from_config(config), **opts)
        return
    if not config.tasks_dir:
        config = config.replace(tasks_dir=str(app.default_tasks_dir(config.store)))
    app.app_from_config(config)  # fail here, once, on a bad config (not in every worker)
    os.environ[app.CONFIG_ENV] = config.to_json()
    uvicorn.run("fastrag.serve.app:app_from_env", factory=True, workers=config.workers, **opts)


class _CallableModule(types.ModuleType):
    def __call__(self, target: Any, **kw: Any) -> None:
        return serve(target, **kw)


sys.modules[__name__].__class__ = _CallableModule
