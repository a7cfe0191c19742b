"""File readers: every format from real files on disk, encodings, errors, registry."""

from __future__ import annotations

import json
import logging
import re
import sys

import pytest
from pdf_maker import pdf_bytes

import fastrag as fr
from fastrag.analysis.language import UNCERTAIN, text_language
from fastrag.documents import readers as R
from fastrag.documents.readers import (
    decode_bytes,
    iter_source_files,
    read_file,
    register_reader,
    supported_extensions,
)
from fastrag.documents.readers.registry import REGISTERED
from fastrag.errors import ConfigError, MissingExtraError, ReaderError

ZH = "亚硫酸盐是一种常见的食品添加剂。它有什么作用？防腐、漂白！"


def _one(path, **kw):
    docs = read_file(path, **kw)
    assert len(docs) == 1
    return docs[0]


def test_language_metadata_by_script_and_function_words(tmp_path):
    """Each document's language is detected from its text; a record's own field wins."""
    texts = {
        "en.md": "How to upload a file to the store and share it with the team.",
        "zh.md": "如何上传文件到知识库并与团队共享。",
        "ja.md": "ファイルをアップロードする方法",
        "ko.md": "파일을 업로드하는 방법",
        "ru.md": "Как загрузить файл в хранилище",
        "fr.md": "Comment envoyer un fichier dans la base et le partager avec le groupe",
        "de.md": "Wie lade ich eine Datei in die Wissensbasis und teile sie mit dem Team",
        "nums.txt": "1234 5678 == != {}",
    }
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    got = {name: _one(tmp_path / name)[1].get("language") for name in texts}
    assert got == {
        "en.md": "en",
        "zh.md": "zh",
        "ja.md": "ja",
        "ko.md": "ko",
        "ru.md": "ru",
        "fr.md": "fr",
        "de.md": "de",
        "nums.txt": None,
    }
    (tmp_path / "r.jsonl").write_text(
        '{"text": "the cat", "language": "xx"}\n{"text": "der Hund und die Katze"}\n'
    )
    assert [m["language"] for _, m in read_file(tmp_path / "r.jsonl")] == ["xx", "de"]
    many = [{"text": f"der Hund und die Katze {i}"} for i in range(R.LANGUAGE_PER_DOCUMENT)]
    many.append({"text": "the dog and the cat"})  # in the even sample: each record detected
    (tmp_path / "many.jsonl").write_text("\n".join(json.dumps(r) for r in many))
    got = [m["language"] for _, m in read_file(tmp_path / "many.jsonl")]
    assert got == ["de"] * R.LANGUAGE_PER_DOCUMENT + ["en"]
    (tmp_path / "many.jsonl").unlink()
    doc = fr.Document(str(tmp_path))
    english = fr.Retriever(doc, "root", "bm25", topk=10, filter="language == 'en'")
    assert {h.metadata["file_name"] for h in english("file upload share team")} == {"en.md"}


def test_txt_md_and_root_metadata(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("hello\nworld\n", encoding="utf-8")
    text, meta = _one(p)
    assert text == "hello\nworld\n"
    st = p.stat()
    assert meta == {
        "file_path": "a.txt",  # read on its own: its name (relative_to= gives a folder)
        "abs_path": str(p.resolve()),
        "file_name": "a.txt",
        "file_type": "txt",
        "file_size": st.st_size,
        "mtime": st.st_mtime,
        "encoding": "utf-8",
        # two words are too few to tell: the model's guess, marked uncertain
        "language": text_language(text)[0],
        "language_score": text_language(text)[1],
    }
    assert meta["language_score"] < UNCERTAIN
    md = tmp_path / "b.MD"
    md.write_text("# Title\n\n*x*", encoding="utf-8")
    text, meta = _one(md)
    assert text == "# Title\n\n*x*"
    assert meta["file_type"] == "md"


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "gb18030", "gbk", "utf-16"])
def test_encodings_decode_exactly(tmp_path, encoding):
    text = ZH + "\nASCII line 123\n"
    p = tmp_path / f"{encoding}.txt"
    p.write_bytes(text.encode(encoding))
    assert _one(p)[0] == text
    assert decode_bytes(text.encode(encoding)) == text
    assert _one(p)[1]["encoding"] == {
        "utf-8": "utf-8",
        "utf-8-sig": "utf-8-sig",
        "utf-16": "utf-16",
    }.get(encoding, "gb18030")


def test_gb18030_four_byte_characters(tmp_path):
    text = "𠀀𪚥 and 中文"  # outside GBK: 4-byte GB18030 sequences
    p = tmp_path / "four.txt"
    p.write_bytes(text.encode("gb18030"))
    assert _one(p)[0] == text


