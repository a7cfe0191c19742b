"""Chat memory in a SQLite database (the standard library's ``sqlite3``): one row per message,
every change one ``BEGIN IMMEDIATE`` transaction, the write-ahead log on, so any number of
threads and processes on one machine share a memory and nothing is lost or reordered.

The file is a SQLite database whose ``application_id`` says it is a fastrag chat memory and
whose ``user_version`` is the schema's; fastrag refuses to write into any other database. Each
process keeps one connection (made again after a ``fork``), guarded by a lock. Memories written
by fastrag before SQLite (``.json`` files) are imported once (see :meth:`SQLiteStore.migrate`);
the files are left as they are.

The write-ahead log needs a local file system: keep the file off NFS and SMB shares (SQLite's
own advice); servers on several machines share a Redis memory instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

from fastrag.chat.backend import Keep, Message, MessageStore
from fastrag.chat.legacy import legacy_files, read_legacy
from fastrag.errors import ConfigError, StoreError, StoreIOError, StoreWarning

__all__ = ["DB_NAME", "SQLITE_SUFFIXES", "SQLiteStore", "database_path"]

SQLITE_SUFFIXES = (".sqlite", ".sqlite3", ".db")
#: the database's file name when a chat memory path names a folder
DB_NAME = "chat_memory.sqlite3"
APPLICATION_ID = 0x66726368  # "frch"
SCHEMA_VERSION = 1
_MAGIC = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages (session, seq);
CREATE TABLE IF NOT EXISTS migrated (
    source TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL,
    sessions INTEGER NOT NULL,
    messages INTEGER NOT NULL,
    at REAL NOT NULL
);
"""


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(_MAGIC)) == _MAGIC
    except OSError:
        return False


def database_path(path: Path) -> Path:
    """The database file of the chat memory path ``path``: the file itself when it is a
    SQLite database or ends in ``.sqlite``, ``.sqlite3`` or ``.db``; ``NAME.sqlite3`` beside
    a ``NAME.json`` path (the one-file memory of earlier fastrag versions); otherwise ``path``
    is a folder and the database is :data:`DB_NAME` in it."""
    if path.is_file() and _is_sqlite(path) or path.suffix.lower() in SQLITE_SUFFIXES:
        if path.is_dir():
            raise ConfigError(
                f"chat memory path {str(path)!r} is a folder but ends in {path.suffix!r}; "
                "name a database file, or a folder without that ending"
            )
        return path
    if path.suffix.lower() == ".json":
        if path.is_dir():
            raise ConfigError(
                f"chat memory path {str(path)!r} is a folder but ends in '.json'; name a "
                "database file (e.g. chat.sqlite3) or a folder without '.json'"
            )
        return path.with_suffix(".sqlite3")
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"chat memory path {str(path)!r} is a file but not a SQLite database; name a "
            f"database file (ending in {', '.join(SQLITE_SUFFIXES)}) or a folder"
        )
    return path / DB_NAME


