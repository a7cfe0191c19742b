"""Where chat memories live: SQLite files shared by threads and processes, a real Redis server,
and the ``.json`` memories of earlier versions imported once, nothing of them dropped."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fastrag.chat import ChatMemory, MessageWindowChatMemory, TokenWindowChatMemory
from fastrag.chat.sqlite_store import DB_NAME, SQLiteStore
from fastrag.errors import ConfigError, StoreError, StoreWarning

WRITER = Path(__file__).with_name("memory_writer.py")
V1 = "fastrag.chat_memory/1"


def _writers(where: str, jobs: list[list[str]]) -> None:
    """Run one memory_writer.py process per job at once (released together); each must end
    with ``done``."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(WRITER), where, *job],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for job in jobs
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "open", p.stderr.read()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "done", err


def _in_order(messages: list[tuple[str, str]], tag: str, n: int) -> bool:
    mine = [int(c.split("-")[1]) for _, c in messages if c.startswith(tag + "-")]
    return mine == list(range(n))


# -- SQLite --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "db"), [("mem", f"mem/{DB_NAME}"), ("mem.json", "mem.sqlite3"), ("m.db", "m.db")]
)
def test_sqlite_round_trip_and_where_the_database_is(tmp_path, name, db):
    path = tmp_path / name
    m1 = MessageWindowChatMemory(max_messages=10, path=path)
    m1.extend("user/ü 1", [("user", "héllo"), ("assistant", 'hi\n"there"')])
    m1.add("b", "user", "second session")
    assert (tmp_path / db).is_file() and m1.store.location == str(tmp_path / db)
    assert not (tmp_path / "mem.json").exists()  # a .json path names the database beside it
    m2 = MessageWindowChatMemory(max_messages=10, path=path)
    assert m2.sessions() == ["user/ü 1", "b"]
    assert m2.get("user/ü 1") == [("user", "héllo"), ("assistant", 'hi\n"there"')]
    m2.clear("b")
    assert ChatMemory(path=path).sessions() == ["user/ü 1"] and m1.sessions() == ["user/ü 1"]
    assert m2.store.verify() == []
    assert "path=" in repr(m2) and "sessions=1" in repr(m2)


def test_window_is_kept_inside_the_write(tmp_path):
    mem = MessageWindowChatMemory(max_messages=3, path=tmp_path / "w.sqlite3")
    mem.add("s", "system", "be brief")
    for i in range(6):
        mem.add("s", "user", f"q{i}")
    assert mem.get("s") == [("system", "be brief"), ("user", "q4"), ("user", "q5")]
    rows = sqlite3.connect(tmp_path / "w.sqlite3").execute("SELECT count(*) FROM messages")
    assert rows.fetchone()[0] == 3  # evicted rows are deleted, not hidden
    tok = TokenWindowChatMemory(max_tokens=3, path=tmp_path / "w.sqlite3")
    tok.add("t", "user", "x " * 10)  # longer than the window alone: nothing kept
    assert tok.get("t") == [] and "t" not in tok.sessions()