def test_undecodable_raises_or_skips(tmp_path, caplog):
    p = tmp_path / "bad.txt"
    p.write_bytes(b"ok \x80\xff\xfe\x80 not text")
    with pytest.raises(ReaderError, match=r"cannot decode file .*bad\.txt.*UTF-8"):
        read_file(p)
    with caplog.at_level("WARNING", logger="fastrag"):
        assert read_file(p, on_error="skip") == []
    assert re.search(r"skipped .*cannot decode file .*bad\.txt", caplog.text)
    with pytest.raises(ReaderError, match="bad.bin"):
        decode_bytes(b"\x80\xff", "bad.bin")
    binary = tmp_path / "nul.txt"
    binary.write_bytes(b"abc\x00def")
    with pytest.raises(ReaderError, match=r"nul\.txt.*binary"):
        read_file(binary)


def test_json_forms(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps("just text"), encoding="utf-8")
    assert _one(p)[0] == "just text"

    p = tmp_path / "o.json"
    p.write_text(
        json.dumps({"text": ZH, "author": "x", "n": 3}, ensure_ascii=False), encoding="utf-8"
    )
    text, meta = _one(p)
    assert text == ZH and meta["author"] == "x" and meta["n"] == 3
    assert meta["file_name"] == "o.json"

    p = tmp_path / "l.json"
    p.write_text(json.dumps([{"body": "a", "k": 1}, {"body": "b", "k": 2}, "c"]), encoding="utf-8")
    docs = read_file(p, json_text_field="body")
    assert [t for t, _ in docs] == ["a", "b", "c"]
    assert [m.get("k") for _, m in docs] == [1, 2, None]
    assert [m["row"] for _, m in docs] == [0, 1, 2]
    assert [m["json_path"] for _, m in docs] == ["$[0]", "$[1]", "$[2]"]
    # without the text field a record is flattened into key: value lines, fields not in metadata
    docs = read_file(p)
    assert [t for t, _ in docs] == ["body: a\nk: 1", "body: b\nk: 2", "c"]
    assert "k" not in docs[0][1] and docs[0][1]["json_path"] == "$[0]"


