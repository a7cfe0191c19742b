"""A packed BM25 index built from a corpus streamed in chunks of documents, with memory bounded
by one chunk's postings plus one merge window: the packed files a store keeps
(:meth:`BM25Index.to_arrays` with ``packed=True``), byte-identical to packing
:meth:`BM25Index.build` of the whole corpus.

Each chunk's postings (term-major, global doc ids, term frequencies) are spilled to disk at
8 bytes each; once every chunk has been read, the corpus statistics are known and the spills
are merged term range by term range into the block codec, with each term's bound.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from filelock import FileLock, Timeout

from fastrag._lazy import kernels
from fastrag.errors import ConfigError, StoreWarning
from fastrag.indexes.bm25.args import (
    INT32_MAX,
    check_corpus,
    check_method,
    check_params,
    raise_bad_token,
)
from fastrag.indexes.bm25.index import BM25Index
from fastrag.indexes.bm25.stats import BM25Stats
from fastrag.indexes.bm25.stored import FORMAT_PACKED
from fastrag.indexes.bm25.weights import METHOD_CODES, base_weights_for, idf_weights

kb = kernels("bm25.build")  # on first use: importing this module loads no numba
kc = kernels("bm25.codec")

# Suffix of the lock file a running build holds beside its temporary folder.
_LOCK = ".building"
# Postings merged (and encoded) per window: 8 bytes each gathered, plus their weights.
MERGE_POSTINGS = 1 << 25
#: Tokens per spilled chunk and postings per merge window of :func:`pack_tokens`: its working
#: memory is one chunk's and one window's postings, whatever the corpus's size (31 MiB measured
#: at 7.9M postings, tests/indexes/test_bm25_stream.py), plus arrays of 8 bytes a term.
PACK_TOKENS = 1 << 21


def build_packed(
    chunks: Iterable[tuple],
    n_vocab: int | None,
    folder: str | os.PathLike,
    *,
    method: str = "lucene",
    k1: float = 1.5,
    b: float = 0.75,
    delta: float = 0.5,
    merge_postings: int = MERGE_POSTINGS,
) -> dict:
    """Build the packed BM25 index of the documents of ``chunks`` (each ``(values,
    offsets)`` as :meth:`BM25Index.build` takes them; documents are numbered on across
    chunks; with ``n_vocab=None`` each chunk is ``(values, offsets, n_vocab)``, for a
    vocabulary that grows from chunk to chunk: earlier ids keep their terms) into the new
    folder ``folder``: one ``<name>.npy`` per array of
    ``to_arrays(packed=True)`` and ``meta.json`` (:meth:`BM25Index.meta`). Open it with
    :func:`open_packed`. Spills go to a sibling temporary folder, removed in any case; the
    index appears under ``folder`` only once complete. A build of ``folder`` killed before it
    could clean up (its temporary folder no longer locked by a live process) is removed by the
    next build of ``folder``, with a :class:`~fastrag.errors.StoreWarning`. Returns the meta."""
    method = check_method(method)
    k1, b, delta = check_params(k1, b, delta)
    if n_vocab is not None:
        _check_n_vocab(n_vocab)
    if not isinstance(merge_postings, int) or merge_postings < 1:
        raise ConfigError(f"merge_postings={merge_postings!r} must be a positive int")
    folder = Path(folder)
    if folder.exists():
        raise ConfigError(f"{folder} exists; build_packed writes a new folder (remove it first)")
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_crashed_builds(folder)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    lock = FileLock(f"{work}{_LOCK}")
    try:
        lock.acquire()
        part_vocab, doc_len, df, n_tokens = _spill(chunks, n_vocab, work)
        n_docs, n_vocab = int(doc_len.shape[0]), int(df.shape[0])
        _check_n_vocab(n_vocab)
        nnz = _merge(work, part_vocab, doc_len, df, method, k1, b, delta, merge_postings)
        meta = {
            "format": FORMAT_PACKED,
            "method": method,
            "k1": k1,
            "b": b,
            "delta": delta,
            "n_docs": n_docs,
            "n_vocab": n_vocab,
            "n_tokens": n_tokens,
            "nnz": nnz,
            "external_stats": False,
            "stats_n_docs": n_docs,
            "stats_n_tokens": n_tokens,
        }
        (work / "meta.json").write_text(json.dumps(meta))
        for f in work.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        try:
            os.rename(work, folder)
        except OSError:
            if folder.exists():
                raise ConfigError(
                    f"{folder} was written by another build meanwhile; this build's files are "
                    "removed (build into a new folder)"
                ) from None
            raise
        return meta
    finally:
        shutil.rmtree(work, ignore_errors=True)
        lock.release()
        Path(lock.lock_file).unlink(missing_ok=True)


def _check_n_vocab(n_vocab) -> None:
    if isinstance(n_vocab, bool) or not isinstance(n_vocab, int) or not 1 <= n_vocab <= INT32_MAX:
        raise ConfigError(f"n_vocab={n_vocab!r} must be an int in [1, {INT32_MAX}]")


def count_postings(values: np.ndarray, offsets: np.ndarray, n_vocab: int) -> int:
    """The number of postings (distinct terms per document, summed) of a token-id corpus."""
    values, offsets, n_vocab = check_corpus(values, offsets, n_vocab)
    df, bad = kb.count_document_frequencies(values, offsets, n_vocab)
    raise_bad_token(bad, values, n_vocab)
    return int(df.sum())


def pack_tokens(
    values: np.ndarray,
    offsets: np.ndarray,
    n_vocab: int,
    folder: str | os.PathLike,
    *,
    method: str = "lucene",
    k1: float = 1.5,
    b: float = 0.75,
    delta: float = 0.5,
) -> dict:
    """Write the packed index of a token-id corpus held in memory (as :meth:`BM25Index.build`
    takes it) into the existing folder ``folder``: one ``<name>.npy`` per array of
    ``to_arrays(packed=True)``, equal to packing ``BM25Index.build`` of the corpus. Built by
    :func:`build_packed` from chunks of about :data:`PACK_TOKENS` tokens, so the uncompressed
    index is never held whole. Returns the meta (:meth:`BM25Index.meta` with
    ``packed=True``)."""
    values, offsets, n_vocab = check_corpus(values, offsets, n_vocab)
    return pack_token_parts(
        [(values, offsets, n_vocab)], folder, method=method, k1=k1, b=b, delta=delta
    )


def pack_token_parts(
    parts: Iterable[tuple[np.ndarray, np.ndarray, int]],
    folder: str | os.PathLike,
    *,
    method: str = "lucene",
    k1: float = 1.5,
    b: float = 0.75,
    delta: float = 0.5,
) -> dict:
    """:func:`pack_tokens` of a corpus that arrives in parts ``(values, offsets, n_vocab)``
    (documents numbered on across parts; ``n_vocab``: the vocabulary's size when the part was
    tokenized, never shrinking), so the corpus's tokens are never held whole: the files equal
    ``pack_tokens`` of the joined parts with the last part's ``n_vocab``. Returns the meta."""
    out = Path(folder) / "packed"
    meta = build_packed(
        _split_parts(parts),
        None,
        out,
        method=method,
        k1=k1,
        b=b,
        delta=delta,
        merge_postings=PACK_TOKENS,
    )
    for f in out.glob("*.npy"):
        os.replace(f, out.parent / f.name)
    (out / "meta.json").unlink()
    out.rmdir()
    return meta


