"""Files derived once from a package's data into the cache folder (word lists, a language
model), checksummed and memory-mapped by every later process."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from fastrag._checksum import checksum_file

__all__ = ["open_derived"]

log = logging.getLogger("fastrag")
T = TypeVar("T")


def _open(folder: Path, files: Sequence[str], load: Callable[[Path, str | None], T]) -> T:
    meta = json.loads((folder / "meta.json").read_text("utf-8"))
    for name in files:
        if meta.get(name) != checksum_file(folder / name):
            raise ValueError(f"{name} does not match its checksum")
    return load(folder, "r")


def _build(
    folder: Path,
    files: Sequence[str],
    derive: Callable[[Path], None],
    load: Callable[[Path, str | None], T],
) -> T:
    """Derive into a temporary sibling of ``folder``, then rename it into place."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        derive(tmp)
        meta = {name: checksum_file(tmp / name) for name in files}
        (tmp / "meta.json").write_text(json.dumps(meta), "utf-8")
        if folder.exists():  # damaged: replaced (another process may have just fixed it)
            shutil.rmtree(folder, ignore_errors=True)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process renamed its copy first: use that one
            shutil.rmtree(tmp, ignore_errors=True)
        return _open(folder, files, load)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def open_derived(
    folder: Path,
    files: Sequence[str],
    derive: Callable[[Path], None],
    load: Callable[[Path, str | None], T],
    what: str,
) -> T:
    """``load(folder, "r")`` of the ``files`` that ``derive(folder)`` writes, once their
    checksums (``meta.json``) match; derived first when missing or damaged (atomically: a
    reader sees the whole folder or none). When the cache cannot be written, derived into a
    temporary folder and loaded into memory (``load(tmp, None)``). ``what`` names the files
    in warnings."""
    if folder.is_dir():
        try:
            return _open(folder, files, load)
        except (OSError, ValueError) as exc:
            log.warning("%s at %s damaged (%s); deriving them again", what, folder, exc)
    try:
        return _build(folder, files, derive, load)
    except OSError as exc:  # a read-only cache: derive into a temporary folder per process
        log.warning("cannot cache the %s at %s (%s)", what, folder, exc)
        tmp = Path(tempfile.mkdtemp(prefix="fastrag-derived-"))
        try:
            derive(tmp)
            return load(tmp, None)  # read into memory: the folder goes
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