class SQLiteStore(MessageStore):
    """The messages of a chat memory in the SQLite database ``path`` (created when missing).

    ``timeout``: seconds a write waits for another process's transaction before failing.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 60.0) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self.timeout = float(timeout)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreIOError(
                f"cannot create the folder of chat memory database {self.location!r}: {exc}"
            ) from None
        with self._transaction() as c:
            self._create_schema(c)

    # -- the contract --------------------------------------------------------------------------
    def get(self, session_id: str) -> list[Message]:
        with self._connection() as c:
            rows = c.execute(
                "SELECT role, content FROM messages WHERE session = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
        return [(r, t) for r, t in rows]

    def append(self, session_id: str, messages: Sequence[Message], keep: Keep) -> None:
        if not messages and keep is None:
            return
        now = time.time()
        with self._transaction() as c:
            if messages:
                c.execute("INSERT OR IGNORE INTO sessions (session) VALUES (?)", (session_id,))
                c.executemany(
                    "INSERT INTO messages (session, role, content, created) VALUES (?, ?, ?, ?)",
                    [(session_id, r, t, now) for r, t in messages],
                )
            if keep is not None:
                self._trim(c, session_id, keep)

    def clear(self, session_id: str | None) -> None:
        with self._transaction() as c:
            if session_id is None:
                c.execute("DELETE FROM messages")
                c.execute("DELETE FROM sessions")
            else:
                c.execute("DELETE FROM messages WHERE session = ?", (session_id,))
                c.execute("DELETE FROM sessions WHERE session = ?", (session_id,))

    def sessions(self) -> list[str]:
        with self._connection() as c:
            return [s for (s,) in c.execute("SELECT session FROM sessions ORDER BY id")]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def verify(self) -> list[str]:
        """What SQLite's ``integrity_check`` finds wrong with the file (empty: nothing)."""
        with self._connection() as c:
            found = [r for (r,) in c.execute("PRAGMA integrity_check")]
        return [] if found == ["ok"] else found

    # -- import --------------------------------------------------------------------------------
    def migrate(self, legacy: Path, keep: Keep) -> int:
        """Import the sessions of the ``.json`` memories ``legacy`` names (a file, or a folder
        of per-session files) that this database has not imported yet, in one transaction;
        the number of messages imported. The files stay as they are; one changed since its
        import is not imported again (a :class:`~fastrag.errors.StoreWarning` says so)."""
        files = legacy_files(legacy)
        if not files:
            return 0
        total = 0
        with self._transaction() as c:
            done = dict(c.execute("SELECT source, sha256 FROM migrated").fetchall())
            for f in files:
                data = f.read_bytes()
                digest = hashlib.sha256(data).hexdigest()
                if f.name in done:
                    if done[f.name] != digest:
                        warnings.warn(
                            f"chat memory file {str(f)!r} changed after it was imported into "
                            f"{self.location!r}; its changes were not imported (the file is "
                            "kept as it is)",
                            StoreWarning,
                            stacklevel=4,
                        )
                    continue
                n_sessions = n_messages = 0
                for sid, msgs in read_legacy(f, data):
                    if keep is not None:
                        msgs = [msgs[i] for i in keep(msgs)]
                    if not msgs:
                        continue
                    c.execute("INSERT OR IGNORE INTO sessions (session) VALUES (?)", (sid,))
                    c.executemany(
                        "INSERT INTO messages (session, role, content, created) "
                        "VALUES (?, ?, ?, ?)",
                        [(sid, r, t, time.time()) for r, t in msgs],
                    )
                    n_sessions += 1
                    n_messages += len(msgs)
                c.execute(
                    "INSERT INTO migrated (source, sha256, sessions, messages, at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (f.name, digest, n_sessions, n_messages, time.time()),
                )
                total += n_messages
        return total

    # -- internals -----------------------------------------------------------------------------
    def _trim(self, c: sqlite3.Connection, session_id: str, keep: Keep) -> None:
        rows = c.execute(
            "SELECT seq, role, content FROM messages WHERE session = ? ORDER BY seq",
            (session_id,),
        ).fetchall()
        kept = set(keep([(r, t) for _, r, t in rows]))
        c.executemany(
            "DELETE FROM messages WHERE seq = ?",
            [(seq,) for i, (seq, _, _) in enumerate(rows) if i not in kept],
        )
        if not kept:
            c.execute("DELETE FROM sessions WHERE session = ?", (session_id,))

    def _check_owner(self, c: sqlite3.Connection) -> None:
        """Refuse a database fastrag did not make or cannot read (before writing anything)."""
        c.execute("BEGIN")  # one snapshot: another process may be creating the schema
        try:
            app = c.execute("PRAGMA application_id").fetchone()[0]
            version = c.execute("PRAGMA user_version").fetchone()[0]
            tables = c.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            if c.in_transaction:
                c.execute("COMMIT")
        if app != APPLICATION_ID and (app != 0 or tables):
            raise StoreError(
                f"{self.location!r} is a SQLite database of another program, not a fastrag "
                "chat memory; name another file"
            )
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"chat memory database {self.location!r} has schema version {version}, written "
                f"by a newer fastrag (this one reads {SCHEMA_VERSION}); upgrade fastrag"
            )

    def _create_schema(self, c: sqlite3.Connection) -> None:
        if c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        for statement in _SCHEMA.split(";"):  # not executescript: it commits first
            if statement.strip():
                c.execute(statement)
        c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _connect(self) -> sqlite3.Connection:
        # SQLite answers "database is locked" at once, without waiting, while another process
        # turns a new file to write-ahead logging: try again until the timeout
        deadline, pause = time.monotonic() + self.timeout, 0.005
        while True:
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            try:
                self._setup(conn)
                return conn
            except sqlite3.OperationalError as exc:
                conn.close()
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
            except BaseException:
                conn.close()
                raise
            time.sleep(pause)
            pause = min(0.2, pause * 2)

    def _setup(self, conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        self._check_owner(conn)
        if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
            raise StoreError(
                f"chat memory database {self.location!r} cannot use SQLite's write-ahead "
                "log (a file system without shared memory?); keep it on a local disk"
            )
        conn.execute("PRAGMA synchronous = FULL")  # a commit survives a power cut

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        if self._pid != os.getpid():  # a forked child: its parent's connection is not its own
            self._lock, self._conn, self._pid = threading.Lock(), None, os.getpid()
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = self._connect()
                yield self._conn
            except sqlite3.Error as exc:
                raise self._error(exc) from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connection() as c:
            c.execute("BEGIN IMMEDIATE")
            try:
                yield c
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")

    def _error(self, exc: sqlite3.Error) -> StoreError:
        msg = str(exc)
        where = f"chat memory database {self.location!r}"
        if "locked" in msg or "busy" in msg:
            return StoreError(
                f"{where} stayed locked by another process for {self.timeout:g} s ({msg}); "
                "try again, or look for a process that holds it"
            )
        if isinstance(exc, sqlite3.OperationalError) and any(
            s in msg for s in ("disk is full", "readonly", "unable to open", "disk I/O")
        ):
            return StoreIOError(f"{where}: {msg}; nothing was written")
        if isinstance(exc, sqlite3.DatabaseError):
            return StoreError(
                f"{where} is damaged or not a database ({msg}); restore it from a backup, or "
                "move it away to start an empty memory"
            )
        return StoreError(f"{where}: {type(exc).__name__}: {msg}")
