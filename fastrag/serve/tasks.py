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

Kinds: ``add`` and ``delete`` (uploads), and ``build``: the vectors of a similarity the server
is configured with, embedded and stored in the background (``progress`` says how far), so that
no request ever embeds a whole group (:mod:`fastrag.serve.readiness`). A build a crash
interrupted ends ``failed`` like any task and is queued once more (running a build again is
safe: it embeds what is missing, stores it, changes nothing else); if that one dies too, the
next restart tries again.

**Crashes.** The writer commits each change with the task id as its tag
(``Document.add(..., tag=)``), so the store itself records whether a task's change landed.
Whoever takes the writer lock next -- after a restart, or another worker -- first settles the
tasks a dead writer left ``running``: ``done`` with its result when the store holds its tag,
else ``failed`` with :data:`INTERRUPTED` (not run again: a task that kills its writer would
kill every next one). Queued tasks simply run. The folder must therefore outlive the server:
by default it is :func:`default_tasks_dir`, one per store. Finished tasks are forgotten after
:data:`KEEP_S`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from fastrag.documents.document import Document
from fastrag.documents.readers import read_file
from fastrag.errors import ConfigError, FastragError
from fastrag.retrieval.retriever import Retriever
from fastrag.retrieval.similarity import get_similarity
from fastrag.serve.readiness import embed_keys, needs_vectors

__all__ = ["INTERRUPTED", "KEEP_S", "TaskStore", "Writer", "default_tasks_dir", "safe_filename"]

log = logging.getLogger("fastrag.serve")

INTERRUPTED = "interrupted: resubmit"  # the error of a task whose writer died before its commit
KEEP_S = 24 * 3600.0  # finished tasks (and Idempotency-Keys) are remembered this long
FINAL = ("done", "failed")
_ORPHAN_S = 3600.0  # a payload folder without its record this old is an upload that died
_RETRY_S = 30.0  # wait before settling left-over tasks again when the store could not be read
_PRUNE_S = 3600.0
# test-only: FASTRAG_TEST_WRITER_CRASH=after_commit ends the writer's process right after a
# task's commit, as kill -9 would (tests/serve/test_task_recovery.py)
_CRASH_ENV = "FASTRAG_TEST_WRITER_CRASH"

_TASK_ID = re.compile(r"^[0-9a-f]{32}$")
_UNSAFE = re.compile(r"[^\w.\- ]+", re.UNICODE)


def safe_filename(name: str | None, default: str = "upload.txt") -> str:
    """The last path component of an uploaded file's name, without characters that could
    escape or confuse a directory (the extension is kept: it picks the reader)."""
    base = re.split(r"[\\/]", name or "")[-1].strip().lstrip(".")
    base = _UNSAFE.sub("_", base)[:200]
    return base or default


def _state_home() -> Path:
    """The user's folder for state that outlives a program (XDG_STATE_HOME on Linux)."""
    env = os.environ.get("XDG_STATE_HOME")
    if env and os.path.isabs(env):
        return Path(env)
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support"
    return Path.home() / ".local" / "state"


