"""BM25 indexes and token ids of a Document's groups: built once per analyzer and parameter
set, cached by the group's fingerprint, persisted in the store (packed when large, written
outside the writers' lock) and reloaded. A mixin of
:class:`~fastrag.documents.indexes.DerivedData`, which owns the caches, locks and store."""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastrag._heap import trim_heap
from fastrag.analysis import TokenizedCorpus, tokenize_corpus
from fastrag.analysis.vocabtable import VocabTable
from fastrag.documents.derivedkeys import params_key
from fastrag.documents.tokenparts import STREAM_ROWS, TokenStream, tokenize_column
from fastrag.errors import StoreError, StoreWarning
from fastrag.indexes.bm25.index import BM25Index
from fastrag.indexes.bm25.stored import PACKED_NAMES
from fastrag.indexes.bm25.stream import count_postings, pack_token_parts, pack_tokens
from fastrag.indexes.vocab import encode_vocab

if TYPE_CHECKING:  # pragma: no cover
    from fastrag.documents.group import NodeGroup
    from fastrag.documents.transaction import Transaction

#: A BM25 index with fewer postings is stored unpacked (8 bytes a posting: 2 MiB at most): a
#: query on it then reads no packed block, and a process that searches a small store once
#: needs no kernel (numba's start-up, 0.4 s, is most of such a search)
PACK_MIN_POSTINGS = 1 << 18


