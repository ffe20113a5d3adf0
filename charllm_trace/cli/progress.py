"""Progress on the terminal for commands that read big inputs: bytes of input read and converted,
rate and elapsed time, on stderr, only when stderr is a terminal (never in pipes or CI logs)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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

from charllm_trace.core.progress import reporting


@contextlib.contextmanager
def input_progress(verb: str, console: Console | None = None) -> Iterator[None]:
    """Show ``verb`` (e.g. "converting") with the bytes of input done while the block runs."""
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
