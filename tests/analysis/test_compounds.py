"""German compound parts of query words (fastrag.analysis.compounds) and bm25's query path."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading

import numpy as np
import pytest

import fastrag as fr
from fastrag._checksum import checksum_file
from fastrag.analysis import compounds, encode_queries
from fastrag.analysis.compounds import compounds_tag, decompounder
from fastrag.analysis.mixed import MixedAnalyzer


@pytest.fixture()
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache folder, and no Decompounder opened yet in this process."""
    monkeypatch.setenv("FASTRAG_CACHE_DIR", str(tmp_path / "cache"))
    compounds._decompounder.cache_clear()
    yield tmp_path / "cache"
    compounds._decompounder.cache_clear()


def _parts(dc, word):
    return [word[a:b] for a, b in dc.split(word)]


def test_splits_compounds_into_dictionary_parts():
    dc = decompounder()
    assert _parts(dc, "hilfeseiten") == ["hilfe", "seiten"]
    assert _parts(dc, "datenbankverbindung") == ["daten", "bank", "verbindung"]
    assert _parts(dc, "hochladen") == ["hoch", "laden"]
    assert _parts(dc, "texteditor") == ["text", "editor"]  # an English last part
    assert _parts(dc, "verarbeitungszeit") == ["verarbeitung", "zeit"]  # linking s dropped
    assert _parts(dc, "Formularfelder") == ["Formular", "felder"]  # spans keep the case


def test_common_english_short_and_non_words_stay_whole():
    dc = decompounder()
    for word in ("password", "dropdown", "understanding", "something", "backend"):
        assert dc.split(word) == [], word
    for word in ("haus", "tisch", "abc", "", "datei_pfad", "v1datenbank", "datenbank2"):
        assert dc.split(word) == [], word
    assert dc.split_many(["hochladen", "password", "hochladen"]) == {"hochladen": [(0, 4), (4, 9)]}


def test_queries_get_parts_and_the_index_keeps_whole_words():
    # every text stemmed in English (per_language=False): the parts as such
    on = MixedAnalyzer(per_language=False)
    off = MixedAnalyzer(compounds=False, per_language=False)
    text = "Dateien hochladen und die Datenbankverbindung prüfen"
    assert (
        on(text)
        == off(text)
        == ["dateien", "hochladen", "und", "die", "datenbankverbindung", "prüfen"]
    )
    assert on.query_tokens(text) == [
        "dateien",
        "hochladen",
        "hoch",
        "laden",
        "und",
        "die",
        "datenbankverbindung",
        "daten",
        "bank",
        "verbindung",
        "prüfen",
    ]
    assert off.query_tokens(text) == off(text)
    # the index's fingerprint is unchanged (no rebuild); the analyzers still differ
    assert on.identity() == off.identity()
    assert on != off and hash(on) != hash(off)
    assert on.query_options() == {"compounds": compounds_tag()}
    assert "compounds=" in repr(on)
    # the stems of the parts, the parts' stopwords dropped
    assert on.query_tokens("Herausfinden") == ["herausfinden", "aus", "finden"]


def test_encode_queries_maps_the_parts_to_the_index_vocabulary():
    vocab = {"daten": 0, "bank": 1, "verbindung": 2}
    ids, offsets = encode_queries(["Datenbankverbindung", "Haus"], "bm25", vocab)
    assert ids.tolist() == [0, 1, 2] and offsets.tolist() == [0, 3, 3]
    ids, _ = encode_queries(["Datenbankverbindung"], MixedAnalyzer(compounds=False), vocab)
    assert ids.tolist() == []


def test_a_german_compound_query_finds_the_page_with_the_parts(tmp_path):
    texts = [
        "So stellen Sie die Verbindung zur Datenbank her und schließen sie wieder.",
        "Dateien aus dem Formular empfangen und speichern.",
        "Die Antwort als JSON zurückgeben.",
    ]
    doc = fr.Document.from_texts(texts, store=str(tmp_path / "s"))
    hits = fr.Retriever(doc, "root", "bm25", topk=3)("Datenbankverbindung")
    assert [h.text for h in hits][:1] == texts[:1]
    plain = MixedAnalyzer(compounds=False)
    off = fr.Retriever(doc, "root", "bm25", topk=3, analyzer=plain)
    assert off("Datenbankverbindung") == []


