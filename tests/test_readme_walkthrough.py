"""The "Your own documents" walkthrough (docs/guide/cli.md; README.md shows its shell part)
runs as written, shell and Python, against a small folder of real files and the local
OpenAI-compatible test server."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _section() -> str:
    return (ROOT / "docs" / "guide" / "cli.md").read_text(encoding="utf-8")


def _readme_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Your own documents")
    return text[start : text.index("\n## ", start + 5)]


def _commands(section: str) -> list[str]:
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    joined = block.replace("\\\n", " ")
    cmds = []
    for line in joined.splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith(("#", "pip ")):
            cmds.append(line)
    return cmds


def _folder(tmp: Path) -> None:
    docs = tmp / "docs"
    (docs / "drafts").mkdir(parents=True)
    (docs / "store.md").write_text(
        "# Stores\nA store is verified by checksums of every file.\n"
        "The manifest records each file's size and checksum.\n",
        encoding="utf-8",
    )
    (docs / "retrieval.rst").write_text(
        "Retrieval\n=========\n\nBM25 ranks passages by term statistics.\n", encoding="utf-8"
    )
    (docs / "drafts" / "todo.md").write_text("draft: nothing here yet\n", encoding="utf-8")
    (tmp / "more").mkdir()
    (tmp / "more" / "notes.txt").write_text(
        "Verification runs on every read of small files.\n", encoding="utf-8"
    )
    (tmp / "questions.txt").write_text("how are stores verified?\nwhat does BM25 rank?\n")
    (tmp / "qa.jsonl").write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"question": "how is a store verified", "answer": "checksums of every file"},
                {"question": "what ranks passages", "answer": "BM25 ranks passages"},
            ]
        )
    )


def test_readme_shows_the_tested_commands():
    assert _commands(_readme_section()) == _commands(_section())


@pytest.mark.slow  # ten CLI processes in turn (about 30 s); test_cli_e2e.py runs each command
def test_shell_walkthrough(tmp_path, openai_server):
    _folder(tmp_path)
    openai_server.reply = "By checksums."
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    outputs = []
    for cmd in _commands(_section()):
        argv = shlex.split(cmd)
        extra = {}
        while "=" in argv[0]:  # VAR=value prefixes
            key, value = argv.pop(0).split("=", 1)
            extra[key] = openai_server.url if key == "FASTRAG_LLM_BASE_URL" else value
        assert argv[0] == "fastrag", cmd
        proc = subprocess.run(
            [sys.executable, "-m", "fastrag.cli", *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env={**env, **extra},
        )
        assert proc.returncode == 0, (cmd, proc.stdout[-1500:], proc.stderr[-2500:])
        outputs.append((cmd, proc.stdout, proc.stderr))
    by_verb = {c.split("fastrag ")[1].split()[0] + str(i): o for i, (c, o, _) in enumerate(outputs)}
    assert any("store.md" in o for k, o in by_verb.items() if k.startswith("search"))
    asks = [o for c, o, _ in outputs if " ask " in f" {c} "]
    assert asks[0].startswith("By checksums.") and "Sources:" in asks[0]
    assert "checksums of every file" in asks[1] and "[store.md]" in asks[1]
    assert (tmp_path / "hits.parquet").stat().st_size > 0
    evals = [o for c, o, _ in outputs if " eval " in f" {c} "]
    assert "bm25 |" in evals[0]


def test_python_walkthrough(tmp_path):
    _folder(tmp_path)
    code = re.search(r"```python\n(.*?)```", _section(), re.S).group(1)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-2500:]
    import fastrag as fr

    doc = fr.Document(store=tmp_path / "my.store", mode="r")
    assert "chunk" in doc.group_names
    files = {n.metadata["file_name"] for n in doc.group("root")}
    assert files == {"store.md", "retrieval.rst"}  # drafts/** excluded
