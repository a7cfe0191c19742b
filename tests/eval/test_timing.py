"""Repeated timed batches (fastrag.eval.timing) and the demo that prints them: the real
``fastrag demo`` on the bundled CMRC knowledge base, its table parsed back."""

from __future__ import annotations

import re

import pytest

from fastrag.cli.main import main
from fastrag.errors import ConfigError
from fastrag.eval.timing import BatchTiming, describe_load, machine_load, time_batches


def test_time_batches_runs_the_warmup_untimed_then_each_timed_run():
    calls = []
    result, t = time_batches(lambda: calls.append(len(calls)) or len(calls), 10, runs=3)
    assert calls == [0, 1, 2, 3] and result == 4
    assert t.runs == 3 and len(t.cpu_s) == 3 and all(w >= 0 for w in t.wall_s)
    with pytest.raises(ConfigError, match="runs must be an int >= 1"):
        time_batches(lambda: None, 1, runs=0)


def test_batch_timing_median_and_spread_are_exact():
    t = BatchTiming(100, (0.5, 0.1, 0.2, 0.25), (0.4, 0.1, 0.3, 0.2))
    assert (t.per_s_min, t.per_s_max) == (200.0, 1000.0)
    assert t.per_s == (400.0 + 500.0) / 2 and t.cpu_s_median == 0.25
    assert t.as_dict()["queries_per_s"] == 450.0 and t.as_dict()["runs"] == 4


def test_describe_load_says_when_the_machine_is_busy():
    assert describe_load({"loadavg": [0.4, 0.3, 0.2], "cores": 2}) == (
        "load average 0.40 (1 min) on 2 cores"
    )
    busy = describe_load({"loadavg": [1.5, 1.0, 1.0], "cores": 2})
    assert busy.startswith("load average 1.50 (1 min) on 2 cores; the machine is busy")
    assert describe_load({"loadavg": [], "cores": 1}) == "machine load unknown on this platform"
    now = machine_load()
    assert now["cores"] >= 1 and len(now["loadavg"]) == 3


def test_the_demo_prints_a_median_of_three_runs_with_its_spread_and_the_load(capsys):
    assert main(["demo", "--runs", "3", "--topk", "1,3"]) == 0
    out = capsys.readouterr().out
    assert "timed 3 times after an untimed run" in out
    assert "queries/s: median of 3 timed batches per similarity after one untimed batch" in out
    assert re.search(r"^load average \d+\.\d\d \(1 min\) on \d+ cores?", out, re.M)
    rows = re.findall(
        r"^(bm25_\w+) \| 0\.\d{3} \| [^|]+\| [^|]+\| [^|]+\| ([\d.]+) \| "
        r"([\d,]+) \(([\d,]+)-([\d,]+)\) \| (\d+\.\d{3})$",
        out,
        re.M,
    )
    assert [r[0] for r in rows] == ["bm25_chinese", "bm25_cjk"]
    for _, mrr, med, lo, hi, cpu in rows:
        med, lo, hi = (int(x.replace(",", "")) for x in (med, lo, hi))
        assert 0 < lo <= med <= hi and float(cpu) > 0 and float(mrr) > 0.9
    assert main(["demo", "--runs", "2"]) == 2
    assert "--runs 2: pass 3 or more" in capsys.readouterr().err
