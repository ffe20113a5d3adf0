"""Progress on the terminal for commands that read big inputs: bytes of input read and converted,
rate and elapsed time, on stderr, only when stderr is a terminal (never in pipes or CI logs)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from charllm_trace.core.progress import reporting

if TYPE_CHECKING:
    from rich.console import Console


def _maybe_terminal() -> bool:
    """Whether stderr may be a terminal for rich (a TTY, or rich told so by its variables): when
    not, rich is not imported at all (``rich.progress`` costs ~50 ms of CPU at start-up)."""
    if any(os.environ.get(v) for v in ("FORCE_TERMINAL", "TTY_INTERACTIVE", "TTY_COMPATIBLE")):
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError, OSError):
        return False


@contextlib.contextmanager
def input_progress(verb: str, console: Console | None = None) -> Iterator[None]:
    """Show ``verb`` (e.g. "converting") with the bytes of input done while the block runs."""
    if console is None and not _maybe_terminal():
        yield
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )

    err = console or Console(stderr=True)
    if not err.is_terminal:
        yield
        return
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        transient=True,
        console=err,
    ) as bar:
        task = bar.add_task(verb, total=None)

        def show(what: str, done: int, total: int) -> None:
            bar.update(task, description=f"{verb} {what}", completed=done, total=total or None)

        with reporting(show):
            yield
