"""Per-chunk checksums of large store files (fastrag/documents/chunksums.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import xxhash

from fastrag.documents import chunksums
from fastrag.errors import StoreError


@pytest.fixture
def big_file(tmp_path, monkeypatch):
    monkeypatch.setattr(chunksums, "CHUNK", 1000)
    path = tmp_path / "f.bin"
    path.write_bytes(np.random.default_rng(0).bytes(10_500))  # 10 whole chunks and a part
    return path


def test_digests_record_the_chunk_size_and_each_chunk(big_file):
    from fastrag._checksum import checksum_file

    whole, rec = chunksums.file_digests(big_file)
    head, _, digests = rec.partition(":")
    data = big_file.read_bytes()
    assert whole == checksum_file(big_file) and head == "1000"
    assert digests == "".join(
        xxhash.xxh3_64(data[i : i + 1000]).hexdigest() for i in range(0, len(data), 1000)
    )


def test_only_the_chunks_a_range_overlaps_are_read_and_each_once(big_file, monkeypatch):
    check = chunksums.ChunkCheck(big_file, chunksums.file_digests(big_file)[1], 10_500)
    hashed = []
    real = xxhash.xxh3_64
    monkeypatch.setattr(chunksums.xxhash, "xxh3_64", lambda b: hashed.append(len(b)) or real(b))
    check.ensure(np.array([1500, 0, 7000]), np.array([2001, 0, 7001]))  # chunks 1-2 and 7
    assert sorted(np.flatnonzero(check._done).tolist()) == [1, 2, 7]
    check.ensure(np.array([1999]), np.array([2500]))  # already verified: nothing read
    assert len(hashed) == 3
    check.ensure(np.array([10_400]), np.array([10_500]))  # the partial last chunk
    assert hashed[-1] == 500 and check.n_verified == 4


def test_a_damaged_chunk_is_named_and_others_still_pass(big_file):
    check = chunksums.ChunkCheck(big_file, chunksums.file_digests(big_file)[1], 10_500)
    data = bytearray(big_file.read_bytes())
    data[4321] ^= 1
    big_file.write_bytes(bytes(data))
    check.ensure(np.array([0]), np.array([4000]))
    with pytest.raises(StoreError, match=r"f\.bin' fails its checksum in bytes 4000-5000"):
        check.ensure(np.array([4500]), np.array([4501]))
    assert not check._done[4]


def test_threads_verifying_at_once_agree(big_file):
    check = chunksums.ChunkCheck(big_file, chunksums.file_digests(big_file)[1], 10_500)
    errors = []

    def run(i):
        try:
            check.ensure(np.array([i * 700]), np.array([10_500]))
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and check.n_verified == 11


@pytest.mark.parametrize("record", ["1000:abc", "x:" + "0" * 176, "0:", "1000:" + "0" * 160])
def test_a_record_that_does_not_fit_the_file_is_refused(big_file, record):
    with pytest.raises(StoreError, match="chunk checksums recorded for .* do not match its size"):
        chunksums.ChunkCheck(big_file, record, 10_500)
