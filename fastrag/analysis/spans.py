"""Code points and token spans shared by the CJK analyzer and the jieba segmenter.

Texts go to the numba kernels as one uint32 code-point array plus offsets; kernels return
token spans (start, length) and local ids; these helpers turn spans back into strings and
rewrite ``(vocab, ids, offsets)`` when each distinct token maps to zero or more tokens.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

__all__ = [
    "append_tokens",
    "expand_tokens",
    "first_occurrence",
    "span_strings",
    "text_kernels",
    "texts_to_codepoints",
]


def text_kernels() -> ModuleType:
    """:mod:`fastrag._kernels.text`, imported on first use: numba loads with it, so importing
    ``fastrag.analysis`` (and the LLM and synthesis layers above it) stays light."""
    from fastrag._kernels import text  # lazy: numba

    return text


def texts_to_codepoints(texts: list[str]) -> tuple[str, np.ndarray, np.ndarray]:
    """``(joined, cps, doc_off)``: the texts each followed by '\\n', as a str and as uint32
    code points; text ``d`` is ``cps[doc_off[d] : doc_off[d + 1] - 1]`` (same indices in
    ``joined``), so a span's string is a slice of ``joined``."""
    doc_off = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(
        np.fromiter((len(t) + 1 for t in texts), dtype=np.int64, count=len(texts)),
        out=doc_off[1:],
    )
    joined = "\n".join(texts) + "\n" if texts else ""
    cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return joined, cps, doc_off


def span_strings(joined: str, cps: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> list[str]:
    """The strings ``joined[s : s + len]`` of the spans, decoded in one go: the spans are
    gathered with a NUL after each, decoded once and split (falling back to slicing when a
    span itself contains NUL)."""
    n = len(starts)
    if n == 0:
        return []
    buf = text_kernels().gather_spans(cps, starts, lens, np.uint32(0))
    out = buf.tobytes().decode("utf-32-le", "surrogatepass").split("\x00")
    if len(out) == n + 1:
        out.pop()
        return out
    return [joined[s:e] for s, e in zip(starts.tolist(), (starts + lens).tolist(), strict=True)]


def expand_tokens(
    raw: list[str], ids: np.ndarray, offsets: np.ndarray, parts: list[tuple[str, ...] | None]
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Replace each distinct raw token ``raw[r]`` by the tokens ``parts[r]`` (None: ``raw[r]``
    itself, as an analyzer's memo keeps it) and rebuild ``(vocab, ids, offsets)`` without a
    per-occurrence Python loop.

    The new vocabulary is in first-occurrence order of the expanded stream, because ``raw``
    is in first-occurrence order and each raw token's parts keep their order.
    """
    final: dict[str, int] = {}
    exp_len = np.zeros(len(raw), dtype=np.int64)
    exp_vals: list[int] = []
    setdefault = final.setdefault
    for r, toks in enumerate(parts):
        if toks is None:
            exp_len[r] = 1
            exp_vals.append(setdefault(raw[r], len(final)))
            continue
        exp_len[r] = len(toks)
        exp_vals.extend([setdefault(p, len(final)) for p in toks])
    exp_values = np.asarray(exp_vals, dtype=np.int32)
    if len(ids) == 0:
        return list(final), np.zeros(0, np.int32), np.zeros_like(offsets)
    if bool((exp_len == 1).all()) and np.array_equal(exp_values, np.arange(len(raw))):
        return list(final), ids, offsets  # identity mapping (not just the same count)
    exp_off = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum(exp_len, out=exp_off[1:])
    lens = exp_len[ids]
    cum = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(lens, out=cum[1:])
    total = int(cum[-1])
    if total and bool((lens == 1).all()):
        values = exp_values[exp_off[ids]]
    else:
        starts = exp_off[ids] - cum[:-1]
        values = exp_values[np.repeat(starts, lens) + np.arange(total, dtype=np.int64)]
    return list(final), values.astype(np.int32, copy=False), cum[offsets]


def first_occurrence(
    out: tuple[list[str], np.ndarray, np.ndarray],
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``(vocab, ids, offsets)`` with the vocabulary renumbered in first-occurrence order
    (tokens no id uses dropped)."""
    vocab, ids, offsets = out
    first = np.full(len(vocab), len(ids), dtype=np.int64)
    np.minimum.at(first, ids, np.arange(len(ids)))
    order = np.argsort(first, kind="stable")
    order = order[first[order] < len(ids)]
    if len(order) == len(vocab) and np.array_equal(order, np.arange(len(vocab))):
        return out
    renum = np.empty(len(vocab), dtype=np.int64)
    renum[order] = np.arange(len(order))
    return [vocab[i] for i in order.tolist()], renum[ids].astype(np.int32), offsets


def append_tokens(
    a: tuple[list[str], np.ndarray, np.ndarray], b: tuple[list[str], np.ndarray, np.ndarray]
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Each text's tokens of ``a`` followed by its tokens of ``b`` (both ``(vocab, ids,
    offsets)`` over the same texts), the vocabulary again in first-occurrence order."""
    va, ia, oa = a
    vb, ib, ob = b
    if len(ib) == 0:
        return a
    index = {t: i for i, t in enumerate(va)}
    vocab = list(va)
    remap = np.empty(len(vb), dtype=np.int64)
    for j, t in enumerate(vb):
        k = index.setdefault(t, len(vocab))
        if k == len(vocab):
            vocab.append(t)
        remap[j] = k
    n = len(oa) - 1
    la, lb = np.diff(oa), np.diff(ob)
    off = oa + ob
    out = np.empty(len(ia) + len(ib), dtype=np.int64)
    doc = np.repeat(np.arange(n), la)
    out[off[doc] + np.arange(len(ia)) - oa[doc]] = ia
    doc = np.repeat(np.arange(n), lb)
    out[off[doc] + la[doc] + np.arange(len(ib)) - ob[doc]] = remap[ib]
    return first_occurrence((vocab, out.astype(np.int32), off))
