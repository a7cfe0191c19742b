"""CI runs every benchmark in its tiny --smoke mode: the scripts work end to end and their
built-in cross-checks (identical results to the peers) hold. Speed is never asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def run_smoke(script: str, tmp_path: Path, *extra: str) -> list[Path]:
    env = {**os.environ, "FASTRAG_BENCH_RESULTS": str(tmp_path)}
    out = subprocess.run([sys.executable, str(BENCH / script), "--smoke", *extra],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    files = sorted(tmp_path.glob("*.json"))
    assert files, f"{script} wrote no results"
    return files


@pytest.mark.slow
@pytest.mark.parametrize("script", ["bench_bm25.py", "bench_dense.py", "bench_hnsw.py",
                                    "bench_synthesis.py", "bench_tokenize.py",
                                    "bench_ingest.py", "bench_pipeline.py"])
def test_benchmark_smoke(script, tmp_path):
    pytest.importorskip("bm25s")
    files = run_smoke(script, tmp_path, *(["--out", str(tmp_path)]
                                          if script == "bench_bm25.py" else []))
    data = json.loads(files[0].read_text())
    assert data  # a results document with content
    if script == "bench_pipeline.py":  # same flow: both answer every question, same LLM shape
        rows = {r["flow"]: r for r in data["rows"]}
        assert len(rows) == 4 and all(r["n_queries"] == 20 for r in rows.values())
        fast = rows["fastrag batch (max_concurrency=16)"]
        assert fast["llm_calls"] == fast["reported_llm_calls"] >= 2 * 20
    if script == "bench_bm25.py":  # fastrag's top-10 equals bm25s's on every query
        checks = [r["verify_vs_bm25s"]["identical"] for r in data["main"] + data["sizes"]]
        assert checks and all(c is True for c in checks)
