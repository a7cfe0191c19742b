"""What a read did: :class:`ReadEntry` per file and the :class:`ReadReport` of a walk."""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fastrag.errors import ConfigError

logger = logging.getLogger(__name__)

ReaderResult = str | list[str] | list[tuple[str, dict]]
ReaderFn = Callable[[Path], ReaderResult]

ON_ERROR = ("raise", "skip")
NO_EXT = "(none)"
FOLDER = "(folder)"
_STATUSES = ("read", "skipped", "failed")
# walk skips worth a warning: the user did not ask for them and may not know they are there
NOTABLE_SKIPS = (
    "symlink loop",
    "FIFO",
    "socket",
    "device file",
    "dangling link",
    "unreadable entry",
    "symlinked folder",
)


# -- the report -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReadEntry:
    """What happened to one file (or folder) of a read.

    ``status`` is "read", "skipped" or "failed"; ``reason`` is short and countable ("binary",
    "hidden", "excluded", "not in required_exts", "fastrag store", "symlink loop", "FIFO",
    "empty file", ... for skips; "error" for failures); ``detail`` says more (the binary kind,
    the matching pattern, the error message); ``documents`` counts the root documents read,
    ``left_out`` the empty pages left out of a read file.
    """

    path: str
    ext: str
    status: str
    reason: str = ""
    detail: str = ""
    documents: int = 0
    left_out: int = 0


@dataclass
class ReadReport:
    """Per extension, the files read, skipped and failed, with reasons and paths.

    Pass one to :func:`iter_source_files` and :func:`read_file` (``report=``); both add to
    it. ``summary()`` is a short table, ``details()`` one line per file. Extensions are
    lower-case with the dot; ``"(none)"`` is a file without one, ``"(folder)"`` a folder
    skipped whole (hidden, excluded, a fastrag store, a symlinked folder).
    """

    entries: list[ReadEntry] = field(default_factory=list)

    def add(
        self,
        path: str | os.PathLike,
        status: str,
        reason: str = "",
        detail: str = "",
        *,
        documents: int = 0,
        left_out: int = 0,
        folder: bool = False,
    ) -> None:
        if status not in _STATUSES:
            raise ConfigError(f"status={status!r} is not one of {_STATUSES}")
        ext = FOLDER if folder else (Path(path).suffix.lower() or NO_EXT)
        self.entries.append(ReadEntry(str(path), ext, status, reason, detail, documents, left_out))

    @property
    def read(self) -> list[ReadEntry]:
        return [e for e in self.entries if e.status == "read"]

    @property
    def skipped(self) -> list[ReadEntry]:
        return [e for e in self.entries if e.status == "skipped"]

    @property
    def failed(self) -> list[ReadEntry]:
        return [e for e in self.entries if e.status == "failed"]

    def counts(self) -> dict[str, dict[str, int]]:
        """``{ext: {"read": n, "skipped": n, "failed": n, "documents": n}}``, sorted by ext."""
        out: dict[str, dict[str, int]] = {}
        for e in self.entries:
            c = out.setdefault(e.ext, dict.fromkeys((*_STATUSES, "documents"), 0))
            c[e.status] += 1
            c["documents"] += e.documents
        return dict(sorted(out.items()))

    def reasons(self) -> dict[str, dict[str, int]]:
        """``{ext: {reason: n}}`` of the skipped and failed entries (and of empty pages left
        out of read files, as ``"empty pages left out"``)."""
        out: dict[str, Counter] = {}
        for e in self.entries:
            c = out.setdefault(e.ext, Counter())
            if e.status != "read":
                c[e.reason] += 1
            elif e.left_out:
                c["empty pages left out"] += e.left_out
        return {ext: dict(sorted(c.items())) for ext, c in sorted(out.items()) if c}

    def summary(self) -> str:
        """A short table: one row per extension (read / skipped / failed / documents and the
        reasons), then the totals."""
        counts, reasons = self.counts(), self.reasons()
        rows = [["ext", "read", "skipped", "failed", "documents", "reasons"]]
        for ext, c in counts.items():
            why = ", ".join(f"{r} {n}" for r, n in reasons.get(ext, {}).items())
            rows.append([ext, *(str(c[k]) for k in (*_STATUSES, "documents")), why])
        rows.append(
            [
                "total",
                *(str(sum(c[k] for c in counts.values())) for k in (*_STATUSES, "documents")),
                "",
            ]
        )
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        return "\n".join(
            "  ".join(
                [r[0].ljust(widths[0]), *(r[i].rjust(widths[i]) for i in range(1, 5)), r[5]]
            ).rstrip()
            for r in rows
        )

    def details(self) -> str:
        """One line per entry: status, extension, path, and the reason or document count."""
        lines = []
        for e in sorted(self.entries, key=lambda e: (_STATUSES.index(e.status), e.path)):
            if e.status == "read":
                tail = f"{e.documents} document{'s' * (e.documents != 1)}"
                if e.left_out:
                    tail += f", {e.left_out} empty page{'s' * (e.left_out != 1)} left out"
            else:
                tail = e.reason + (f": {e.detail}" if e.detail else "")
            lines.append(f"{e.status:<8} {e.ext:<9} {e.path}  ({tail})")
        return "\n".join(lines)

    def missing_extras(self) -> list[str]:
        """One line per install command for the files that failed because an optional package
        is missing (reason "missing extra"): how many, which (up to 3), and the command, e.g.
        ``2 .pdf files not read (a.pdf, b.pdf): install the reader with: pip install
        'fastrag-engine[pdf]', then run the same command again``."""
        groups: dict[str, list[ReadEntry]] = {}
        for e in self.failed:
            if e.reason == "missing extra":
                m = _INSTALL.search(e.detail)
                groups.setdefault(m.group(0) if m else e.detail, []).append(e)
        lines = []
        for cmd, entries in sorted(groups.items(), key=lambda g: sorted(e.ext for e in g[1])):
            exts = sorted({e.ext for e in entries})
            n = len(entries)
            shown = ", ".join(e.path for e in entries[:3]) + (", ..." if n > 3 else "")
            lines.append(
                f"{n} {'/'.join(exts)} file{'s' * (n != 1)} not read ({shown}): install the "
                f"reader with: {cmd}, then run the same command again"
            )
        return lines

    def __str__(self) -> str:
        return self.summary()


_INSTALL = re.compile(r"pip install '[^']+'")