def _split_parts(parts: Iterable[tuple[np.ndarray, np.ndarray, int]]):
    """Each part's :func:`_token_chunks`, with its vocabulary's size."""
    for values, offsets, n_vocab in parts:
        if np.shape(offsets) == (1,) and np.size(values) == 0:
            yield values, offsets, n_vocab  # no documents, but its vocabulary counts
            continue
        values, offsets, n_vocab = check_corpus(values, offsets, n_vocab)
        for v, o in _token_chunks(values, offsets):
            yield v, o, n_vocab


def _token_chunks(values: np.ndarray, offsets: np.ndarray):
    """``(values, offsets)`` chunks of whole documents of about :data:`PACK_TOKENS` tokens
    (offsets into the whole ``values``: nothing is copied)."""
    n_docs = offsets.shape[0] - 1
    lo = 0
    while lo < n_docs:
        end = int(np.searchsorted(offsets, offsets[lo] + PACK_TOKENS, "right")) - 1
        hi = min(max(end, lo + 1), n_docs)
        yield values, offsets[lo : hi + 1]
        lo = hi


def _remove_crashed_builds(folder: Path) -> None:
    """Remove the temporary folders of earlier builds of ``folder`` whose process died (their
    lock file no longer held); a build still running keeps its folder."""
    # mkdtemp's names: the prefix, then 8 random characters
    for lock_path in folder.parent.glob(f".{glob.escape(folder.name)}.{'?' * 8}{_LOCK}"):
        work = Path(str(lock_path)[: -len(_LOCK)])
        lock = FileLock(str(lock_path))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue  # a live build
        try:
            if work.is_dir():
                size = sum(f.stat().st_size for f in work.rglob("*") if f.is_file())
                shutil.rmtree(work)
                warnings.warn(
                    f"removed {work} ({size:,} bytes), left by a build of {folder} that was "
                    "interrupted before it could clean up",
                    StoreWarning,
                    stacklevel=3,
                )
        finally:
            lock.release()
            lock_path.unlink(missing_ok=True)


