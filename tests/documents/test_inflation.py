"""Bounded inflation: the compressed parts of a file (draw.io pages, DOCX members, PDF
streams, a .json.gz data set) inflate no further than a cap set by the file's size, checked
while inflating; JSON nested too deep is refused by name, never with Python's RecursionError.

Bombs are built in milliseconds, never committed: one MiB of a repeated byte is deflated and
ended by a full flush (byte-aligned, history reset), so its compressed bytes repeat as they
are for every further MiB."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib
from urllib.parse import quote

import pytest

from fastrag.documents.inflate import (
    INFLATE_CEILING,
    INFLATE_FLOOR,
    InflateBudget,
    InflateLimitError,
    inflate_cap,
)
from fastrag.documents.readers import iter_source_files, read_file
from fastrag.errors import ReaderError
from fastrag.eval.loaders import read_squad_json

MIB = 1 << 20
BOMB = r"inflates to more than .* MiB .*decompression bomb and was not read"


def deflate_run(mib: int, byte: bytes = b" ", head: bytes = b"") -> bytes:
    """Raw deflate of ``head`` then ``mib`` MiB of ``byte``."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH) if head else b""
    one = c.compress(byte * MIB) + c.flush(zlib.Z_FULL_FLUSH)
    return first + one * mib + b"\x03\x00"  # an empty final block ends the stream


def zlib_run(mib: int, byte: bytes = b" ", head: bytes = b"") -> bytes:
    """The same in zlib's wrapping (a PDF's /FlateDecode), with its Adler-32 checksum."""
    adler = zlib.adler32(head)
    chunk = byte * MIB
    for _ in range(mib):
        adler = zlib.adler32(chunk, adler)
    return b"\x78\xda" + deflate_run(mib, byte, head) + adler.to_bytes(4, "big")


# -- draw.io ----------------------------------------------------------------------------------
def drawio_bomb(mib: int) -> str:
    packed = base64.b64encode(deflate_run(mib, b"a")).decode()
    return f"<mxfile><diagram id='a'>{packed}</diagram></mxfile>"


def test_caps_follow_the_file_size():
    assert inflate_cap(0) == INFLATE_FLOOR
    assert inflate_cap(1 << 20) == 100 << 20
    assert inflate_cap(50 << 20) == INFLATE_CEILING
    budget = InflateBudget("x.bin", 1000)
    assert budget.inflate(zlib.compress(b"ab" * 1000)[2:-4], -15, "part 1") == b"ab" * 1000
    with pytest.raises(InflateLimitError, match=r"'x\.bin' .*more than 16\.0 MiB \(part 2\)"):
        budget.inflate(deflate_run(17), -15, "part 2")
    assert budget.used == INFLATE_FLOOR + 1  # stopped one byte past the cap


def test_drawio_bomb_refused_in_bounded_memory(tmp_path):
    """A 1.4 MB draw.io file packing 1 GiB: 3.2 GB and 16 s before the cap; now refused in
    a child process that may not map more than 2 GiB."""
    bomb = tmp_path / "bomb.drawio"
    bomb.write_text(drawio_bomb(1024))
    assert 1.3e6 < bomb.stat().st_size < 1.5e6
    child = textwrap.dedent(
        f"""
        import resource, sys, time
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from fastrag.documents.readers import read_file
        t = time.perf_counter()
        try:
            read_file({str(bomb)!r})
        except Exception as exc:
            print(type(exc).__name__, exc)
        print(f"seconds {{time.perf_counter() - t:.2f}}")
        """
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=120, env=env
    )
    assert run.returncode == 0, run.stderr
    first, seconds = run.stdout.strip().splitlines()
    assert first.startswith("InflateLimitError ")
    assert "bomb.drawio" in first and "(diagram page 1)" in first
    assert f"more than {100 * bomb.stat().st_size / MIB:.1f} MiB" in first  # 100x its size
    assert float(seconds.split()[1]) < 10  # about 0.6 s; 16 s before the cap


def test_drawio_packed_pages_still_read(tmp_path):
    model = (
        '<mxGraphModel><root><mxCell id="0"/><mxCell id="2" value="Upload" /></root></mxGraphModel>'
    )
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    packed = base64.b64encode(c.compress(quote(model, safe="").encode()) + c.flush()).decode()
    p = tmp_path / "ok.drawio"
    p.write_text(f"<mxfile><diagram id='a'>{packed}</diagram><diagram>{packed}</diagram></mxfile>")
    assert read_file(p)[0][0] == "Upload\nUpload"


