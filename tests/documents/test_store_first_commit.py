"""A store's first commit: other processes open it meanwhile, a failed first write, a store
whose manifest is gone."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import fastrag as fr
from fastrag.documents import store as store_mod
from fastrag.documents.store import Store
from fastrag.documents.storelock import writer_lock
from fastrag.errors import StoreError, StoreLockTimeout

ROOT = Path(__file__).resolve().parents[2]

# writes the first store of a folder and stops after each segment file until told to go on
PAUSING_WRITER = textwrap.dedent(
    """
    import sys
    import fastrag as fr
    from fastrag.documents import transaction

    write = transaction.Transaction.write_segment

    def pausing(self, name, table):
        entry = write(self, name, table)
        print("written", flush=True)
        sys.stdin.readline()
        return entry

    transaction.Transaction.write_segment = pausing
    fr.Document.from_texts(["alpha beta", "gamma delta"], store=sys.argv[1])
    print("done", flush=True)
    """
)


def store_files(st: Path) -> list[str]:
    return sorted(str(p.relative_to(st)) for p in (st / "data").rglob("*") if p.is_file())


def test_opening_a_store_during_another_writers_first_commit(tmp_path):
    """The first commit's files are written after an empty manifest: an opener sees an empty
    store, never a store it calls damaged."""
    st = tmp_path / "st"
    writer = subprocess.Popen(
        [sys.executable, "-c", PAUSING_WRITER, str(st)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "written", writer.stderr.read()
        assert store_files(st)  # a segment is on disk, not yet committed
        for mode in ("a", "r"):
            opened = Store(st, mode=mode)
            assert opened.manifest["generation"] == 0 and opened.manifest["groups"] == {}
        assert len(fr.Document(store=st, mode="r").group("root")) == 0
        assert Store(st, mode="r").verify() == []
        out, err = writer.communicate("\n" * 50, timeout=120)
    finally:
        writer.kill()
        writer.wait()
    assert writer.returncode == 0 and out.split()[-1] == "done", err
    doc = fr.Document(store=st, mode="r")
    assert doc.group("root").texts() == ["alpha beta", "gamma delta"]


def test_a_transaction_refuses_a_store_whose_manifest_is_gone(tmp_path):
    """Collecting garbage against a missing manifest would remove every file: refused."""
    st = tmp_path / "st"
    doc = fr.Document.from_texts(["one", "two"], store=st)
    before = store_files(st)
    (st / store_mod.MANIFEST).unlink()
    with pytest.raises(StoreError, match=r"manifest.json' is missing.*holds store files"):
        doc.add(texts=["three"])
    with pytest.raises(StoreError, match=r"is missing.*nothing was changed or removed"):
        Store(st)
    assert store_files(st) == before


def test_a_failed_first_write_keeps_what_another_writer_committed(tmp_path, monkeypatch):
    """A writer whose first transaction fails removes the store folder it created only while
    nothing was committed to it: here another writer commits in between."""
    st = tmp_path / "st"
    remove = Store._remove_if_unused

    def another_writer_first(self):
        fr.Document.from_texts(["kept"], store=st)
        remove(self)

    monkeypatch.setattr(Store, "_remove_if_unused", another_writer_first)
    with pytest.raises(RuntimeError, match="boom"), Store(st).transaction() as txn:
        txn.write_segment("root", fr.Document.from_texts(["lost"]).group("root").table)
        raise RuntimeError("boom")
    assert fr.Document(store=st, mode="r").group("root").texts() == ["kept"]
    assert Store(st, mode="r").verify() == []


def test_a_failed_first_write_leaves_no_folder(tmp_path):
    st = tmp_path / "st"
    with pytest.raises(RuntimeError, match="boom"), Store(st).transaction() as txn:
        txn.write_segment("root", fr.Document.from_texts(["lost"]).group("root").table)
        assert (st / store_mod.MANIFEST).is_file()  # claimed before the first file
        raise RuntimeError("boom")
    assert not st.exists()


def test_building_claims_a_new_store_first(tmp_path):
    st = tmp_path / "st"
    with Store(st).building() as folder:
        (folder / "part.npy").write_bytes(b"x")
        assert Store(st, mode="r").manifest["generation"] == 0
    assert Store(st).manifest["generation"] == 0


LOCK_HOLDER = textwrap.dedent(
    """
    import sys, time
    from fastrag.documents.store import Store
    s = Store(sys.argv[1])
    with s._locked():
        print("locked", flush=True)
        time.sleep(60)
    """
)


def test_a_failed_first_write_leaves_another_writers_lock_alone(tmp_path, monkeypatch):
    """When another process holds the writers' lock by the time the failed writer cleans up,
    nothing is removed: not the store, not that writer's lock file or its note."""
    st = tmp_path / "st"
    remove = Store._remove_if_unused
    holders = []

    def another_writer_locks_first(self):
        holder = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(st)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        holders.append(holder)
        assert holder.stdout.readline().strip() == "locked"
        remove(self)

    monkeypatch.setattr(Store, "_remove_if_unused", another_writer_locks_first)
    try:
        with pytest.raises(RuntimeError, match="boom"), Store(st).transaction() as txn:
            txn.write_segment("root", fr.Document.from_texts(["lost"]).group("root").table)
            raise RuntimeError("boom")
        assert (st / store_mod.LOCK).is_file() and (st / store_mod.HOLDER).is_file()
        assert Store(st, mode="r").manifest["generation"] == 0
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()


# takes the writers' lock once told to, then stops before recording itself until told to go on
LATE_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from fastrag.documents import storelock

    st, go, locked, done = map(Path, sys.argv[1:5])
    record = storelock._write_holder

    def pausing(path):
        locked.write_text("x")
        while not done.exists():
            time.sleep(0.01)
        record(path)

    storelock._write_holder = pausing
    while not go.exists():
        time.sleep(0.01)
    with storelock.writer_lock(st, 60):
        print("held", flush=True)
    """
)


def test_a_writer_that_locks_as_the_failed_writer_cleans_up_keeps_the_lock(tmp_path, monkeypatch):
    """The clean-up after a failed first write removes the lock file while it still holds it:
    a writer that takes the lock the moment it is let go (before it records itself) holds the
    one lock file there is, so no third process can take the lock beside it."""
    st = tmp_path / "st"
    go, locked, done = (tmp_path / n for n in ("go", "locked", "done"))
    writer = subprocess.Popen(
        [sys.executable, "-c", LATE_WRITER, *map(str, (st, go, locked, done))],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    take = Store._locked

    @contextlib.contextmanager
    def handing_over(self, timeout=None):
        with take(self, timeout):
            yield
        if timeout == 0:  # the clean-up's lock, let go: the waiting writer takes it now
            go.write_text("x")
            deadline = time.monotonic() + 60
            while not locked.exists() and time.monotonic() < deadline:
                time.sleep(0.01)

    monkeypatch.setattr(Store, "_locked", handing_over)
    try:
        with pytest.raises(RuntimeError, match="boom"), Store(st).transaction() as txn:
            txn.write_segment("root", fr.Document.from_texts(["lost"]).group("root").table)
            raise RuntimeError("boom")
        assert locked.exists(), writer.stderr.read()
        with pytest.raises(StoreLockTimeout):  # the waiting writer holds the lock
            with writer_lock(st, 0):
                pass
        done.write_text("x")
        out, err = writer.communicate(timeout=60)
    finally:
        done.write_text("x")
        writer.kill()
        writer.wait()
    assert writer.returncode == 0 and out.strip() == "held", err
