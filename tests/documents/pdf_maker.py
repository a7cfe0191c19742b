"""Hand-written PDFs for reader tests (no PDF library needed to make them)."""

from __future__ import annotations


def pdf_bytes(pages: list[str], labels: str = "", startxref_offset: int = 0) -> bytes:
    """A valid PDF with one Helvetica line per page ("" = a page without text); ``labels``
    is a /PageLabels dictionary; ``startxref_offset`` spoils the xref pointer (pypdf then
    warns and recovers)."""
    catalog = "<< /Type /Catalog /Pages 2 0 R" + (f" /PageLabels {labels}" if labels else "")
    objs = [(catalog + " >>").encode()]
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objs.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font = 3 + 2 * len(pages)
    for i, line in enumerate(pages):
        stream = (f"BT /F1 24 Tf 72 700 Td ({line}) Tj ET" if line else "").encode("latin-1")
        objs.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents "
            f"{4 + 2 * i} 0 R /Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objs.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objs) + 1,
        xref + startxref_offset,
    )
    return bytes(out)
