"""The "Beyond one machine" example of docs/guide/ray.md runs as written, in its own process
with its own local Ray cluster, against the local OpenAI-compatible test server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import fastrag as fr
from fastrag.datasets import load_cmrc2018_dev

pytest.importorskip("ray", reason="needs the [ray] extra: pip install -e '.[ray]'")
pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]


def _example() -> str:
    text = (ROOT / "docs" / "guide" / "ray.md").read_text(encoding="utf-8")
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_readme_ray_example_runs_twice(tmp_path, openai_server):
    """Run twice in the same folder: the second run replaces the first's output (no doubled
    hits, one compacted shard set)."""
    env = {
        **os.environ,
        "FASTRAG_LLM_BASE_URL": openai_server.url,
        "FASTRAG_LLM_MODEL": "test-model",
        "OPENAI_API_KEY": "test-key",
        "FASTRAG_BACKGROUND_COMPILE": "0",
    }
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-c", _example()],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
    # the retrieval job wrote every hit of batch_arrow
    hits = pq.read_table(tmp_path / "hits")
    doc = fr.Document(store=tmp_path / "cmrc.store", mode="r")
    questions = [
        q["question"]
        for a in load_cmrc2018_dev()["data"]
        for p in a["paragraphs"]
        for q in p["qas"]
    ]
    want = fr.Retriever(doc, "root", "bm25_chinese", topk=5).batch_arrow(questions)
    assert hits.num_rows == want.num_rows and hits.column("error").null_count == hits.num_rows
    # the sharded index was compacted to one segment holding the added document
    shards = json.loads((tmp_path / "cmrc.shards" / "shards.json").read_text())
    assert (
        len(shards["segments"]) == 1 and shards["segments"][0]["docs"] == len(doc.group("root")) + 1
    )
    # 8 answers and 20 summaries, then 8 answers again (the summaries and embeddings are
    # stored): the LLM server saw all of them
    paths = [r.path for r in openai_server.requests]
    assert paths.count("/v1/chat/completions") == 8 + 20 + 8
    assert paths.count("/v1/embeddings") >= 1
    small = fr.Document(store=tmp_path / "small.store", mode="r")
    assert "summary" in small.group_names
    assert len(small.group("summary")) == 20
