"""Repeated timed batches: queries/s as a median with its spread, CPU time and the machine load.

One wall-clock batch is not a speed: the first one in a process loads (or compiles) kernels
and a busy machine halves another. :func:`time_batches` runs the batch once untimed, then
``runs`` times timed, and keeps what a reader needs to judge the number.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastrag._checks import check_int

__all__ = ["BatchTiming", "describe_load", "machine_load", "time_batches"]


@dataclass(frozen=True)
class BatchTiming:
    """Timed runs of one batch of ``n_items``: wall and CPU seconds per run, in run order."""

    n_items: int
    wall_s: tuple[float, ...]
    cpu_s: tuple[float, ...]

    @property
    def runs(self) -> int:
        return len(self.wall_s)

    def _rates(self) -> list[float]:
        return [self.n_items / w if w > 0 else float("inf") for w in self.wall_s]

    @property
    def per_s(self) -> float:
        """Median items per second over the timed runs."""
        return statistics.median(self._rates())

    @property
    def per_s_min(self) -> float:
        return min(self._rates())

    @property
    def per_s_max(self) -> float:
        return max(self._rates())

    @property
    def cpu_s_median(self) -> float:
        """Median CPU seconds of one run (all threads of this process)."""
        return statistics.median(self.cpu_s)

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "queries_per_s": self.per_s,
            "queries_per_s_min": self.per_s_min,
            "queries_per_s_max": self.per_s_max,
            "wall_s": list(self.wall_s),
            "cpu_s": list(self.cpu_s),
            "cpu_s_median": self.cpu_s_median,
        }


def time_batches(
    fn: Callable[[], Any], n_items: int, *, runs: int = 5, warmup: int = 1
) -> tuple[Any, BatchTiming]:
    """Call ``fn`` ``warmup`` times untimed, then ``runs`` times timed; the last result and
    the timings (wall by ``perf_counter``, CPU by ``process_time``)."""
    check_int("runs", runs, min=1)
    check_int("warmup", warmup, min=0)
    check_int("n_items", n_items, min=0)
    result = None
    for _ in range(warmup):
        result = fn()
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(runs):
        c0, t0 = time.process_time(), time.perf_counter()
        result = fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return result, BatchTiming(n_items, tuple(wall), tuple(cpu))


def machine_load() -> dict[str, Any]:
    """The 1-, 5- and 15-minute load averages and the cores this process may use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    try:
        load = list(os.getloadavg())
    except OSError:  # no load average on this platform
        load = []
    return {"loadavg": load, "cores": cores}


def describe_load(load: dict[str, Any]) -> str:
    """One line on the load (from :func:`machine_load`), saying so when it is high."""
    if not load.get("loadavg"):
        return "machine load unknown on this platform"
    one, cores = load["loadavg"][0], load["cores"]
    text = f"load average {one:.2f} (1 min) on {cores} core{'s' if cores != 1 else ''}"
    if one >= 0.75 * cores:
        text += (
            "; the machine is busy: other processes took CPU time from these batches, so "
            "queries/s is below what this machine does when quiet"
        )
    return text