def test_json_errors(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text('{"text": "a",', encoding="utf-8")
    with pytest.raises(ReaderError, match=r"broken\.json: invalid JSON at line 1"):
        read_file(p)
    p = tmp_path / "num.json"
    p.write_text('[{"text": 5}]', encoding="utf-8")
    with pytest.raises(ReaderError, match=r"num\.json: item 0 field 'text' must be a string"):
        read_file(p)
    p = tmp_path / "int.json"
    p.write_text("42", encoding="utf-8")  # any JSON is read: a number is its text
    assert _one(p)[0] == "42" and _one(p)[1]["json_path"] == "$"


def test_jsonl(tmp_path, caplog):
    p = tmp_path / "d.jsonl"
    p.write_text('{"text": "one", "id": 1}\n\n"two"\n{"text": "三", "id": 3}\n', encoding="utf-8")
    docs = read_file(p)
    assert [t for t, _ in docs] == ["one", "two", "三"]
    assert [m.get("id") for _, m in docs] == [1, None, 3]
    assert [m["row"] for _, m in docs] == [0, 1, 2]
    assert [m["line"] for _, m in docs] == [1, 3, 4]
    assert [m["json_path"] for _, m in docs] == ["$[0]", "$[1]", "$[2]"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": oops}\n', encoding="utf-8")
    with pytest.raises(ReaderError, match=r"bad\.jsonl: line 2 is not valid JSON"):
        read_file(bad)
    with caplog.at_level("WARNING", logger="fastrag"):
        assert read_file(bad, on_error="skip") == []
    assert re.search(r"bad\.jsonl.*line 2", caplog.text)


def test_csv_rows(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text('title,body\n"A, with comma","line1\nline2"\nB,中文\n,\n', encoding="utf-8")
    docs = read_file(p)
    assert [t for t, _ in docs] == [
        "title: A, with comma\nbody: line1\nline2",
        "title: B\nbody: 中文",
    ]
    assert [m["row"] for _, m in docs] == [0, 1]
    docs = read_file(p, json_text_field="body")
    assert [t for t, _ in docs] == ["line1\nline2", "中文"]
    assert [m["title"] for _, m in docs] == ["A, with comma", "B"]
    ragged = tmp_path / "r.csv"
    ragged.write_text("150,4,setosa\n5.1,3.5,1.4,0.2,0\n4.9,3.0,1.4,0.2,0\n", encoding="utf-8")
    ((text, meta),) = read_file(ragged)  # no header (scikit-learn's style): one table document
    assert text == "150, 4, setosa\n5.1, 3.5, 1.4, 0.2, 0\n4.9, 3.0, 1.4, 0.2, 0"
    assert meta["csv_header"] is False
    gbk = tmp_path / "g.csv"
    gbk.write_bytes("问题,答案\n作用,防腐\n".encode("gbk"))
    assert read_file(gbk)[0][0] == "问题: 作用\n答案: 防腐"


def test_html_visible_text(tmp_path):
    p = tmp_path / "page.html"
    p.write_text(
        "<!DOCTYPE html><html><head><title>T &amp; x</title><style>p{color:red}</style>"
        "<script>var a = '<p>no</p>';</script></head><body><h1>Head</h1>"
        "<p>Hello &lt;b&gt;   world &#20013;</p><div>二<b>三</b></div><script>x()</script>"
        "<ul><li>one</li><li>two</li></ul><pre>a\n  b</pre>"
        "<table><tr><td>1</td><td>2</td></tr></table></body></html>",
        encoding="utf-8",
    )
    text, meta = _one(p)
    assert text == "Head\nHello <b> world 中\n二三\none\ntwo\na\n  b\n1\t2"
    assert meta["title"] == "T & x"
    assert meta["file_type"] == "html"
    htm = tmp_path / "x.htm"
    htm.write_bytes("<p>中文网页</p>".encode("gb18030"))
    assert _one(htm)[0] == "中文网页"


def test_pdf(tmp_path):
    p = tmp_path / "doc.pdf"
    p.write_bytes(pdf_bytes(["Hello PDF world", "Second page here"]))
    docs = read_file(p)
    assert [t for t, _ in docs] == ["Hello PDF world", "Second page here"]
    assert [(m["page"], m["page_label"], m["page_count"]) for _, m in docs] == [
        (1, "1", 2),
        (2, "2", 2),
    ]
    assert docs[0][1]["file_type"] == "pdf" and "encoding" not in docs[0][1]
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\nnot really")
    with pytest.raises(ReaderError, match=r"broken\.pdf: not a readable PDF"):
        read_file(broken)


def test_docx(tmp_path):
    import docx

    d = docx.Document()
    d.add_paragraph("第一段：亚硫酸盐。")
    d.add_paragraph("Second paragraph.")
    table = d.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text = "k"
    table.rows[0].cells[1].text = "v"
    d.add_paragraph("After table")
    p = tmp_path / "doc.docx"
    d.save(str(p))
    text, meta = _one(p)
    assert text == "第一段：亚硫酸盐。\nSecond paragraph.\nk\tv\nAfter table"
    assert meta["file_type"] == "docx"
    bad = tmp_path / "bad.docx"
    bad.write_bytes(b"PK not a zip")
    with pytest.raises(ReaderError, match=r"bad\.docx: not a readable \.docx"):
        read_file(bad)


@pytest.mark.parametrize("module,ext,extra", [("pypdf", ".pdf", "pdf"), ("docx", ".docx", "docx")])
def test_missing_extra(tmp_path, monkeypatch, module, ext, extra):
    p = tmp_path / f"x{ext}"
    p.write_bytes(b"whatever")
    monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError
    with pytest.raises(MissingExtraError, match=rf"pip install 'fastrag-engine\[{extra}\]'"):
        read_file(p)
    with pytest.raises(MissingExtraError):  # not swallowed by on_error="skip"
        read_file(p, on_error="skip")


def test_custom_readers(tmp_path, monkeypatch, caplog, request):
    saved = dict(REGISTERED)  # the registry is one dict: this test empties it, then restores it
    REGISTERED.clear()
    request.addfinalizer(lambda: (REGISTERED.clear(), REGISTERED.update(saved)))
    p = tmp_path / "a.xyz"
    p.write_text("A|B", encoding="utf-8")
    assert read_file(p)[0][0] == "A|B"  # no reader: read as plain text, it decodes
    register_reader(".XYZ", lambda path: path.read_text().split("|"))
    docs = read_file(p)
    assert [t for t, _ in docs] == ["A", "B"]
    assert all(m["file_type"] == "xyz" for _, m in docs)
    assert ".xyz" in supported_extensions()
    # per-call readers override registered and built-in ones; reader metadata is kept
    docs = read_file(p, readers={".xyz": lambda path: [("x", {"k": 1})]})
    assert docs[0][0] == "x" and docs[0][1]["k"] == 1
    txt = tmp_path / "t.txt"
    txt.write_text("plain", encoding="utf-8")
    assert read_file(txt, readers={".txt": lambda path: "overridden"})[0][0] == "overridden"
    with pytest.raises(ReaderError, match=r"returned int for .*t\.txt"):
        read_file(txt, readers={".txt": lambda path: 3})

    def boom(path):
        raise RuntimeError("parser exploded")

    with pytest.raises(ReaderError, match=r"cannot read .*t\.txt.*parser exploded"):
        read_file(txt, readers={".txt": boom})
    with caplog.at_level("WARNING", logger="fastrag"):
        assert read_file(txt, readers={".txt": boom}, on_error="skip") == []
    assert "parser exploded" in caplog.text


def test_bad_arguments(tmp_path, caplog):
    p = tmp_path / "a.txt"
    p.write_text("x", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"on_error='ignore' is not one of \('raise', 'skip'\)"):
        read_file(p, on_error="ignore")
    with pytest.raises(ConfigError, match="json_text_field must be a non-empty"):
        read_file(p, json_text_field="")
    with pytest.raises(ConfigError, match=r"readers must be a dict"):
        read_file(p, readers=[".txt"])
    with pytest.raises(ConfigError, match=r"extension must look like '\.xyz', got 'txt'"):
        read_file(p, readers={"txt": str})
    with pytest.raises(ConfigError, match="must be callable"):
        register_reader(".abc", "not callable")
    with pytest.raises(ConfigError, match="path must be a str or Path"):
        read_file(3)
    with pytest.raises(ReaderError, match=r"file .*missing\.txt.* does not exist"):
        read_file(tmp_path / "missing.txt")
    with caplog.at_level("WARNING", logger="fastrag"):
        assert read_file(tmp_path / "missing.txt", on_error="skip") == []
    assert "missing.txt" in caplog.text
    with pytest.raises(ConfigError, match="takes bytes"):
        decode_bytes("str")


def test_iter_source_files(tmp_path, caplog):
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "z").mkdir(parents=True)
    (tmp_path / ".hidden").mkdir()
    for rel in [
        "b/2.txt",
        "b/10.md",
        "a/z/x.json",
        "a/1.html",
        "top.csv",
        "notes.rst",
        ".dot.txt",
        ".hidden/h.txt",
        "a/.also.txt",
    ]:
        (tmp_path / rel).write_text("x", encoding="utf-8")
    (tmp_path / "skip.bin").write_bytes(b"\x00\x01\x02binary")
    with caplog.at_level("INFO", logger="fastrag"):
        files = iter_source_files(tmp_path)
    rel = [f.relative_to(tmp_path.resolve()).as_posix() for f in files]
    assert rel == ["a/1.html", "a/z/x.json", "b/10.md", "b/2.txt", "notes.rst", "top.csv"]
    assert re.search(r"skipping .*skip\.bin: binary \(NUL bytes\)", caplog.text)
    # a list: user order kept, duplicates once, directories expanded
    files = iter_source_files([tmp_path / "top.csv", str(tmp_path / "b"), tmp_path / "top.csv"])
    assert [f.name for f in files] == ["top.csv", "10.md", "2.txt"]
    # readers= makes another extension supported
    files = iter_source_files(tmp_path, readers={".bin": lambda p: "b"})
    assert "skip.bin" in [f.name for f in files]
    # named explicitly, a binary is kept for read_file, which refuses it by name
    assert iter_source_files(tmp_path / "skip.bin") == [(tmp_path / "skip.bin").resolve()]
    with pytest.raises(ReaderError, match=r"skip\.bin.*binary \(NUL bytes\)"):
        read_file(tmp_path / "skip.bin")
    with pytest.raises(ReaderError, match=r"nope.* does not exist"):
        iter_source_files(tmp_path / "nope")
    with pytest.raises(ConfigError, match="paths is empty"):
        iter_source_files([])
    with pytest.raises(ConfigError, match="paths must be a path or a list"):
        iter_source_files(42)
    with pytest.raises(ConfigError, match="paths must hold str or Path items"):
        iter_source_files([tmp_path, 42])


def test_read_directory_is_an_error(tmp_path):
    d = tmp_path / "dir.txt"
    d.mkdir()
    with pytest.raises(ReaderError, match="is a directory; list its files with iter_source_files"):
        read_file(d)


def test_cmrc_knowledge_base_files(tmp_path):
    """The tutorial layout: CMRC paragraphs, 10 per .txt file, newline-separated."""
    from fastrag.datasets import load_cmrc2018_dev  # byte-identical to ../shared/data's copy

    data = load_cmrc2018_dev()
    paras = list(dict.fromkeys(p["context"] for a in data["data"] for p in a["paragraphs"]))
    for i in range(0, 40, 10):
        (tmp_path / f"kb_{i // 10:03d}.txt").write_text(
            "\n".join(paras[i : i + 10]), encoding="utf-8"
        )
    texts = [read_file(f)[0][0] for f in iter_source_files(tmp_path)]
    assert [ln for t in texts for ln in t.split("\n")] == paras[:40]


def test_skip_logs_one_line_naming_the_file_once(tmp_path, caplog):
    p = tmp_path / "bad.txt"
    p.write_bytes(b"\x80\x81\xff")
    with caplog.at_level(logging.WARNING, logger="fastrag"):
        read_file(p, on_error="skip")
    assert len(caplog.records) == 1 and caplog.records[0].name.startswith("fastrag")
    msg = caplog.records[0].getMessage()
    assert "\n" not in msg and msg.count("bad.txt") == 1
