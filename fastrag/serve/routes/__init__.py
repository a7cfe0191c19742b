"""The routes of ``fastrag serve``, one module-level ``APIRouter`` per family. Each route reads
the app's parts from ``request.app.state`` (see :mod:`fastrag.serve.lifecycle`)."""

from __future__ import annotations

from fastrag.serve.routes import chat, documents, probes, retrieve

__all__ = ["ROUTERS"]

#: every router, in the order the app includes them
ROUTERS = (probes.router, retrieve.router, chat.router, documents.router)