def test_drawio_pages_share_one_budget(tmp_path):
    """Pages each under the cap are refused together: the cap is per file."""
    page = base64.b64encode(deflate_run(6, b"a")).decode()
    p = tmp_path / "pages.drawio"
    p.write_text("<mxfile>" + f"<diagram>{page}</diagram>" * 3 + "</mxfile>")
    with pytest.raises(InflateLimitError, match=r"pages\.drawio.*\(diagram page 3\)"):
        read_file(p)


# -- DOCX -------------------------------------------------------------------------------------
def zip_bytes(members: list[tuple[str, bytes, int, int]]) -> bytes:
    """A ZIP of deflated members ``(name, raw deflate, declared size, declared CRC-32)``,
    written by hand: zipfile would deflate (and check) the data itself."""
    body, central = bytearray(), bytearray()
    for name, raw, size, crc in members:
        n = name.encode()
        central += struct.pack(
            "<4s4B4HL2L5H2L", b"PK\x01\x02", 20, 3, 20, 0, 0, 8, 0, 0x21, crc, len(raw), size,
            len(n), 0, 0, 0, 0, 0, len(body),
        )  # fmt: skip
        central += n
        body += struct.pack(
            "<4s2B4HL2L2H", b"PK\x03\x04", 20, 0, 0, 8, 0, 0x21, crc, len(raw), size, len(n), 0
        )
        body += n + raw
    end = struct.pack(
        "<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(body), 0
    )
    return bytes(body + central + end)


@pytest.fixture(scope="module")
def docx_parts() -> dict[str, bytes]:
    """The parts of a small DOCX saved by python-docx."""
    docx = pytest.importorskip("docx")
    d = docx.Document()
    d.add_paragraph("Upload a file")
    buf = io.BytesIO()
    d.save(buf)
    with zipfile.ZipFile(buf) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _member(name: str, data: bytes) -> tuple[str, bytes, int, int]:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return name, c.compress(data) + c.flush(), len(data), zlib.crc32(data)


def test_docx_normal_still_reads(tmp_path, docx_parts):
    p = tmp_path / "ok.docx"
    p.write_bytes(zip_bytes([_member(n, d) for n, d in docx_parts.items()]))
    assert read_file(p)[0][0] == "Upload a file"


def test_docx_bomb_refused_by_declared_sizes(tmp_path, docx_parts):
    """A member declaring 1 GiB (honestly) is refused before anything is inflated."""
    members = [_member(n, d) for n, d in docx_parts.items()]
    members.append(("word/media/bomb.bin", deflate_run(1024, b"\0"), 1 << 30, 0))
    p = tmp_path / "bomb.docx"
    p.write_bytes(zip_bytes(members))
    with pytest.raises(InflateLimitError, match=r"bomb\.docx.*members declare 1\.0 GiB"):
        read_file(p)


def test_docx_member_lying_about_its_size_refused(tmp_path, docx_parts):
    """word/document.xml declares its real XML (size and CRC) but inflates on to 1 GiB of
    spaces: ZipFile.read would inflate it all, then cut it to the declared size."""
    xml = docx_parts["word/document.xml"]
    members = [_member(n, d) for n, d in docx_parts.items() if n != "word/document.xml"]
    lying = deflate_run(1024, b" ", head=xml)
    members.append(("word/document.xml", lying, len(xml), zlib.crc32(xml)))
    p = tmp_path / "lying.docx"
    p.write_bytes(zip_bytes(members))
    with pytest.raises(
        InflateLimitError, match=r"'word/document\.xml' inflating past the \d+ bytes it declares"
    ):
        read_file(p)


def test_docx_other_compression_methods_refused(tmp_path, docx_parts):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_LZMA) as zf:
        for name, data in docx_parts.items():
            zf.writestr(name, data)
    p = tmp_path / "lzma.docx"
    p.write_bytes(buf.getvalue())
    with pytest.raises(ReaderError, match=r"lzma\.docx.*compression method 14; only stored"):
        read_file(p)


