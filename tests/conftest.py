"""Shared pytest fixtures. Append new fixtures in their own clearly separated section."""

from __future__ import annotations

import os
import sys

import pytest

# Kernels compile in the test process (and its subprocesses) on first use, as plain numba does:
# tests of the background compile and its NumPy path (tests/test_coldstart.py) turn it on.
os.environ.setdefault("FASTRAG_BACKGROUND_COMPILE", "0")

# tests/ on sys.path, so test modules can `from openai_server import OpenAIServer`.
sys.path.insert(0, os.path.dirname(__file__))

import wallclock
from openai_server import OpenAIServer

# The checkout's root off sys.path (`python -m pytest` puts the working folder there): its
# kernels/ folder, installed as fastrag._kernels, would shadow the `kernels` package that
# transformers imports (sentence-transformers then fails to load). fastrag itself is installed.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _ROOT]

# Set FASTRAG_TEST_WARMUP=0 to skip the session warm-up below (e.g. to run one quick test on a
# fresh checkout without compiling every kernel first).
WARMUP_ENV = "FASTRAG_TEST_WARMUP"


def pytest_configure(config):
    """Before the first test, and before pytest-xdist starts its workers: when this checkout's
    kernels are not compiled yet, compile them with ``fastrag warmup`` over several processes,
    so that workers and the processes tests start load them instead of each compiling its own
    (and so that fastrag's modules are byte-compiled once). Wall-clock limits are checked only
    in a run that includes the slow tests (tests/wallclock.py)."""
    wallclock.CHECKED = "not slow" not in (config.getoption("markexpr", "") or "")
    if hasattr(config, "workerinput") or os.environ.get(WARMUP_ENV, "1") == "0":
        return
    from fastrag._coldstart import marker

    if marker().exists():
        return
    from fastrag.warmup import warmup

    jobs = min(4, os.cpu_count() or 1)
    sys.__stderr__.write(f"compiling fastrag's kernels first, in {jobs} processes ...\n")
    try:
        seconds = warmup(verbose=False, jobs=jobs)
    except Exception as exc:  # the tests of the failing path will say more
        sys.__stderr__.write(f"the warm-up failed, kernels compile on first use instead: {exc}\n")
    else:
        sys.__stderr__.write(f"kernels compiled in {seconds:.0f} s\n")


# Modules whose tests start processes and take longest (measured on 2 cores): they run first,
# so that with two xdist workers the short tests fill the end instead of one worker finishing
# a long test alone. Only the order changes; a stale entry costs nothing.
FIRST = (
    "tests/test_readme_walkthrough.py",
    "tests/test_cli_e2e.py",
    "tests/serve/test_task_recovery.py",
    "tests/serve/test_serve_http.py",
    "tests/documents/test_store_concurrency.py",
    "tests/documents/test_store_damage.py",
    "tests/distributed/test_sharded.py",
    "tests/test_imports.py",
)


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return FIRST.index(path) if path in FIRST else len(FIRST)

    items.sort(key=rank)  # stable: the rest keep their order


# --- LLM / embedding HTTP test server (fastrag.llms) ------------------------------------------
@pytest.fixture
def openai_server():
    """A fresh local OpenAI-compatible server (see tests/openai_server.py), stopped after."""
    with OpenAIServer() as server:
        yield server


# --- a real Redis server (tests/redis_server.py) ----------------------------------------------
@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """One ``redis-server`` per test process (None when FASTRAG_TEST_REDIS_URL names one)."""
    from redis_server import ENV, RedisServer

    if os.environ.get(ENV):
        yield None
        return
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server):
    """A Redis URL whose keys no other test shares (``?prefix=...``)."""
    from redis_server import redis_url

    return redis_url(redis_server)