def _spill(
    chunks: Iterable[tuple], n_vocab: int | None, work: Path
) -> tuple[list[int], np.ndarray, np.ndarray, int]:
    """Spill each chunk's postings (raw ``<i>.indptr/indices/tf.bin``: int64 offsets, int32
    global doc ids, uint32 term frequencies); returns ``(each spill's vocabulary size,
    document lengths, document frequencies, tokens)``. ``n_vocab=None``: chunks carry their
    vocabulary's size (see :func:`build_packed`)."""

    doc_len, df, part_vocab = [], np.zeros(n_vocab or 0, np.int64), []
    n_docs = n_tokens = 0
    for i, chunk in enumerate(chunks):
        values, offsets, nv = chunk if n_vocab is None else (*chunk, n_vocab)
        if n_vocab is None:
            _check_n_vocab(nv)
            if nv < df.shape[0]:
                raise ConfigError(
                    f"chunk {i} has a vocabulary of {nv} terms, an earlier one {df.shape[0]}: "
                    "a growing vocabulary never shrinks"
                )
            df = np.concatenate([df, np.zeros(nv - df.shape[0], np.int64)])
        if np.shape(offsets) == (1,) and np.size(values) == 0:
            continue  # a chunk of no documents
        values, offsets, _ = check_corpus(values, offsets, nv)
        local, bad = kb.count_document_frequencies(values, offsets, nv)
        if bad != -1:
            raise ConfigError(
                f"token id {int(values[bad])} of chunk {i} is outside the vocabulary "
                f"[0, {nv}); map tokens to ids below n_vocab"
            )
        if n_docs + offsets.shape[0] - 1 > INT32_MAX:
            raise ConfigError(f"more than {INT32_MAX} documents: build shards instead")
        indptr, indices, tf = kb.build_postings(values, offsets, nv, local)
        indices += np.int32(n_docs)
        part = len(doc_len)
        part_vocab.append(nv)
        indptr.tofile(work / f"{part}.indptr.bin")
        indices.tofile(work / f"{part}.indices.bin")
        tf.astype(np.uint32).tofile(work / f"{part}.tf.bin")
        doc_len.append(np.diff(offsets).astype(np.uint32))
        df[:nv] += local
        n_docs += offsets.shape[0] - 1
        n_tokens += int(offsets[-1] - offsets[0])
    if not doc_len:
        raise ConfigError("chunks yielded no chunk of documents")
    return part_vocab, np.concatenate(doc_len), df, n_tokens