def test_threads_share_one_memory(tmp_path):
    mem = ChatMemory(path=tmp_path / "t.sqlite3")
    other = ChatMemory(path=tmp_path / "t.sqlite3")  # a second connection in this process

    def work(tag: str, m: ChatMemory) -> None:
        for i in range(50):
            m.add("shared", "user", f"{tag}-{i}")

    threads = [
        threading.Thread(target=work, args=(f"T{k}", mem if k % 2 else other)) for k in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = mem.get("shared")
    assert len(got) == 400 and all(_in_order(got, f"T{k}", 50) for k in range(8))


def test_two_processes_lose_nothing(tmp_path):
    """The defect: two processes adding 200 messages each to one memory kept 201 of 400 (199
    lost), 206 in one session. Now each keeps its own session and the shared one whole."""
    where = str(tmp_path / "chat")
    _writers(
        where,
        [
            ["A", "200", "own-A", "shared", "--window", "1000"],
            ["B", "200", "own-B", "shared", "--window", "1000"],
        ],
    )
    mem = ChatMemory(path=where)
    assert len(mem.get("own-A")) == 200 and len(mem.get("own-B")) == 200
    shared = mem.get("shared")
    assert len(shared) == 400
    assert _in_order(shared, "A", 200) and _in_order(shared, "B", 200)
    assert sorted(mem.sessions()) == ["own-A", "own-B", "shared"]


def _open_and_add(path: str, tag: str) -> str | None:
    try:
        ChatMemory(path=path).add("s", "user", tag)
    except Exception as exc:  # reported to the parent
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.mark.slow
def test_many_processes_create_one_memory_at_once(tmp_path):
    """Eight processes opening one new database at once, 30 times: none fails (SQLite answers
    "locked" at once while another process turns the file to WAL; a reader could see the
    schema half-made), and each keeps its message."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(8) as pool:
        for r in range(30):
            path = str(tmp_path / f"r{r}" / "chat.sqlite3")
            assert pool.starmap(_open_and_add, [(path, str(i)) for i in range(8)]) == [None] * 8
            assert sorted(c for _, c in ChatMemory(path=path).get("s")) == list("01234567")


@pytest.mark.slow
def test_four_processes_trim_one_window(tmp_path):
    """Trimming runs in the write: four processes adding 100 each through a 40-message window
    leave exactly 40, each process's in its own order."""
    where = str(tmp_path / "w.db")
    _writers(where, [[f"P{k}", "100", "s", "--window", "40"] for k in range(4)])
    got = ChatMemory(path=where).get("s")
    assert len(got) == 40
    for k in range(4):
        mine = [int(c.split("-")[1]) for _, c in got if c.startswith(f"P{k}-")]
        assert mine == sorted(mine)


def test_bad_paths_and_databases_are_clear_errors(tmp_path):
    (tmp_path / "notes").write_text("a text file")
    with pytest.raises(ConfigError, match="is a file but not a SQLite database"):
        ChatMemory(path=tmp_path / "notes")
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(ConfigError, match="is a folder but ends in '.json'"):
        ChatMemory(path=tmp_path / "dir.json")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    before = other.read_bytes()
    with pytest.raises(StoreError, match="database of another program"):
        ChatMemory(path=other)
    assert other.read_bytes() == before  # never written into
    damaged = tmp_path / "d.sqlite3"
    with ChatMemory(path=damaged) as mem:
        mem.add("s", "user", "hi")
    data = damaged.read_bytes()
    damaged.write_bytes(b"\xff" * 16 + data[16:])
    with pytest.raises(StoreError, match=re.escape(str(damaged)) + ".*damaged or not a database"):
        ChatMemory(path=damaged)
    damaged.write_bytes(data[:100] + b"\xff" * (len(data) - 100))
    with pytest.raises(StoreError, match=re.escape(str(damaged))):
        ChatMemory(path=damaged).get("s")
    with pytest.raises(ConfigError, match="must be a path, a redis:// URL or None"):
        ChatMemory(path=42)


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "n.sqlite3"
    ChatMemory(path=path).close()
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match="schema version 99, written by a newer fastrag"):
        SQLiteStore(path)


# -- the .json memories of earlier versions -----------------------------------------------------
def _v1_folder(folder: Path) -> dict[Path, bytes]:
    folder.mkdir()
    files = {}
    for i, sid in enumerate(["alice", "bob"]):
        body = {
            "format": V1,
            "session_id": sid,
            "messages": [{"role": "user", "content": f"{sid} {k}"} for k in range(3)],
        }
        f = folder / f"{sid}-{i:016x}.json"
        f.write_text(json.dumps(body), encoding="utf-8")
        files[f] = f.read_bytes()
    return files


def test_v1_folder_is_imported_once_and_left_as_it_is(tmp_path):
    files = _v1_folder(tmp_path / "mem")
    mem = MessageWindowChatMemory(max_messages=10, path=tmp_path / "mem")
    assert mem.migrated == 6 and mem.sessions() == ["alice", "bob"]
    assert mem.get("bob") == [("user", f"bob {k}") for k in range(3)]
    mem.add("bob", "assistant", "new")
    again = MessageWindowChatMemory(max_messages=10, path=tmp_path / "mem")
    assert again.migrated == 0 and len(again.get("bob")) == 4  # not imported twice
    again.clear()
    assert ChatMemory(path=tmp_path / "mem").sessions() == []  # nor brought back
    assert {f: f.read_bytes() for f in files} == files  # the files are untouched


