"""How many examples a hypothesis test runs: its full count in everything, a quarter of it (at
least 10) in the fast tier. ``conftest.py`` sets :data:`FAST` under ``--fast`` before the test
modules are imported (and loads a profile with 25 examples instead of hypothesis' 100 for the
tests that set no count of their own)."""

from __future__ import annotations

#: set by tests/conftest.py under --fast
FAST = False


def examples(n: int) -> int:
    """``max_examples`` for a test whose full count is ``n``."""
    return max(10, n // 4) if FAST else n
