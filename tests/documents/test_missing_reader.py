"""Issue 42, goal 6: a PDF without ``pypdf`` installed fails that file only: the rest of the
folder is read, the ingest report names the file and the install command, and the file is read
on the next ingest once the extra is there. What a store already holds of it is kept."""

from __future__ import annotations

import sys
from pathlib import Path

from pdf_maker import pdf_bytes

import fastrag as fr
from fastrag.cli.main import main

INSTALL = "pip install 'fastrag-engine[pdf]'"


def _folder(base: Path) -> Path:
    (base / "en").mkdir(parents=True)
    (base / "en" / "tar.md").write_text("tar stores many files in one archive.\n", "utf-8")
    (base / "notes.txt").write_text("Dogs bark at the postman.\n", "utf-8")
    (base / "manual.pdf").write_bytes(pdf_bytes(["Sulfites in wine", "Labelling rules"]))
    return base


def test_cli_ingest_reads_the_rest_and_names_the_install_command(tmp_path, monkeypatch, capsys):
    kb, st = _folder(tmp_path / "kb"), tmp_path / "st"
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "pypdf", None)  # `import pypdf` raises ImportError
        assert main(["ingest", str(kb), "--store", str(st), "-q"]) == 0
        out, err = capsys.readouterr()
        assert (
            f"note: 1 .pdf file not read ({kb / 'manual.pdf'}): install the reader with: "
            f"{INSTALL}, then run the same command again" in err.splitlines()
        )
        pdf_row = next(line.split() for line in out.splitlines() if line.startswith(".pdf"))
        assert pdf_row == [".pdf", "0", "0", "1", "0", "missing", "extra", "1"]
        assert "read 2 new files, 1 not read (an optional package is missing)" in out
        doc = fr.Document(store=st, mode="r")
        assert sorted(n.metadata["file_path"] for n in doc.group("root")) == [
            "en/tar.md",
            "notes.txt",
        ]
    # with pypdf back, the same command reads the PDF (it was not recorded as read)
    assert main(["ingest", str(kb), "--store", str(st), "-q"]) == 0
    assert "read 1 new file, unchanged 2" in capsys.readouterr().out
    doc = fr.Document(store=st, mode="r")
    pages = [n.text for n in doc.group("root") if n.metadata["file_path"] == "manual.pdf"]
    assert pages == ["Sulfites in wine", "Labelling rules"]


def test_a_stored_pdf_is_kept_when_its_reader_is_missing(tmp_path, monkeypatch):
    kb = _folder(tmp_path / "kb")
    doc = fr.Document(kb, store=tmp_path / "st")
    before = sorted(n.text for n in doc.group("root"))
    (kb / "manual.pdf").write_bytes(pdf_bytes(["Sulfites in wine", "New rules"]))  # changed
    (kb / "notes.txt").write_text("Cats sleep all day.\n", "utf-8")
    monkeypatch.setitem(sys.modules, "pypdf", None)
    again = fr.Document(kb, store=tmp_path / "st", remove_missing=True)
    assert again.source_changes.unread == [str((kb / "manual.pdf").resolve())]
    assert again.source_changes.changed == 1  # notes.txt
    texts = sorted(n.text for n in again.group("root"))
    assert texts == sorted(
        [t for t in before if t != "Dogs bark at the postman.\n"] + ["Cats sleep all day.\n"]
    )  # the PDF's stored pages are still there
    assert [e.reason for e in again.read_report.failed] == ["missing extra"]