def test_v1_file_is_imported_beside_itself_and_a_change_is_reported(tmp_path):
    v1 = tmp_path / "chat.json"
    sessions = {"s": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]}
    v1.write_text(json.dumps({"format": V1, "sessions": sessions}), encoding="utf-8")
    digest = hashlib.sha256(v1.read_bytes()).hexdigest()
    mem = ChatMemory(path=v1)
    assert mem.migrated == 2 and mem.get("s") == [("user", "hello"), ("assistant", "hi")]
    assert (tmp_path / "chat.sqlite3").is_file()
    assert hashlib.sha256(v1.read_bytes()).hexdigest() == digest
    v1.write_text(json.dumps({"format": V1, "sessions": {}}), encoding="utf-8")
    with pytest.warns(StoreWarning, match="changed after it was imported"):
        reopened = ChatMemory(path=v1)
    assert reopened.get("s") == [("user", "hello"), ("assistant", "hi")]


def test_damaged_v1_files_are_clear_errors_and_import_nothing(tmp_path):
    folder = tmp_path / "mem"
    _v1_folder(folder)
    bad = folder / "zz.json"
    bad.write_text(f'{{"format": "{V1}", "session_id": "s", "messa')
    with pytest.raises(StoreError, match=re.escape(str(bad)) + ".* is damaged"):
        ChatMemory(path=folder)
    bad.write_text("[" * 100_000 + "]" * 100_000)  # the defect: a raw RecursionError
    with pytest.raises(StoreError, match="nests JSON deeper than a chat memory does") as info:
        ChatMemory(path=folder)
    assert "Recursion" not in str(info.value)
    bad.unlink()
    assert ChatMemory(path=folder).migrated == 6  # the failed imports left nothing behind
    single = tmp_path / "all.json"
    single.write_text(f'{{"format": "{V1}", "sessions": {{"s": [{{"role": 1}}]}}}}')
    with pytest.raises(StoreError, match=re.escape(str(single)) + ".*message 0"):
        ChatMemory(path=single)


# -- Redis ---------------------------------------------------------------------------------------
def test_redis_memory_keeps_the_same_semantics(redis_url):
    mem = MessageWindowChatMemory(max_messages=3, path=redis_url)
    mem.add("s", "system", "be brief")
    for i in range(5):
        mem.add("s", "user", f"q{i}")
    mem.extend("t", [("user", "ü"), ("assistant", 'a\n"b"')])
    other = MessageWindowChatMemory(max_messages=3, path=redis_url)
    kept = [("system", "be brief"), ("user", "q3"), ("user", "q4")]
    assert other.get("s") == kept
    assert other.get("t") == [("user", "ü"), ("assistant", 'a\n"b"')]
    assert other.sessions() == ["s", "t"]
    other.clear("s")
    assert mem.sessions() == ["t"]
    everything = ChatMemory(path=redis_url)
    everything.extend("u", [("user", str(i)) for i in range(100)])
    assert len(everything.get("u")) == 100
    everything.clear()
    assert mem.sessions() == [] and "***" not in repr(mem)


@pytest.mark.slow  # the SQLite twin runs in README's test command; this one in CI's full pass
def test_redis_two_processes_lose_nothing(redis_url):
    _writers(
        redis_url,
        [
            ["A", "200", "own-A", "shared", "--window", "1000"],
            ["B", "200", "own-B", "shared"],  # one trims under WATCH, one appends by script
        ],
    )
    mem = ChatMemory(path=redis_url)
    shared = mem.get("shared")
    assert len(mem.get("own-A")) == 200 and len(mem.get("own-B")) == 200 and len(shared) == 400
    assert _in_order(shared, "A", 200) and _in_order(shared, "B", 200)


def test_redis_errors_name_the_server(tmp_path):
    from redis_server import _free_port

    url = f"redis://user:secret@127.0.0.1:{_free_port()}/0"
    with pytest.raises(StoreError, match="cannot reach the Redis chat memory") as info:
        ChatMemory(path=url)
    assert "secret" not in str(info.value) and "***" in str(info.value)
