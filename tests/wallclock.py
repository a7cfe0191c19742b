"""Wall-clock limits of tests, checked in CI's full pass only.

README's test command (``-m "not slow and not ray"``) must pass on a loaded 2-core machine, so
no test in it fails by speed alone: a limit such as "12 calls of 0.2 s, 4 at a time, took under
1.2 s" is asserted with :func:`below`, which checks it only when the run includes the slow tests
(CI's ``python -m pytest``). What does not depend on speed (how many calls overlapped, what was
cancelled, which error came) is asserted in every run.
"""

from __future__ import annotations

# set by tests/conftest.py: False when the run leaves the slow tests out (README's command)
CHECKED = True


def below(seconds: float, limit: float, what: str = "it") -> None:
    """Assert ``seconds < limit`` where wall-clock limits are checked (see the module)."""
    if CHECKED:
        assert seconds < limit, f"{what} took {seconds:.2f} s (limit {limit} s)"