def _merge(
    work: Path,
    part_vocab: list[int],
    doc_len: np.ndarray,
    df: np.ndarray,
    method: str,
    k1: float,
    b: float,
    delta: float,
    merge_postings: int,
) -> int:
    """Merge the spills into the packed arrays' files in ``work`` (and remove the spills);
    returns the number of postings. ``part_vocab``: each spill's vocabulary size (its terms'
    ids are below it)."""

    n_vocab, n_docs = df.shape[0], doc_len.shape[0]
    idf = idf_weights(method, df, n_docs)
    base = base_weights_for(method, idf, k1, delta)
    avgdl = BM25Stats(n_docs, int(doc_len.sum(dtype=np.int64)), df).avgdl
    indptr = np.zeros(n_vocab + 1, np.int64)
    np.cumsum(df, out=indptr[1:])
    n_blocks = int(((df + kc.BLOCK - 1) // kc.BLOCK).sum())
    doc_off = np.zeros(n_docs + 1, np.int64)
    np.cumsum(doc_len, out=doc_off[1:])
    names = {"blk_last": np.uint32, "blk_word": np.int64, "blk_dw": np.uint8, "blk_tw": np.uint8}
    # Written and read as files, not memory maps: the process's memory stays one window's.
    out = {n: open(work / f"{n}.npy", "wb") for n in names}  # noqa: SIM115 - closed below
    term_max = np.zeros(n_vocab, np.float32)
    t0 = word0 = 0
    try:
        for n, dtype in names.items():
            _npy_header(out[n], dtype, n_blocks + (n == "blk_word"))
        with open(work / "words.raw", "wb") as raw:
            while t0 < n_vocab:  # a window of terms with about merge_postings postings
                t1 = int(np.searchsorted(indptr, indptr[t0] + merge_postings, "right")) - 1
                t1 = min(max(t1, t0 + 1), n_vocab)
                w_indptr = indptr[t0 : t1 + 1] - indptr[t0]
                w_idx = np.empty(int(w_indptr[-1]), np.int32)
                w_tf = np.empty(int(w_indptr[-1]), np.uint32)
                cursor = w_indptr[:-1].copy()
                for i, nv in enumerate(part_vocab):  # chunk by chunk: doc ids ascend
                    if nv <= t0:
                        continue  # the window's terms came after this chunk
                    c_indptr = _read(work / f"{i}.indptr.bin", np.int64, t0, min(t1, nv) + 1)
                    if nv < t1:  # terms after the chunk's vocabulary: no postings in it
                        c_indptr = np.pad(c_indptr, (0, t1 - nv), mode="edge")
                    lo, hi = int(c_indptr[0]), int(c_indptr[-1])
                    kc.gather_window(
                        c_indptr,
                        _read(work / f"{i}.indices.bin", np.int32, lo, hi),
                        _read(work / f"{i}.tf.bin", np.uint32, lo, hi),
                        cursor,
                        w_idx,
                        w_tf,
                    )
                term_max[t0:t1] = kb.weigh_postings(
                    w_indptr,
                    w_idx,
                    w_tf.astype(np.float32),
                    doc_off,
                    idf[t0:t1],
                    base[t0:t1],
                    METHOD_CODES[method],
                    k1,
                    b,
                    delta,
                    avgdl,
                )
                _, last, word, dw, tw, words = kc.encode_postings(w_indptr, w_idx, w_tf)
                out["blk_last"].write(last.tobytes())
                out["blk_word"].write((word[:-1] + word0).tobytes())
                out["blk_dw"].write(dw.tobytes())
                out["blk_tw"].write(tw.tobytes())
                raw.write(words[:-1].tobytes())  # without the reader's pad word
                word0, t0 = word0 + int(word[-1]), t1
        out["blk_word"].write(np.int64(word0).tobytes())
    finally:
        for f in out.values():
            f.close()
    with open(work / "words.npy", "wb") as f, open(work / "words.raw", "rb") as raw:
        _npy_header(f, np.uint32, word0 + 1)
        shutil.copyfileobj(raw, f, 1 << 20)
        f.write(np.uint32(0).tobytes())  # the reader's pad word
    for f in work.iterdir():  # the spills
        if f.suffix in (".bin", ".raw"):
            f.unlink()
    nnz = int(indptr[-1])
    np.save(work / "indptr.npy", indptr.astype(np.int32) if nnz <= INT32_MAX else indptr)
    np.save(work / "term_max.npy", term_max)
    np.save(work / "doc_len.npy", doc_len)
    return nnz


def _npy_header(f, dtype, n: int) -> None:
    """Write the ``.npy`` header of a 1-D array of ``n`` items of ``dtype`` to ``f``."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False}
    np.lib.format.write_array_header_1_0(f, {**header, "shape": (int(n),)})


def _read(path: Path, dtype, lo: int, hi: int) -> np.ndarray:
    """Items ``[lo, hi)`` of the raw file ``path`` of ``dtype`` items."""
    size = np.dtype(dtype).itemsize
    return np.fromfile(path, dtype, hi - lo, offset=lo * size)


def open_packed(folder: str | os.PathLike) -> BM25Index:
    """The :class:`BM25Index` that :func:`build_packed` wrote in ``folder``, its arrays
    memory-mapped (nothing is read but the per-term and per-block arrays)."""
    folder = Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    arrays = {f.stem: np.load(f, mmap_mode="r") for f in folder.glob("*.npy")}
    return BM25Index.from_arrays(arrays, meta)