def default_tasks_dir(store: str | os.PathLike) -> Path:
    """The tasks folder of the server of ``store``:
    ``$XDG_STATE_HOME/fastrag/serve-tasks/<store name>-<hash of its absolute path>`` (one per
    store, outside it: stores may be mounted read-only; shared by every server of the store)."""
    path = Path(store).resolve()
    name = re.sub(r"[^\w.-]+", "_", path.name)[:64] or "store"
    digest = hashlib.sha256(str(path).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return _state_home() / "fastrag" / "serve-tasks" / f"{name}-{digest}"


class TaskStore:
    """Task records and payloads in one directory (shared by a server's workers)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)  # it holds uploads
        except OSError as exc:
            raise ConfigError(
                f"cannot create the upload tasks folder {str(self.root)!r}: "
                f"{exc.strerror or exc}; pass --tasks-dir DIR (tasks_dir=) naming "
                "a writable folder that survives restarts"
            ) from None
        self._final: set[str] = set()  # ids seen done or failed: they never change again

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

    def with_status(self, status: str) -> list[dict[str, Any]]:
        """The tasks in ``status`` (queued or running), oldest first."""
        out = []
        for p in self.root.glob("*.json"):
            if p.stem in self._final:
                continue
            rec = self.get(p.stem)
            if rec is None:
                continue
            if rec.get("status") in FINAL:
                self._final.add(p.stem)
            elif rec.get("status") == status:
                out.append(rec)
        return sorted(out, key=lambda r: (r["created_ns"], r["id"]))

    def queued(self) -> list[dict[str, Any]]:
        """Queued tasks, oldest first."""
        return self.with_status("queued")

    def payload(self, task_id: str) -> Path:
        return self.root / task_id

    def prune(self, keep_s: float = KEEP_S) -> int:
        """Forget tasks finished over ``keep_s`` seconds ago; remove payloads no queued or
        running task owns (an upload or a writer that died). Returns how many went."""
        now = time.time()
        forgotten = set()
        for p in self.root.glob("*.json"):
            rec = self.get(p.stem)
            if (
                rec is not None
                and rec.get("status") in FINAL
                and (rec.get("finished") or rec.get("created") or 0) < now - keep_s
            ):
                p.unlink(missing_ok=True)
                self._final.discard(p.stem)
                forgotten.add(p.stem)
        removed = len(forgotten)
        for p in self.root.iterdir():
            stale = _mtime(p) < now - _ORPHAN_S
            if p.is_dir() and _TASK_ID.match(p.name):
                rec = self.get(p.name)
                if (
                    rec is None
                    and (stale or p.name in forgotten)
                    or rec is not None
                    and rec.get("status") in FINAL
                ):
                    shutil.rmtree(p, ignore_errors=True)
                    removed += 1
            elif p.name.endswith(".tmp") and stale:
                p.unlink(missing_ok=True)
                removed += 1
        return removed

    # -- creation ------------------------------------------------------------------------------
    def _new(self, kind: str, task_id: str | None, **fields: Any) -> dict[str, Any]:
        now = time.time_ns()
        return {
            "id": task_id or uuid.uuid4().hex,
            "object": "task",
            "kind": kind,
            "status": "queued",
            "created": now / 1e9,
            "created_ns": now,
            "started": None,
            "finished": None,
            "error": None,
            "doc_ids": [],
            "deleted": None,
            "warnings": [],
            **fields,
        }

    def add_texts(
        self, texts: list[str], metadatas: list[dict] | None, *, task_id: str | None = None
    ) -> dict[str, Any]:
        rec = self._new("add", task_id, n_texts=len(texts), files=[])
        d = self.payload(rec["id"])
        d.mkdir()
        (d / "texts.json").write_text(
            json.dumps({"texts": texts, "metadatas": metadatas}, ensure_ascii=False),
            encoding="utf-8",
        )
        self._write(rec)
        return rec

    def add_files(
        self,
        files: Iterable[tuple[str, Any]],
        metadata: dict[str, Any] | None = None,
        *,
        task_id: str | None = None,
    ) -> dict[str, Any]:
        """``files``: (original name, readable binary file object) pairs, copied here."""
        rec = self._new("add", task_id, n_texts=None, files=[])
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
            (d / "metadata.json").write_text(
                json.dumps(metadata, ensure_ascii=False), encoding="utf-8"
            )
        rec["files"] = names
        self._write(rec)
        return rec

    def delete(self, doc_id: str, *, task_id: str | None = None) -> dict[str, Any]:
        rec = self._new("delete", task_id, doc_id=doc_id)
        self._write(rec)
        return rec

    def build(
        self, group: str, similarity: str, retry: bool = False, **fields: Any
    ) -> dict[str, Any]:
        """The task that builds and stores the vectors of ``similarity`` over ``group``: the
        queued or running one, else the last one (``retry``: a new one when the last failed
        or finished), else a new one (with ``fields``). Every worker of a server finds the same
        task."""
        digest = hashlib.blake2b(f"{group}\0{similarity}".encode(), digest_size=12).hexdigest()
        pointer = self.root / f"build-{digest}.id"
        try:
            rec = self.get(pointer.read_text(encoding="ascii").strip())
        except OSError:
            rec = None
        if rec is not None and (rec["status"] not in FINAL or not retry):
            return rec
        rec = self._new("build", None, group=group, similarity=similarity, progress=None, **fields)
        self._write(rec)
        tmp = pointer.with_name(f"{pointer.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(rec["id"], encoding="ascii")
        os.replace(tmp, pointer)
        return rec


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _crash_point(name: str) -> None:
    if os.environ.get(_CRASH_ENV) == name:
        os._exit(70)


class Writer:
    """The single writer: runs queued tasks one at a time with the writable Document.

    ``engine``: the :class:`~fastrag.serve.engine.ServeEngine` whose Document (or store) the
    tasks change; ``metrics``: counts finished tasks; ``scrub``: cleans error messages;
    ``janitor``: called about hourly to forget what expired (e.g. Idempotency-Keys).
    """

    def __init__(
        self,
        tasks: TaskStore,
        engine: Any,
        *,
        metrics: Any = None,
        scrub: Any = None,
        janitor: Callable[[], Any] | None = None,
        poll_s: float = 0.1,
    ) -> None:
        self.tasks = tasks
        self.engine = engine
        self.metrics = metrics
        self.scrub = scrub or (lambda s: s)
        self.janitor = janitor
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
                settle_at = prune_at = 0.0
                while not self._stop.is_set():
                    now = time.monotonic()
                    try:
                        if settle_at is not None and now >= settle_at:
                            settle_at = None if self._settle() else now + _RETRY_S
                        if now >= prune_at:
                            self._prune()
                            prune_at = now + _PRUNE_S
                        queued = self.tasks.queued()
                        if queued:
                            self._run(queued[0])
                            continue
                    except Exception as exc:  # e.g. a full disk: keep the writer alive
                        log.error(
                            "the writer failed (retrying): %s",
                            self.scrub(f"{type(exc).__name__}: {exc}"),
                        )
                        self._stop.wait(1.0)
                    self._wake.wait(self.poll_s)
                    self._wake.clear()
            finally:
                lock.release()

    def _run(self, rec: dict[str, Any]) -> None:
        self.tasks.update(rec["id"], status="running", started=time.time())
        self._finish(rec, lambda: self._apply(rec))

    def _settle(self) -> bool:
        """Settle the tasks a writer that died left ``running`` (see the module docstring);
        False when the store could not be read (try again later)."""
        for rec in self.tasks.with_status("running"):
            try:
                doc = self._wdoc()
                landed = doc.committed(rec["id"]) if doc.store is not None else None
            except Exception as exc:
                log.error(
                    "cannot tell whether interrupted task %s landed (will retry): %s",
                    rec["id"],
                    self.scrub(f"{type(exc).__name__}: {exc}"),
                )
                return False
            log.warning(
                "task %s (%s) was interrupted by a crash; its change %s",
                rec["id"],
                rec["kind"],
                "had landed" if landed else "had not landed: resubmit it",
            )
            self._finish(
                rec,
                None
                if landed is None
                else functools.partial(self._outcome, rec, landed["result"], doc),
            )
            if rec["kind"] == "build" and not rec.get("retry_of"):  # once: it may be the killer
                self.tasks.build(rec["group"], rec["similarity"], retry=True, retry_of=rec["id"])
        return True

    def _finish(self, rec: dict[str, Any], work: Callable[[], dict[str, Any]] | None) -> None:
        """Record the task done with what ``work`` returns, or failed with its exception (no
        ``work``: interrupted), then remove its payload."""
        tid = rec["id"]
        try:
            fields = (
                {"status": "failed", "error": INTERRUPTED}
                if work is None
                else {"status": "done", **work()}
            )
        except Exception as exc:
            msg = self._clean(f"{type(exc).__name__}: {exc}", tid)
            log.warning("task %s (%s) failed: %s", tid, rec["kind"], msg)
            fields = {"status": "failed", "error": msg}
        try:
            self.tasks.update(tid, finished=time.time(), **fields)
        finally:
            shutil.rmtree(self.tasks.payload(tid), ignore_errors=True)
        if self.metrics is not None:
            self.metrics.inc("fastrag_tasks_total", kind=rec["kind"], status=fields["status"])

    def _prune(self) -> None:
        try:
            self.tasks.prune()
            if self.janitor is not None:
                self.janitor()
        except OSError as exc:
            log.warning("could not prune the tasks folder: %s", exc)

    def _clean(self, msg: str, tid: str) -> str:
        """The message without the payload folder's paths (they mean nothing to a client)."""
        files = self.tasks.payload(tid) / "files"
        msg = re.sub(re.escape(str(files)) + r"[\\/]\d+[\\/]", "", msg)
        return self.scrub(msg.replace(str(self.tasks.payload(tid)), "<upload>"))

    # -- the writable Document -----------------------------------------------------------------
    def _wdoc(self) -> Any:
        if self._doc is None:
            doc = self.engine.require_doc()
            if doc.store is None:
                self._doc = doc  # an in-memory Document: the served one itself
            else:
                self._doc = Document(
                    store=doc.store.path, mode="a", embed=doc.embed or None, lock_timeout=60.0
                )
        elif self._doc.store is not None:
            self._doc.refresh()
        return self._doc

    def _apply(self, rec: dict[str, Any]) -> dict[str, Any]:
        doc = self._wdoc()
        if rec["kind"] == "build":
            return self._build(rec, doc)
        if rec["kind"] == "delete":
            n = doc.delete([rec["doc_id"]], tag=rec["id"])
            _crash_point("after_commit")
            return self._outcome(rec, n, doc)
        texts, metadatas, warnings = self._read_payload(rec)
        ids = doc.add(texts=texts, metadatas=metadatas, tag=rec["id"])
        _crash_point("after_commit")
        return self._outcome(rec, ids, doc, warnings)

    def _outcome(
        self, rec: dict[str, Any], result: Any, doc: Any, warnings: Iterable[str] = ()
    ) -> dict[str, Any]:
        """The fields of a task whose change committed with ``result`` (the new root ids, or
        the number deleted), after rebuilding what readers load."""
        if rec["kind"] == "delete":
            if not result:
                raise ConfigError(f"no document with id {rec['doc_id']!r}")
            return {
                "deleted": result,
                "doc_ids": [rec["doc_id"]],
                "warnings": [*warnings, *self._rebuild(doc)],
            }
        return {
            "doc_ids": list(result),
            "n_texts": len(result),
            "warnings": [*warnings, *self._rebuild(doc)],
        }

    def _read_payload(self, rec: dict[str, Any]) -> tuple[list[str], list[dict], list[str]]:
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
                meta = {k: v for k, v in meta.items() if k not in ("file_path", "abs_path")}
                meta["file_name"] = name
                meta.update(extra)
                texts.append(text)
                metas.append(meta)
        if not texts:
            raise ConfigError(
                f"no text in the uploaded file(s) {rec['files']}; upload text, "
                "Markdown, HTML, JSON(L), CSV, PDF or DOCX files"
            )
        return texts, metas, warnings

    def _build(self, rec: dict[str, Any], doc: Any) -> dict[str, Any]:
        """A build task: embed the nodes of ``rec``'s group that have no vectors, and store
        them (the progress goes into the task record about once a second)."""
        tid, last = rec["id"], [0.0]

        def progress(stage: str, done: int, total: int) -> None:
            now = time.monotonic()
            if now - last[0] >= 1.0 or done == total:
                last[0] = now
                self.tasks.update(tid, progress={"stage": stage, "done": done, "total": total})

        with doc.derived.reporting(progress):
            self._index(doc, rec["group"], rec["similarity"])
        self.engine.refresh_if_changed()
        return {"warnings": []}

    def _index(self, doc: Any, group: str, sim: str) -> None:
        """Build (and store) the index of ``group`` for ``sim`` for its new nodes, with a
        retriever kept across tasks."""
        ret = self._retrievers.get((group, sim))
        if ret is None:
            ret = self._retrievers[(group, sim)] = Retriever(doc, group, sim, topk=1)
        ret("index")

    def _rebuild(self, doc: Any) -> list[str]:
        """Build the changed groups and the configured retrievers' indexes now, so readers
        load them (vectors never built are left to their build task)."""
        warnings = []
        stored = doc.store.manifest["groups"] if doc.store is not None else {}
        configured = self.engine.configured()
        wanted = {g for g, _ in configured}
        for name in doc.group_names[1:]:
            if name in stored or name in wanted:
                try:
                    doc.group(name)
                except ConfigError as exc:
                    warnings.append(f"group {name!r} was not updated: {exc}")
        for group, sim in configured:
            try:
                if needs_vectors(sim) and (
                    not get_similarity(sim).path.stored  # in each reader's memory only
                    or any(
                        doc.derived.vectors_missing(doc.group(group), k) is None
                        for k in embed_keys(doc, sim)
                    )
                ):
                    continue
                self._index(doc, group, sim)
            except FastragError as exc:
                self._retrievers.pop((group, sim), None)
                warnings.append(f"index of group {group!r} ({sim}) was not updated: {exc}")
        self.engine.refresh_if_changed()
        return warnings
