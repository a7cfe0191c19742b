"""The server's counters in Prometheus' text exposition format (version 0.0.4), no client
library needed: counters and histograms keyed by label tuples, updated from the event loop and
from worker threads under one lock.

Per process: with ``--workers N`` each worker keeps its own numbers (a scrape sees the worker
that answered it).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

__all__ = ["LATENCY_BUCKETS", "Metrics"]

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

# name -> (type, help, label names)
_FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "fastrag_http_requests_total": (
        "counter",
        "HTTP requests answered, by method, route and status.",
        ("method", "path", "status"),
    ),
    "fastrag_http_request_duration_seconds": (
        "histogram",
        "Time from request to the last byte of the response, by route.",
        ("path",),
    ),
    "fastrag_retrieve_requests_total": (
        "counter",
        "Retrieval requests (one per /v1/retrieve call or chat query) by source.",
        ("source",),
    ),
    "fastrag_retrieve_queries_total": ("counter", "Queries retrieved.", ()),
    "fastrag_retrieve_batches_total": (
        "counter",
        "Retriever.batch calls (each serves one or more coalesced requests).",
        (),
    ),
    "fastrag_retrieve_batch_queries": ("histogram", "Queries per Retriever.batch call.", ()),
    "fastrag_llm_calls_total": ("counter", "LLM calls made for chat completions.", ()),
    "fastrag_llm_prompt_tokens_total": ("counter", "Prompt tokens sent to the LLM.", ()),
    "fastrag_llm_completion_tokens_total": ("counter", "Completion tokens from the LLM.", ()),
    "fastrag_llm_errors_total": ("counter", "Chat completions failed by the upstream LLM.", ()),
    "fastrag_chat_completions_total": (
        "counter",
        "Chat completions answered, by mode.",
        ("stream",),
    ),
    "fastrag_tasks_total": (
        "counter",
        "Write tasks finished, by kind and status.",
        ("kind", "status"),
    ),
    "fastrag_ready": ("gauge", "1 once the store is open and the kernels are compiled.", ()),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(str(v))}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


class _Histogram:
    __slots__ = ("buckets", "count", "counts", "sum")

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        for i, b in enumerate(self.buckets):
            if value <= b:
                self.counts[i] += 1
        self.count += 1
        self.sum += value


class Metrics:
    """Thread-safe counters and histograms; :meth:`render` is the ``/metrics`` body."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[tuple[str, ...], float]] = {n: {} for n in _FAMILIES}
        self._hists: dict[str, dict[tuple[str, ...], _Histogram]] = {
            n: {} for n, f in _FAMILIES.items() if f[0] == "histogram"
        }

    def inc(self, name: str, value: float = 1, **labels: str) -> None:
        key = self._key(name, labels)
        with self._lock:
            fam = self._values[name]
            fam[key] = fam.get(key, 0) + value

    def set(self, name: str, value: float, **labels: str) -> None:
        key = self._key(name, labels)
        with self._lock:
            self._values[name][key] = value

    def observe(self, name: str, value: float, **labels: str) -> None:
        key = self._key(name, labels)
        buckets = BATCH_BUCKETS if name == "fastrag_retrieve_batch_queries" else LATENCY_BUCKETS
        with self._lock:
            fam = self._hists[name]
            h = fam.get(key)
            if h is None:
                h = fam[key] = _Histogram(buckets)
            h.observe(value)

    def value(self, name: str, **labels: str) -> float:
        """A counter's or gauge's current value (0 when never set)."""
        with self._lock:
            return self._values[name].get(self._key(name, labels), 0)

    @staticmethod
    def _key(name: str, labels: dict[str, str]) -> tuple[str, ...]:
        names = _FAMILIES[name][2]
        if set(labels) != set(names):
            raise ValueError(f"metric {name} takes labels {names}, got {sorted(labels)}")
        return tuple(str(labels[n]) for n in names)

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            for name, (kind, help_, names) in _FAMILIES.items():
                lines.append(f"# HELP {name} {help_}")
                lines.append(f"# TYPE {name} {kind}")
                if kind != "histogram":
                    values = self._values[name]
                    if not values and not names:
                        lines.append(f"{name} 0")
                    for key, v in sorted(values.items()):
                        lines.append(f"{name}{_labels(names, key)} {_num(v)}")
                    continue
                for key, h in sorted(self._hists[name].items()):
                    for b, c in zip(h.buckets, h.counts, strict=True):
                        le = 'le="' + _num(b) + '"'
                        lines.append(f"{name}_bucket{_labels(names, key, le)} {c}")
                    inf = _labels(names, key, 'le="+Inf"')
                    lines.append(f"{name}_bucket{inf} {h.count}")
                    lines.append(f"{name}_sum{_labels(names, key)} {_num(h.sum)}")
                    lines.append(f"{name}_count{_labels(names, key)} {h.count}")
        return "\n".join(lines) + "\n"