# -- PDF --------------------------------------------------------------------------------------
def pdf_of(pages: list[list[bytes]]) -> bytes:
    """A PDF of one page per list of /FlateDecode content streams."""
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    font = 3 + len(pages) + sum(len(streams) for streams in pages)
    kids = []
    for streams in pages:
        kids.append(len(objs) + 1)
        first = len(objs) + 2
        contents = " ".join(f"{first + i} 0 R" for i in range(len(streams)))
        objs.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents [{contents}] "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        for s in streams:
            head = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(s)
            objs.append(head + s + b"\nendstream")
    objs[1] = f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {len(kids)} >>"
    objs[1] = objs[1].encode()
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    assert len(objs) == font
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)


HELLO = b"BT /F1 24 Tf 72 700 Td (Hello) Tj ET\n"


def test_pdf_flate_bomb_refused(tmp_path):
    pytest.importorskip("pypdf")
    p = tmp_path / "bomb.pdf"
    p.write_bytes(pdf_of([[zlib_run(100, head=HELLO)]]))  # 100 KB, 100 MiB of content
    with pytest.raises(InflateLimitError, match=r"bomb\.pdf.*more than 16\.0 MiB \(its streams"):
        read_file(p)
    ok = tmp_path / "ok.pdf"
    ok.write_bytes(pdf_of([[zlib.compress(HELLO)], [zlib.compress(HELLO)]]))
    assert [text for text, _ in read_file(ok)] == ["Hello", "Hello"]


def test_pdf_streams_share_one_budget(tmp_path):
    """pypdf limits each stream (75 MB), not a file: 20 pages of 70 MB content, 1.46 MB of
    PDF, took 1.6 GB before the cap. Here three streams of 6 MiB each pass pypdf's limit but
    not the file's cap (16 MiB for a file this small), refused before any is parsed."""
    pytest.importorskip("pypdf")
    p = tmp_path / "streams.pdf"
    p.write_bytes(pdf_of([[zlib.compress(HELLO)], [zlib_run(6, head=HELLO)] * 3]))
    assert p.stat().st_size < 100_000
    with pytest.raises(InflateLimitError, match=r"streams\.pdf.*more than 16\.0 MiB \(its streams"):
        read_file(p)


@pytest.mark.slow
def test_pdf_stream_past_pypdf_limit_refused(tmp_path):
    """A 1 MB PDF packing 1 GiB in one stream: its cap (100 MiB) is above pypdf's own limit
    for one stream, which refuses it first (about 1 s: 75 MB are inflated)."""
    pytest.importorskip("pypdf")
    p = tmp_path / "bomb.pdf"
    p.write_bytes(pdf_of([[zlib_run(1024, head=HELLO)]]))
    with pytest.raises(InflateLimitError, match=r"bomb\.pdf.*past 71\.5 MiB, pypdf's limit"):
        read_file(p)


# -- gzip (evaluation data sets) --------------------------------------------------------------
def test_squad_gzip_bomb_refused(tmp_path):
    raw = deflate_run(20)
    crc, chunk = 0, b" " * MIB
    for _ in range(20):
        crc = zlib.crc32(chunk, crc)
    p = tmp_path / "squad.json.gz"
    p.write_bytes(
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + raw + struct.pack("<2L", crc, 20 * MIB)
    )
    with pytest.raises(InflateLimitError, match=r"squad\.json\.gz.*\(gzip data\)"):
        read_squad_json(p)
    ok = tmp_path / "ok.json.gz"
    ok.write_bytes(gzip.compress(b'{"data": []}'))
    assert read_squad_json(ok) == {"data": []}


# -- JSON nested too deep ---------------------------------------------------------------------
def test_json_nested_too_deep_is_a_friendly_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    with pytest.raises(ReaderError) as info:
        read_file(deep)
    msg = str(info.value)
    assert "deep.json" in msg and "nests JSON more than 512 levels deep" in msg
    assert "RecursionError" not in msg and "recursion" not in msg
    lines = tmp_path / "deep.jsonl"
    lines.write_text('{"text": "a"}\n' + '{"a": ' * 600 + "1" + "}" * 600 + "\n")
    with pytest.raises(ReaderError, match=r"deep\.jsonl: line 2 nests JSON more than 512"):
        read_file(lines)
    at_limit = tmp_path / "ok.json"
    at_limit.write_text(json.dumps({"text": "t", "m": json.loads("[" * 511 + "]" * 511)}))
    assert read_file(at_limit)[0][0] == "t"
    # a folder walk reads a deep manifest.json as a file, not as a store's manifest
    (tmp_path / "manifest.json").write_text("[" * 100_000)
    assert tmp_path / "manifest.json" in list(iter_source_files(tmp_path))
