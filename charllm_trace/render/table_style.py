"""The look shared by the terminal tables of ``charllm-trace analyze``: the plain rich table of the
per-analysis renderers and the label of a simulated timeline. Formatting only."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich import box
from rich.table import Table


def simulated_label(res: Any) -> str:
    """`` [SIMULATED]`` after a table title when ``res`` (a ``RunAnalysis``) has a simulated
    timeline (the trace has no timestamps), else nothing."""
    return " [SIMULATED]" if res.simulated else ""


def plain_table(title: str, cols: Iterable[tuple[str, str]], *, no_wrap: bool = False) -> Table:
    """A rich table with a bold left title and a simple head: ``cols`` are (name, justify)."""
    t = Table(
        title=title, title_justify="left", title_style="bold", header_style="bold",
        box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False, show_edge=False,
    )  # fmt: skip
    for name, just in cols:
        t.add_column(name, justify=just, no_wrap=no_wrap)  # type: ignore[arg-type]
    return t