class BM25Data:
    """The BM25 part of :class:`~fastrag.documents.indexes.DerivedData`."""

    def bm25(self, g: NodeGroup, analyzer: Any, params: dict, num_workers: int = 0):
        """(BM25Index, vocab) of group ``g`` for one analyzer and parameter set."""
        key = f"{g.name}/bm25/{params_key(analyzer.identity(), params)}"
        return self._cached(
            ("bm25", key),
            g.fingerprint,
            lambda prev: self._build_bm25(g, key, analyzer, params, num_workers),
        )

    def rebuild_bm25(
        self, g: NodeGroup, analyzer: Any, params: dict, num_workers: int, exc: Exception
    ):
        """Drop a BM25 index that proved damaged while searching (postings are checked on
        first use) and build it again; (BM25Index, vocab)."""
        key = f"{g.name}/bm25/{params_key(analyzer.identity(), params)}"
        self._damaged(f"BM25 index {key!r}", exc)
        with self._locks(("bm25", key)):
            store = self.doc.store
            entry = None if store is None else store.manifest["indexes"].get(key)
            if entry is not None:
                self._bad_dirs.add(entry["dir"])
            self._cache.pop(("bm25", key), None)
        return self.bm25(g, analyzer, params, num_workers)

    def store_bm25(self, g: NodeGroup, analyzer: Any, params: dict, num_workers: int = 0) -> None:
        """Build and store group ``g``'s BM25 index for one analyzer and parameter set unless
        the store (or this process) holds it, as :meth:`bm25` does, but without opening an
        index streamed into the store: the process that searches it does (``fastrag
        ingest``)."""
        key = f"{g.name}/bm25/{params_key(analyzer.identity(), params)}"
        with self._locks(("bm25", key)):
            hit = self._cache.get(("bm25", key))
            if hit is not None and hit[0] == g.fingerprint:
                return
            value = self._build_bm25(g, key, analyzer, params, num_workers, load=False)
            if value is not None:
                self._cache[("bm25", key)] = (g.fingerprint, value)

    def _build_bm25(
        self, g: NodeGroup, key: str, analyzer, params: dict, num_workers: int, load: bool = True
    ):
        """(BM25Index, vocab) of ``g``, loaded from the store or built (and stored); with
        ``load=False``, None where the index is in the store (found, or streamed into it)."""
        store = self.doc.store
        entry = None if store is None else store.manifest["indexes"].get(key)
        if (
            entry is not None
            and entry["meta"].get("fingerprint") == g.fingerprint
            and entry["dir"] not in self._bad_dirs
        ):
            if not load:
                return None
            try:
                return self._load_bm25(g, key)
            except (StoreError, KeyError, ValueError, TypeError, AttributeError) as exc:
                self._damaged(f"BM25 index {key!r}", exc)
        elif entry is None and store is not None:
            _warn_other_configuration(store.manifest["indexes"], g, analyzer, store.writable)
        with self._stage(f"bm25 index of {g.name!r}", 2) as bar:
            if self.keep_tokens or not _packable(store, params):
                tc = self.tokens(g, analyzer, num_workers)
            else:
                stream = TokenStream(
                    g.text_parts(STREAM_ROWS),
                    analyzer,
                    num_workers,
                    PACK_MIN_POSTINGS,
                    after_part=trim_heap,
                    rows=STREAM_ROWS,
                )
                if stream.large:
                    streamed = self._pack_stream(g, key, analyzer, params, stream, entry, load)
                    if streamed is not None or not load:
                        return streamed
                    tc = self.tokens(g, analyzer, num_workers)
                else:
                    tc = stream.whole()
            bar.update(1)
            packed = self._pack_in_store(g, key, analyzer, params, tc, entry)
            if packed is not None:
                with contextlib.suppress(StoreError, KeyError, ValueError, TypeError):
                    # the vocabulary in memory is the stored one if this build wrote it
                    return self._load_bm25(g, key, tc.vocab if packed else None)
            index = BM25Index.build(tc.values, tc.offsets, len(tc.vocab), **params)
            bar.update(1)
        self._count("bm25")

        def write(txn: Transaction) -> None:
            if _stored_meanwhile(txn, key, g, entry):
                return
            packed = index.indices.shape[0] >= PACK_MIN_POSTINGS
            arrays = dict(index.to_arrays(packed=packed))
            arrays["vocab_bytes"], arrays["vocab_offsets"] = encode_vocab(tc.vocab)
            txn.write_arrays(
                key,
                arrays,
                {**_bm25_meta(g, analyzer), "index": index.meta(packed=packed)},
            )

        self._persist(write)
        return index, tc.vocab

    def _load_bm25(self, g: NodeGroup, key: str, vocab: dict[str, int] | None = None):
        """(BM25Index, vocab) of ``key`` as stored (memory-mapped), checked against ``g``;
        ``vocab``: the stored vocabulary, already in memory (else a VocabTable of the stored
        arrays)."""
        store = self.doc.store
        arrays, meta = store.read_arrays(key)
        if meta.get("fingerprint") != g.fingerprint:
            raise StoreError(f"the stored index is of another version of group {g.name!r}")
        vocab_arrays = arrays.pop("vocab_bytes"), arrays.pop("vocab_offsets")
        if vocab is None:  # searched through its arrays: no dict of ~120 bytes a term
            vocab = VocabTable.from_arrays(*vocab_arrays)
        index = BM25Index.from_arrays(arrays, meta["index"])
        index.verify_postings_with(
            {
                n: (check, int(getattr(arrays[n], "offset", 0)))
                for n in ("indices", "data", *PACKED_NAMES)
                if n in arrays and (check := store.chunk_check(key, f"{n}.npy")) is not None
            }
        )
        if index.n_docs != len(g) or index.n_vocab != len(vocab):
            raise StoreError(
                f"index covers {index.n_docs} nodes and {index.n_vocab} "
                f"terms, the group has {len(g)} and the vocabulary "
                f"{len(vocab)}"
            )
        return index, vocab

    def _pack_stream(
        self, g, key: str, analyzer, params: dict, stream: TokenStream, entry, load: bool
    ):
        """(BM25Index, vocab) of a large group tokenized part by part into a packed index
        (``stream.pack_token_parts``); None if it could not be opened after (the caller
        builds it again from the tokens), or not ``load``."""

        def build(work: Path) -> tuple[dict, None]:
            def parts():
                yield from stream
                # tokenizing is done: the memo (~29 MiB) and the vocabulary (written now)
                # leave memory before the postings merge
                analyzer.release_memo()
                _save_vocab(work, stream.take_vocab())

            return pack_token_parts(parts(), work, **params), None

        self._write_packed(g, key, analyzer, entry, build)
        if not load:
            return None
        with contextlib.suppress(StoreError, KeyError, ValueError, TypeError):
            return self._load_bm25(g, key)
        return None

    def _pack_in_store(self, g, key: str, analyzer, params: dict, tc, entry) -> bool | None:
        """Write a large group's BM25 index into the store in packed form
        (``stream.pack_tokens``: bounded memory, the same arrays as packing a whole build).
        True once written, False when another writer had stored it, None (nothing written)
        where the index would be kept unpacked, the parameters name global statistics, or
        the store is not writable."""
        if (
            not _packable(self.doc.store, params)
            or int(tc.offsets[-1] - tc.offsets[0]) < PACK_MIN_POSTINGS
            or count_postings(tc.values, tc.offsets, len(tc.vocab)) < PACK_MIN_POSTINGS
        ):
            return None

        def build(work: Path) -> tuple[dict, dict[str, int]]:
            return pack_tokens(tc.values, tc.offsets, len(tc.vocab), work, **params), tc.vocab

        return self._write_packed(g, key, analyzer, entry, build)

    def _write_packed(self, g, key: str, analyzer, entry, build) -> bool:
        """Build a packed BM25 index (``build(folder)`` -> (index meta, vocabulary, or None
        where ``build`` wrote it)) in the store's private folder, outside the writers' lock,
        and move it in with a short transaction; False when another writer had stored it
        meanwhile."""
        store = self.doc.store
        wrote = []
        with store.building() as work:
            index_meta, vocab = build(work)
            self._count("bm25")
            if vocab is not None:
                _save_vocab(work, vocab)
            del vocab

            def write(txn: Transaction) -> None:
                if _stored_meanwhile(txn, key, g, entry):
                    return

                def files(folder: Path) -> None:
                    for f in sorted(work.iterdir()):
                        os.replace(f, folder / f.name)

                txn.write_index(key, files, {**_bm25_meta(g, analyzer), "index": index_meta})
                wrote.append(True)

            self._persist(write)
        return bool(wrote)

    def tokens(self, g: NodeGroup, analyzer, num_workers: int = 0):
        """The group's token ids for ``analyzer`` (a TokenizedCorpus, kept in memory only).
        After an update only new nodes are tokenized; the others are gathered by node id from
        the previous corpus (kept in memory per group and analyzer). Terms of removed nodes
        stay in the vocabulary with no postings, so scores and ranks equal a clean build's."""

        tkey = ("tok", g.name, analyzer.identity())
        with self._locks(tkey):
            prev = self._cache.get(tkey)
            ids = g.table.column("id")
            pos = None
            if prev is not None:
                old_ids, old = prev[1]
                pos = np.asarray(pc.index_in(ids, value_set=old_ids).fill_null(-1), np.int64)
            if (
                pos is None
                or np.count_nonzero(pos < 0) > len(pos) // 2
                or len(old.vocab) > 2 * len(old.values) + 1024
            ):
                tc = tokenize_column(g.table.column("text"), analyzer, num_workers)
            else:
                new_rows = np.flatnonzero(pos < 0)
                texts = g.table.column("text").take(pa.array(new_rows)).to_pylist()
                fresh = tokenize_corpus(texts, analyzer, num_workers=num_workers)
                tc = _merge_tokens(old, pos, new_rows, fresh, TokenizedCorpus)
            self._cache[tkey] = (g.fingerprint, (ids, tc))
            return tc


