"""Language detection on real text, its confidence, the many-records sample, and the
``language_score`` field through a store and a filter.

The samples are the descriptions of `tar` (and for th, el, hi, pl of another command) from
tldr-pages (https://github.com/tldr-pages/tldr, commit 08e345f4, CC-BY-4.0, the tldr-pages
team and contributors), unchanged."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest

import fastrag as fr
from fastrag.analysis import language as L
from fastrag.analysis.language import UNCERTAIN, text_language, texts_languages
from fastrag.documents.readers import read_file

TLDR = {
    "en": "Archiving utility. Often combined with a compression method, such as `gzip` or `bzip2`.",
    "ko": "아카이브 유틸리티. 종종 `gzip` 또는 `bzip2`와 같은 압축 방법과 결합하여 사용됩니다.",
    "ja": "アーカイブ(複数のファイルやフォルダを 1 つのファイルに纏める)の為のユーティリティー。",
    "zh": "归档实用程序。 通常与压缩方法结合使用，例如 `gzip` 或 `bzip2`。",
    "fr": "Utilitaire d'archivage. Souvent combiné avec une méthode de compression, telle "
    "que gzip ou bzip2.",
    "de": "Archivierungstool. Häufig kombiniert mit anderen Methoden zur Komprimierung, wie "
    "gzip oder bzip2.",
    "es": "Utilidad de archivado. A menudo se combina con un método de compresión, como gzip "
    "o bzip2.",
    "pt": "Ferramenta de compressão de arquivos. Utilizado com metodos de compressão como o "
    "de gzip ou bzip2.",
    "ru": "Утилита архивирования. Обычно используется в сочетании с методом сжатия, таким "
    "как `gzip` или `bzip2`.",
    "uk": "Утиліта архівування. Часто поєднується з методом стиснення, таким як `gzip` або "
    "`bzip2`.",
    "ar": "أداة أرشفة. غالبًا ما تُستخدم مع طريقة ضغط، مثل `gzip` أو `bzip2`.",
    "nl": "Archiveringsprogramma. Vaak gecombineerd met een compressiemethode, zoals `gzip` "
    "of `bzip2`.",
    "tr": "Arşivleme aracı. Dosyalar genellikle gzip veya bzip2 gibi bir sıkıştırma "
    "yöntemiyle birleştirilir.",
    "th": "คำสั่งนี้เป็นอีกชื่อหนึ่งของคำสั่ง `docker container diff`",
    "el": "Αυτή η εντολή είναι ψευδώνυμο της εντολής `docker image pull`.",
    "hi": "यह आदेश `g++` का उपनाम है।",
    "pl": "To polecenie jest aliasem `bun install`.",
}


@pytest.mark.parametrize("lang", sorted(TLDR))
def test_real_descriptions_are_detected_with_confidence(lang):
    code, score = text_language(TLDR[lang])
    assert code == lang
    assert UNCERTAIN <= score <= 1.0


def test_code_is_taken_out():
    page = "# tar\n\n> 아카이브 유틸리티.\n\n" + "- 예:\n\n`tar czf {{a.tar.gz}} {{b c}}`\n\n" * 20
    code, score = text_language(page)  # Korean, though code's Latin letters outnumber it
    assert code == "ko" and score >= 0.95
    assert text_language(page.replace("`", "").replace("{{", "").replace("}}", ""))[0] == "ko"
    # only code: its own words decide (English identifiers), with the model's probability
    code, score = text_language("`git commit --message 'fix the build'`")
    assert code == "en" and 0.0 < score < 1.0


def test_uncertain_and_letterless_text():
    for text in ("hello\nworld\n", "x = 1", "ok"):
        code, score = text_language(text)
        assert isinstance(code, str) and score < UNCERTAIN, (text, code, score)
    assert text_language("1234 5678 == != {}") == (None, 0.0)
    assert text_language("") == (None, 0.0)


def test_many_records_detect_an_even_sample_unless_it_disagrees(monkeypatch):
    calls = []
    real = L.text_language

    def counted(text, sample=4000):
        calls.append(text)
        return real(text, sample)

    monkeypatch.setattr(L, "text_language", counted)
    german = [f"Der Hund und die Katze schlafen im Garten, Nummer {i}." for i in range(500)]
    got = texts_languages(german, 64)
    assert len(calls) == 64 and calls[0] == german[0] and calls[-1] == german[-1]
    assert {code for code, _ in got} == {"de"}
    low = min(real(t)[1] for t in calls)  # the others get the sample's lowest probability
    sampled = set(calls)
    assert {s for t, (_, s) in zip(german, got, strict=True) if t not in sampled} == {low}
    calls.clear()
    mixed = german[:250] + ["The dog and the cat sleep in the garden all afternoon."] + german
    got = texts_languages(mixed, 64)
    assert len(calls) == 64 + len(mixed) - 64  # the sample disagreed: every record detected
    assert [i for i, (code, _) in enumerate(got) if code != "de"] == [250]
    assert got[250][0] == "en"


def test_language_score_round_trips_a_store_and_the_filter_keeps_uncertain_pages(tmp_path, caplog):
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "ko.md").write_text(TLDR["ko"], "utf-8")
    (kb / "en.md").write_text(TLDR["en"], "utf-8")
    (kb / "short.txt").write_text("tar xf", "utf-8")  # too short to tell
    fr.Document(kb, store=tmp_path / "st")
    doc = fr.Document(store=tmp_path / "st", mode="r")
    meta = {n.metadata["file_path"]: n.metadata for n in doc.group("root")}
    assert meta["ko.md"]["language"] == "ko" and meta["ko.md"]["language_score"] >= 0.95
    expected = {name: text_language((kb / name).read_text("utf-8")) for name in meta}
    assert {k: (m["language"], m["language_score"]) for k, m in meta.items()} == expected
    assert meta["short.txt"]["language_score"] < UNCERTAIN
    plain = fr.Retriever(doc, "root", "bm25", topk=10, filter="language == 'ko'")
    kept = fr.Retriever(
        doc, "root", "bm25", topk=10, filter=f"language == 'ko' || language_score < {UNCERTAIN}"
    )
    query = "tar gzip 아카이브"
    with caplog.at_level(logging.WARNING, logger="fastrag.retrieval.retriever"):
        assert {h.metadata["file_path"] for h in plain(query)} == {"ko.md"}
        plain(query)
        assert {h.metadata["file_path"] for h in kept(query)} == {"ko.md", "short.txt"}
        by_type = fr.Retriever(doc, "root", "bm25", topk=10, filter="file_type == 'md'")
        assert {h.metadata["file_path"] for h in by_type(query)} == {"ko.md", "en.md"}
    # the plain language filter says what it left out, once; the others say nothing
    assert [r.getMessage() for r in caplog.records] == [
        "the filter \"language == 'ko'\" leaves out 1 node(s) whose language is uncertain "
        "(language_score < 0.5); add || language_score < 0.5 to keep them"
    ]


def test_a_records_own_language_wins_and_carries_no_score(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(
        json.dumps({"text": "the cat", "language": "xx"})
        + "\n"
        + json.dumps({"text": TLDR["de"]})
        + "\n"
    )
    metas = [m for _, m in read_file(p)]
    assert metas[0]["language"] == "xx" and "language_score" not in metas[0]
    assert (metas[1]["language"], metas[1]["language_score"]) == text_language(TLDR["de"])


def test_the_model_is_derived_once_and_memory_mapped_with_the_same_answers(
    tmp_path, monkeypatch, caplog
):
    """The first process derives py3langid's LZMA model into the cache folder as .npy arrays
    (atomically); later ones memory-map them and answer exactly as the packaged model does. A
    damaged array fails its checksum and is derived again, with a warning; the whole .npz an
    older fastrag unpacked is removed."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    monkeypatch.setenv("FASTRAG_CACHE_DIR", str(tmp_path))
    (tmp_path / "langid").mkdir()
    (tmp_path / "langid" / "py3langid-0.4.0.npz").write_bytes(b"old copy")
    texts = [
        "Das ist ein kurzer deutscher Satz über Katzen.",
        "这是一个关于猫的中文句子。",
        "Ceci est une phrase en français sur les chats.",
        "ファイルの所有者を変える",
        "ls -la /tmp",
        "",
    ]
    packaged = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    want = [packaged.rank(t) for t in texts]
    first = L._load_identifier()  # derives
    (folder,) = (tmp_path / "langid").iterdir()  # no temporary folder, no old copy left
    assert sorted(x.name for x in folder.iterdir()) == sorted([*L._MODEL_FILES, "meta.json"])
    again = L._load_identifier()  # maps the arrays
    assert isinstance(again.nb_ptc, np.memmap)
    assert [first.rank(t) for t in texts] == [again.rank(t) for t in texts] == want

    nextmove = folder / "nextmove.npy"
    data = bytearray(nextmove.read_bytes())
    data[len(data) // 2] ^= 0xFF
    nextmove.write_bytes(bytes(data))
    damaged = L._load_identifier()
    assert "nextmove.npy does not match its checksum" in caplog.text
    assert [damaged.rank(t) for t in texts] == want
    assert L._load_identifier().rank(texts[0]) == want[0]  # the folder was derived again


def test_an_unwritable_cache_still_identifies_in_memory(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FASTRAG_CACHE_DIR", str(blocker))
    m = L._load_identifier()
    assert not isinstance(m.nb_ptc, np.memmap)
    assert m.classify("Das ist ein kurzer deutscher Satz über Katzen.")[0] == "de"
    assert "cannot cache the language model" in caplog.text


LOAD_CHILD = r"""
import json
import os
from fastrag.analysis.language import _load_identifier
m = _load_identifier()
print(json.dumps(m.classify("Das ist ein kurzer deutscher Satz über Katzen.")))
"""


def test_two_processes_unpacking_the_model_at_once_agree(tmp_path):
    """Two fresh processes on an empty cache folder unpack the model at the same time: both
    answer, and one whole copy is left (each writes its own temporary file, then renames)."""
    import subprocess
    import sys

    env = {**os.environ, "FASTRAG_CACHE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", LOAD_CHILD], env=env, stdout=subprocess.PIPE)
        for _ in range(2)
    ]
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs[0] == outs[1] and outs[0][0] == "de"
    (folder,) = (tmp_path / "langid").iterdir()
    assert not folder.name.startswith(".")


def test_a_released_model_is_opened_again_and_answers_the_same(monkeypatch):
    """release_language_model() drops the process's model; the next detection loads it once
    more (a spy counts the loads) and detects exactly as before."""
    texts = [TLDR["de"], "这是一个关于猫的中文句子。", "ls -la /tmp"]
    want = [text_language(t) for t in texts]
    loads = []
    real = L._load_identifier
    monkeypatch.setattr(L, "_load_identifier", lambda: loads.append(1) or real())
    assert [text_language(t) for t in texts] == want and loads == []  # held
    L.release_language_model()
    assert [text_language(t) for t in texts] == want and loads == [1]  # loaded once again
