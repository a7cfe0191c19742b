"""Write tasks (upload, delete) and the single writer that runs them.

A task is a JSON record ``TASKS_DIR/<id>.json`` (written atomically) plus its payload in
``TASKS_DIR/<id>/`` (the uploaded files, or the texts), so every worker process of one server
can queue tasks and answer ``GET /v1/tasks/<id>``. Exactly one :class:`Writer` runs them: each
worker starts a writer thread, and the one holding the OS file lock ``TASKS_DIR/writer.lock``
owns the writable Document and works through the queue in creation order (the others wait for
the lock, and take over if its process ends). After each task the writer rebuilds the store's
groups and the served retrievers' indexes, so readers load them instead of building them again,
then marks the task done; readers see the change on their next retrieval (see
:meth:`fastrag.serve.engine.ServeEngine.refresh_if_changed`).

Statuses: ``queued`` -> ``running`` -> ``done`` | ``failed`` (``error`` says why).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

__all__ = ["TaskStore", "Writer", "safe_filename"]

log = logging.getLogger("fastrag.serve")

_TASK_ID = re.compile(r"^[0-9a-f]{32}$")
_UNSAFE = re.compile(r"[^\w.\- ]+", re.UNICODE)


def safe_filename(name: str | None, default: str = "upload.txt") -> str:
    """The last path component of an uploaded file's name, without characters that could
    escape or confuse a directory (the extension is kept: it picks the reader)."""
    base = re.split(r"[\\/]", name or "")[-1].strip().lstrip(".")
    base = _UNSAFE.sub("_", base)[:200]
    return base or default


class TaskStore:
    """Task records and payloads in one directory (shared by a server's workers)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    # -- records -------------------------------------------------------------------------------
    def _path(self, task_id: str) -> Path:
        return self.root / f"{task_id}.json"

    def _write(self, record: dict[str, Any]) -> None:
        path = self._path(record["id"])
        tmp = path.with_suffix(f".json.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(record, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)

    def get(self, task_id: str) -> dict[str, Any] | None:
        if not isinstance(task_id, str) or not _TASK_ID.match(task_id):
            return None
        try:
            return json.loads(self._path(task_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def update(self, task_id: str, **fields: Any) -> dict[str, Any]:
        record = self.get(task_id)
        if record is None:
            raise KeyError(task_id)
        record.update(fields)
        self._write(record)
        return record

    def queued(self) -> list[dict[str, Any]]:
        """Queued tasks, oldest first."""
        out = []
        for p in self.root.glob("*.json"):
            rec = self.get(p.stem)
            if rec is not None and rec.get("status") == "queued":
                out.append(rec)
        return sorted(out, key=lambda r: (r["created_ns"], r["id"]))

    def payload(self, task_id: str) -> Path:
        return self.root / task_id

    # -- creation ------------------------------------------------------------------------------
    def _new(self, kind: str, **fields: Any) -> dict[str, Any]:
        task_id = uuid.uuid4().hex
        now = time.time_ns()
        return {"id": task_id, "object": "task", "kind": kind, "status": "queued",
                "created": now / 1e9, "created_ns": now, "started": None, "finished": None,
                "error": None, "doc_ids": [], "deleted": None, "warnings": [], **fields}

    def add_texts(self, texts: list[str], metadatas: list[dict] | None) -> dict[str, Any]:
        rec = self._new("add", n_texts=len(texts), files=[])
        d = self.payload(rec["id"])
        d.mkdir()
        (d / "texts.json").write_text(json.dumps({"texts": texts, "metadatas": metadatas},
                                                 ensure_ascii=False), encoding="utf-8")
        self._write(rec)
        return rec

    def add_files(self, files: Iterable[tuple[str, Any]],
                  metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """``files``: (original name, readable binary file object) pairs, copied here."""
        rec = self._new("add", n_texts=None, files=[])
        d = self.payload(rec["id"])
        names = []
        for i, (name, fobj) in enumerate(files):
            safe = safe_filename(name)
            target = d / "files" / str(i) / safe
            target.parent.mkdir(parents=True)
            with open(target, "wb") as out:
                shutil.copyfileobj(fobj, out, 1 << 20)
            names.append(safe)
        if metadata:
            (d / "metadata.json").write_text(json.dumps(metadata, ensure_ascii=False),
                                             encoding="utf-8")
        rec["files"] = names
        self._write(rec)
        return rec

    def delete(self, doc_id: str) -> dict[str, Any]:
        rec = self._new("delete", doc_id=doc_id)
        self._write(rec)
        return rec


class Writer:
    """The single writer: runs queued tasks one at a time with the writable Document.

    ``engine``: the :class:`~fastrag.serve.engine.ServeEngine` whose Document (or store) the
    tasks change; ``metrics``: counts finished tasks; ``scrub``: cleans error messages.
    """

    def __init__(self, tasks: TaskStore, engine: Any, *, metrics: Any = None,
                 scrub: Any = None, poll_s: float = 0.1) -> None:
        self.tasks = tasks
        self.engine = engine
        self.metrics = metrics
        self.scrub = scrub or (lambda s: s)
        self.poll_s = poll_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._doc: Any = None
        self._retrievers: dict[tuple[str, str], Any] = {}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="fastrag-writer", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the loop ------------------------------------------------------------------------------
    def _main(self) -> None:
        lock = FileLock(str(self.tasks.root / "writer.lock"))
        while not self._stop.is_set():
            try:
                lock.acquire(timeout=0.5)
            except Timeout:
                continue
            try:
                while not self._stop.is_set():
                    queued = self.tasks.queued()
                    if not queued:
                        self._wake.wait(self.poll_s)
                        self._wake.clear()
                        continue
                    self._run(queued[0])
            finally:
                lock.release()

    def _run(self, rec: dict[str, Any]) -> None:
        tid = rec["id"]
        self.tasks.update(tid, status="running", started=time.time())
        try:
            result = self._apply(rec)
        except Exception as exc:
            msg = self._clean(f"{type(exc).__name__}: {exc}", tid)
            log.warning("task %s (%s) failed: %s", tid, rec["kind"], msg)
            self.tasks.update(tid, status="failed", finished=time.time(), error=msg)
            status = "failed"
        else:
            self.tasks.update(tid, status="done", finished=time.time(), **result)
            status = "done"
        finally:
            shutil.rmtree(self.tasks.payload(tid), ignore_errors=True)
        if self.metrics is not None:
            self.metrics.inc("fastrag_tasks_total", kind=rec["kind"], status=status)

    def _clean(self, msg: str, tid: str) -> str:
        """The message without the payload folder's paths (they mean nothing to a client)."""
        files = self.tasks.payload(tid) / "files"
        msg = re.sub(re.escape(str(files)) + r"[\\/]\d+[\\/]", "", msg)
        return self.scrub(msg.replace(str(self.tasks.payload(tid)), "<upload>"))

    # -- the writable Document -----------------------------------------------------------------
    def _wdoc(self) -> Any:
        from fastrag.documents.document import Document

        if self._doc is None:
            doc = self.engine.require_doc()
            if doc.store is None:
                self._doc = doc  # an in-memory Document: the served one itself
            else:
                self._doc = Document(store=doc.store.path, mode="a", embed=doc.embed or None,
                                     lock_timeout=60.0)
        elif self._doc.store is not None:
            self._doc.refresh()
        return self._doc

    def _apply(self, rec: dict[str, Any]) -> dict[str, Any]:
        from fastrag.errors import ConfigError

        doc = self._wdoc()
        if rec["kind"] == "delete":
            n = doc.delete([rec["doc_id"]])
            if n == 0:
                raise ConfigError(f"no document with id {rec['doc_id']!r}")
            warnings = self._rebuild(doc)
            return {"deleted": n, "doc_ids": [rec["doc_id"]], "warnings": warnings}
        texts, metadatas, warnings = self._read_payload(rec)
        ids = doc.add(texts=texts, metadatas=metadatas)
        warnings += self._rebuild(doc)
        return {"doc_ids": ids, "n_texts": len(texts), "warnings": warnings}

    def _read_payload(self, rec: dict[str, Any]) -> tuple[list[str], list[dict], list[str]]:
        from fastrag.documents.readers import read_file
        from fastrag.errors import ConfigError

        d = self.tasks.payload(rec["id"])
        if (d / "texts.json").is_file():
            data = json.loads((d / "texts.json").read_text(encoding="utf-8"))
            metas = data["metadatas"] or [{} for _ in data["texts"]]
            return data["texts"], metas, []
        extra = {}
        if (d / "metadata.json").is_file():
            extra = json.loads((d / "metadata.json").read_text(encoding="utf-8"))
        texts, metas, warnings = [], [], []
        for i, name in enumerate(rec["files"]):
            records = read_file(d / "files" / str(i) / name)
            if not records:
                warnings.append(f"{name}: no text found")
            for text, meta in records:
                meta = {k: v for k, v in meta.items() if k != "file_path"}
                meta["file_name"] = name
                meta.update(extra)
                texts.append(text)
                metas.append(meta)
        if not texts:
            raise ConfigError(f"no text in the uploaded file(s) {rec['files']}; upload text, "
                              "Markdown, HTML, JSON(L), CSV, PDF or DOCX files")
        return texts, metas, warnings

    def _rebuild(self, doc: Any) -> list[str]:
        """Build the changed groups and the served indexes now, so readers load them."""
        from fastrag.errors import ConfigError
        from fastrag.retrieval.retriever import Retriever

        warnings = []
        stored = doc.store.manifest["groups"] if doc.store is not None else {}
        served = self.engine.served()
        wanted = {g for g, _ in served}
        for name in doc.group_names[1:]:
            if name in stored or name in wanted:
                try:
                    doc.group(name)
                except ConfigError as exc:
                    warnings.append(f"group {name!r} was not updated: {exc}")
        for group, sim in served:
            try:
                ret = self._retrievers.get((group, sim))
                if ret is None:
                    ret = self._retrievers[(group, sim)] = Retriever(doc, group, sim, topk=1)
                ret("index")  # builds (and stores) the index for the new nodes
            except ConfigError as exc:
                self._retrievers.pop((group, sim), None)
                warnings.append(f"index of group {group!r} ({sim}) was not updated: {exc}")
        self.engine.refresh_if_changed()
        return warnings