def test_derived_once_then_opened_from_the_cache(fresh_cache, monkeypatch):
    dc = decompounder()
    folder = fresh_cache / "compounds" / compounds_tag()
    meta = json.loads((folder / "meta.json").read_text())
    assert sorted(meta) == ["english.json", "german.npy", "german_logp.npy"]
    words = np.load(folder / "german.npy")
    assert len(words) > 300_000 and bool(np.all(words[1:] > words[:-1]))  # sorted, unique
    compounds._decompounder.cache_clear()

    def no_derive(folder):
        raise AssertionError("derived again")

    monkeypatch.setattr(compounds, "_derive", no_derive)
    again = decompounder()
    assert again is not dc and _parts(again, "hilfeseiten") == ["hilfe", "seiten"]
    assert isinstance(again._german, np.memmap)


def test_a_damaged_list_is_derived_again(fresh_cache, caplog):
    decompounder()
    folder = fresh_cache / "compounds" / compounds_tag()
    path = folder / "german.npy"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    compounds._decompounder.cache_clear()
    with caplog.at_level(logging.WARNING, logger="fastrag"):
        dc = decompounder()
    assert "damaged" in caplog.text and "german.npy does not match its checksum" in caplog.text
    assert _parts(dc, "datenbankverbindung") == ["daten", "bank", "verbindung"]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["german.npy"] == checksum_file(path)


def test_an_unwritable_cache_still_splits(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FASTRAG_CACHE_DIR", str(blocker / "cache"))
    compounds._decompounder.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="fastrag"):
            dc = decompounder()
        assert "cannot cache the compound word lists" in caplog.text
        assert _parts(dc, "hilfeseiten") == ["hilfe", "seiten"]
        assert blocker.read_text() == "not a folder"
    finally:
        compounds._decompounder.cache_clear()


def test_threads_share_one_decompounder(fresh_cache):
    got, errors = [], []

    def work():
        try:
            dc = decompounder()
            got.append((id(dc), _parts(dc, "kommandozeilenwerkzeuge")))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len({g[0] for g in got}) == 1 and len(got) == 8
    assert got[0][1] == ["kommando", "zeile", "werk", "zeuge"]


def test_processes_deriving_at_once_agree(tmp_path):
    code = (
        "from fastrag.analysis.compounds import decompounder\n"
        "dc = decompounder()\n"
        "print([[w[a:b] for a, b in dc.split(w)] for w in ('hilfeseiten', 'hochladen')])\n"
    )
    env = {**__import__("os").environ, "FASTRAG_CACHE_DIR": str(tmp_path / "cache")}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert outs == ["[['hilfe', 'seiten'], ['hoch', 'laden']]"] * 3
    folder = tmp_path / "cache" / "compounds" / compounds_tag()
    meta = json.loads((folder / "meta.json").read_text())
    assert all(meta[n] == checksum_file(folder / n) for n in meta)
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no temporary left


def test_without_pyspellchecker_queries_equal_the_index_tokens(monkeypatch):
    monkeypatch.setattr(compounds, "_version", lambda: None)
    an = MixedAnalyzer()
    assert decompounder() is None and an.query_options() == {"compounds": None}
    assert an.query_tokens("Datenbankverbindung hochladen") == an("Datenbankverbindung hochladen")


def test_the_word_list_is_pyspellcheckers():
    from spellchecker import SpellChecker

    de = SpellChecker(language="de", distance=1).word_frequency.dictionary
    dc = decompounder()
    total = sum(de.values())
    got = dc._lookup(["verbindung", "hilfe", "zzzqx"])
    assert set(got) == {"verbindung", "hilfe"}
    assert got["hilfe"] == pytest.approx(np.log(de["hilfe"] / total), abs=1e-12)


@pytest.mark.parametrize("option", ["compounds", "han_bigrams"])
def test_bad_options_are_refused_by_name(option):
    from fastrag.errors import ConfigError

    with pytest.raises(ConfigError, match=f"{option} must be True or False, got str 'yes'"):
        MixedAnalyzer(**{option: "yes"})
