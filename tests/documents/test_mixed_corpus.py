"""A mixed folder as users keep one: every format, legacy encodings, binaries, an empty file,
a symlink loop, hidden files and a fastrag store, read by one walk with a ReadReport."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import pytest
from pdf_maker import pdf_bytes

import fastrag as fr
from fastrag.documents.readers import ReadReport, decode_bytes, iter_source_files, read_file
from fastrag.documents.sources import Planner
from fastrag.errors import ConfigError, MissingExtraError, ReaderError

# ~250 characters of Western European prose with cp1252's typographic characters (– “ ” € …)
CP1252_TEXT = (
    "Le café de la gare est naïf et charmant – on y sert une crème brûlée “maison” pour "
    "4,50 €. Über die Straße gehen Männer und Frauen; el señor García pidió una piña colada… "
    "The résumé said «déjà vu», and the coöperative paid 12 € per hour.\n"
)
# ~200 characters of Simplified Chinese with full-width punctuation and digits
GBK_TEXT = (
    "亚硫酸盐是一种常见的食品添加剂，广泛用于葡萄酒、果干和腌制食品中。它主要有三个作用：防腐、"
    "抗氧化和漂白。适量使用是安全的，但少数人对亚硫酸盐过敏，可能出现哮喘等症状。因此，许多国家"
    "要求在食品标签上注明其含量。2019年的一项研究表明，红酒中的亚硫酸盐含量通常在每升50到350毫克"
    "之间，而白葡萄酒往往更高。\n"
)


def make_docx(path) -> None:
    import docx

    d = docx.Document()
    d.add_paragraph("Memo: the sulfite labelling rules.")
    d.add_paragraph("第二段：亚硫酸盐。")
    d.save(str(path))


EXPECTED_TEXT = {
    "page.html": ["Sulfites\nUsed in wine & dried fruit."],
    "guide.md": ["# Guide\n\nRead *this* first.\n"],
    "notes.rst": ["Notes\n=====\n\n.. note:: reStructuredText is text too.\n"],
    "tool.py": ["def add(a, b):\n    return a + b\n"],
    "config.yaml": ["model: bm25\ntopk: 5\n"],
    "records.json": ["First record.", "Second record."],
    "nested.json": [
        "product.name: Dried apricots\nproduct.tags[0]: fruit\nproduct.tags[1]: "
        "sulfites\nproduct.origin.country: Turkey\nprice: 3.5\norganic: false"
    ],
    "lines.jsonl": ["one", "two", "q: why?\nscore: 2"],
    "table.csv": ["title: Apricot\nbody: Dried, with sulfites", "title: 葡萄酒\nbody: 含亚硫酸盐"],
    "report.pdf": ["Sulfites in wine", "Labelling rules", "Appendix"],
    "memo.docx": ["Memo: the sulfite labelling rules.\n第二段：亚硫酸盐。"],
    "western.txt": [CP1252_TEXT],
    "chinese.txt": [GBK_TEXT],
    "LICENSE": ["Apache License\nVersion 2.0\n"],
}


@pytest.fixture
def corpus(tmp_path):
    kb = tmp_path / "kb"
    (kb / "deep" / "deeper").mkdir(parents=True)
    w = {
        "page.html": "<html><head><title>T</title></head><body><h1>Sulfites</h1>"
        "<p>Used in wine &amp; dried fruit.</p><script>x()</script></body></html>",
        "guide.md": "# Guide\n\nRead *this* first.\n",
        "notes.rst": "Notes\n=====\n\n.. note:: reStructuredText is text too.\n",
        "tool.py": "def add(a, b):\n    return a + b\n",
        "config.yaml": "model: bm25\ntopk: 5\n",
        "records.json": json.dumps(
            [
                {"text": "First record.", "author": "ann", "year": 2020},
                {"text": "Second record.", "author": "bob", "year": 2021},
            ]
        ),
        "nested.json": json.dumps(
            {
                "product": {
                    "name": "Dried apricots",
                    "tags": ["fruit", "sulfites"],
                    "origin": {"country": "Turkey"},
                },
                "price": 3.5,
                "organic": False,
            }
        ),
        "lines.jsonl": '{"text": "one", "id": 1}\n"two"\n\n{"q": "why?", "score": 2}\n',
        "table.csv": 'title,body\nApricot,"Dried, with sulfites"\n葡萄酒,含亚硫酸盐\n',
        "LICENSE": "Apache License\nVersion 2.0\n",
        ".secret.txt": "hidden text",
        "store/manifest.json": json.dumps({"format_version": 2}),
        "store/root.arrow.txt": "store files are never sources",
    }
    for rel, text in w.items():
        (kb / rel).parent.mkdir(parents=True, exist_ok=True)
        (kb / rel).write_text(text, encoding="utf-8")
    (kb / "report.pdf").write_bytes(
        pdf_bytes(
            ["Sulfites in wine", "Labelling rules", "Appendix"],
            labels="<< /Nums [0 << /S /r >> 2 << /S /A /P (App-) >>] >>",
        )
    )
    make_docx(kb / "memo.docx")
    (kb / "western.txt").write_bytes(CP1252_TEXT.encode("cp1252"))
    (kb / "chinese.txt").write_bytes(GBK_TEXT.encode("gbk"))
    (kb / "fake.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (kb / "empty.md").write_bytes(b"")
    (kb / "loop").symlink_to(kb / "loop")
    return kb


def read_all(kb, **kw):
    report = ReadReport()
    docs = {}
    for f in iter_source_files(kb, report=report, **kw):
        docs[f.name] = read_file(f, report=report)
    return docs, report


def test_mixed_corpus_texts_metadata_and_report(corpus, caplog, capsys):
    with caplog.at_level(logging.INFO, logger="fastrag"):
        docs, report = read_all(corpus)
    assert {name: [t for t, _ in d] for name, d in docs.items()} == EXPECTED_TEXT

    assert report.counts() == {
        "(folder)": {"read": 0, "skipped": 1, "failed": 0, "documents": 0},
        "(none)": {"read": 1, "skipped": 1, "failed": 0, "documents": 1},
        ".csv": {"read": 1, "skipped": 0, "failed": 0, "documents": 2},
        ".docx": {"read": 1, "skipped": 0, "failed": 0, "documents": 1},
        ".html": {"read": 1, "skipped": 0, "failed": 0, "documents": 1},
        ".json": {"read": 2, "skipped": 0, "failed": 0, "documents": 3},
        ".jsonl": {"read": 1, "skipped": 0, "failed": 0, "documents": 3},
        ".md": {"read": 1, "skipped": 1, "failed": 0, "documents": 1},
        ".pdf": {"read": 1, "skipped": 0, "failed": 0, "documents": 3},
        ".py": {"read": 1, "skipped": 0, "failed": 0, "documents": 1},
        ".rst": {"read": 1, "skipped": 0, "failed": 0, "documents": 1},
        ".txt": {"read": 2, "skipped": 2, "failed": 0, "documents": 2},
        ".yaml": {"read": 1, "skipped": 0, "failed": 0, "documents": 1},
    }
    # nothing unexpected is skipped, and each skip says why
    skipped = {(e.path.removeprefix(str(corpus) + "/"), e.reason, e.detail) for e in report.skipped}
    assert skipped == {
        (".secret.txt", "hidden", ""),
        ("fake.txt", "binary", "PNG image"),
        ("empty.md", "empty file", ""),
        ("loop", "symlink loop", ""),
        ("store", "fastrag store", ""),
    }
    assert report.failed == []
    assert report.reasons()[".txt"] == {"binary": 1, "hidden": 1}

    summary = report.summary()
    assert summary.splitlines()[0].split() == [
        "ext",
        "read",
        "skipped",
        "failed",
        "documents",
        "reasons",
    ]
    assert re.search(r"^\.txt +2 +2 +0 +2 +binary 1, hidden 1$", summary, re.M)
    assert re.search(r"^total +14 +5 +0 +20$", summary, re.M)
    assert re.search(
        r"^skipped +\.txt +\S*fake\.txt +\(binary: PNG image\)$", report.details(), re.M
    )
    assert len(report.details().splitlines()) == len(report.entries) == 19

    # metadata: encodings, JSON paths, PDF pages
    meta = {name: [m for _, m in d] for name, d in docs.items()}
    assert meta["western.txt"][0]["encoding"] == "cp1252"
    assert meta["chinese.txt"][0]["encoding"] == "gb18030"
    assert meta["guide.md"][0]["encoding"] == "utf-8"
    assert [m["json_path"] for m in meta["records.json"]] == ["$[0]", "$[1]"]
    assert [m["author"] for m in meta["records.json"]] == ["ann", "bob"]
    assert meta["nested.json"][0]["json_path"] == "$"
    assert "product" not in meta["nested.json"][0]  # flattened into the text, not metadata
    assert [(m["page"], m["page_label"], m["page_count"]) for m in meta["report.pdf"]] == [
        (1, "i", 3),
        (2, "ii", 3),
        (3, "App-A", 3),
    ]
    assert meta["LICENSE"][0]["file_type"] == ""

    # skips are logged at INFO; the symlink loop also in one warning line; no console noise
    warnings_ = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings_] == [
        f"skipped 1 symlink loop (e.g. {str(corpus / 'loop')!r}) while walking the folders"
    ]
    assert capsys.readouterr().err == ""


def test_document_reads_the_mixed_corpus(corpus, tmp_path):
    doc = fr.Document(corpus)
    texts = sorted(n.text for n in doc.group("root"))
    assert texts == sorted(t for ts in EXPECTED_TEXT.values() for t in ts)
    report = doc.read_report
    assert sum(c["read"] for c in report.counts().values()) == 14
    # into a store, then again: the second ingest changes nothing
    st = tmp_path / "st"
    first = fr.Document(corpus, store=st)
    first.create_node_group("line", transform=fr.LineSplitter())
    ids = first.group("line").ids
    manifest = (st / "manifest.json").read_bytes()
    again = fr.Document(corpus, store=st)
    assert again.group("line").ids == ids
    assert (st / "manifest.json").read_bytes() == manifest


def test_walk_options(corpus):
    def names(**kw):
        return sorted(
            f.relative_to(corpus.resolve()).as_posix() for f in iter_source_files(corpus, **kw)
        )

    (corpus / "deep" / "a.md").write_text("a", encoding="utf-8")
    (corpus / "deep" / "deeper" / "b.md").write_text("b", encoding="utf-8")
    (corpus / "deep" / "deeper" / "c.log").write_text("c", encoding="utf-8")
    report = ReadReport()
    assert names(required_exts=[".MD", ".rst"]) == [
        "deep/a.md",
        "deep/deeper/b.md",
        "guide.md",
        "notes.rst",
    ]
    iter_source_files(corpus, required_exts=[".md"], report=report)
    assert report.reasons()[".txt"] == {"hidden": 1, "not in required_exts": 3}
    assert "deep/deeper/c.log" not in names(exclude=["*.log"])  # "*" crosses folders
    assert "deep/a.md" in names(exclude=["deeper"])  # a bare name: top level only
    assert names(exclude=["deeper"]) == names()
    assert not [n for n in names(exclude=["**/deeper"]) if "deeper" in n]
    assert "guide.md" not in names(exclude=["**/guide.md"])  # "**/" also at the top
    assert not [n for n in names(exclude=["deep/"]) if n.startswith("deep/")]
    report = ReadReport()
    iter_source_files(corpus, exclude=["deep/", "*.py"], report=report)
    assert {(e.ext, e.reason, e.detail) for e in report.skipped if e.reason == "excluded"} == {
        ("(folder)", "excluded", "matches 'deep/'"),
        (".py", "excluded", "matches '*.py'"),
    }
    top = names(recursive=False)
    assert "deep/a.md" not in top and "guide.md" in top
    assert ".secret.txt" in names(exclude_hidden=False)
    # a store inside the corpus stays out even with hidden files included
    assert not [n for n in names(exclude_hidden=False) if n.startswith("store/")]
    # the options pass through Document
    doc = fr.Document(corpus, required_exts=[".md"], exclude=["deep/deeper/"])
    assert sorted(n.text for n in doc.group("root")) == ["# Guide\n\nRead *this* first.\n", "a"]
    for bad, match in [
        ({"required_exts": "md"}, "required_exts must be a list"),
        ({"required_exts": ["md"]}, r"required_exts must look like '\.xyz'"),
        ({"exclude": "*.log"}, "exclude must be a list"),
        ({"recursive": "no"}, "recursive must be True or False"),
    ]:
        with pytest.raises(ConfigError, match=match):
            iter_source_files(corpus, **bad)


def test_missing_extras_are_reported_together_and_fail_only_their_files(corpus, monkeypatch):
    (corpus / "more.pdf").write_bytes(pdf_bytes(["x"]))
    monkeypatch.setitem(sys.modules, "pypdf", None)  # `import pypdf` raises ImportError
    monkeypatch.setitem(sys.modules, "docx", None)
    with pytest.raises(MissingExtraError) as info:
        iter_source_files(corpus)
    msg = str(info.value)
    assert "2 .pdf files need the optional package 'pypdf' (extra [pdf])" in msg
    assert "1 .docx file needs the optional package 'python-docx' (extra [docx])" in msg
    assert msg.endswith("install them with: pip install 'fastrag-engine[pdf,docx]'")
    # a Document reads the rest and fails only those files, naming what to install
    doc = fr.Document(corpus, on_error="raise")
    failed = {Path(e.path).name: e.reason for e in doc.read_report.failed}
    assert failed == {
        "more.pdf": "missing extra",
        "report.pdf": "missing extra",
        "memo.docx": "missing extra",
    }
    lines = doc.read_report.missing_extras()
    assert len(lines) == 2 and lines[1].startswith("2 .pdf files not read (")
    assert lines[1].endswith(
        "install the reader with: pip install 'fastrag-engine[pdf]', then run the same "
        "command again"
    )
    assert lines[0] == (
        f"1 .docx file not read ({corpus / 'memo.docx'}): install the reader with: "
        "pip install 'fastrag-engine[docx]', then run the same command again"
    )
    assert doc.source_changes.unread and len(doc.group("root")) > 0
    # a custom reader for the extension needs no extra
    assert iter_source_files(corpus, required_exts=[".pdf"], readers={".pdf": lambda p: "x"})


def test_pdf_pages_empty_pages_and_pypdf_noise(tmp_path, caplog, capsys):
    p = tmp_path / "gaps.pdf"
    p.write_bytes(pdf_bytes(["First", "", "Third"], startxref_offset=7))
    report = ReadReport()
    with caplog.at_level(logging.WARNING):
        docs = read_file(p, report=report)
    assert [(t, m["page"], m["page_label"], m["page_count"]) for t, m in docs] == [
        ("First", 1, "1", 3),
        ("Third", 3, "3", 3),
    ]
    assert report.read[0].left_out == 1 and report.read[0].documents == 2
    assert report.reasons() == {".pdf": {"empty pages left out": 1}}
    assert "1 empty page left out" in report.details()
    # pypdf's complaint about the broken xref pointer: one line on fastrag's logger
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and lines[0].name.startswith("fastrag")
    assert re.match(r"pypdf: \d+ warnings? reading .*gaps\.pdf: .*startxref", lines[0].getMessage())
    assert capsys.readouterr().err == ""
    doc = fr.Document(p)
    assert [n.metadata["page_label"] for n in doc.group("root")] == ["1", "3"]
    assert doc.source_text(p) == "First\nThird"
    with pytest.raises(fr.errors.ConfigError, match="not a source"):
        doc.source_text(tmp_path / "other.pdf")


def test_encodings_long_and_short(tmp_path):
    assert decode_bytes(CP1252_TEXT.encode("cp1252")) == CP1252_TEXT
    assert decode_bytes(GBK_TEXT.encode("gbk")) == GBK_TEXT
    assert decode_bytes(CP1252_TEXT.encode("latin-1", "ignore")) == CP1252_TEXT.encode(
        "latin-1", "ignore"
    ).decode("latin-1")
    # Short inputs: charset-normalizer alone calls "café naïve" cp1250 or cp1257 ("naďve",
    # "naļve") and two GBK characters Big5 ("笢恅"): each of those decodes them without chaos.
    # fastrag's rules keep cp1252 for Western-looking text and GB18030 for CJK bytes.
    for text, enc in [
        ("café naïve – “quotes” €", "cp1252"),
        ("naïve", "cp1252"),
        ("中文", "gbk"),
        ("问题,答案\n作用,防腐\n", "gbk"),
        ("Größe: 5 m²", "latin-1"),
    ]:
        assert decode_bytes(text.encode(enc)) == text
    # a short Cyrillic line in cp1251 fits a dozen code pages: refused, not guessed
    p = tmp_path / "ru.txt"
    p.write_bytes("Привет мир".encode("cp1251"))
    with pytest.raises(ReaderError, match=r"cannot decode file .*ru\.txt.*with confidence"):
        read_file(p)
    # a long one is recognized
    ru = "Привет, мир! Это тестовый текст на русском языке, чтобы проверить кодировку. " * 3
    p.write_bytes(ru.encode("cp1251"))
    text, meta = read_file(p)[0]
    assert text == ru and meta["encoding"] == "cp1251"
    for bom_enc in ["utf-8-sig", "utf-16", "utf-32"]:
        assert decode_bytes(GBK_TEXT.encode(bom_enc)) == GBK_TEXT


def test_unknown_extensions_and_binaries(tmp_path, caplog):
    zipped = tmp_path / "archive.zip"
    zipped.write_bytes(b"PK\x03\x04\x14\x00\x00\x00")
    elf = tmp_path / "tool"
    elf.write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 20)
    gbk_ini = tmp_path / "settings.ini"
    gbk_ini.write_bytes(("[main]\nname = " + GBK_TEXT).encode("gbk"))
    report = ReadReport()
    files = iter_source_files(tmp_path, report=report)
    assert [f.name for f in files] == ["settings.ini"]
    assert {(e.path.split("/")[-1], e.detail) for e in report.skipped} == {
        ("archive.zip", "ZIP archive"),
        ("tool", "ELF executable"),
    }
    assert read_file(gbk_ini)[0][0] == "[main]\nname = " + GBK_TEXT
    # named explicitly: an error naming the file, or with on_error="skip" a logged skip
    with pytest.raises(ReaderError, match=r"archive\.zip.*binary \(ZIP archive\)"):
        read_file(zipped)
    with caplog.at_level(logging.WARNING, logger="fastrag"):
        assert read_file(elf, on_error="skip", report=report) == []
    assert len(caplog.records) == 1 and "ELF executable" in caplog.records[0].getMessage()
    assert report.counts()["(none)"]["skipped"] == 2
    # undecodable bytes without a reader are binary too
    odd = tmp_path / "blob.dat"
    odd.write_bytes(bytes(range(0x80, 0x100)) * 2)
    with pytest.raises(ReaderError, match=r"blob\.dat.*does not decode as text"):
        read_file(odd)


def test_json_metadata_fields_and_flattening(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(
        json.dumps(
            [
                {"text": "a", "author": "x", "year": 1, "junk": [1]},
                {"title": "no text", "author": "y", "deep": {"k": [1, {"z": None}]}},
                5,
                [True, "s"],
            ]
        ),
        encoding="utf-8",
    )
    docs = read_file(p, metadata_fields=["author", "year"])
    assert [t for t, _ in docs] == [
        "a",
        "title: no text\nauthor: y\ndeep.k[0]: 1\ndeep.k[1].z: null",
        "5",
        "[0]: true\n[1]: s",
    ]
    assert {k: docs[0][1][k] for k in ("author", "year", "json_path", "row")} == {
        "author": "x",
        "year": 1,
        "json_path": "$[0]",
        "row": 0,
    }
    assert "junk" not in docs[0][1]
    assert docs[1][1]["author"] == "y" and "title" not in docs[1][1]  # named fields only
    assert "author" not in read_file(p)[1][1]  # flattened fields stay out of metadata
    jl = tmp_path / "r.jsonl"
    jl.write_text('{"text": "t", "a": 1, "b": 2}\n', encoding="utf-8")
    assert "b" not in read_file(jl, metadata_fields=["a"])[0][1]
    csv_ = tmp_path / "r.csv"
    csv_.write_text("text,a,b\nhello,1,2\n", encoding="utf-8")
    ((text, meta),) = read_file(csv_, metadata_fields=["b"])
    assert text == "hello" and meta["b"] == "2" and "a" not in meta
    with pytest.raises(ConfigError, match="metadata_fields must be a list"):
        read_file(p, metadata_fields="author")
    # the option passes through Planner and Document
    planner = Planner(
        readers=None,
        on_error="raise",
        json_text_field="text",
        global_metadata={},
        hash_files=False,
        metadata_fields=["author"],
    )
    assert "year" not in planner.file_rows(p, str(p))[0][6]
    roots = list(fr.Document(p, metadata_fields=["year"]).group("root"))
    assert roots[0].metadata["year"] == 1 and "author" not in roots[0].metadata