def _merge_tokens(old, pos: np.ndarray, new_rows: np.ndarray, fresh, corpus_cls):
    """A corpus whose row ``r`` is ``old``'s row ``pos[r]``, or the next row of ``fresh`` where
    ``pos[r] < 0``; ``fresh``'s terms are added to (a copy of) ``old``'s vocabulary."""
    vocab = dict(old.vocab)
    remap = np.empty(len(fresh.vocab), np.int32)
    for tok, j in fresh.vocab.items():
        remap[j] = vocab.setdefault(tok, len(vocab))
    old_len = np.diff(old.offsets)
    kept = np.flatnonzero(pos >= 0)
    lengths = np.zeros(len(pos), np.int64)
    lengths[kept] = old_len[pos[kept]]
    lengths[new_rows] = np.diff(fresh.offsets)
    offsets = np.zeros(len(pos) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.empty(int(offsets[-1]), np.int32)
    for rows, src_start, src_values in (
        (kept, old.offsets[pos[kept]], old.values),
        (new_rows, fresh.offsets[:-1], remap[fresh.values]),
    ):
        n = lengths[rows]
        within = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        values[np.repeat(offsets[rows], n) + within] = src_values[np.repeat(src_start, n) + within]
    return corpus_cls(vocab=vocab, values=values, offsets=offsets)


def _packable(store, params: dict) -> bool:
    """Whether a large BM25 index with ``params`` is written packed into ``store``."""
    return store is not None and store.writable and set(params) <= {"method", "k1", "b", "delta"}


def _stored_meanwhile(txn: Transaction, key: str, g: NodeGroup, entry: dict | None) -> bool:
    """Whether another writer stored index ``key`` of this version of ``g`` (and it is not
    the damaged ``entry`` this process read)."""
    cur = txn.manifest["indexes"].get(key)
    return (
        cur is not None
        and cur["meta"].get("fingerprint") == g.fingerprint
        and (entry is None or cur["dir"] != entry["dir"])
    )


def _warn_other_configuration(indexes: dict, g: NodeGroup, analyzer: Any, writable: bool) -> None:
    """Say so when the store holds a BM25 index of ``g`` for the same analyzer with other
    options and none for these: the index for this configuration is built instead. Always
    when a word segmenter differs (one the writer had installed and this process lacks, or
    the reverse: tokens differ without anyone asking); for other options (``stemmer=``, a
    choice) only on a read-only store, which builds it in memory in every process."""
    mine = _identity(analyzer.identity())
    for entry in indexes.values():
        meta = entry.get("meta", {}) if isinstance(entry, dict) else {}
        if meta.get("kind") != "bm25" or meta.get("group") != g.name:
            continue
        theirs = _identity(meta.get("analyzer"))
        if theirs.get("analyzer") != mine.get("analyzer") or theirs == mine:
            continue
        a, b = _flat(theirs), _flat(mine)
        differ = [k for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
        segmenters = any(".segmenters." in k for k in differ)
        if writable and not segmenters:
            return  # a choice made here, built once and stored
        fix = (
            "install the segmenters the writer had (the fastrag extras ja, thai, lao, icu or "
            "languages)"
            if segmenters
            else "pass the options it was built with"
        )
        diff = "; ".join(f"{k}: {a.get(k, '-')} there, {b.get(k, '-')} here" for k in differ)
        warnings.warn(
            f"the store's BM25 index of group {g.name!r} was built by analyzer "
            f"{mine.get('analyzer')!r} with other options ({diff}): building one for this "
            "configuration (a read-only store builds it in memory, in every process). To use "
            f"the stored one, {fix}; or ingest again with this configuration.",
            StoreWarning,
            stacklevel=5,
        )
        return


def _identity(value: Any) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _bm25_meta(g: NodeGroup, analyzer: Any) -> dict:
    """The stored meta of a BM25 index of ``g``, but its ``index`` entry."""
    return {
        "kind": "bm25",
        "group": g.name,
        "fingerprint": g.fingerprint,
        "analyzer": analyzer.identity(),
    }


def _save_vocab(folder: Path, vocab: dict[str, int] | VocabTable) -> None:
    """Write ``vocab`` as a stored index's two vocabulary arrays into ``folder``."""
    blob, offsets = vocab.arrays() if isinstance(vocab, VocabTable) else encode_vocab(vocab)
    np.save(folder / "vocab_bytes.npy", blob, allow_pickle=False)
    np.save(folder / "vocab_offsets.npy", offsets, allow_pickle=False)
