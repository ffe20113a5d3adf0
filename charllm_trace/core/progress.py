"""Progress of long reads, by bytes of input: the converters say how many bytes of their input
files they have read and converted; a command that shows progress installs a reporter.

Nothing is reported unless a reporter is installed (the library prints nothing, and a reporter
is process-wide like the cache switch): ``with reporting(fn): ...``. ``fn(what, done, total)``
gets a short description (``rank 3``, a file name), the bytes done and the bytes in all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

Reporter = Callable[[str, int, int], None]

_reporter: Reporter | None = None


def report(what: str, done: int, total: int) -> None:
    """Tell the installed reporter (if any) that ``done`` of ``total`` input bytes are through."""
    if _reporter is not None:
        _reporter(what, done, total)


@contextlib.contextmanager
def reporting(fn: Reporter) -> Iterator[None]:
    """Install ``fn`` as the reporter for the duration of the block."""
    global _reporter
    old, _reporter = _reporter, fn
    try:
        yield
    finally:
        _reporter = old
