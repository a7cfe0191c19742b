"""The default analyzer's per-text language (``per_language``): function words choose the
Snowball stemmer and the stopwords of a Latin-script text."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from memo_threads import errors_while_releasing

import fastrag as fr
from fastrag.analysis import get_analyzer
from fastrag.analysis.latin import LANGUAGES, function_words, rules_tag, text_languages
from fastrag.analysis.mixed import MixedAnalyzer
from fastrag.errors import ConfigError

FASTAPI = Path(__file__).resolve().parents[2] / "bench" / "data" / "fastapi_docs" / "corpus"
MIXED_DOCS = Path(__file__).resolve().parents[2] / "bench" / "data" / "mixed_docs" / "corpus"
PAGE_LANGUAGES = {
    "de": "german",
    "en": "english",
    "es": "spanish",
    "fr": "french",
    "pt": "portuguese",
}


def _languages(an: MixedAnalyzer, texts: list[str]) -> list[str]:
    raw, ids, offsets = an._spans(an._prepare(texts))
    found = text_languages(raw, ids, offsets)
    if found is None:
        return ["english"] * len(texts)
    return [LANGUAGES[i] if i >= 0 else "unclear" for i in found[0].tolist()]


def _pages(lang: str) -> list[str]:
    return [p.read_text("utf-8") for p in sorted((FASTAPI / lang).rglob("*.md"))]


def test_every_fastapi_page_gets_its_language():
    an = MixedAnalyzer()
    for lang, language in PAGE_LANGUAGES.items():
        pages = _pages(lang)
        assert len(pages) == 51
        assert _languages(an, pages) == [language] * 51, lang


def test_sentences_and_queries():
    an = MixedAnalyzer()
    assert _languages(
        an,
        [
            "afficher un composant seulement si une condition est vraie",
            "mostrar un componente solo cuando se cumple una condición",
            "mostrar um componente apenas quando uma condição for verdadeira",
            "Datei hochladen mit UploadFile",
            "render an array of items in a loop",
            "Query-Parameter optional machen",  # no function word
            "el parámetro de ruta debe ser mayor o igual que 1",  # es/pt: 4 each
            "",
        ],
    ) == [
        "french",
        "spanish",
        "portuguese",
        "german",
        "english",
        "unclear",
        "unclear",
        "unclear",
    ]
    assert "de" in function_words("french") and "the" in function_words("english")
    assert rules_tag().startswith("function-words-v2:")


def test_pages_in_english_or_other_scripts_keep_their_tokens():
    """English pages and Chinese pages (with code, URLs, a Latin function word or two) are
    tokenized exactly as without per_language."""
    on, off = MixedAnalyzer(), MixedAnalyzer(per_language=False)
    pages = _pages("en") + _pages("zh")
    pages += [p.read_text("utf-8") for p in sorted(MIXED_DOCS.rglob("*.md"))][:200]
    assert len(pages) == 282
    assert _same(on, off, pages)


def _same(on: MixedAnalyzer, off: MixedAnalyzer, texts: list[str]) -> bool:
    a, b = on.encode_chunk(texts), off.encode_chunk(texts)
    return a[0] == b[0] and np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])


def test_a_french_text_is_stemmed_in_french_and_a_batch_equals_its_texts():
    an = MixedAnalyzer()
    french = "Le développement des applications web"
    assert an(french) == ["développ", "appliqu", "web"]
    assert MixedAnalyzer(per_language=False)(french) == [
        *("le", "développ", "des", "applic", "web")
    ]
    texts = [p[:4000] for lang in ("de", "en", "es", "fr", "pt", "zh") for p in _pages(lang)[:6]]
    vocab, ids, offsets = an.encode_chunk(texts)
    per_text = [[vocab[i] for i in ids[offsets[k] : offsets[k + 1]]] for k in range(len(texts))]
    assert per_text == [an(t) for t in texts]
    # the local vocabulary in order of first occurrence (the Analyzer contract)
    assert vocab == list(dict.fromkeys(t for toks in per_text for t in toks))


def test_queries_of_unclear_language():
    an = MixedAnalyzer()
    q = an.query_tokens
    # ASCII words without a function word: English, as before (English keyword searches)
    for text in ("docker compose up", "xylophone quasar", "make a script executable"):
        assert q(text) == MixedAnalyzer(per_language=False).query_tokens(text)
    # a tie between Spanish and Portuguese: each word in both, a stopword of either dropped
    assert q("el parámetro de ruta debe ser mayor o igual que 1") == [
        *("parametr", "parámetr", "rut", "deb", "mayor", "igual", "1")
    ]
    # a German compound also gives the German stems a German page has
    assert q("Datenbankverbindung")[:4] == ["datenbankverbindung", "daten", "bank", "verbindung"]
    assert "verbind" in q("Datenbankverbindung")
    # a query with words of another script is English (its Latin words are names)
    # a query of function words only keeps them, in English (a search for the C language)
    assert q("c") == ["c"] and q("a la") == ["la"]
    mostly_han = "les fichiers 上传文件"
    assert q(mostly_han) == MixedAnalyzer(per_language=False).query_tokens(mostly_han)


def test_a_french_query_finds_the_french_page_by_another_inflection(tmp_path):
    texts = [
        "Les journaux du serveur sont enregistrés chaque nuit.",
        "The server logs are saved every night.",
        "Die Protokolle des Servers werden jede Nacht gespeichert.",
    ]
    doc = fr.Document.from_texts(texts, store=str(tmp_path / "s"))
    query = "comment lire le journal"  # journal, journaux -> journal in French
    hits = fr.Retriever(doc, "root", "bm25", topk=3)(query)
    assert [h.text for h in hits] == texts[:1]
    plain = MixedAnalyzer(per_language=False)
    old = fr.Retriever(doc, "root", "bm25", topk=3, analyzer=plain)(query)
    assert [h.text for h in old] == []  # English stems: journaux, journal


def test_option_identity_pickle():
    on, off = MixedAnalyzer(), MixedAnalyzer(per_language=False)
    assert on.identity() != off.identity() and on != off
    assert '"per_language":"function-words-v2:' in on.identity()
    assert '"per_language":null' in off.identity()
    # a stemmer given, or no default stopwords: the tag says what follows the language
    assert ':stop"' in MixedAnalyzer(stemmer="english").identity()
    assert ':stem"' in MixedAnalyzer(stopwords=None).identity()
    again = pickle.loads(pickle.dumps(on))
    text = "Le développement des applications web"
    assert again == on and again(text) == on(text)
    with pytest.raises(ConfigError, match="per_language"):
        MixedAnalyzer(per_language="yes")
    assert get_analyzer("bm25", per_language=False) == off


def test_cmrc_tokens_are_unchanged(cmrc):
    """Chinese paragraphs keep their tokens; of 3,219 questions one changes: its German
    compound also gives German stems, which no paragraph holds. CMRC's BM25 and hybrid
    numbers stand."""
    contexts, questions, _ = cmrc
    on, off = MixedAnalyzer(), MixedAnalyzer(per_language=False)
    assert _same(on, off, contexts)
    changed = [q for q in questions if on.query_tokens(q) != off.query_tokens(q)]
    assert len(questions) == 3219 and len(changed) == 1
    extra = set(on.query_tokens(changed[0])) - set(off.query_tokens(changed[0]))
    assert extra == {"deutschosterreich", "osterreich"}
    assert not extra & set(on.encode_chunk(contexts)[0])


def test_threads_share_one_analyzer_while_its_memos_start_afresh(monkeypatch):
    """Four threads tokenize pages and queries in six languages with one analyzer, its
    per-language memo small enough to start afresh again and again, while another thread
    releases every memo: each result equals the single-threaded one."""
    import fastrag.analysis.mixed as mixed

    monkeypatch.setattr(mixed, "QUERY_CACHE", 64)
    monkeypatch.setattr(mixed, "SPAN_CACHE", 256)
    pages = [p[:1500] for lang in ("de", "en", "es", "fr", "pt", "zh") for p in _pages(lang)[:4]]
    queries = [
        "comment lire le journal",
        "el parámetro de ruta debe ser mayor o igual que 1",
        "Datenbankverbindung",
        "docker compose up",
        "enviar um arquivo com o formulário",
    ]
    an = MixedAnalyzer()
    want = (_tokens(an.encode_chunk(pages)), _tokens(an.encode_query_chunk(queries)))

    def work() -> None:
        for _ in range(5):
            got = (_tokens(an.encode_chunk(pages)), _tokens(an.encode_query_chunk(queries)))
            assert got == want

    assert errors_while_releasing(an, work) == []


def _tokens(out: tuple[list[str], np.ndarray, np.ndarray]) -> list[list[str]]:
    vocab, ids, offsets = out
    return [[vocab[i] for i in ids[offsets[k] : offsets[k + 1]]] for k in range(len(offsets) - 1)]
